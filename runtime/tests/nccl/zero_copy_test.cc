// Zero copy proven (docs/nccl.md "GPU memory"): the plugin moves NCCL's registered buffers with
// no CPU access to them. The "GPU" buffers are memfds standing in for a GPU's dma-buf, mapped
// twice: the address NCCL names a buffer by (its iova, as a CUDA pointer would be) is made
// PROT_NONE once the buffer is registered, so any CPU read or write of it through the plugin
// faults and kills the test; the libibverbs test double (tests/doubles/ibverbs) reaches the bytes
// through its own mapping of the dma-buf fd, as an HCA reaches GPU memory; the test checks them
// through a readable mapping of its own. Over two rdma rails of the double:
//  - the plugin loaded as NCCL loads it: zero-copy in its INFO line and ptrSupport, and messages
//    of every size through isend/irecv/test of the v12 table exact;
//  - two links built as the plugin builds them: a rail cut mid-stream fails over onto the other
//    rdma rail (replay from the same registered buffers) and comes back rebuilt on the same
//    protection domain, every message exact;
//  - a zero-copy end and a host-staged end refuse to build a link, naming both.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "nccl/comm_error.h"
#include "nccl/engine_link.h"
#include "nccl/gpu_memory.h"
#include "nccl/link_pair.h"
#include "nccl/net_abi.h"
#include "nccl/plugin_driver.h"
#include "test_util.h"
#include "transport/fake_hca.h"
#include "transport/verbs_pair.h"

namespace nezha::ncclnet {
namespace {

constexpr size_t kBufferBytes = 4 << 20;

// A GPU buffer's stand-in: a memfd (the dma-buf) with the address NCCL uses (`device()`, hidden
// from the CPU by hide()) and the test's own view of the same bytes.
class GpuStandIn {
 public:
  GpuStandIn() : memfd_(kBufferBytes) {
    device_ = map();
    view_ = static_cast<uint8_t*>(map());
  }
  ~GpuStandIn() {
    munmap(device_, kBufferBytes);
    munmap(view_, kBufferBytes);
  }
  GpuStandIn(const GpuStandIn&) = delete;
  GpuStandIn& operator=(const GpuStandIn&) = delete;
  void* device() const { return device_; }
  int fd() const { return memfd_.fd(); }
  uint8_t* view() const { return view_; }
  // From now on the CPU cannot touch the buffer through the address NCCL hands the plugin.
  void hide() const { ASSERT_EQ(mprotect(device_, kBufferBytes, PROT_NONE), 0); }

