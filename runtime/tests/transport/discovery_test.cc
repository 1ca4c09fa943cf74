// RDMA device/port/GID discovery against fixture sysfs trees: RoCE v2 on a PF, a VF found by the
// PCI address from PCIDEVICE_*, a two-port HCA, InfiniBand (IPoIB dev_port), IPv4-mapped GIDs
// among v1 and IPv6 entries, and the errors that name what was found instead.
#include "transport/verbs/discovery.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "nezha/nezha.hpp"

namespace nezha {
namespace {

namespace fs = std::filesystem;

class SysfsFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/nezha-sysfs.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
  }
  void TearDown() override { fs::remove_all(root_); }

  void write(const std::string& rel, const std::string& text) {
    const fs::path p = fs::path(root_) / rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text << "\n";
  }
  // A PCI function at `pci` holding HCA `dev`, and netdev `iface` pointing at it (the kernel's
  // /sys/class/net/<if>/device symlink).
  void function(const std::string& pci, const std::string& dev, const std::string& iface) {
    fs::create_directories(fs::path(root_) / "bus/pci/devices" / pci / "infiniband" / dev);
    fs::create_directories(fs::path(root_) / "class/net" / iface);
    fs::create_symlink(fs::path(root_) / "bus/pci/devices" / pci,
                       fs::path(root_) / "class/net" / iface / "device");
  }
  void gid(const std::string& dev, int port, int idx, const std::string& gid,
           const std::string& type, const std::string& ndev) {
    const std::string p = "class/infiniband/" + dev + "/ports/" + std::to_string(port);
    write(p + "/gids/" + std::to_string(idx), gid);
    write(p + "/gid_attrs/types/" + std::to_string(idx), type);
    write(p + "/gid_attrs/ndevs/" + std::to_string(idx), ndev);
  }
  void linkLayer(const std::string& dev, int port, const std::string& ll) {
    write("class/infiniband/" + dev + "/ports/" + std::to_string(port) + "/link_layer", ll);
  }
  std::string root_;
};

TEST(RdmaDiscovery, Ipv4MappedGid) {
  EXPECT_EQ(ipv4MappedGid("10.100.0.10"), "0000:0000:0000:0000:0000:ffff:0a64:000a");
  EXPECT_EQ(ipv4MappedGid("192.168.1.255"), "0000:0000:0000:0000:0000:ffff:c0a8:01ff");
  EXPECT_THROW(ipv4MappedGid("10.1.2"), ConfigError);
}

TEST_F(SysfsFixture, RoceV2GidIsTheOneCarryingTheRailsAddress) {
  function("0000:3b:00.0", "mlx5_0", "eth1");
  linkLayer("mlx5_0", 1, "Ethernet");
  gid("mlx5_0", 1, 0, "fe80:0000:0000:0000:0a00:27ff:fe00:0001", "IB/RoCE v1", "eth1");
  gid("mlx5_0", 1, 1, "fe80:0000:0000:0000:0a00:27ff:fe00:0001", "RoCE v2", "eth1");
  gid("mlx5_0", 1, 2, "0000:0000:0000:0000:0000:ffff:0a64:000a", "IB/RoCE v1", "eth1");
  gid("mlx5_0", 1, 3, "0000:0000:0000:0000:0000:ffff:0a64:000a", "RoCE v2", "eth1");
  gid("mlx5_0", 1, 4, "0000:0000:0000:0000:0000:ffff:0a64:000b", "RoCE v2",
      "eth9");  // another netdev
  const RdmaPort p = resolveRdmaPort(root_, {"r0", "eth1", "10.100.0.10", ""});
  EXPECT_EQ(p.device, "mlx5_0");
  EXPECT_EQ(p.port, 1);
  EXPECT_EQ(p.gidIndex, 3);
  EXPECT_EQ(p.gidType, "RoCE v2");
  EXPECT_EQ(p.linkLayer, "Ethernet");
}

