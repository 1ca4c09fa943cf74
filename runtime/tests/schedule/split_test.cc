// Split arithmetic: ratios -> integer weights -> contiguous slices, including boundaries, tiny
// counts, dropped rails and determinism.
#include "schedule/split.h"

#include <gtest/gtest.h>

#include <numeric>

#include "base/error.h"

namespace nezha {
namespace {

size_t total(const std::vector<Slice>& s) {
  size_t n = 0;
  for (const auto& x : s) n += x.count;
  return n;
}

void expectContiguous(const std::vector<Slice>& s, size_t count) {
  size_t pos = 0;
  for (const auto& x : s) {
    EXPECT_EQ(x.offset, pos);
    EXPECT_GT(x.count, 0u);
    pos += x.count;
  }
  EXPECT_EQ(pos, count);
}

TEST(WeightsTest, SumExactlyToScale) {
  for (auto ratios : std::vector<std::vector<double>>{
           {1}, {0.73, 0.27}, {1, 1, 1}, {0.1, 0.2, 0.7}, {1e-9, 1}, {3, 0, 1}}) {
    auto w = toWeights(ratios);
    EXPECT_EQ(std::accumulate(w.begin(), w.end(), uint64_t(0)), kWeightScale);
  }
  EXPECT_EQ(toWeights({3, 0, 1})[1], 0u);
  EXPECT_THROW(toWeights({0, 0}), EnforceError);
  EXPECT_THROW(toWeights({-1, 2}), EnforceError);
}

TEST(SplitTest, ProportionalAndCoversBuffer) {
  auto s = splitCount(1000, toWeights({0.75, 0.25}), 1);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].count, 750u);
  EXPECT_EQ(s[1].count, 250u);
  expectContiguous(s, 1000);
}

TEST(SplitTest, AnyCountIncludingZeroOnePrimes) {
  auto w = toWeights({0.5, 0.3, 0.2});
  EXPECT_TRUE(splitCount(0, w, 1).empty());
  for (size_t count : {1ul, 2ul, 3ul, 7ul, 13ul, 1031ul, 65537ul, 1000003ul}) {
    auto s = splitCount(count, w, 1);
    expectContiguous(s, count);
    EXPECT_EQ(total(s), count);
  }
  auto one = splitCount(1, w, 1);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].rail, 0);  // the largest share survives
}

TEST(SplitTest, DropsRailsBelowMinimumSlice) {
  // 10% of 1000 = 100 < 200 -> rail 2 dropped, its share redistributed.
  auto s = splitCount(1000, toWeights({0.6, 0.3, 0.1}), 200);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].rail, 0);
  EXPECT_EQ(s[1].rail, 1);
  EXPECT_NEAR(static_cast<double>(s[0].count), 667, 1);  // 0.6/0.9 of 1000 (quantized weights)
  expectContiguous(s, 1000);
  // Everything below the minimum collapses to one rail, never zero rails.
  auto tiny = splitCount(10, toWeights({0.5, 0.5}), 1000);
  ASSERT_EQ(tiny.size(), 1u);
  EXPECT_EQ(tiny[0].count, 10u);
}

TEST(SplitTest, ZeroWeightRailIsSkipped) {
  auto s = splitCount(100, toWeights({0.5, 0, 0.5}), 1);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].rail, 0);
  EXPECT_EQ(s[1].rail, 2);
}

TEST(SplitTest, HugeCountsStayExact) {
  size_t count = (size_t(1) << 40) + 7;
  auto s = splitCount(count, toWeights({0.3, 0.7}), 1);
  expectContiguous(s, count);
}

TEST(SplitTest, DeterministicForSameInputs) {
  auto w = toWeights({0.123456789, 0.876543211});
  for (size_t count : {999ul, 12345ul}) {
    auto a = splitCount(count, w, 1), b = splitCount(count, w, 1);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].count, b[i].count);
  }
}

}  // namespace
}  // namespace nezha
