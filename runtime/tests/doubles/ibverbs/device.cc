// The double's devices, contexts, async events, PDs, MRs, completion channels and CQs.
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>

#include "ibverbs_double.h"

// The header turns these into inline wrappers; the library defines the real symbols.
#undef ibv_query_port
#undef ibv_reg_mr

namespace ibvdouble {

std::string sysfsRoot() {
  const char* v = std::getenv("NEZHA_RDMA_SYSFS_ROOT");
  return v != nullptr && *v != '\0' ? v : "/sys";
}

std::string readLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return "";
  while (!line.empty() && (line.back() == '\n' || line.back() == ' ')) line.pop_back();
  return line;
}

static std::vector<std::string> listDir(const std::string& path) {
  std::vector<std::string> out;
  if (DIR* d = opendir(path.c_str())) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] != '.') out.push_back(e->d_name);
    }
    closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool interfaceUp(const std::string& iface) {
  int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return false;
  ifreq ifr{};
  std::strncpy(ifr.ifr_name, iface.c_str(), IFNAMSIZ - 1);
  const bool up = ioctl(s, SIOCGIFFLAGS, &ifr) == 0 && (ifr.ifr_flags & IFF_UP) != 0 &&
                  (ifr.ifr_flags & IFF_RUNNING) != 0;
  close(s);
  return up;
}

static bool parseGid(const std::string& text, uint8_t out[16]) {
  unsigned v[8];
  if (std::sscanf(text.c_str(), "%x:%x:%x:%x:%x:%x:%x:%x", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
                  &v[6], &v[7]) != 8)
    return false;
  for (int i = 0; i < 8; ++i) {
    out[2 * i] = static_cast<uint8_t>(v[i] >> 8);
    out[2 * i + 1] = static_cast<uint8_t>(v[i] & 0xff);
  }
  return true;
}

// Devices live for the life of the process (a device list hands out pointers to them).
static std::mutex gDevicesMu;
// A function-local static, not a namespace-scope one: threads dlopen this library concurrently,
// and ThreadSanitizer does not see the loader's lock ordering one thread's static initializers
// before another thread's first use (it reported that as a race); a local static's guard it sees.
// Never destroyed: a context still open at exit (the NCCL plugin keeps its per-rail devices for
// the life of the process) has a link-watch thread reading its Device until the process ends.
static std::vector<std::unique_ptr<Device>>& allDevices() {
  static auto* devices = new std::vector<std::unique_ptr<Device>>;
  return *devices;
}

static Device* loadDevice(const std::string& root, const std::string& name) {
  auto& devices = allDevices();
  for (auto& d : devices) {
    if (d->root == root && d->name == name) return d.get();
  }
  auto d = std::make_unique<Device>();
  d->root = root;
  d->name = name;
  const std::string port = root + "/class/infiniband/" + name + "/ports/1";
  for (const auto& idx : listDir(port + "/gids")) {
    const size_t i = std::strtoul(idx.c_str(), nullptr, 10);
    if (d->gids.size() <= i) d->gids.resize(i + 1);
    d->gids[i] = readLine(port + "/gids/" + idx);
    uint8_t raw[16];
    if (d->ipv4 == 0 && parseGid(d->gids[i], raw) && raw[10] == 0xff && raw[11] == 0xff) {
      std::memcpy(&d->ipv4, raw + 12, 4);
      d->iface = readLine(port + "/gid_attrs/ndevs/" + idx);
    }
  }
  d->dev.node_type = IBV_NODE_CA;
  d->dev.transport_type = IBV_TRANSPORT_IB;
  std::snprintf(d->dev.name, sizeof d->dev.name, "%s", name.c_str());
  std::snprintf(d->dev.dev_name, sizeof d->dev.dev_name, "uverbs-%s", name.c_str());
  std::snprintf(d->dev.ibdev_path, sizeof d->dev.ibdev_path, "%s/class/infiniband/%s", root.c_str(),
                name.c_str());
  devices.push_back(std::move(d));
  return devices.back().get();
}

void Context::pushEvent(const ibv_async_event& ev) {
  {
    std::lock_guard<std::mutex> lock(mu);
    events.push_back(ev);
  }
  const char b = 1;
  if (write(asyncWrite, &b, 1) < 0) {
    // The pipe only fills if nobody reads events for a long time; the event is kept anyway.
  }
}

char* Context::hostAddress(const ibv_pd* pd, uint32_t key, uint64_t addr, uint64_t len,
                           int access) {
  std::lock_guard<std::mutex> lock(mrMu);
  auto it = mrs.find(key);
  if (it == mrs.end()) return nullptr;
  const Mr* m = it->second;
  if (m->mr.pd != pd) return nullptr;
  if (addr < m->iova || addr + len > m->iova + m->mr.length) return nullptr;
  if (access != 0 && (m->access & access) == 0) return nullptr;
  return m->host + (addr - m->iova);
}