TEST_F(SysfsFixture, VfFoundThroughThePciAddressOfTheDevicePlugin) {
  function("0000:3b:00.0", "mlx5_0", "eth1");  // the PF, not ours
  function("0000:3b:02.1", "mlx5_7", "net1");  // the VF in the pod
  linkLayer("mlx5_7", 1, "Ethernet");
  gid("mlx5_7", 1, 0, "0000:0000:0000:0000:0000:ffff:0a65:0005", "RoCE v2", "net1");
  setenv("PCIDEVICE_NVIDIA_COM_RDMA_VF", "0000:3b:02.1,0000:3b:02.2", 1);
  EXPECT_EQ(pciAddressFromEnv("nvidia.com/rdma_vf", 0), "0000:3b:02.1");
  EXPECT_EQ(pciAddressFromEnv("nvidia.com/rdma_vf", 1), "0000:3b:02.2");
  EXPECT_EQ(pciAddressFromEnv("nvidia.com/rdma_vf", 2), "");
  EXPECT_EQ(pciAddressFromEnv("example.com/absent", 0), "");
  const RdmaPort p = resolveRdmaPort(
      root_, {"r1", "net1", "10.101.0.5", pciAddressFromEnv("nvidia.com/rdma_vf", 0)});
  unsetenv("PCIDEVICE_NVIDIA_COM_RDMA_VF");
  EXPECT_EQ(p.device, "mlx5_7");
  EXPECT_EQ(p.gidIndex, 0);
}

TEST_F(SysfsFixture, SecondPortOfATwoPortHca) {
  function("0000:5e:00.0", "mlx4_0", "eth2");
  linkLayer("mlx4_0", 1, "Ethernet");
  linkLayer("mlx4_0", 2, "Ethernet");
  gid("mlx4_0", 1, 1, "0000:0000:0000:0000:0000:ffff:0a64:0001", "RoCE v2", "eth1");
  gid("mlx4_0", 2, 1, "0000:0000:0000:0000:0000:ffff:0a65:0001", "RoCE v2", "eth2");
  const RdmaPort p = resolveRdmaPort(root_, {"r1", "eth2", "10.101.0.1", ""});
  EXPECT_EQ(p.port, 2);
  EXPECT_EQ(p.gidIndex, 1);
}

TEST_F(SysfsFixture, InfinibandPortFromIpoibDevPort) {
  function("0000:af:00.0", "mlx5_2", "ib1");
  linkLayer("mlx5_2", 1, "InfiniBand");
  linkLayer("mlx5_2", 2, "InfiniBand");
  write("class/infiniband/mlx5_2/ports/1/gids/0", "fe80:0000:0000:0000:0002:c903:0000:0001");
  write("class/infiniband/mlx5_2/ports/2/gids/0", "fe80:0000:0000:0000:0002:c903:0000:0002");
  write("class/net/ib1/dev_port", "1");
  const RdmaPort p = resolveRdmaPort(root_, {"ib", "ib1", "192.168.7.1", ""});
  EXPECT_EQ(p.port, 2);
  EXPECT_EQ(p.gidIndex, 0);
  EXPECT_EQ(p.gidType, "IB");
  EXPECT_EQ(p.gid, "fe80:0000:0000:0000:0002:c903:0000:0002");
}

std::string errorOf(const std::string& root, const RdmaRailQuery& q) {
  try {
    resolveRdmaPort(root, q);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST_F(SysfsFixture, ErrorsNameTheRailAndWhatWasFound) {
  fs::create_directories(fs::path(root_) / "class/net/eth0");  // a plain NIC
  EXPECT_NE(errorOf(root_, {"r0", "eth0", "10.0.0.1", ""})
                .find("rail r0 (eth0): no RDMA device behind the interface"),
            std::string::npos);

  function("0000:3b:00.0", "mlx5_0", "eth1");
  linkLayer("mlx5_0", 1, "Ethernet");
  gid("mlx5_0", 1, 0, "fe80:0000:0000:0000:0a00:27ff:fe00:0001", "IB/RoCE v1", "eth1");
  gid("mlx5_0", 1, 1, "0000:0000:0000:0000:0000:ffff:0a64:0009", "RoCE v2", "eth1");
  const std::string e = errorOf(root_, {"r1", "eth1", "10.100.0.10", ""});
  EXPECT_NE(e.find("no RoCE v2 GID for 10.100.0.10"), std::string::npos) << e;
  EXPECT_NE(e.find("gid 1 RoCE v2 0000:0000:0000:0000:0000:ffff:0a64:0009"), std::string::npos)
      << e;

  function("0000:3c:00.0", "mlx5_1", "eth3");
  fs::create_directories(fs::path(root_) / "bus/pci/devices/0000:3c:00.0/infiniband/mlx5_9");
  EXPECT_NE(
      errorOf(root_, {"r2", "eth3", "10.0.0.1", ""}).find("2 RDMA devices behind one function"),
      std::string::npos);
  EXPECT_NE(
      errorOf(root_, {"r3", "net1", "10.0.0.1", "0000:99:00.0"}).find("PCI device 0000:99:00.0"),
      std::string::npos);
}

}  // namespace
}  // namespace nezha
