// External memory on the RDMA rail's device (transport/verbs/memory_region.h) against the
// libibverbs test double: host memory and dma-buf memory registered, then an RDMA write with
// immediate from one region into another over a connected queue pair, bytes compared. The
// dma-buf is a memfd (what the double maps, as the kernel maps a GPU's dma-buf for the HCA);
// the test reads and writes it only through the fd, and its iova is an address that is not
// mapped in this process (like a CUDA device pointer), so the bytes can only have moved through
// the double's own mapping of the fd. What only hardware shows is in docs/rdma.md.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "base/error.h"
#include "transport/fake_hca.h"
#include "transport/verbs/memory_region.h"
#include "transport/verbs_pair.h"

namespace nezha {
namespace {

using testing::ConnectedPair;
using testing::Memfd;
using testing::nextCompletion;

// Device-pointer-like iovas: high, distinct, and not mapped here.
constexpr uint64_t kSendIova = 0x7e5700000000ull;
constexpr uint64_t kRecvIova = 0x7e5800000000ull;

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 13 + (i >> 8));
  return v;
}

class VerbsMemoryTest : public testing::FakeHcaSuite {};

// One RDMA write with immediate of `len` bytes at `from`+fromOff into `to`+toOff, pair.qp[0]
// -> pair.qp[1]; both completions must succeed and the receive carry the immediate.
void writeWithImm(ConnectedPair& pair, const MemoryRegion& from, uint64_t fromOff,
                  const MemoryRegion& to, uint64_t toOff, uint32_t len, uint32_t imm) {
  ibv_recv_wr rwr{};
  ibv_recv_wr* rbad = nullptr;
  rwr.wr_id = 7;
  ASSERT_EQ(ibv_post_recv(pair.qp[1]->get(), &rwr, &rbad), 0);
  ibv_sge sge{};
  sge.addr = from.address() + fromOff;
  sge.length = len;
  sge.lkey = from.lkey();
  ibv_send_wr wr{};
  ibv_send_wr* bad = nullptr;
  wr.wr_id = 9;
  wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.imm_data = htonl(imm);
  wr.wr.rdma.remote_addr = to.address() + toOff;
  wr.wr.rdma.rkey = to.rkey();
  ASSERT_EQ(ibv_post_send(pair.qp[0]->get(), &wr, &bad), 0);
  const ibv_wc sent = nextCompletion(*pair.dev[0]);
  EXPECT_EQ(sent.status, IBV_WC_SUCCESS);
  EXPECT_EQ(sent.wr_id, 9u);
  const ibv_wc got = nextCompletion(*pair.dev[1]);
  EXPECT_EQ(got.status, IBV_WC_SUCCESS);
  EXPECT_EQ(got.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
  EXPECT_EQ(ntohl(got.imm_data), imm);
  EXPECT_EQ(got.byte_len, len);
}

TEST_F(VerbsMemoryTest, TheDoubleSupportsDmabuf) {
  auto dev = testing::openLoopbackDevice(sysfsRoot(), "127.0.0.1");
  EXPECT_EQ(probeDmabufSupport(*dev), DmabufSupport::kSupported);
}

// memfd (dma-buf) -> memfd (dma-buf) -> host memory, at offsets that are not page aligned.
TEST_F(VerbsMemoryTest, WritesMoveBytesBetweenDmabufAndHostRegions) {
  ConnectedPair pair(sysfsRoot());
  const size_t bytes = 1 << 20;
  Memfd sendBuf(bytes), recvBuf(bytes);
  const uint64_t sendOffset = 4096 + 100, recvOffset = 3 * 4096 + 1;
  const size_t regionBytes = 512 << 10;
  const uint32_t len = 300000;
  const std::vector<uint8_t> data = pattern(len, 5);
  sendBuf.write(sendOffset + 64, data);
  auto src = MemoryRegion::registerDmabuf(*pair.dev[0], sendBuf.fd(), sendOffset, regionBytes,
                                          kSendIova, 0);
  auto dst = MemoryRegion::registerDmabuf(*pair.dev[1], recvBuf.fd(), recvOffset, regionBytes,
                                          kRecvIova, 0);
  EXPECT_TRUE(src->dmabuf());
  EXPECT_EQ(src->address(), kSendIova);
  EXPECT_EQ(dst->size(), regionBytes);
  writeWithImm(pair, *src, 64, *dst, 1000, len, 0x1234);
  EXPECT_EQ(recvBuf.read(recvOffset + 1000, len), data);
  // Not a byte outside the target range.
  EXPECT_EQ(recvBuf.read(recvOffset, 1000), std::vector<uint8_t>(1000, 0));
  EXPECT_EQ(recvBuf.read(recvOffset + 1000 + len, 4096), std::vector<uint8_t>(4096, 0));

  // Back the other way: the received dma-buf region is the source, host memory the target.
  ConnectedPair back(sysfsRoot());
  auto again = MemoryRegion::registerDmabuf(*back.dev[0], recvBuf.fd(), recvOffset, regionBytes,
                                            kRecvIova, 0);
  std::vector<uint8_t> host(len, 0);
  auto hostMr = MemoryRegion::registerHost(*back.dev[1], host.data(), host.size(), 0);
  EXPECT_FALSE(hostMr->dmabuf());
  EXPECT_EQ(hostMr->address(), reinterpret_cast<uintptr_t>(host.data()));
  writeWithImm(back, *again, 1000, *hostMr, 0, len, 42);
  EXPECT_EQ(host, data);
}

// A write past the end of a dma-buf region is refused by the responder, as by an HCA: the
// region's bounds are its iova range, not the whole buffer behind the fd.
TEST_F(VerbsMemoryTest, AWriteBeyondTheRegionFails) {
  ConnectedPair pair(sysfsRoot());
  Memfd sendBuf(1 << 16), recvBuf(1 << 16);
  auto src = MemoryRegion::registerDmabuf(*pair.dev[0], sendBuf.fd(), 0, 8192, kSendIova, 0);
  auto dst = MemoryRegion::registerDmabuf(*pair.dev[1], recvBuf.fd(), 0, 4096, kRecvIova, 0);
  ibv_recv_wr rwr{};
  ibv_recv_wr* rbad = nullptr;
  ASSERT_EQ(ibv_post_recv(pair.qp[1]->get(), &rwr, &rbad), 0);
  ibv_sge sge{src->address(), 8192, src->lkey()};
  ibv_send_wr wr{};
  ibv_send_wr* bad = nullptr;
  wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.wr.rdma.remote_addr = dst->address();
  wr.wr.rdma.rkey = dst->rkey();
  ASSERT_EQ(ibv_post_send(pair.qp[0]->get(), &wr, &bad), 0);
  EXPECT_NE(nextCompletion(*pair.dev[0]).status, IBV_WC_SUCCESS);
  EXPECT_EQ(recvBuf.read(0, 8192), std::vector<uint8_t>(8192, 0));
}

TEST_F(VerbsMemoryTest, AKernelWithoutDmabufIsReportedAndRefused) {
  auto dev = testing::openLoopbackDevice(sysfsRoot(), "127.0.0.1");
  Memfd buf(4096);
  setenv("NEZHA_IBV_DOUBLE_DMABUF", "unsupported", 1);
  EXPECT_EQ(probeDmabufSupport(*dev), DmabufSupport::kRefusedByKernel);
  try {
    MemoryRegion::registerDmabuf(*dev, buf.fd(), 0, 4096, kSendIova, 3);
    ADD_FAILURE() << "registered a dma-buf on a kernel without dma-buf support";
  } catch (const RailError& e) {
    EXPECT_EQ(e.rail(), 3);
    EXPECT_NE(std::string(e.what()).find("ibv_reg_dmabuf_mr"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(std::strerror(EOPNOTSUPP)), std::string::npos) << e.what();
  }
  unsetenv("NEZHA_IBV_DOUBLE_DMABUF");
}

TEST_F(VerbsMemoryTest, BadRegistrationsNameTheCallAndTheInput) {
  auto dev = testing::openLoopbackDevice(sysfsRoot(), "127.0.0.1");
  Memfd buf(4096);
  EXPECT_THROW(MemoryRegion::registerDmabuf(*dev, -1, 0, 4096, kSendIova, 0), InvalidArgument);
  EXPECT_THROW(MemoryRegion::registerDmabuf(*dev, buf.fd(), 0, 0, kSendIova, 0), InvalidArgument);
  EXPECT_THROW(MemoryRegion::registerHost(*dev, nullptr, 10, 0), InvalidArgument);
  try {  // past the end of the buffer behind the fd
    MemoryRegion::registerDmabuf(*dev, buf.fd(), 4000, 200, kSendIova, 0);
    ADD_FAILURE() << "registered beyond the dma-buf";
  } catch (const RailError& e) {
    EXPECT_NE(std::string(e.what()).find("fd " + std::to_string(buf.fd()) + ", offset 4000, 200"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace nezha
