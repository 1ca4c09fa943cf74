// The plugin's wire format, one stream per rail connection. A rail connection starts with
// bootstrap/auth's token handshake (its purpose names the rail, the epoch and the connection's
// nonce: nccl/rail_purpose.h); the frames below follow it. Every frame is a u32 little-endian
// body length followed by the body; the body's first byte is its type. Sender -> receiver: DATA
// chunks, PROBEs and RAIL_DOWN notices. Receiver -> sender, on the same sockets: CTS (a posted
// receive: which tags, how large) and ACK (how far the receiver has consumed each rail's
// stream). Decoders are pure and throw FrameError naming the field, so a garbled connection
// costs that connection and nothing else (fuzz/fuzz_nccl_frame.cc).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace nezha::ncclnet {

struct FrameError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class FrameType : uint8_t { kRailDown = 1, kData = 2, kProbe = 3, kCts = 4, kAck = 5 };

constexpr size_t kLengthPrefix = 4;
constexpr size_t kNonceBytes = 16;
constexpr size_t kMaxRails = 8;    // what fits the 128-byte connect handle
constexpr size_t kMaxGrouped = 8;  // maxRecvs: receives NCCL may group into one irecv
constexpr size_t kMaxControlBody = 256;
constexpr uint32_t kMinChunk = 4096;
constexpr uint32_t kMaxChunk = 64u << 20;

using Nonce = std::array<uint8_t, kNonceBytes>;

// The sender gave up the rail's connection of `epoch` (a stall, an error): the receiver drops
// its end and opens the rail's listener for the next epoch. Sent on the rails still live, in
// order with their data, because a black-holed rail cannot carry its own obituary.
struct RailDown {
  uint16_t rail = 0;
  uint32_t epoch = 0;
};
// One chunk of one message. The chunk's bytes follow the header in the same frame.
struct DataHeader {
  uint8_t entry = 0;   // which receive of the group
  uint64_t group = 0;  // the receiver's CTS sequence number
  uint32_t chunk = 0;  // index of this chunk in the message
  uint32_t chunkBytes = 0;
  uint64_t total = 0;  // the message's size as sent
  uint64_t offset() const { return uint64_t(chunk) * chunkBytes; }
  uint32_t chunks() const;   // chunks in the message (a 0-byte message has one, empty)
  uint32_t payload() const;  // bytes of this chunk
};
constexpr size_t kDataHeaderBody = 1 + 1 + 8 + 4 + 4 + 8;
// Zero-padded to a data header's size: the receiver reads a header in one recv() and must never
// read past the end of the frame into the next one.
constexpr size_t kRailDownBody = kDataHeaderBody;

struct CtsEntry {
  int32_t tag = 0;
  uint64_t size = 0;
};
struct Cts {
  uint64_t group = 0;
  std::vector<CtsEntry> entries;
};

struct RailAck {
  uint32_t epoch = 0;
  uint64_t consumed = 0;  // bytes of the rail's stream (this epoch) fully handled
};
struct Ack {
  std::vector<RailAck> rails;
};

// Encoders return a whole frame, length prefix included.
std::string encodeRailDown(const RailDown& d);
std::string encodeDataHeader(const DataHeader& h);  // prefix counts the payload that follows
std::string encodeProbeHeader(uint32_t payload);
std::string encodeCts(const Cts& c);
std::string encodeAck(const Ack& a);

// Length prefix of a frame; throws unless 1 <= len <= maxBody.
uint32_t decodeLength(const uint8_t* p, size_t maxBody);
FrameType frameType(const std::string& body);  // throws on an unknown type
RailDown decodeRailDown(const std::string& body);
// `body` is the header only (kDataHeaderBody bytes); `frameLen` the whole body length, so the
// payload length is checked against the header's own arithmetic.
DataHeader decodeDataHeader(const std::string& body, uint32_t frameLen);
Cts decodeCts(const std::string& body);
Ack decodeAck(const std::string& body, size_t rails);

}  // namespace nezha::ncclnet
