// One peer of an RDMA rail: its RC queue pair, the two staging rings and the credit counters
// of the data path (see verbs_channel.h for the protocol).
//
// Data path: RDMA write with immediate into the peer's receive ring. Chunk k of the stream to
// a peer goes to ring slot k % slots; the immediate carries its length, so the receiver learns
// from the completion alone where the bytes are and how many (RC delivers in order). The
// receiver copies the slot out into the IoOp's buffer (whole elements, onRecv as they land)
// and hands the slot back with a credit: a zero-length write with immediate whose top bit
// marks it as a credit and whose low bits count the slots returned. A sender never has more
// chunks in flight than the peer has free slots, so receive work requests never run out and
// one slow peer cannot fill the shared completion queue.
//
// Direct placement (an IoOp with a region, channel.h: zero copy, no CPU access to the bytes):
// the receiver advertises its registered buffer (DirectAdvert: address, length, rkey) as a
// record in the sender's ring, a chunk with the advert flag; the sender matches adverts to its
// region-carrying sends in order and RDMA-writes from its own region straight into the
// advertised buffer, each write's immediate flagged direct with its length (no ring slot, no
// credit). RC's ordering keeps direct writes, ring chunks and adverts in posting order, so the
// receiver matches them to its receives in order as before. The receiver never copies and
// the sender never stages: only the HCA reads and writes the registered memory.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>

#include "base/socket.h"
#include "transport/verbs/verbs_device.h"

namespace nezha {

// Immediate data: bit 31 set = credit (low bits: slots returned); bit 30 = a direct write (low
// bits: bytes written into the advertised buffer); bit 29 = a ring chunk holding a
// DirectAdvert; none = a ring chunk of data (its bytes).
constexpr uint32_t kCreditFlag = 0x80000000u;
constexpr uint32_t kDirectFlag = 0x40000000u;
constexpr uint32_t kAdvertFlag = 0x20000000u;
// The largest direct write (its length must fit below the flags), and how many may be in
// flight per peer: each consumes one of the receiver's posted receives.
constexpr uint32_t kDirectWriteBytes = 256u << 20;
constexpr int kDirectInFlight = 4;

// Work request ids: peer << 2 | kind.
enum WrKind : uint64_t { kWrData = 0, kWrCredit = 1, kWrRecv = 2, kWrDirect = 3 };
inline uint64_t wrId(int peer, WrKind kind) { return (static_cast<uint64_t>(peer) << 2) | kind; }
inline int wrPeer(uint64_t id) { return static_cast<int>(id >> 2); }
inline WrKind wrKind(uint64_t id) { return static_cast<WrKind>(id & 3); }

struct VerbsPeer {
  VerbsPeer(const VerbsDevice& dev, int slots, size_t slotBytes, int rail);

  int sendDepth() const { return 3 * slots + 8; }
  int recvDepth() const { return 2 * slots + 8; }
  // Posts zero-length receives until recvDepth() are outstanding (writes with immediate consume
  // one each; the data lands where the write says, not in the receive's buffer).
  void refillReceives();
  // Posts a chunk of `len` bytes already copied to sendSlot(); the caller checked canSend().
  // `flags`: kAdvertFlag for an advert record.
  void postData(uint32_t len, uint32_t flags = 0);
  // Direct placement: `len` bytes at `addr` (registered, `lkey`) to [raddr, raddr + len) of the
  // peer's advertised buffer; the caller checked canWriteDirect().
  void postDirect(uint64_t addr, uint32_t lkey, uint64_t raddr, uint32_t rkey, uint32_t len);
  bool canWriteDirect() const {
    return directPosted < directDone + kDirectInFlight && outstanding < sendDepth() - 1;
  }
  // Returns every consumed slot to the peer if enough accumulated (or `flush`).
  void returnCredits(bool flush);

  char* sendSlot() const { return sendRing->data() + (sent % slots) * slotBytes; }
  const char* recvSlot(uint64_t k) const { return recvRing->data() + (k % slots) * slotBytes; }
  // A chunk may go when the peer has a free slot and our staging slot's last write completed.
  bool canSend() const {
    return sent < creditLimit && sent < sendDone + slots && outstanding < sendDepth() - 1;
  }

  int slots;
  size_t slotBytes;
  int rail;
  std::unique_ptr<RegisteredBuffer> sendRing, recvRing;
  std::unique_ptr<QueuePair> qp;
  QpAddress remote;
  Fd boot;  // the authenticated TCP connection the addresses came over; EOF = peer gone

  uint64_t sent = 0;         // data chunks posted
  uint64_t sendDone = 0;     // data chunks whose write completed
  uint64_t creditLimit = 0;  // chunks the peer has room for, ever (slots + credits received)
  int outstanding = 0;       // send work requests not yet completed (data and credits)
  int recvPosted = 0;        // receive work requests outstanding
  uint64_t arrived = 0;      // data chunks landed in our ring
  uint64_t consumed = 0;     // ... copied out to an IoOp
  uint64_t credited = 0;     // ... and handed back to the peer
  // Immediates of arrived, unhandled ring chunks and direct writes (oldest first).
  std::deque<uint32_t> arrivals;
  std::deque<DirectAdvert> adverts;  // the peer's receive buffers not yet written (oldest first)
  uint64_t directPosted = 0;         // direct writes posted
  uint64_t directDone = 0;           // ... and completed
};

}  // namespace nezha
