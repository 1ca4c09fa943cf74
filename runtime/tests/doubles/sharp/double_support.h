// Plumbing of the libsharp_coll test double (TEST ONLY): the "HCA" behind a device string,
// carrier, the aggregator's address, and blocking socket helpers for group creation.
#pragma once

#include <netinet/in.h>

#include <chrono>
#include <cstddef>
#include <string>

namespace nezha::sharpdouble {

using Clock = std::chrono::steady_clock;

// Bytes per element of a sharp_datatype value; 0 for one the double does not know.
size_t dtypeSize(int dt);

// The network interface of "<hca>:<port>" (the real library's ib_dev_list form, e.g.
// "mlx5_0:1"), found in the sysfs tree under NEZHA_RDMA_SYSFS_ROOT (default /sys) the way the
// kernel shows an IPoIB interface's HCA: <root>/class/net/<iface>/device/infiniband/<hca>, and
// <root>/class/net/<iface>/dev_port = port - 1. "" when the string is not of that form or no
// interface matches (the real library then fails with SHARP_COLL_EDEV too).
std::string interfaceOfDevice(const std::string& device);

// The interface's carrier, from the live /sys/class/net (this network namespace).
bool carrierUp(const std::string& iface);

// "a.b.c.d:port".
bool parseAggregator(const char* text, sockaddr_in& out);

bool waitFd(int fd, short events, Clock::time_point deadline);
bool sendAll(int fd, const void* buf, size_t len, Clock::time_point deadline);
bool recvAll(int fd, void* buf, size_t len, Clock::time_point deadline);

}  // namespace nezha::sharpdouble
