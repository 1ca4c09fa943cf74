// The test double's wire between libsharp_coll.so (the double, one per rank) and
// nezha-sharp-aggregator (the stand-in aggregation node in the test bed's switch namespace).
// Not SHARP's protocol (that runs in IB switch hardware); only what the double needs to make a
// real network reduction over the SHARP rail. Fixed-size little-endian headers (both ends run on
// the same machine).
#pragma once

#include <cstdint>

namespace nezha::sharpdouble {

constexpr uint32_t kHelloMagic = 0x48535a4e;  // "NZSH"
constexpr uint32_t kOpMagic = 0x504f5a4e;     // "NZOP"
constexpr uint32_t kReplyMagic = 0x53525a4e;  // "NZRS"
constexpr uint32_t kVersion = 1;
constexpr uint64_t kMaxPayload = 64ull << 20;  // per operation; larger is refused
constexpr uint32_t kMaxGroup = 4096;

// Rank -> aggregator, once per connection: join group (jobId, nonce) of `size` ranks.
struct Hello {
  uint32_t magic, version;
  uint64_t jobId, nonce;
  uint32_t size, rank;
};
// Aggregator -> every rank, once the whole group joined (status 0) or could not (< 0).
struct HelloReply {
  uint32_t magic;
  int32_t status;
};
// Rank -> aggregator: one allreduce contribution of `bytes` payload bytes.
struct OpHeader {
  uint32_t magic;
  int32_t dtype, op;  // sharp_datatype, sharp_reduce_op values
  uint32_t reserved;
  uint64_t seq, count, bytes;
};
// Aggregator -> rank: the reduced result (status 0, `bytes` payload bytes follow) or an error.
struct OpReply {
  uint32_t magic;
  int32_t status;
  uint64_t seq, bytes;
};

static_assert(sizeof(Hello) == 32 && sizeof(HelloReply) == 8 && sizeof(OpHeader) == 40 &&
                  sizeof(OpReply) == 24,
              "wire layout");

}  // namespace nezha::sharpdouble
