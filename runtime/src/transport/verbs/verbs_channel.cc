// VerbsChannel: construction, connect() (TCP bootstrap, queue pair exchange), abort() and the
// async event thread. The data path is in verbs_exchange.cc.
#include "transport/verbs/verbs_channel.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "base/error.h"
#include "base/params.h"
#include "base/sha256.h"

namespace nezha {

namespace {
constexpr int kConns = 2;  // per peer: bootstrap (0) and control (1)
}  // namespace

VerbsChannel::VerbsChannel(const Options& o, int railIndex, const std::string& address,
                           std::shared_ptr<const VerbsDevice> domain)
    : spec_(o.rails.at(railIndex)),
      address_(address),
      rail_(railIndex),
      rank_(o.rank),
      size_(o.worldSize),
      token_(o.jobToken),
      ioTimeout_(o.ioTimeout),
      controlUserTimeout_(2 * o.progressFloor),
      guard_(o.ioTimeout),
      mesh_(o, railIndex, address) {
  tuning_.noDelay = true;
  tuning_.userTimeout = o.ioTimeout;
  RdmaRailQuery q;
  q.rail = spec_.name;
  q.iface = spec_.iface;
  q.ipv4 = address_;
  const RdmaPort port = resolveRdmaPort(paramString("NEZHA_RDMA_SYSFS_ROOT"), q);
  // Every peer's sends and receives (and their credits) can complete at once.
  const int cqDepth = std::max(1, size_ - 1) * (5 * kSlots + 16);
  if (domain == nullptr) {
    device_ = std::make_unique<VerbsDevice>(port, cqDepth, rail_, spec_.name);
  } else {
    if (domain->port().device != port.device || domain->port().port != port.port) {
      throw ConfigError(strCat("rail ", spec_.name, ": resolves to ", port.device, " port ",
                               port.port, " but was handed the protection domain of ",
                               domain->where()));
    }
    device_ = std::make_unique<VerbsDevice>(std::move(domain), cqDepth, rail_, spec_.name);
  }
  wake_ = Fd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake_.valid()) throw RailError(rail_, sysError("eventfd", errno));
  listen_ = listenOn(address_, 0, spec_.iface, 256, tuning_);
  if (!device_->sharesContext()) async_ = std::thread([this] { asyncLoop(); });
}

VerbsChannel::~VerbsChannel() {
  const uint64_t one = 1;
  if (::write(wake_.get(), &one, sizeof one) < 0) {
    // An eventfd write only fails on counter overflow; the thread is woken either way.
  }
  if (async_.joinable()) async_.join();
}

RailEndpoint VerbsChannel::endpoint() const {
  return {spec_.name, spec_.transport, address_, localPort(listen_.get())};
}

std::string VerbsChannel::purpose(const std::string& session, int from, int to, int stream) const {
  return strCat(stream == 1 ? "control" : "verbs", " session=",
                toHex(reinterpret_cast<const uint8_t*>(session.data()), session.size()),
                " rail=", rail_, " from=", from, " to=", to, " stream=", stream);
}

void VerbsChannel::connect(const JobTable& job, Deadline deadline) {
  pending_ = mesh_.connect(
      job, deadline, listen_.get(), tuning_, kConns,
      [&](int from, int to, int stream) { return purpose(job.session, from, to, stream); },
      rejected_);
  listen_.reset();
  control_.clear();
  control_.resize(size_);
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    control_[p] = std::move(pending_[p][1]);
    setControlTimeouts(control_[p].get(), controlUserTimeout_);
  }
  connectQueuePairs(deadline);
  pending_.clear();
}

