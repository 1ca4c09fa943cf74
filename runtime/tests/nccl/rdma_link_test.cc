// The plugin's connections over rdma rails (docs/nccl.md "Rails"): both ends built the way the
// plugin builds them (nccl/pending_link.h: listen() fills the handle, connect() dials it, every
// rail's connections prove the job token), with rdma rails made by the verbs transport against
// the libibverbs test double (tests/doubles/ibverbs; ctest puts it on LD_LIBRARY_PATH) and its
// fake HCA on loopback (GIDs 127.0.0.1 and 127.0.0.2). Two rdma rails, and a tcp rail beside an
// rdma rail in one connection: every message size arrives exact, and a cut rail fails over and
// comes back.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "nccl/engine_link.h"
#include "nccl/link_pair.h"
#include "test_util.h"
#include "transport/fake_hca.h"

namespace nezha::ncclnet {
namespace {

constexpr int kS = EngineLink::kSender;
constexpr int kR = EngineLink::kReceiver;
using Links = testing::LinkPair;

class RdmaLinkTest : public ::testing::TestWithParam<std::array<std::string, 2>> {
 protected:
  static void SetUpTestSuite() { hca_ = std::make_unique<testing::FakeHcaOnLoopback>(); }
  static void TearDownTestSuite() { hca_.reset(); }

  static Options base() { return testing::heldShareLinkOptions({GetParam()[0], GetParam()[1]}); }
  static Links connectLinks() { return testing::connectPendingLinks(base()); }

  static std::unique_ptr<testing::FakeHcaOnLoopback> hca_;
};
std::unique_ptr<testing::FakeHcaOnLoopback> RdmaLinkTest::hca_;

struct Sent {
  bool exact = false;
  uint64_t receivedBytes = 0;
  int railsUsed = 0;  // on the sender
};

// One message of `bytes` (pattern of message m) into a larger receive, polled to completion.
Sent sendOne(Links& links, int m, size_t bytes) {
  std::vector<uint8_t> out(bytes), in(bytes + 64, 0);
  for (size_t i = 0; i < bytes; ++i) out[i] = static_cast<uint8_t>(m * 37 + i * 11 + 5);
  const uint64_t sid = links[kS]->post(out.data(), bytes);
  const uint64_t rid = links[kR]->post(in.data(), in.size());
  Sent s;
  uint64_t sentBytes = 0;
  while (!links[kS]->test(sid, &sentBytes, &s.railsUsed)) std::this_thread::yield();
  while (!links[kR]->test(rid, &s.receivedBytes)) std::this_thread::yield();
  s.exact = std::equal(out.begin(), out.end(), in.begin()) &&
            std::all_of(in.begin() + static_cast<long>(bytes), in.end(),
                        [](uint8_t b) { return b == 0; });
  return s;
}

TEST_P(RdmaLinkTest, CarriesMessagesOfEverySizeExactly) {
  Links links = connectLinks();
  // Around the verbs rail's slot (128 KiB) and several slots, split over both rails.
  const std::vector<size_t> sizes{0,         1,       4097,          (128 << 10) - 1,
                                  128 << 10, 1 << 20, (3 << 20) + 5, (128 << 10) + 1};
  for (size_t m = 0; m < sizes.size(); ++m) {
    const Sent s = sendOne(links, static_cast<int>(m), sizes[m]);
    EXPECT_TRUE(s.exact) << sizes[m] << " bytes";
    EXPECT_EQ(s.receivedBytes, sizes[m]);
  }
  EXPECT_EQ(sendOne(links, 20, 3 << 20).railsUsed, 2) << "a large message uses both rails";
}

TEST_P(RdmaLinkTest, ACutRailFailsOverAndComesBackWithEveryMessageExact) {
  Links links = connectLinks();
  // Cut each rail in turn (the rdma one included), between messages, on alternating ends.
  for (int rail : {1, 0}) {
    const int cutter = rail == 1 ? kS : kR;
    const size_t readmittedBefore = links[cutter]->metrics().readmissions.size();
    links[cutter]->abortRail(rail);
    const Sent afterCut = sendOne(links, 100 + rail, 2 << 20);
    EXPECT_TRUE(afterCut.exact);
    EXPECT_EQ(afterCut.railsUsed, 1) << "rail r" << rail << " is out of the split";
    int m = 0;
    while (links[cutter]->metrics().readmissions.size() == readmittedBefore) {
      ASSERT_LT(++m, 5000) << "rail r" << rail << " never came back";
      ASSERT_TRUE(sendOne(links, m, 2 << 20).exact) << "message " << m;
    }
    const Sent back = sendOne(links, 200 + rail, 2 << 20);
    EXPECT_TRUE(back.exact);
    EXPECT_EQ(back.railsUsed, 2) << "rail r" << rail << " carries its share again";
  }
  for (int rank : {kS, kR}) {
    const Metrics& metrics = links[rank]->metrics();
    ASSERT_EQ(metrics.failovers.size(), 2u) << "rank " << rank;
    EXPECT_EQ(metrics.failovers[0].rail, "r1");
    EXPECT_EQ(metrics.failovers[1].rail, "r0");
    EXPECT_EQ(metrics.readmissions.size(), 2u) << "rank " << rank;
  }
}

INSTANTIATE_TEST_SUITE_P(Rails, RdmaLinkTest,
                         ::testing::Values(std::array<std::string, 2>{"rdma", "rdma"},
                                           std::array<std::string, 2>{"tcp", "rdma"}),
                         [](const auto& param) { return param.param[0] + "_" + param.param[1]; });

}  // namespace
}  // namespace nezha::ncclnet
