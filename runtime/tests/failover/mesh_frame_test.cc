// The control mesh's wire format: dissemination steps, aborts and silent-peer verdicts go through
// whole, and frames this build does not speak (the all-to-all round of older builds, a step out
// of bounds, an unknown abort kind, a verdict naming a rank no int holds, an argument where none
// belongs) are bad frames, never taken.
#include "failover/mesh_frame.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace nezha {
namespace {

MeshDecode decodeOne(std::string bytes, MeshFrame& f, std::string& why) {
  return takeMeshFrame(bytes, f, why);
}

TEST(MeshFrameTest, StepAndAbortRoundTrip) {
  std::string stream = encodeMeshStep(7, 2, {1.5, -3.0}) +
                       encodeMeshAbort(8, 3, kMeshAbortConfig, "rank 1 sent 2 values") +
                       encodeMeshFrame(kMeshResend, 2, 7);
  MeshFrame f;
  std::string why;
  ASSERT_EQ(takeMeshFrame(stream, f, why), MeshDecode::kFrame) << why;
  EXPECT_EQ(f.type, kMeshStep);
  EXPECT_EQ(f.seq, 7u);
  EXPECT_EQ(f.step, 2);
  EXPECT_EQ(f.values, (std::vector<double>{1.5, -3.0}));
  f = MeshFrame{};
  ASSERT_EQ(takeMeshFrame(stream, f, why), MeshDecode::kFrame) << why;
  EXPECT_EQ(f.type, kMeshAbort);
  EXPECT_EQ(f.seq, 8u);
  EXPECT_EQ(f.origin, 3u);
  EXPECT_EQ(f.kind, kMeshAbortConfig);
  EXPECT_EQ(f.why, "rank 1 sent 2 values");
  f = MeshFrame{};
  ASSERT_EQ(takeMeshFrame(stream, f, why), MeshDecode::kFrame) << why;
  EXPECT_EQ(f.type, kMeshResend);
  EXPECT_EQ(f.step, 2);
  EXPECT_TRUE(stream.empty());
}

TEST(MeshFrameTest, AbortReasonIsCutToItsBound) {
  MeshFrame f;
  std::string why;
  ASSERT_EQ(decodeOne(encodeMeshAbort(1, 0, kMeshAbortRail, std::string(5000, 'x')), f, why),
            MeshDecode::kFrame);
  EXPECT_EQ(f.why.size(), kMeshMaxAbortText);
}

TEST(MeshFrameTest, FramesThisBuildDoesNotSpeakAreBad) {
  MeshFrame f;
  std::string why;
  // The all-to-all round of older libnezha (before dissemination): type 1, sequence = round,
  // doubles.
  std::string old = encodeMeshStep(1, 0, {1.0});
  old[4] = 1;
  EXPECT_EQ(decodeOne(old, f, why), MeshDecode::kBad);
  EXPECT_NE(why.find("older"), std::string::npos) << why;
  why.clear();
  EXPECT_EQ(decodeOne(encodeMeshStep(1, kMeshMaxSteps, {1.0}), f, why), MeshDecode::kBad);
  why.clear();
  EXPECT_EQ(decodeOne(encodeMeshAbort(1, 0, 3, "x"), f, why), MeshDecode::kBad);
  EXPECT_NE(why.find("kind 3"), std::string::npos) << why;
  why.clear();
  EXPECT_EQ(decodeOne(encodeMeshFrame(kMeshWhere, 5, 0), f, why), MeshDecode::kBad);
  why.clear();
  std::string big = encodeMeshAbort(1, 0, kMeshAbortRail, "x");
  big[16] = static_cast<char>((8 + kMeshMaxAbortText + 1) & 0xff);  // the length field
  big[17] = static_cast<char>((8 + kMeshMaxAbortText + 1) >> 8);
  EXPECT_EQ(decodeOne(big, f, why), MeshDecode::kBad);
}

// A silent-peer verdict: the named rank in the sequence, the watcher in a 4-byte payload.
TEST(MeshFrameTest, SilentPeerVerdictRoundTrips) {
  const std::string bytes = encodeMeshSilent(5, 2);
  std::string stream = bytes;
  MeshFrame f;
  std::string why;
  ASSERT_EQ(takeMeshFrame(stream, f, why), MeshDecode::kFrame) << why;
  EXPECT_EQ(f.type, kMeshSilent);
  EXPECT_EQ(f.seq, 5u);
  EXPECT_EQ(f.origin, 2u);
  EXPECT_TRUE(stream.empty());
  EXPECT_EQ(encodeMeshFrame(f), bytes);
  f = MeshFrame{};
  ASSERT_EQ(decodeOne(encodeMeshSilent(kMeshMaxRank, 0), f, why), MeshDecode::kFrame) << why;
  EXPECT_EQ(f.seq, kMeshMaxRank);
}

// A rank number no int can hold (named rank or watcher), a payload of another size or an
// argument: the stream is garbage, the buffer is left as it was.
TEST(MeshFrameTest, SilentPeerVerdictOutOfBoundsIsBad) {
  MeshFrame f;
  std::string why;
  std::string huge = encodeMeshSilent(uint64_t{1} << 40, 0);
  const std::string kept = huge;
  EXPECT_EQ(takeMeshFrame(huge, f, why), MeshDecode::kBad);
  EXPECT_NE(why.find("verdict on rank 1099511627776"), std::string::npos) << why;
  EXPECT_EQ(huge, kept);
  why.clear();
  EXPECT_EQ(decodeOne(encodeMeshSilent(kMeshMaxRank + 1, 0), f, why), MeshDecode::kBad);
  why.clear();
  EXPECT_EQ(decodeOne(encodeMeshSilent(1, 0xffffffffu), f, why), MeshDecode::kBad);
  EXPECT_NE(why.find("by rank 4294967295"), std::string::npos) << why;
  why.clear();
  std::string longer = encodeMeshSilent(1, 0) + std::string(4, '\0');
  longer[16] = 8;  // the length field: 8 payload bytes
  EXPECT_EQ(decodeOne(longer, f, why), MeshDecode::kBad);
  EXPECT_NE(why.find("payload of 8 bytes"), std::string::npos) << why;
  why.clear();
  std::string withArg = encodeMeshSilent(1, 0);
  withArg[6] = 1;  // the argument
  EXPECT_EQ(decodeOne(withArg, f, why), MeshDecode::kBad);
  why.clear();
  std::string unknown = encodeMeshSilent(1, 0);
  unknown[4] = 9;  // the first type after the verdict
  EXPECT_EQ(decodeOne(unknown, f, why), MeshDecode::kBad);
  EXPECT_NE(why.find("unknown type 9"), std::string::npos) << why;
}

TEST(MeshFrameTest, PartialFrameWaitsForMore) {
  const std::string whole = encodeMeshStep(3, 1, {2.0, 4.0});
  std::string part = whole.substr(0, whole.size() - 1);
  MeshFrame f;
  std::string why;
  EXPECT_EQ(takeMeshFrame(part, f, why), MeshDecode::kNeedMore);
  EXPECT_EQ(part.size(), whole.size() - 1);
}

}  // namespace
}  // namespace nezha
