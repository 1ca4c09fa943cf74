// nezha-rdma-info: which RDMA device, port and GID each rail interface resolves to (the
// discovery the verbs transport will use; transport/verbs/discovery.h). For users on real
// hardware (hack/hw-check.sh) and for checking a node before declaring an rdma RailClass.
//
//   nezha-rdma-info [--sysfs DIR] [--pci ADDR] [--address IP] IFACE...
//
// One line per interface; exit 1 if any did not resolve (the line says why).
#include <getopt.h>

#include <cstdio>
#include <string>

#include "base/error.h"
#include "base/socket.h"
#include "transport/verbs/discovery.h"

namespace {

void usage() {
  std::fprintf(stderr,
               "usage: nezha-rdma-info [--sysfs DIR] [--pci ADDR] [--address IP] IFACE...\n"
               "  --sysfs DIR    sysfs root (default /sys)\n"
               "  --pci ADDR     PCI address of the function (SR-IOV VF from PCIDEVICE_*); one "
               "interface only\n"
               "  --address IP   the rail's IPv4 address (default: the interface's first)\n");
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  static const option opts[] = {{"sysfs", required_argument, nullptr, 's'},
                                {"pci", required_argument, nullptr, 'p'},
                                {"address", required_argument, nullptr, 'a'},
                                {"help", no_argument, nullptr, 'h'},
                                {nullptr, 0, nullptr, 0}};
  std::string sysfs = "/sys", pci, address;
  int c;
  while ((c = getopt_long(argc, argv, "", opts, nullptr)) != -1) {
    switch (c) {
      case 's':
        sysfs = optarg;
        break;
      case 'p':
        pci = optarg;
        break;
      case 'a':
        address = optarg;
        break;
      default:
        usage();
    }
  }
  if (optind >= argc) usage();
  if ((!pci.empty() || !address.empty()) && argc - optind != 1) {
    std::fprintf(stderr, "nezha-rdma-info: --pci and --address apply to one interface; give one\n");
    return 2;
  }
  int rc = 0;
  for (int i = optind; i < argc; ++i) {
    const std::string iface = argv[i];
    try {
      const std::string ip = address.empty() ? nezha::interfaceAddress(iface, iface) : address;
      const nezha::RdmaPort p = nezha::resolveRdmaPort(sysfs, {iface, iface, ip, pci});
      std::printf(
          "%s address=%s device=%s port=%d link_layer=%s gid_index=%d gid=%s gid_type=\"%s\"\n",
          iface.c_str(), ip.c_str(), p.device.c_str(), p.port, p.linkLayer.c_str(), p.gidIndex,
          p.gid.c_str(), p.gidType.c_str());
    } catch (const std::exception& e) {
      std::printf("%s error=\"%s\"\n", iface.c_str(), e.what());
      rc = 1;
    }
  }
  return rc;
}
