#include "nccl/frame.h"

#include <cstring>

#include "base/error.h"
#include "base/wire.h"

namespace nezha::ncclnet {

namespace {

std::string withLength(const std::string& body, uint32_t extra = 0) {
  std::string out(4, '\0');
  const uint32_t len = static_cast<uint32_t>(body.size()) + extra;
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>((len >> (8 * i)) & 0xff);
  return out + body;
}

// WireReader throws nezha::Error; frames are judged as FrameError so callers need one catch.
template <typename F>
auto decodeAs(const char* what, F&& f) {
  try {
    return f();
  } catch (const FrameError&) {
    throw;
  } catch (const std::exception& e) {
    throw FrameError(strCat("malformed ", what, " frame: ", e.what()));
  }
}

}  // namespace

uint32_t DataHeader::chunks() const {
  if (total == 0) return 1;
  return static_cast<uint32_t>((total + chunkBytes - 1) / chunkBytes);
}

uint32_t DataHeader::payload() const {
  if (total == 0) return 0;
  const uint64_t left = total - offset();
  return static_cast<uint32_t>(left < chunkBytes ? left : chunkBytes);
}

std::string encodeRailDown(const RailDown& d) {
  WireWriter w;
  w.u8(static_cast<uint8_t>(FrameType::kRailDown)).u8(d.rail & 0xff).u8(d.rail >> 8).u32(d.epoch);
  std::string body = w.data();
  body.resize(kRailDownBody, '\0');
  return withLength(body);
}

std::string encodeDataHeader(const DataHeader& h) {
  WireWriter w;
  w.u8(static_cast<uint8_t>(FrameType::kData)).u8(h.entry).u64(h.group).u32(h.chunk);
  w.u32(h.chunkBytes).u64(h.total);
  return withLength(w.data(), h.payload());
}

std::string encodeProbeHeader(uint32_t payload) {
  WireWriter w;
  w.u8(static_cast<uint8_t>(FrameType::kProbe));
  return withLength(w.data(), payload);
}

std::string encodeCts(const Cts& c) {
  NEZHA_ENFORCE(!c.entries.empty() && c.entries.size() <= kMaxGrouped);
  WireWriter w;
  w.u8(static_cast<uint8_t>(FrameType::kCts)).u8(static_cast<uint8_t>(c.entries.size()));
  w.u64(c.group);
  for (const auto& e : c.entries) w.u32(static_cast<uint32_t>(e.tag)).u64(e.size);
  return withLength(w.data());
}

std::string encodeAck(const Ack& a) {
  NEZHA_ENFORCE(a.rails.size() <= kMaxRails);
  WireWriter w;
  w.u8(static_cast<uint8_t>(FrameType::kAck)).u8(static_cast<uint8_t>(a.rails.size()));
  for (const auto& r : a.rails) w.u32(r.epoch).u64(r.consumed);
  return withLength(w.data());
}

uint32_t decodeLength(const uint8_t* p, size_t maxBody) {
  const uint32_t len =
      uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
  if (len == 0 || len > maxBody) {
    throw FrameError(strCat("frame length ", len, " is outside 1..", maxBody));
  }
  return len;
}

FrameType frameType(const std::string& body) {
  if (body.empty()) throw FrameError("empty frame");
  const auto t = static_cast<uint8_t>(body[0]);
  if (t < 1 || t > 5) throw FrameError(strCat("unknown frame type ", int(t)));
  return static_cast<FrameType>(t);
}

RailDown decodeRailDown(const std::string& body) {
  return decodeAs("rail-down", [&] {
    if (body.size() != kRailDownBody) {
      throw FrameError(strCat("rail-down: ", body.size(), " bytes, want ", kRailDownBody));
    }
    WireReader r(body, "rail-down");
    if (r.u8() != static_cast<uint8_t>(FrameType::kRailDown))
      throw FrameError("not a rail-down frame");
    RailDown d;
    d.rail = r.u8();
    d.rail |= uint16_t(r.u8()) << 8;
    d.epoch = r.u32();
    for (size_t i = 7; i < kRailDownBody; ++i) {
      if (r.u8() != 0) throw FrameError("rail-down: padding is not zero");
    }
    r.finish();
    if (d.rail >= kMaxRails)
      throw FrameError(strCat("rail-down: rail ", d.rail, " >= ", kMaxRails));
    if (d.epoch == 0) throw FrameError("rail-down: epoch 0");
    return d;
  });
}

DataHeader decodeDataHeader(const std::string& body, uint32_t frameLen) {
  return decodeAs("data", [&] {
    WireReader r(body, "data");
    if (r.u8() != static_cast<uint8_t>(FrameType::kData)) throw FrameError("not a data frame");
    DataHeader h;
    h.entry = r.u8();
    h.group = r.u64();
    h.chunk = r.u32();
    h.chunkBytes = r.u32();
    h.total = r.u64();
    r.finish();
    if (h.entry >= kMaxGrouped) throw FrameError(strCat("data: entry ", int(h.entry)));
    if (h.chunkBytes < kMinChunk || h.chunkBytes > kMaxChunk) {
      throw FrameError(
          strCat("data: chunk size ", h.chunkBytes, " outside ", kMinChunk, "..", kMaxChunk));
    }
    if (h.total > (uint64_t(1) << 40)) throw FrameError(strCat("data: size ", h.total));
    if (h.chunk >= h.chunks()) {
      throw FrameError(strCat("data: chunk ", h.chunk, " of a ", h.total, "-byte message"));
    }
    if (frameLen != kDataHeaderBody + h.payload()) {
      throw FrameError(
          strCat("data: frame of ", frameLen, " bytes for a ", h.payload(), "-byte chunk"));
    }
    return h;
  });
}

Cts decodeCts(const std::string& body) {
  return decodeAs("cts", [&] {
    WireReader r(body, "cts");
    if (r.u8() != static_cast<uint8_t>(FrameType::kCts)) throw FrameError("not a cts frame");
    const size_t n = r.u8();
    if (n == 0 || n > kMaxGrouped) throw FrameError(strCat("cts: ", n, " receives"));
    Cts c;
    c.group = r.u64();
    for (size_t i = 0; i < n; ++i) {
      CtsEntry e;
      e.tag = static_cast<int32_t>(r.u32());
      e.size = r.u64();
      if (e.size > (uint64_t(1) << 40)) throw FrameError(strCat("cts: size ", e.size));
      c.entries.push_back(e);
    }
    r.finish();
    return c;
  });
}

Ack decodeAck(const std::string& body, size_t rails) {
  return decodeAs("ack", [&] {
    WireReader r(body, "ack");
    if (r.u8() != static_cast<uint8_t>(FrameType::kAck)) throw FrameError("not an ack frame");
    const size_t n = r.u8();
    if (n > kMaxRails) throw FrameError(strCat("ack: ", n, " rails (at most ", kMaxRails, ")"));
    if (n != rails) throw FrameError(strCat("ack: ", n, " rails, this connection has ", rails));
    Ack a;
    for (size_t i = 0; i < n; ++i) {
      RailAck ra;
      ra.epoch = r.u32();
      ra.consumed = r.u64();
      a.rails.push_back(ra);
    }
    r.finish();
    return a;
  });
}

}  // namespace nezha::ncclnet
