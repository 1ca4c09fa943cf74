// The control mesh's wire format: dissemination steps and aborts go through whole, and frames
// this build does not speak (the all-to-all round of older builds, a step out of bounds, an
// unknown abort kind, an argument where none belongs) are bad frames, never taken.
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
  // The all-to-all round of libnezha before issue 18: type 1, sequence = round, doubles.
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