Mr* Context::addMr(ibv_pd* pd, uint64_t iova, size_t length, int access, char* host) {
  auto* m = new Mr;
  m->mr.context = pd->context;
  m->mr.pd = pd;
  m->mr.length = length;
  m->access = access | IBV_ACCESS_LOCAL_WRITE;
  m->iova = iova;
  m->host = host;
  std::lock_guard<std::mutex> lock(mrMu);
  m->mr.lkey = m->mr.rkey = nextKey++;
  mrs[m->mr.lkey] = m;
  return m;
}

// Carrier changes of the device's interface (rtnetlink): losing it fails the port. `nl` is
// already bound (startLinkWatch), so no change after the device was opened can be missed.
static void watchLinks(Context* c, int nl) {
  const unsigned index = if_nametoindex(c->device->iface.c_str());
  char buf[8192];
  pollfd fds[2] = {{nl, POLLIN, 0}, {c->watchWake, POLLIN, 0}};
  while (true) {
    if (poll(fds, 2, -1) < 0 && errno != EINTR) break;
    if ((fds[1].revents & POLLIN) != 0) break;
    if ((fds[0].revents & POLLIN) == 0) continue;
    const ssize_t got = recv(nl, buf, sizeof buf, 0);
    if (got <= 0) continue;
    bool ours = false;
    unsigned len = static_cast<unsigned>(got);
    for (auto* h = reinterpret_cast<nlmsghdr*>(buf); NLMSG_OK(h, len); h = NLMSG_NEXT(h, len)) {
      if (h->nlmsg_type != RTM_NEWLINK && h->nlmsg_type != RTM_DELLINK) continue;
      const auto* ifi = static_cast<const ifinfomsg*>(NLMSG_DATA(h));
      if (static_cast<unsigned>(ifi->ifi_index) == index) ours = true;
    }
    if (!ours) continue;
    const bool up = interfaceUp(c->device->iface);
    {
      std::lock_guard<std::mutex> lock(c->mu);
      if (up == c->portUp) continue;
      c->portUp = up;
      if (!up) {
        // A dead port: its queue pairs exhaust their retries.
        for (Qp* q : c->qps) {
          std::lock_guard<std::mutex> qlock(q->mu);
          q->toError(IBV_WC_RETRY_EXC_ERR);
        }
      }
    }
    ibv_async_event ev{};
    ev.event_type = up ? IBV_EVENT_PORT_ACTIVE : IBV_EVENT_PORT_ERR;
    ev.element.port_num = 1;
    c->pushEvent(ev);
  }
  close(nl);
}

void startLinkWatch(Context* c) {
  c->watchWake = eventfd(0, EFD_CLOEXEC);
  // Subscribed here, before ibv_open_device returns, not on the watch thread: a thread not yet
  // scheduled on a busy machine missed a link change made right after the open (the port error
  // never came; VerbsTest.PortErrorReachesTheHealthListener failed under ctest -j2).
  int nl = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
  sockaddr_nl sa{};
  sa.nl_family = AF_NETLINK;
  sa.nl_groups = RTMGRP_LINK;
  if (nl >= 0 && bind(nl, reinterpret_cast<sockaddr*>(&sa), sizeof sa) < 0) {
    close(nl);
    nl = -1;
  }
  c->watch = std::thread([c, nl] {
    if (nl >= 0) watchLinks(c, nl);
  });
}

void stopLinkWatch(Context* c) {
  const uint64_t one = 1;
  if (write(c->watchWake, &one, sizeof one) < 0) {
  }
  c->watch.join();
  close(c->watchWake);
}

void registerQp(Context* c, Qp* q) {
  std::lock_guard<std::mutex> lock(c->mu);
  c->qps.push_back(q);
}

void unregisterQp(Context* c, Qp* q) {
  std::lock_guard<std::mutex> lock(c->mu);
  c->qps.erase(std::remove(c->qps.begin(), c->qps.end(), q), c->qps.end());
}

void Cq::push(const ibv_wc& wc) {
  bool notify = false;
  {
    std::lock_guard<std::mutex> lock(mu);
    entries.push_back(wc);
    notify = armed && cq.channel != nullptr;
    if (notify) armed = false;
  }
  if (notify) {
    auto* ch = reinterpret_cast<Channel*>(cq.channel);
    Cq* self = this;
    if (write(ch->writeFd, &self, sizeof self) < 0) {
      // Non-blocking pipe full: a notification is already pending, which is all it means.
    }
  }
}

int pollCq(ibv_cq* cq, int n, ibv_wc* wc) {
  auto* c = reinterpret_cast<Cq*>(cq);
  std::lock_guard<std::mutex> lock(c->mu);
  int k = 0;
  while (k < n && !c->entries.empty()) {
    wc[k++] = c->entries.front();
    c->entries.pop_front();
  }
  return k;
}

