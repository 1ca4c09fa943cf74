#include "transport/peer_mesh.h"

#include <sys/socket.h>

#include <algorithm>

#include "base/error.h"
#include "bootstrap/acceptor.h"
#include "bootstrap/auth.h"
#include "transport/transport.h"

namespace nezha {

namespace {
// A connection to a rail port must finish its handshake within this (or the I/O timeout).
constexpr std::chrono::milliseconds kHandshakeDeadline{5000};

int firstMissingPeer(const std::vector<std::vector<Fd>>& fds, int rank) {
  for (int peer = rank + 1; peer < static_cast<int>(fds.size()); ++peer) {
    for (const Fd& fd : fds[peer]) {
      if (!fd.valid()) return peer;
    }
  }
  return -1;
}
}  // namespace

PeerMesh::PeerMesh(const Options& o, int railIndex, const std::string& address)
    : spec_(o.rails.at(railIndex)),
      rail_(railIndex),
      rank_(o.rank),
      size_(o.worldSize),
      address_(address),
      token_(o.jobToken),
      ioTimeout_(o.ioTimeout) {}

PeerMesh::~PeerMesh() = default;

void PeerMesh::open(const JobTable& job, int listenFd, const SocketTuning& tuning, int maxConns,
                    Purpose purpose) {
  job_ = job;
  tuning_ = tuning;
  maxConns_ = maxConns;
  purpose_ = std::move(purpose);
  HandshakeAcceptor::Options ao;
  ao.listener = strCat("rail ", spec_.name);
  ao.perConnection = std::min(kHandshakeDeadline, ioTimeout_);
  ao.maxPendingPerSource = kMaxPendingPerSource;
  acceptor_ = std::make_unique<HandshakeAcceptor>(listenFd, token_, ao);
  // Every connection a higher rank may open to this one, by the purpose it must prove.
  dialledBy_.clear();
  for (int peer = rank_ + 1; peer < size_; ++peer) {
    for (int s = 0; s < maxConns_; ++s) dialledBy_[purpose_(peer, rank_, s)] = {peer, s};
  }
  kept_.clear();
  handedOut_.assign(size_, std::vector<char>(maxConns_, 0));
}

uint64_t PeerMesh::rejected() const { return acceptor_ ? acceptor_->rejectedTotal() : 0; }

void PeerMesh::interrupt() {
  std::lock_guard<std::mutex> lock(dialMu_);
  interrupted_ = true;
  if (dialling_ >= 0) ::shutdown(dialling_, SHUT_RDWR);
}

Fd PeerMesh::dial(int peer, int stream, Deadline deadline) {
  const RailEndpoint& ep = job_.ranks[peer].rails[rail_];
  const std::string what = strCat("rail ", spec_.name, " to rank ", peer);
  try {
    Fd fd = connectTo(ep.address, ep.port, address_, spec_.iface, deadline, rail_, what, tuning_);
    {
      std::lock_guard<std::mutex> lock(dialMu_);
      if (interrupted_) throw RailError(rail_, strCat(what, ": the rail was aborted"));
      dialling_ = fd.get();  // interrupt() shuts it down, which ends the handshake's wait
    }
    try {
      authenticateAsClient(fd.get(), token_, purpose_(rank_, peer, stream), deadline, rail_, what);
    } catch (...) {
      std::lock_guard<std::mutex> lock(dialMu_);
      dialling_ = -1;
      throw;
    }
    std::lock_guard<std::mutex> lock(dialMu_);
    dialling_ = -1;
    return fd;
  } catch (const PeerConnectError&) {
    throw;
  } catch (const RailError& e) {
    throw PeerConnectError(rail_, peer, e.what());
  }
}

std::vector<std::vector<Fd>> PeerMesh::connect(const std::vector<int>& peers, int conns,
                                               Deadline deadline) {
  NEZHA_ENFORCE(acceptor_ != nullptr, "rail ", spec_.name, ": PeerMesh::connect before open");
  NEZHA_ENFORCE(conns > 0 && conns <= maxConns_, conns, " connections asked, at most ", maxConns_);
  std::vector<std::vector<Fd>> fds(size_);
  for (int peer : peers) {
    NEZHA_ENFORCE(peer >= 0 && peer < size_ && peer != rank_, "bad peer ", peer);
    fds[peer].resize(conns);
  }
  for (int peer : peers) {
    if (peer > rank_) continue;
    for (int s = 0; s < conns; ++s) {
      fds[peer][s] = dial(peer, s, deadline);
      handedOut_[peer][s] = 1;
    }
  }
  accept(fds, deadline);
  return fds;
}

void PeerMesh::accept(std::vector<std::vector<Fd>>& want, Deadline deadline) {
  int expected = 0;
  for (int peer = rank_ + 1; peer < size_; ++peer) {
    for (Fd& fd : want[peer]) {
      auto early = kept_.find({peer, static_cast<int>(&fd - want[peer].data())});
      if (early != kept_.end()) {
        fd = std::move(early->second);
        kept_.erase(early);
      }
      expected += fd.valid() ? 0 : 1;
    }
  }
  while (expected > 0) {
    AcceptedPeer in;
    try {
      in = acceptor_->next(deadline, rail_,
                           strCat("rail ", spec_.name, " waiting for ", expected, " connections"));
    } catch (const RailError& e) {
      throw PeerConnectError(rail_, firstMissingPeer(want, rank_), e.what());
    }
    auto it = dialledBy_.find(in.purpose);
    if (it == dialledBy_.end()) {
      acceptor_->reject(strCat("a token holder's connection for \"", in.purpose.substr(0, 160),
                               "\" is not one of this rail's"));
      continue;
    }
    const auto [peer, s] = it->second;
    if (!want[peer].empty()) {  // asked for now
      if (s >= static_cast<int>(want[peer].size()) || want[peer][s].valid()) {
        acceptor_->reject(strCat("a second connection for \"", in.purpose.substr(0, 160), "\""));
        continue;
      }
      want[peer][s] = std::move(in.fd);
      --expected;
    } else if (!handedOut_[peer][s] && kept_.count({peer, s}) == 0) {
      kept_[{peer, s}] = std::move(in.fd);  // dialled before this rank needs it: kept until then
    } else {
      acceptor_->reject(strCat("a second connection for \"", in.purpose.substr(0, 160), "\""));
    }
  }
  for (int peer = rank_ + 1; peer < size_; ++peer) {
    for (size_t s = 0; s < want[peer].size(); ++s) handedOut_[peer][s] = 1;
  }
}

std::vector<std::vector<Fd>> PeerMesh::connect(const JobTable& job, Deadline deadline, int listenFd,
                                               const SocketTuning& tuning, int conns,
                                               const Purpose& purpose, uint64_t& rejected) {
  open(job, listenFd, tuning, conns, purpose);
  std::vector<int> everyone;
  for (int p = 0; p < size_; ++p) {
    if (p != rank_) everyone.push_back(p);
  }
  std::vector<std::vector<Fd>> fds = connect(everyone, conns, deadline);
  rejected += this->rejected();
  return fds;
}

}  // namespace nezha
