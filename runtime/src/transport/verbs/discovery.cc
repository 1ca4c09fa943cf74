#include "transport/verbs/discovery.h"

#include <arpa/inet.h>
#include <dirent.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "base/error.h"

namespace nezha {

namespace {

std::vector<std::string> listDir(const std::string& path) {
  std::vector<std::string> out;
  DIR* d = opendir(path.c_str());
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") out.push_back(name);
  }
  closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

// The first line of a sysfs attribute, trailing whitespace removed; "" if unreadable.
std::string readAttr(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return "";
  while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
  return line;
}

bool isNumber(const std::string& s) {
  return !s.empty() &&
         std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c) != 0; });
}

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

std::string ipv4MappedGid(const std::string& ipv4) {
  in_addr a{};
  if (inet_pton(AF_INET, ipv4.c_str(), &a) != 1) {
    throw ConfigError(strCat("\"", ipv4, "\" is not an IPv4 address"));
  }
  const auto* b = reinterpret_cast<const unsigned char*>(&a.s_addr);
  char buf[64];
  std::snprintf(buf, sizeof buf, "0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x", b[0], b[1],
                b[2], b[3]);
  return buf;
}

std::string pciAddressFromEnv(const std::string& resource, size_t index) {
  std::string name = "PCIDEVICE_";
  for (char c : resource)
    name += std::isalnum(static_cast<unsigned char>(c))
                ? static_cast<char>(std::toupper(static_cast<unsigned char>(c)))
                : '_';
  const char* v = std::getenv(name.c_str());
  if (v == nullptr) return "";
  std::string list = v;
  size_t start = 0;
  for (size_t i = 0;; ++i) {
    const size_t comma = list.find(',', start);
    if (i == index)
      return list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (comma == std::string::npos) return "";
    start = comma + 1;
  }
}

RdmaPort resolveRdmaPort(const std::string& root, const RdmaRailQuery& q) {
  const std::string where = strCat("rail ", q.rail, " (", q.iface, ")");
  // 1. The HCA: from the PCI address when the device plugin gave one, else from the netdev.
  const std::string hcaDir = q.pciAddress.empty()
                                 ? strCat(root, "/class/net/", q.iface, "/device/infiniband")
                                 : strCat(root, "/bus/pci/devices/", q.pciAddress, "/infiniband");
  const auto devices = listDir(hcaDir);
  if (devices.empty()) {
    throw ConfigError(
        strCat(where, ": no RDMA device behind ",
               q.pciAddress.empty() ? "the interface" : "PCI device " + q.pciAddress, " (", hcaDir,
               " is missing or empty; transport rdma needs an RDMA NIC "
               "or its VF, and the RDMA device plugin or SR-IOV resource in the pod)"));
  }
  if (devices.size() > 1) {
    throw ConfigError(strCat(where, ": ", devices.size(), " RDMA devices behind one function (",
                             devices[0], ", ", devices[1],
                             "...); cannot tell which one is the rail's"));
  }
  RdmaPort out;
  out.device = devices[0];
  const std::string portsDir = strCat(root, "/class/infiniband/", out.device, "/ports");
  const auto ports = listDir(portsDir);
  if (ports.empty())
    throw ConfigError(strCat(where, ": ", out.device, " has no ports under ", portsDir));

  // 2. The port and GID.
  std::string seen;  // what the ports offer, for the error
  for (const auto& p : ports) {
    if (!isNumber(p)) continue;
    const std::string pdir = strCat(portsDir, "/", p);
    const std::string link = readAttr(pdir + "/link_layer");
    if (link == "InfiniBand") {
      // IPoIB: the interface's dev_port says which port it is (0-based); one-port HCAs may omit it.
      const std::string devPort = readAttr(strCat(root, "/class/net/", q.iface, "/dev_port"));
      const int want = isNumber(devPort) ? std::stoi(devPort) + 1 : 1;
      if (std::stoi(p) != want) {
        seen += strCat(" port ", p, ": InfiniBand (not dev_port ", devPort.empty() ? "0" : devPort,
                       ");");
        continue;
      }
      out.port = std::stoi(p);
      out.linkLayer = link;
      out.gidIndex = 0;
      out.gid = readAttr(pdir + "/gids/0");
      out.gidType = "IB";
      if (out.gid.empty())
        throw ConfigError(strCat(where, ": ", out.device, " port ", p, " has no GID 0"));
      return out;
    }
    if (link != "Ethernet") {
      seen += strCat(" port ", p, ": link layer \"", link, "\";");
      continue;
    }
    const std::string want = ipv4MappedGid(q.ipv4);
    for (const auto& idx : listDir(pdir + "/gid_attrs/ndevs")) {
      if (!isNumber(idx)) continue;
      const std::string ndev = readAttr(strCat(pdir, "/gid_attrs/ndevs/", idx));
      if (ndev != q.iface) continue;
      const std::string type = readAttr(strCat(pdir, "/gid_attrs/types/", idx));
      const std::string gid = lower(readAttr(strCat(pdir, "/gids/", idx)));
      seen += strCat(" port ", p, " gid ", idx, " ", type, " ", gid, ";");
      if (type == "RoCE v2" && gid == want) {
        out.port = std::stoi(p);
        out.linkLayer = link;
        out.gidIndex = std::stoi(idx);
        out.gid = gid;
        out.gidType = type;
        return out;
      }
    }
  }
  throw ConfigError(strCat(where, ": ", out.device, " has no RoCE v2 GID for ", q.ipv4, " (",
                           ipv4MappedGid(q.ipv4), ") on ", q.iface,
                           "; found:", seen.empty() ? " nothing for this interface" : seen,
                           " (is the address on the interface, and RoCE v2 enabled?)"));
}

}  // namespace nezha