 private:
  void* map() const {
    void* p = mmap(nullptr, kBufferBytes, PROT_READ | PROT_WRITE, MAP_SHARED, memfd_.fd(), 0);
    EXPECT_NE(p, MAP_FAILED);
    return p;
  }
  testing::Memfd memfd_;
  void* device_ = nullptr;
  uint8_t* view_ = nullptr;
};

uint8_t pattern(int m, size_t i) { return static_cast<uint8_t>(m * 37 + i * 11 + 5); }

// Message m of `bytes` in the sender's buffer; the receiver's first bytes + 64 cleared.
void prepare(const GpuStandIn& out, const GpuStandIn& in, int m, size_t bytes) {
  for (size_t i = 0; i < bytes; ++i) out.view()[i] = pattern(m, i);
  std::fill(in.view(), in.view() + std::min(kBufferBytes, bytes + 64), 0);
}

// Whether message m arrived exactly: its bytes, and nothing written past them.
bool arrivedExact(const GpuStandIn& in, int m, size_t bytes) {
  for (size_t i = 0; i < bytes; ++i) {
    if (in.view()[i] != pattern(m, i)) return false;
  }
  for (size_t i = bytes; i < std::min(kBufferBytes, bytes + 64); ++i) {
    if (in.view()[i] != 0) return false;
  }
  return true;
}

class ZeroCopyTest : public testing::FakeHcaSuite {};

// ---- the plugin, loaded as NCCL loads it, on two rdma rails ----------------------------------

using testing::logged;

TEST_F(ZeroCopyTest, ThePluginMovesGpuBuffersOfEverySizeWithoutTouchingThem) {
  void* ctx = nullptr;
  const ncclNet_v12_t* net = testing::loadPlugin("r0=lo:rdma,r1=lo:rdma", &ctx);
  ASSERT_NE(net, nullptr);
  EXPECT_NE(logged().find("zero-copy (ptrSupport NCCL_PTR_HOST|NCCL_PTR_CUDA|NCCL_PTR_DMABUF): "
                          "every rail is rdma"),
            std::string::npos)
      << logged();
  ncclNetProperties_v12_t props{};
  ASSERT_EQ(net->getProperties(0, &props), ncclSuccess);
  EXPECT_EQ(props.ptrSupport, NCCL_PTR_HOST | NCCL_PTR_CUDA | NCCL_PTR_DMABUF);
  testing::Comms comms;
  ASSERT_NO_FATAL_FAILURE(testing::connectComms(net, ctx, comms));

  GpuStandIn out, in;
  void *sendMh = nullptr, *recvMh = nullptr;
  ASSERT_EQ(
      net->regMrDmaBuf(comms.send, out.device(), kBufferBytes, NCCL_PTR_CUDA, 0, out.fd(), &sendMh),
      ncclSuccess)
      << logged();
  ASSERT_EQ(
      net->regMrDmaBuf(comms.recv, in.device(), kBufferBytes, NCCL_PTR_CUDA, 0, in.fd(), &recvMh),
      ncclSuccess)
      << logged();
  out.hide();
  in.hide();

  // A message of some bytes without its memory handle cannot move without the CPU: refused.
  void* req = nullptr;
  EXPECT_EQ(net->isend(comms.send, out.device(), 16, 0, nullptr, nullptr, &req),
            ncclInvalidArgument);

  const std::vector<size_t> sizes{0, 1, 4096, (64 << 10) + 3, (3 << 20) + 5};
  for (size_t m = 0; m < sizes.size(); ++m) {
    prepare(out, in, static_cast<int>(m), sizes[m]);
    int got = -1;
    ASSERT_NO_FATAL_FAILURE(testing::transfer(net, comms, out.device(), sizes[m], sendMh,
                                              in.device(), kBufferBytes, recvMh, &got));
    EXPECT_EQ(got, static_cast<int>(sizes[m]));
    EXPECT_TRUE(arrivedExact(in, static_cast<int>(m), sizes[m])) << sizes[m] << " bytes";
  }
  // NCCL asks for a flush only where a GPU may not yet see the HCA's writes (before Hopper, C2C
  // platforms, NCCL_NET_FORCE_FLUSH). The plugin has no flush to do it with: it fails naming the
  // way out, never a silent "done". A flush of nothing is done at once.
  void* data[1] = {in.device()};
  int flushSizes[1] = {4096};
  void* flushHandles[1] = {recvMh};
  void* flushReq = &flushReq;
  EXPECT_EQ(net->iflush(comms.recv, 1, data, flushSizes, flushHandles, &flushReq),
            ncclInternalError);
  EXPECT_EQ(flushReq, nullptr);
  EXPECT_NE(logged().find("iflush: NCCL asks to flush a receive into GPU memory"),
            std::string::npos)
      << logged();
  EXPECT_NE(logged().find("NCCL_NET_GDR_LEVEL=LOC"), std::string::npos);
  flushSizes[0] = 0;
  EXPECT_EQ(net->iflush(comms.recv, 1, data, flushSizes, flushHandles, &flushReq), ncclSuccess);
  EXPECT_EQ(flushReq, nullptr);

  EXPECT_EQ(net->deregMr(comms.send, sendMh), ncclSuccess);
  EXPECT_EQ(net->deregMr(comms.recv, recvMh), ncclSuccess);
  testing::closeComms(net, comms);
}

// ---- two links as the plugin builds them, each end with its own domains ----------------------

constexpr int kS = EngineLink::kSender;
constexpr int kR = EngineLink::kReceiver;
using Links = testing::LinkPair;

Links connectLinks(const LinkMemory& receiver, const LinkMemory& sender) {
  return testing::connectPendingLinks(testing::heldShareLinkOptions({"rdma", "rdma"}), receiver,
                                      sender);
}

struct Sent {
  bool exact = false;
  int railsUsed = 0;  // on the sender
};

// Message m of `bytes` between the registered buffers; `whilePosted` runs once both are posted.
Sent sendOne(Links& links, const GpuStandIn& out, const Registration& sendReg, const GpuStandIn& in,
             const Registration& recvReg, int m, size_t bytes,
             const std::function<void()>& whilePosted = nullptr) {
  prepare(out, in, m, bytes);
  const uint64_t sid = links[kS]->post(out.device(), bytes, &sendReg);
  const uint64_t rid = links[kR]->post(in.device(), kBufferBytes, &recvReg);
  if (whilePosted) whilePosted();
  Sent s;
  uint64_t moved = 0;
  while (!links[kS]->test(sid, &moved, &s.railsUsed)) std::this_thread::yield();
  while (!links[kR]->test(rid, &moved)) std::this_thread::yield();
  s.exact = moved == bytes && arrivedExact(in, m, bytes);
  return s;
}

TEST_F(ZeroCopyTest, ARailCutMidStreamFailsOverOntoTheOtherRdmaRailWithoutTouchingTheBuffers) {
  // Each end has its own domains and registers its own buffer, as two hosts do.
  const Options rails = testing::heldShareLinkOptions({"rdma", "rdma"});
  GpuMemory senderMemory(rails), receiverMemory(rails);
  ASSERT_TRUE(senderMemory.path().zeroCopy) << senderMemory.path().why;
  Links links = connectLinks(receiverMemory.linkMemory(), senderMemory.linkMemory());
  GpuStandIn out, in;
  auto sendReg = senderMemory.registerDmabuf(out.device(), kBufferBytes, 0, out.fd());
  auto recvReg = receiverMemory.registerDmabuf(in.device(), kBufferBytes, 0, in.fd());
  out.hide();
  in.hide();

  constexpr size_t kBytes = (3 << 20) + 5;
  ASSERT_EQ(sendOne(links, out, *sendReg, in, *recvReg, 0, kBytes).railsUsed, 2)
      << "a large message uses both rails";
  // Cut r1 while a message is posted: its slices are replayed on r0 from the same buffers.
  const Sent cut =
      sendOne(links, out, *sendReg, in, *recvReg, 1, kBytes, [&] { links[kS]->abortRail(1); });
  EXPECT_TRUE(cut.exact);
  int m = 2;
  while (links[kS]->metrics().readmissions.empty()) {
    ASSERT_LT(m, 5000) << "rail r1 never came back";
    ASSERT_TRUE(sendOne(links, out, *sendReg, in, *recvReg, m, kBytes).exact) << "message " << m;
    ++m;
  }
  // The rebuilt rail opened on the same protection domain: NCCL's keys work in it.
  const Sent back = sendOne(links, out, *sendReg, in, *recvReg, m, kBytes);
  EXPECT_TRUE(back.exact);
  EXPECT_EQ(back.railsUsed, 2) << "rail r1 carries its share again";
  for (int rank : {kS, kR}) {
    const Metrics& metrics = links[rank]->metrics();
    ASSERT_EQ(metrics.failovers.size(), 1u) << "rank " << rank;
    EXPECT_EQ(metrics.failovers[0].rail, "r1");
  }
}

TEST_F(ZeroCopyTest, AZeroCopyEndAndAHostStagedEndRefuseToBuildALink) {
  GpuMemory memory(testing::heldShareLinkOptions({"rdma", "rdma"}));
  ASSERT_TRUE(memory.path().zeroCopy);
  try {
    connectLinks(LinkMemory{}, memory.linkMemory());
    FAIL() << "a link between a zero-copy and a host-staged end was built";
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("both hosts must take GPU memory alike"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace nezha::ncclnet
