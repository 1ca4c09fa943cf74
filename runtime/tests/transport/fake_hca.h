// The sysfs tree of the libibverbs test double's fake HCA (tests/doubles/ibverbs): `nzdbl_lo`
// behind lo, RoCE v2 GID i = 127.0.0.(i+1). The runtime's discovery (transport/verbs/discovery.h)
// and the double both read it through NEZHA_RDMA_SYSFS_ROOT.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>

#include "transport/verbs/discovery.h"

namespace nezha::testing {

inline void writeFile(const std::string& path, const std::string& text) {
  const std::string dir = path.substr(0, path.rfind('/'));
  ASSERT_EQ(std::system(("mkdir -p '" + dir + "'").c_str()), 0);
  std::ofstream(path) << text << "\n";
}

// Creates the tree in a fresh temporary directory and points NEZHA_RDMA_SYSFS_ROOT at it;
// removes it again on destruction.
class FakeHcaOnLoopback {
 public:
  explicit FakeHcaOnLoopback(int gids = 2) {
    char tmpl[] = "/tmp/nezha-verbs-sysfs.XXXXXX";
    if (mkdtemp(tmpl) == nullptr) {
      ADD_FAILURE() << "mkdtemp failed";
      return;
    }
    root_ = tmpl;
    const std::string dev = root_ + "/class/infiniband/nzdbl_lo/ports/1";
    writeFile(root_ + "/class/net/lo/device/infiniband/nzdbl_lo/ibdev", "nzdbl_lo");
    writeFile(dev + "/link_layer", "Ethernet");
    for (int i = 0; i < gids; ++i) {
      const std::string idx = std::to_string(i);
      writeFile(dev + "/gids/" + idx, ipv4MappedGid("127.0.0." + std::to_string(i + 1)));
      writeFile(dev + "/gid_attrs/ndevs/" + idx, "lo");
      writeFile(dev + "/gid_attrs/types/" + idx, "RoCE v2");
    }
    setenv("NEZHA_RDMA_SYSFS_ROOT", root_.c_str(), 1);
  }
  ~FakeHcaOnLoopback() {
    if (!root_.empty()) {
      EXPECT_EQ(std::system(("rm -rf '" + root_ + "'").c_str()), 0);
    }
  }
  FakeHcaOnLoopback(const FakeHcaOnLoopback&) = delete;
  FakeHcaOnLoopback& operator=(const FakeHcaOnLoopback&) = delete;
  const std::string& root() const { return root_; }

 private:
  std::string root_;
};

// A test suite whose tests share one fake HCA tree (GIDs 127.0.0.1 and .2), made before its
// first test and removed after its last.
class FakeHcaSuite : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { hca_ = std::make_unique<FakeHcaOnLoopback>(); }
  static void TearDownTestSuite() { hca_.reset(); }
  static const std::string& sysfsRoot() { return hca_->root(); }

 private:
  static inline std::unique_ptr<FakeHcaOnLoopback> hca_;
};

}  // namespace nezha::testing