// Creates one RC queue pair per peer, swaps addresses over the bootstrap connections, brings
// every QP to RTS, and waits until each peer did too (so no write reaches a QP not yet ready).
void VerbsChannel::connectQueuePairs(Deadline deadline) {
  peers_.clear();
  peers_.resize(size_);
  std::mt19937 rng(std::random_device{}());
  std::vector<QpAddress> local(size_);
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    auto peer = std::make_unique<VerbsPeer>(*device_, kSlots, kSlotBytes, rail_);
    peer->boot = std::move(pending_[p][0]);
    peer->qp->toInit();
    peer->refillReceives();
    QpAddress& a = local[p];
    a.qpn = peer->qp->qpn();
    a.lid = device_->portAttr().lid;
    std::memcpy(a.gid, device_->gid().raw, sizeof a.gid);
    a.ringAddr = reinterpret_cast<uintptr_t>(peer->recvRing->data());
    a.ringKey = peer->recvRing->rkey();
    a.slots = kSlots;
    a.slotBytes = static_cast<uint32_t>(kSlotBytes);
    a.psn = rng() & 0xffffff;
    a.mtu = device_->portAttr().active_mtu;
    peers_[p] = std::move(peer);
    sendFrame(peers_[p]->boot.get(), a.encode(), deadline, rail_);
  }
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    VerbsPeer& peer = *peers_[p];
    const std::string from = strCat("rank ", p, " on rail ", spec_.name);
    peer.remote = QpAddress::decode(
        recvFrame(peer.boot.get(), deadline, rail_, QpAddress::kWireBytes), rail_, from);
    if (peer.remote.slots != static_cast<uint32_t>(kSlots) || peer.remote.slotBytes != kSlotBytes)
      throw RailError(rail_, strCat(from, " uses ", peer.remote.slots, " x ", peer.remote.slotBytes,
                                    " byte slots, this rank ", kSlots, " x ", kSlotBytes));
    peer.qp->connect(local[p], peer.remote);
  }
  const char ready = 'R';
  for (int p = 0; p < size_; ++p) {
    if (p != rank_) sendAll(peers_[p]->boot.get(), &ready, 1, deadline, rail_);
  }
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    char got = 0;
    recvAll(peers_[p]->boot.get(), &got, 1, deadline, rail_);
    if (got != ready) throw RailError(rail_, strCat("rank ", p, " sent a bad ready byte"));
    setNonBlocking(peers_[p]->boot.get(), true);
  }
}

void VerbsChannel::abort() {
  aborted_ = true;
  // Both are safe while the rail thread is inside exchange(): modify_qp is serialized against
  // posting by verbs, shutdown() leaves the fd valid; the QP's outstanding work completes with
  // flush errors and the peers see EOF on their bootstrap connection at once.
  for (auto& peer : peers_) {
    if (peer == nullptr) continue;
    peer->qp->toError();
    if (peer->boot.valid()) ::shutdown(peer->boot.get(), SHUT_RDWR);
  }
}

void VerbsChannel::fail(const std::string& what) {
  broken_ = true;
  abort();
  throw RailError(
      rail_, strCat("rail ", spec_.name, " (", spec_.iface, " ", device_->where(), "): ", what));
}

// The device's async events: a port error or a fatal device error makes the rail unusable
// whatever the QPs say yet (an idle rail learns it here, not at its next exchange).
void VerbsChannel::asyncLoop() {
  pollfd fds[2] = {{device_->context()->async_fd, POLLIN, 0}, {wake_.get(), POLLIN, 0}};
  while (true) {
    const int n = ::poll(fds, 2, -1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 || (fds[1].revents & POLLIN) != 0) return;
    if ((fds[0].revents & POLLIN) == 0) continue;
    ibv_async_event ev{};
    if (device_->lib().getAsyncEvent(device_->context(), &ev) != 0) continue;
    const ibv_event_type type = ev.event_type;
    const int port = type == IBV_EVENT_PORT_ERR ? ev.element.port_num : 0;
    device_->lib().ackAsyncEvent(&ev);
    if (type == IBV_EVENT_PORT_ERR && port == device_->port().port) {
      reportUnhealthy(strCat(device_->where(), ": IBV_EVENT_PORT_ERR"));
    } else if (type == IBV_EVENT_DEVICE_FATAL) {
      reportUnhealthy(strCat(device_->port().device, ": IBV_EVENT_DEVICE_FATAL"));
    }
    // QP and CQ errors surface as error completions in exchange(); the rest is informational.
  }
}

}  // namespace nezha
