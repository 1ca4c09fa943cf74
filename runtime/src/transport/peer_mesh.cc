#include "transport/peer_mesh.h"

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

std::vector<std::vector<Fd>> PeerMesh::connect(const JobTable& job, Deadline deadline, int listenFd,
                                               const SocketTuning& tuning, int conns,
                                               const Purpose& purpose, uint64_t& rejected) const {
  std::vector<std::vector<Fd>> fds(size_);
  for (int p = 0; p < size_; ++p) {
    if (p != rank_) fds[p].resize(conns);
  }
  for (int peer = 0; peer < rank_; ++peer) {
    const RailEndpoint& ep = job.ranks[peer].rails[rail_];
    for (int s = 0; s < conns; ++s) {
      const std::string what = strCat("rail ", spec_.name, " to rank ", peer);
      try {
        Fd fd =
            connectTo(ep.address, ep.port, address_, spec_.iface, deadline, rail_, what, tuning);
        authenticateAsClient(fd.get(), token_, purpose(rank_, peer, s), deadline, rail_, what);
        fds[peer][s] = std::move(fd);
      } catch (const PeerConnectError&) {
        throw;
      } catch (const RailError& e) {
        throw PeerConnectError(rail_, peer, e.what());
      }
    }
  }
  HandshakeAcceptor::Options ao;
  ao.listener = strCat("rail ", spec_.name);
  ao.perConnection = std::min(kHandshakeDeadline, ioTimeout_);
  ao.maxPendingPerSource = kMaxPendingPerSource;
  HandshakeAcceptor acceptor(listenFd, token_, ao);
  int expected = (size_ - 1 - rank_) * conns;
  while (expected > 0) {
    AcceptedPeer in;
    try {
      in = acceptor.next(deadline, rail_,
                         strCat("rail ", spec_.name, " waiting for ", expected, " connections"));
    } catch (const RailError& e) {
      throw PeerConnectError(rail_, firstMissingPeer(fds, rank_), e.what());
    }
    bool matched = false;
    for (int peer = rank_ + 1; peer < size_ && !matched; ++peer) {
      for (int s = 0; s < conns && !matched; ++s) {
        if (!fds[peer][s].valid() && in.purpose == purpose(peer, rank_, s)) {
          fds[peer][s] = std::move(in.fd);
          matched = true;
        }
      }
    }
    if (!matched) {
      acceptor.reject(strCat("a token holder's connection for \"", in.purpose.substr(0, 160),
                             "\" is not one this rail is waiting for"));
      continue;
    }
    --expected;
  }
  rejected += acceptor.rejectedTotal();
  return fds;
}

}  // namespace nezha
