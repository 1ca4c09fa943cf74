// Which RDMA device, port and GID a rail uses, resolved from what Kubernetes already knows about
// the rail — its interface (and, for SR-IOV VFs, the PCI address the device plugin puts in
// PCIDEVICE_*) — by reading sysfs, never by guessing a GID index:
//
//   /sys/class/net/<iface>/device/infiniband/<dev>           the HCA behind a netdev (PF or VF)
//   /sys/bus/pci/devices/<pci>/infiniband/<dev>              the same from a PCI address
//   /sys/class/infiniband/<dev>/ports/<p>/link_layer         "Ethernet" (RoCE) or "InfiniBand"
//   /sys/class/infiniband/<dev>/ports/<p>/gid_attrs/ndevs/<i>  the netdev a RoCE GID belongs to
//   /sys/class/infiniband/<dev>/ports/<p>/gid_attrs/types/<i>  "IB/RoCE v1" or "RoCE v2"
//   /sys/class/infiniband/<dev>/ports/<p>/gids/<i>             the GID (RoCE v2: IPv4-mapped IP)
//   /sys/class/net/<iface>/dev_port                          IPoIB: the port (0-based)
//
// RoCE: the GID is the RoCE v2 entry of the rail's interface whose address is the rail's IPv4
// (::ffff:a.b.c.d) — the entry NCCL users otherwise pick by hand with NCCL_IB_GID_INDEX. No such
// entry is an error that lists what the port does have. InfiniBand: GID index 0 (the port GID).
// The verbs transport (issue "RDMA and SHARP rails") opens the device and port found here.
#pragma once

#include <string>
#include <vector>

namespace nezha {

struct RdmaPort {
  std::string device;     // e.g. mlx5_0
  int port = 0;           // 1-based, as verbs numbers them
  std::string linkLayer;  // "Ethernet" (RoCE) or "InfiniBand"
  int gidIndex = -1;
  std::string gid;      // as sysfs prints it, e.g. 0000:0000:0000:0000:0000:ffff:0a64:000a
  std::string gidType;  // "RoCE v2", or "IB" for InfiniBand
};

struct RdmaRailQuery {
  std::string rail;        // for messages
  std::string iface;       // the rail's interface in this network namespace
  std::string ipv4;        // the rail's address (RoCE: selects the GID)
  std::string pciAddress;  // optional: from PCIDEVICE_* (SR-IOV); wins over the netdev link
};

// Resolves one rail under `sysfsRoot` ("/sys" in production, a fixture tree in tests). Throws
// ConfigError naming the rail, the interface and what was found instead.
RdmaPort resolveRdmaPort(const std::string& sysfsRoot, const RdmaRailQuery& q);

// The IPv4-mapped GID text sysfs shows for a.b.c.d. Throws ConfigError on a malformed address.
std::string ipv4MappedGid(const std::string& ipv4);

// The PCI address an SR-IOV device plugin allocated for `resource` (e.g. "nvidia.com/rdma_vf"):
// env PCIDEVICE_NVIDIA_COM_RDMA_VF="0000:3b:02.1[,...]"; `index` picks among several. "" if unset.
std::string pciAddressFromEnv(const std::string& resource, size_t index);

}  // namespace nezha