int reqNotifyCq(ibv_cq* cq, int) {
  auto* c = reinterpret_cast<Cq*>(cq);
  std::lock_guard<std::mutex> lock(c->mu);
  c->armed = true;
  return 0;
}

}  // namespace ibvdouble

using namespace ibvdouble;

extern "C" {

ibv_device** ibv_get_device_list(int* num) {
  const std::string root = sysfsRoot();
  std::lock_guard<std::mutex> lock(gDevicesMu);
  std::vector<Device*> found;
  for (const auto& name : listDir(root + "/class/infiniband")) {
    found.push_back(loadDevice(root, name));
  }
  auto** list = static_cast<ibv_device**>(calloc(found.size() + 1, sizeof(ibv_device*)));
  if (list == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  for (size_t i = 0; i < found.size(); ++i) list[i] = &found[i]->dev;
  if (num != nullptr) *num = static_cast<int>(found.size());
  return list;
}

void ibv_free_device_list(ibv_device** list) { free(list); }

const char* ibv_get_device_name(ibv_device* device) { return device->name; }

ibv_context* ibv_open_device(ibv_device* device) {
  auto* c = new Context;
  c->device = reinterpret_cast<Device*>(device);
  c->ctx.device = device;
  c->ctx.cmd_fd = -1;
  c->ctx.num_comp_vectors = 1;
  c->ctx.abi_compat = nullptr;  // not an extended context: inline helpers use the legacy calls
  c->ctx.ops.poll_cq = pollCq;
  c->ctx.ops.req_notify_cq = reqNotifyCq;
  c->ctx.ops.post_send = postSend;
  c->ctx.ops.post_recv = postRecv;
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) {
    delete c;
    return nullptr;
  }
  c->ctx.async_fd = p[0];
  c->asyncWrite = p[1];
  c->portUp = interfaceUp(c->device->iface);
  startLinkWatch(c);
  return &c->ctx;
}

int ibv_close_device(ibv_context* ctx) {
  auto* c = reinterpret_cast<Context*>(ctx);
  stopLinkWatch(c);
  close(c->ctx.async_fd);
  close(c->asyncWrite);
  delete c;
  return 0;
}

int ibv_query_port(ibv_context* ctx, uint8_t port, _compat_ibv_port_attr* out) {
  auto* c = reinterpret_cast<Context*>(ctx);
  if (port != 1) return EINVAL;
  // The caller's buffer is a full ibv_port_attr (the header's inline wrapper); only fields of
  // the legacy prefix are written.
  auto* a = reinterpret_cast<ibv_port_attr*>(out);
  const bool up = interfaceUp(c->device->iface);
  a->state = up ? IBV_PORT_ACTIVE : IBV_PORT_DOWN;
  a->max_mtu = IBV_MTU_4096;
  a->active_mtu = IBV_MTU_1024;
  a->gid_tbl_len = static_cast<int>(c->device->gids.size());
  a->max_msg_sz = 1u << 31;
  a->lid = 0;
  a->link_layer = IBV_LINK_LAYER_ETHERNET;
  a->phys_state = up ? 5 : 3;  // LinkUp / Disabled
  return 0;
}

int ibv_query_gid(ibv_context* ctx, uint8_t port, int index, ibv_gid* gid) {
  auto* c = reinterpret_cast<Context*>(ctx);
  if (port != 1 || index < 0 || static_cast<size_t>(index) >= c->device->gids.size() ||
      !parseGid(c->device->gids[index], gid->raw)) {
    errno = EINVAL;
    return -1;
  }
  return 0;
}

ibv_pd* ibv_alloc_pd(ibv_context* ctx) {
  auto* pd = new ibv_pd{};
  pd->context = ctx;
  return pd;
}

int ibv_dealloc_pd(ibv_pd* pd) {
  delete pd;
  return 0;
}

ibv_mr* ibv_reg_mr(ibv_pd* pd, void* addr, size_t length, int access) {
  auto* c = reinterpret_cast<Context*>(pd->context);
  Mr* m = c->addMr(pd, reinterpret_cast<uintptr_t>(addr), length, access, static_cast<char*>(addr));
  m->mr.addr = addr;
  return &m->mr;
}

// rdma-core's signature (verbs.h, IBVERBS_1.12). Errors as the kernel gives them: EBADF for a
// bad fd (NCCL's support probe passes -1 and reads EBADF as "supported"), EOPNOTSUPP where
// dma-buf is not supported, EINVAL for a range outside the buffer.
ibv_mr* ibv_reg_dmabuf_mr(ibv_pd* pd, uint64_t offset, size_t length, uint64_t iova, int fd,
                          int access) {
  const char* mode = std::getenv("NEZHA_IBV_DOUBLE_DMABUF");
  if (mode != nullptr && std::strcmp(mode, "unsupported") == 0) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  struct stat st {};
  if (fd < 0 || fstat(fd, &st) != 0) {
    errno = EBADF;
    return nullptr;
  }
  if (length == 0 || offset + length < offset ||
      offset + length > static_cast<uint64_t>(st.st_size)) {
    errno = EINVAL;
    return nullptr;
  }
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t start = offset - offset % page;
  const size_t bytes = static_cast<size_t>(offset + length - start);
  void* map =
      mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, static_cast<off_t>(start));
  if (map == MAP_FAILED) return nullptr;  // errno from mmap
  auto* c = reinterpret_cast<Context*>(pd->context);
  Mr* m = c->addMr(pd, iova, length, access, static_cast<char*>(map) + (offset - start));
  m->mapping = map;
  m->mappingBytes = bytes;
  // What rdma-core's ibv_reg_dmabuf_mr leaves in addr: the offset, not an address.
  m->mr.addr = reinterpret_cast<void*>(static_cast<uintptr_t>(offset));
  return &m->mr;
}

