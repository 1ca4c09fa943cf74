// The RDMA rail's device on a libibverbs without ibv_reg_dmabuf_mr (rdma-core older than v34),
// played by the test double built without that symbol (doubles/ibverbs-pre-dmabuf, on this
// test's LD_LIBRARY_PATH): dma-buf support is reported absent, a dma-buf registration is a
// ConfigError naming the missing call, and everything else, host registration included, works.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <string>

#include "base/error.h"
#include "transport/fake_hca.h"
#include "transport/verbs/memory_region.h"
#include "transport/verbs_pair.h"

namespace nezha {
namespace {

TEST(VerbsPreDmabufTest, TheDoubleWithoutTheSymbolIsLoaded) {
  const std::string path = testing::loadedLibibverbs();
  EXPECT_NE(path.find("doubles/ibverbs-pre-dmabuf/"), std::string::npos) << path;
  void* h = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(h, nullptr) << dlerror();
  EXPECT_EQ(dlvsym(h, "ibv_reg_dmabuf_mr", kRegDmabufMrVersion), nullptr);
}

TEST(VerbsPreDmabufTest, DmabufIsUnsupportedAndHostMemoryStillRegisters) {
  testing::FakeHcaOnLoopback hca;
  auto dev = testing::openLoopbackDevice(hca.root(), "127.0.0.1");
  EXPECT_EQ(dev->lib().regDmabufMr, nullptr);
  EXPECT_EQ(probeDmabufSupport(*dev), DmabufSupport::kNoLibrarySymbol);
  testing::Memfd buf(4096);
  try {
    MemoryRegion::registerDmabuf(*dev, buf.fd(), 0, 4096, 0x7e5700000000ull, 0);
    ADD_FAILURE() << "registered a dma-buf without ibv_reg_dmabuf_mr";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("ibv_reg_dmabuf_mr@IBVERBS_1.12"), std::string::npos)
        << e.what();
  }
  std::vector<char> host(4096);
  auto mr = MemoryRegion::registerHost(*dev, host.data(), host.size(), 0);
  EXPECT_EQ(mr->size(), host.size());
}

}  // namespace
}  // namespace nezha
