// The NCCL plugin's wire format and connect handle: round trips, and every malformed input is a
// FrameError naming what is wrong (never a crash or a silent misread).
#include "nccl/frame.h"

#include <gtest/gtest.h>

#include <cstring>

#include "nccl/handle.h"
#include "nccl/net_abi.h"

namespace nezha::ncclnet {
namespace {

std::string body(const std::string& frame) { return frame.substr(kLengthPrefix); }

TEST(NcclFrame, RailDownRoundTripAndRejections) {
  RailDown d;
  d.rail = 2;
  d.epoch = 7;
  const std::string f = encodeRailDown(d);
  ASSERT_EQ(f.size(), kLengthPrefix + kRailDownBody);
  EXPECT_EQ(decodeLength(reinterpret_cast<const uint8_t*>(f.data()), kRailDownBody), kRailDownBody);
  EXPECT_EQ(frameType(body(f)), FrameType::kRailDown);
  const RailDown back = decodeRailDown(body(f));
  EXPECT_EQ(back.rail, 2);
  EXPECT_EQ(back.epoch, 7u);

  std::string bad = body(f);
  bad[kRailDownBody - 1] = 1;  // padding
  EXPECT_THROW(decodeRailDown(bad), FrameError);
  d.epoch = 0;
  EXPECT_THROW(decodeRailDown(body(encodeRailDown(d))), FrameError);
  d.epoch = 1;
  d.rail = kMaxRails;
  EXPECT_THROW(decodeRailDown(body(encodeRailDown(d))), FrameError);
  EXPECT_THROW(decodeRailDown(body(f).substr(0, 10)), FrameError);
  EXPECT_THROW(decodeRailDown(body(f) + "x"), FrameError);
}

TEST(NcclFrame, DataHeaderArithmetic) {
  DataHeader h;
  h.entry = 3;
  h.group = 99;
  h.chunkBytes = 4096;
  h.total = 10000;  // chunks of 4096, 4096, 1808
  h.chunk = 2;
  EXPECT_EQ(h.chunks(), 3u);
  EXPECT_EQ(h.payload(), 1808u);
  EXPECT_EQ(h.offset(), 8192u);
  const std::string f = encodeDataHeader(h);
  const uint32_t len = decodeLength(reinterpret_cast<const uint8_t*>(f.data()), 1 << 30);
  EXPECT_EQ(len, kDataHeaderBody + 1808);
  const DataHeader back = decodeDataHeader(body(f), len);
  EXPECT_EQ(back.group, 99u);
  EXPECT_EQ(back.entry, 3);
  EXPECT_EQ(back.chunk, 2u);

  // The frame length must be exactly what the header implies.
  EXPECT_THROW(decodeDataHeader(body(f), len + 1), FrameError);
  // A chunk past the message's end.
  h.chunk = 3;
  EXPECT_THROW(decodeDataHeader(body(encodeDataHeader(h)), kDataHeaderBody), FrameError);
  // A chunk size outside the limits.
  h.chunk = 0;
  h.chunkBytes = 100;
  EXPECT_THROW(decodeDataHeader(body(encodeDataHeader(h)), kDataHeaderBody + 100), FrameError);
  // A zero-byte message is one empty chunk.
  DataHeader z;
  z.chunkBytes = 4096;
  EXPECT_EQ(z.chunks(), 1u);
  EXPECT_EQ(z.payload(), 0u);
  EXPECT_NO_THROW(decodeDataHeader(body(encodeDataHeader(z)), kDataHeaderBody));
}

TEST(NcclFrame, CtsAndAck) {
  Cts c;
  c.group = 5;
  c.entries = {{1, 100}, {-2, 0}, {3, 1 << 20}};
  const Cts back = decodeCts(body(encodeCts(c)));
  ASSERT_EQ(back.entries.size(), 3u);
  EXPECT_EQ(back.group, 5u);
  EXPECT_EQ(back.entries[1].tag, -2);
  EXPECT_EQ(back.entries[2].size, 1u << 20);
  std::string zero = body(encodeCts(c));
  zero[1] = 0;  // zero receives
  EXPECT_THROW(decodeCts(zero), FrameError);

  Ack a;
  a.rails = {{1, 10}, {4, 1ull << 40}};
  const Ack ab = decodeAck(body(encodeAck(a)), 2);
  EXPECT_EQ(ab.rails[1].epoch, 4u);
  EXPECT_EQ(ab.rails[1].consumed, 1ull << 40);
  EXPECT_THROW(decodeAck(body(encodeAck(a)), 3), FrameError);  // rail count must match
}

TEST(NcclFrame, LengthAndType) {
  const uint8_t zero[4] = {0, 0, 0, 0};
  EXPECT_THROW(decodeLength(zero, 100), FrameError);
  const uint8_t big[4] = {0xff, 0xff, 0xff, 0x7f};
  EXPECT_THROW(decodeLength(big, 100), FrameError);
  EXPECT_THROW(frameType(std::string("\x09", 1)), FrameError);
  EXPECT_THROW(frameType(""), FrameError);
}

TEST(NcclHandle, RoundTripFitsAndRejectsForeignHandles) {
  ConnectHandle h;
  h.nonce.fill(0xab);
  for (int i = 0; i < int(kMaxRails); ++i)
    h.rails.push_back({0x0100000aU + uint32_t(i), uint16_t(40000 + i)});
  uint8_t buf[NCCL_NET_HANDLE_MAXSIZE];
  std::memset(buf, 0x55, sizeof buf);
  encodeHandle(h, buf);
  for (size_t i = kHandleScratchOffset; i < kHandleBytes; ++i) EXPECT_EQ(buf[i], 0) << i;
  const ConnectHandle back = decodeHandle(buf);
  ASSERT_EQ(back.rails.size(), kMaxRails);
  EXPECT_EQ(back.rails[7].port, 40007);
  EXPECT_EQ(back.rails[3].ipv4, h.rails[3].ipv4);
  EXPECT_EQ(ipv4Text(0x0100000aU), "10.0.0.1");

  uint8_t foreign[NCCL_NET_HANDLE_MAXSIZE] = {};
  EXPECT_THROW(decodeHandle(foreign), FrameError);
  buf[4 + kNonceBytes] = 0;  // no rails
  EXPECT_THROW(decodeHandle(buf), FrameError);
}

// The plugin structs must have the layout NCCL's headers give them.
}  // namespace
}  // namespace nezha::ncclnet