int ibv_dereg_mr(ibv_mr* mr) {
  auto* c = reinterpret_cast<Context*>(mr->context);
  auto* m = reinterpret_cast<Mr*>(mr);
  {
    std::lock_guard<std::mutex> lock(c->mrMu);
    c->mrs.erase(mr->lkey);
  }
  if (m->mapping != nullptr) munmap(m->mapping, m->mappingBytes);
  delete m;
  return 0;
}

ibv_comp_channel* ibv_create_comp_channel(ibv_context* ctx) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) return nullptr;
  fcntl(p[1], F_SETFL, O_NONBLOCK);
  auto* ch = new Channel;
  ch->ch.context = ctx;
  ch->ch.fd = p[0];
  ch->ch.refcnt = 0;
  ch->writeFd = p[1];
  return &ch->ch;
}

int ibv_destroy_comp_channel(ibv_comp_channel* channel) {
  auto* ch = reinterpret_cast<Channel*>(channel);
  close(ch->ch.fd);
  close(ch->writeFd);
  delete ch;
  return 0;
}

ibv_cq* ibv_create_cq(ibv_context* ctx, int cqe, void* cqContext, ibv_comp_channel* channel, int) {
  auto* c = new Cq;
  c->cq.context = ctx;
  c->cq.channel = channel;
  c->cq.cq_context = cqContext;
  c->cq.cqe = cqe;
  return &c->cq;
}

int ibv_destroy_cq(ibv_cq* cq) {
  delete reinterpret_cast<Cq*>(cq);
  return 0;
}

int ibv_get_cq_event(ibv_comp_channel* channel, ibv_cq** cq, void** cqContext) {
  Cq* c = nullptr;
  const ssize_t n = read(channel->fd, &c, sizeof c);
  if (n != static_cast<ssize_t>(sizeof c)) return -1;  // errno from read (EAGAIN if non-blocking)
  *cq = &c->cq;
  *cqContext = c->cq.cq_context;
  return 0;
}

void ibv_ack_cq_events(ibv_cq*, unsigned int) {}

int ibv_get_async_event(ibv_context* ctx, ibv_async_event* event) {
  auto* c = reinterpret_cast<Context*>(ctx);
  char b;
  if (read(c->ctx.async_fd, &b, 1) != 1) return -1;
  std::lock_guard<std::mutex> lock(c->mu);
  if (c->events.empty()) {
    errno = EAGAIN;
    return -1;
  }
  *event = c->events.front();
  c->events.pop_front();
  return 0;
}

void ibv_ack_async_event(ibv_async_event*) {}

const char* ibv_wc_status_str(ibv_wc_status status) {
  switch (status) {
    case IBV_WC_SUCCESS:
      return "success";
    case IBV_WC_LOC_PROT_ERR:
      return "local protection error";
    case IBV_WC_WR_FLUSH_ERR:
      return "Work Request Flushed Error";
    case IBV_WC_REM_ACCESS_ERR:
      return "remote access error";
    case IBV_WC_RETRY_EXC_ERR:
      return "transport retry counter exceeded";
    default:
      return "unknown";
  }
}

const char* ibv_port_state_str(ibv_port_state state) {
  switch (state) {
    case IBV_PORT_DOWN:
      return "PORT_DOWN";
    case IBV_PORT_ACTIVE:
      return "PORT_ACTIVE";
    default:
      return "PORT_OTHER";
  }
}

const char* ibv_event_type_str(ibv_event_type event) {
  switch (event) {
    case IBV_EVENT_PORT_ERR:
      return "port error";
    case IBV_EVENT_PORT_ACTIVE:
      return "port active";
    case IBV_EVENT_DEVICE_FATAL:
      return "local catastrophic error";
    default:
      return "unknown";
  }
}

}  // extern "C"
