// reduce, gather, scatter and alltoallv (comm/communicator_compose.cc) on in-process jobs of
// 2-4 ranks over 1-3 loopback rails, against references; alltoallv with uneven and empty
// splits, and a count mismatch that must fail on every rank instead of hanging.
#include <gtest/gtest.h>

#include <numeric>

#include "test_util.h"

namespace nezha {
namespace {

using testing::jobOptions;
using testing::makeJob;
using testing::runRanks;

struct Shape {
  int ranks;
  int rails;
};

class ComposeTest : public ::testing::TestWithParam<Shape> {};

TEST_P(ComposeTest, RootedAndPersonalized) {
  const Shape s = GetParam();
  auto comms = makeJob(jobOptions(s.ranks, s.rails));
  const size_t count = 20000;  // large enough to be split across rails when hot
  const size_t n = static_cast<size_t>(s.ranks);
  runRanks(s.ranks, [&](int r) {
    Communicator& c = *comms[r];
    for (int root = 0; root < s.ranks; ++root) {
      // reduce (sum of rank+i over ranks)
      std::vector<int64_t> in(count), out(count, -7);
      for (size_t i = 0; i < count; ++i) in[i] = r + static_cast<int64_t>(i);
      c.reduce(in.data(), r == root ? out.data() : nullptr, count, DataType::kInt64, ReduceOp::kSum,
               root);
      if (r == root) {
        for (size_t i = 0; i < count; i += 997) {
          ASSERT_EQ(out[i], static_cast<int64_t>(n * i + n * (n - 1) / 2)) << i;
        }
      }
      // gather
      std::vector<float> g(n * count, -1);
      std::vector<float> mine(count, static_cast<float>(r * 10 + root));
      c.gather(mine.data(), r == root ? g.data() : nullptr, count, DataType::kFloat32, root);
      if (r == root) {
        for (size_t p = 0; p < n; ++p) ASSERT_EQ(g[p * count + 5], p * 10.0f + root);
      }
      // scatter
      std::vector<double> all(n * count), part(count, -1);
      for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<double>(i);
      c.scatter(r == root ? all.data() : nullptr, part.data(), count, DataType::kFloat64, root);
      ASSERT_EQ(part[0], static_cast<double>(r * count));
      ASSERT_EQ(part[count - 1], static_cast<double>((r + 1) * count - 1));
    }
    // alltoallv: rank r sends (r + p) * 1000 + (p == 1 ? 0 : 3) elements to p (rank 1 gets
    // nothing from rank 0 and is still fine); element value = from * 1e6 + to * 1e3 + index.
    auto amount = [](size_t from, size_t to) {
      return (from == 0 && to == 1) ? 0 : (from + to) * 1000 + 3;
    };
    std::vector<size_t> sc(n), sd(n), rc(n), rd(n);
    size_t st = 0, rt = 0;
    for (size_t p = 0; p < n; ++p) {
      sc[p] = amount(r, p);
      sd[p] = st;
      st += sc[p];
      rc[p] = amount(p, r);
      rd[p] = rt;
      rt += rc[p];
    }
    std::vector<int32_t> send(st), recv(rt, -1);
    for (size_t p = 0; p < n; ++p) {
      for (size_t i = 0; i < sc[p]; ++i)
        send[sd[p] + i] = static_cast<int32_t>(r * 1000000 + p * 1000 + i % 1000);
    }
    c.alltoallv(send.data(), sc.data(), sd.data(), recv.data(), rc.data(), rd.data(),
                DataType::kInt32);
    for (size_t p = 0; p < n; ++p) {
      for (size_t i = 0; i < rc[p]; i += 101) {
        ASSERT_EQ(recv[rd[p] + i], static_cast<int32_t>(p * 1000000 + r * 1000 + i % 1000))
            << "from " << p << " index " << i;
      }
    }
    // A receive count that disagrees with the sender: every rank throws, nobody hangs.
    std::vector<size_t> bad = rc;
    if (r == 0) bad[n - 1] += 1;
    EXPECT_THROW(c.alltoallv(send.data(), sc.data(), sd.data(), recv.data(), bad.data(), rd.data(),
                             DataType::kInt32),
                 InvalidArgument);
    // The communicator is still usable afterwards.
    int64_t one = 1;
    c.allreduce(&one, &one, 1, DataType::kInt64, ReduceOp::kSum);
    EXPECT_EQ(one, static_cast<int64_t>(n));
  });
}

INSTANTIATE_TEST_SUITE_P(Shapes, ComposeTest,
                         ::testing::Values(Shape{2, 1}, Shape{3, 2}, Shape{4, 3}),
                         [](const ::testing::TestParamInfo<Shape>& i) {
                           return "ranks" + std::to_string(i.param.ranks) + "_rails" +
                                  std::to_string(i.param.rails);
                         });

TEST(ComposeArgs, BadRootIsInvalidArgument) {
  auto comms = makeJob(jobOptions(1, 1));
  float x = 0;
  EXPECT_THROW(comms[0]->reduce(&x, &x, 1, DataType::kFloat32, ReduceOp::kSum, 1), InvalidArgument);
  EXPECT_THROW(comms[0]->scatter(&x, &x, 1, DataType::kFloat32, -1), InvalidArgument);
}

}  // namespace
}  // namespace nezha
