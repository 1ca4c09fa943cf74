// Direct placement on the RDMA rail (transport/verbs/verbs_peer.h; docs/rdma.md): IoOps that
// carry a region move between registered buffers with no CPU access to them, beside ordinary
// staged ops in the same exchange. Three ranks, each with its rail's channel opened on a
// protection domain of its own making (VerbsChannel's `domain`, as the NCCL plugin opens its
// rails) and a memfd standing in for a GPU's dma-buf registered there; the address the ops name
// is made PROT_NONE once registered, so a CPU access through the rail faults; the bytes are
// checked through a second mapping. Also: keys of another protection domain fail the rail.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "test_util.h"
#include "transport/fake_hca.h"
#include "transport/rdma_ranks.h"
#include "transport/verbs/memory_region.h"
#include "transport/verbs_pair.h"

namespace nezha {
namespace {

using testing::runRanks;

class VerbsDirectTest : public testing::FakeHcaSuite {};

// A rank's "GPU" memory: one memfd, the half [0, kHalf) its sends read, [kHalf, 2 kHalf) its
// receives land in; `device` (the iova the ops name) hidden from the CPU after registration.
constexpr size_t kHalf = 12 << 20;
struct RankMemory {
  testing::Memfd memfd{2 * kHalf};
  char* device = map();
  uint8_t* view = reinterpret_cast<uint8_t*>(map());
  std::unique_ptr<MemoryRegion> region;
  char* map() const {
    void* p = mmap(nullptr, 2 * kHalf, PROT_READ | PROT_WRITE, MAP_SHARED, memfd.fd(), 0);
    EXPECT_NE(p, MAP_FAILED);
    return static_cast<char*>(p);
  }
  void registerOn(const VerbsDevice& dev) {
    region = MemoryRegion::registerDmabuf(dev, memfd.fd(), 0, 2 * kHalf,
                                          reinterpret_cast<uintptr_t>(device), 0);
    ASSERT_EQ(mprotect(device, 2 * kHalf, PROT_NONE), 0);
  }
  IoRegion keys() const { return IoRegion{region->lkey(), region->rkey()}; }
  ~RankMemory() {
    region.reset();
    munmap(device, 2 * kHalf);
    munmap(view, 2 * kHalf);
  }
};

uint8_t pattern(int from, int to, int op, size_t i) {
  return static_cast<uint8_t>(from * 31 + to * 7 + op * 13 + i);
}

TEST_F(VerbsDirectTest, RegisteredOpsMoveBesideStagedOpsWithoutTheCpu) {
  constexpr int kRanks = 3;
  std::vector<std::shared_ptr<const VerbsDevice>> domains;
  for (int r = 0; r < kRanks; ++r)
    domains.push_back(testing::openLoopbackDevice(sysfsRoot(), "127.0.0.1"));
  auto ts = testing::connectRdmaRanks(kRanks, domains);
  std::vector<std::unique_ptr<RankMemory>> mem;
  for (int r = 0; r < kRanks; ++r) {
    mem.push_back(std::make_unique<RankMemory>());
    mem.back()->registerOn(*domains[r]);
  }
  // Below, around and above a staging slot (128 KiB), and several slots.
  const size_t sizes[] = {1, 4097, (128 << 10) + 1, (1 << 20) + 5};
  const size_t slot = 2 << 20;  // per peer and op in a rank's halves (6 of them)
  runRanks(kRanks, [&](int r) {
    RankMemory& m = *mem[r];
    for (size_t len : sizes) {
      // Per peer and direction: a staged op, then two registered ones, then a staged one.
      std::vector<std::vector<uint8_t>> stagedOut(kRanks * 2), stagedIn(kRanks * 2);
      std::vector<IoOp> ops;
      std::vector<size_t> landed(kRanks * 2, 0);
      for (int p = 0; p < kRanks; ++p) {
        if (p == r) continue;
        for (int k = 0; k < 2; ++k) {
          stagedOut[p * 2 + k].resize(len);
          for (size_t i = 0; i < len; ++i) stagedOut[p * 2 + k][i] = pattern(r, p, k, i);
          stagedIn[p * 2 + k].assign(len, 0);
          for (size_t i = 0; i < len; ++i) m.view[(p * 2 + k) * slot + i] = pattern(r, p, 2 + k, i);
          std::fill(m.view + kHalf + (p * 2 + k) * slot, m.view + kHalf + (p * 2 + k) * slot + len,
                    0);
        }
        auto direct = [&](IoOp op) {
          op.region = m.keys();
          return op;
        };
        ops.push_back(IoOp::send(p, stagedOut[p * 2].data(), len));
        ops.push_back(direct(IoOp::send(p, m.device + (p * 2) * slot, len)));
        ops.push_back(direct(IoOp::send(p, m.device + (p * 2 + 1) * slot, len)));
        ops.push_back(IoOp::send(p, stagedOut[p * 2 + 1].data(), len));
        ops.push_back(IoOp::recv(p, stagedIn[p * 2].data(), len));
        for (int k = 0; k < 2; ++k) {
          ops.push_back(direct(IoOp::recv(p, m.device + kHalf + (p * 2 + k) * slot, len, 1,
                                          [&, p, k](size_t off, size_t n) {
                                            EXPECT_EQ(off, 0u);
                                            landed[p * 2 + k] += n;
                                          })));
        }
        ops.push_back(IoOp::recv(p, stagedIn[p * 2 + 1].data(), len));
      }
      ts[r]->exchange(ops);
      for (int p = 0; p < kRanks; ++p) {
        if (p == r) continue;
        for (int k = 0; k < 2; ++k) {
          EXPECT_EQ(landed[p * 2 + k], len) << "onRecv once with the whole receive";
          for (size_t i = 0; i < len; ++i) {
            ASSERT_EQ(stagedIn[p * 2 + k][i], pattern(p, r, k, i)) << len << " staged " << i;
            ASSERT_EQ(m.view[kHalf + (p * 2 + k) * slot + i], pattern(p, r, 2 + k, i))
                << len << " direct " << k << " byte " << i;
          }
        }
      }
    }
  });
  ts.clear();  // channels before the registrations (mem) and the domains
}

TEST_F(VerbsDirectTest, KeysOfAnotherProtectionDomainFailTheRail) {
  // The channels open domains of their own; the memory is registered elsewhere.
  auto ts = testing::connectRdmaRanks(2);
  std::shared_ptr<const VerbsDevice> elsewhere =
      testing::openLoopbackDevice(sysfsRoot(), "127.0.0.1");
  RankMemory m;
  m.registerOn(*elsewhere);
  runRanks(2, [&](int r) {
    std::vector<IoOp> ops{r == 0 ? IoOp::send(1, m.device, 4096)
                                 : IoOp::recv(0, m.device + kHalf, 4096)};
    ops[0].region = m.keys();
    EXPECT_THROW(ts[r]->exchange(ops), RailError) << "rank " << r;
  });
  ts.clear();
}

}  // namespace
}  // namespace nezha
