#include "p2p.h"

#include <c10/util/Exception.h>
#include <sys/socket.h>

#include <algorithm>

#include "base/wire.h"
#include "bootstrap/acceptor.h"
#include "bootstrap/auth.h"
#include "nezha/nezha.hpp"

namespace nezha_torch {

namespace {

using nezha::Clock;

constexpr uint64_t kMaxMessage = uint64_t(1) << 40;
constexpr size_t kHeaderBytes = 16;  // tag, length: u64 each (base/wire.h)
// A connection to the p2p port must finish its handshake within this (or the setup timeout).
constexpr std::chrono::milliseconds kHandshakeDeadline{5000};
// Between messages a link may stay idle for as long as the job runs.
constexpr auto kIdle = std::chrono::hours(24 * 365);

// What the connecting rank claims and proves in the job-token handshake (bootstrap/auth.h binds
// it into both MACs): the direction of the link and the listener it was published for, so a
// proof for one link or one process group's listener is no proof for another.
std::string purposeOf(int from, int to, const std::string& listener) {
  return "p2p from=" + std::to_string(from) + " to=" + std::to_string(to) + " at=" + listener;
}

std::string keyOf(int rank) { return "nezha/p2p/" + std::to_string(rank); }

}  // namespace

PeerLinks::PeerLinks(c10d::Store& store, int rank, int size, const std::string& address,
                     const std::string& token, std::chrono::milliseconds timeout)
    : rank_(rank), size_(size), token_(token), links_(static_cast<size_t>(size)) {
  if (size <= 1) return;
  listen_ = nezha::listenOn(address, 0, "");
  where_ = address + ":" + std::to_string(nezha::localPort(listen_.get()));
  store.set(keyOf(rank), std::vector<uint8_t>(where_.begin(), where_.end()));
  // Accept the lower ranks while connecting to the higher ones, so no rank waits on another
  // that is itself still connecting.
  std::exception_ptr acceptError;
  std::thread acceptor([&] {
    try {
      acceptFrom(timeout);
    } catch (...) {
      acceptError = std::current_exception();
    }
  });
  std::exception_ptr connectError;
  try {
    for (int p = rank + 1; p < size; ++p) {
      std::vector<uint8_t> v = store.get(keyOf(p));
      connectTo(p, std::string(v.begin(), v.end()), timeout);
    }
  } catch (...) {
    connectError = std::current_exception();
  }
  if (connectError) ::shutdown(listen_.get(), SHUT_RDWR);  // ends the acceptor's wait
  acceptor.join();
  if (connectError) std::rethrow_exception(connectError);
  if (acceptError) std::rethrow_exception(acceptError);
  listen_.reset();
  for (int p = 0; p < size; ++p) {
    if (p != rank) startReader(p);
  }
}

PeerLinks::~PeerLinks() { close(); }

void PeerLinks::close() {
  std::lock_guard<std::mutex> once(closeMu_);
  if (closed_) return;
  closed_ = true;
  {
    std::lock_guard<std::mutex> lock(mu_);
    closing_ = true;
  }
  for (auto& l : links_) {
    if (l && l->fd.valid()) ::shutdown(l->fd.get(), SHUT_RDWR);
  }
  for (auto& l : links_) {
    if (l && l->reader.joinable()) l->reader.join();
  }
  // Receives nobody will ever match end with an error rather than leave a waiter hanging.
  auto error = std::make_exception_ptr(
      std::runtime_error("nezha backend: process group shut down before the message arrived"));
  std::deque<Posted> posted;
  {
    std::lock_guard<std::mutex> lock(mu_);
    posted.swap(posted_);
  }
  for (auto& p : posted) p.deliver(p.src, nullptr, error);
}

void PeerLinks::connectTo(int peer, const std::string& where, std::chrono::milliseconds timeout) {
  const size_t colon = where.rfind(':');
  TORCH_CHECK(colon != std::string::npos, "nezha backend: bad p2p address '", where, "' for rank ",
              peer, " in the store");
  const Clock::time_point deadline = Clock::now() + timeout;
  const std::string what = "p2p link to rank " + std::to_string(peer);
  try {
    nezha::Fd fd = nezha::connectTo(where.substr(0, colon), std::stoi(where.substr(colon + 1)), "",
                                    "", deadline, -1, what);
    nezha::authenticateAsClient(fd.get(), token_, purposeOf(rank_, peer, where), deadline, -1,
                                "rank " + std::to_string(peer));
    nezha::applyTuning(fd.get(), nezha::SocketTuning{});
    links_[peer] = std::make_unique<Link>();
    links_[peer]->fd = std::move(fd);
  } catch (const nezha::Error& e) {
    TORCH_CHECK(false, "nezha backend: ", what, " at ", where, ": ", e.what());
  }
}

void PeerLinks::acceptFrom(std::chrono::milliseconds timeout) {
  const Clock::time_point deadline = Clock::now() + timeout;
  // Anyone else who connects (a port scanner, a stray client, a wrong token) costs only its own
  // handshake deadline and is counted by the acceptor.
  nezha::HandshakeAcceptor::Options ao;
  ao.listener = "p2p links of rank " + std::to_string(rank_);
  ao.perConnection = std::min(kHandshakeDeadline, timeout);
  nezha::HandshakeAcceptor acceptor(listen_.get(), token_, ao);
  int missing = rank_;  // ranks 0..rank-1 connect to us
  while (missing > 0) {
    nezha::AcceptedPeer in;
    try {
      in = acceptor.next(deadline, -1, "p2p links");
    } catch (const nezha::Error& e) {
      TORCH_CHECK(false, "nezha backend: rank ", rank_, " waited for p2p links from ", missing,
                  " lower rank(s): ", e.what());
    }
    int peer = -1;
    for (int p = 0; p < rank_ && peer < 0; ++p) {
      if (!links_[p] && in.purpose == purposeOf(p, rank_, where_)) peer = p;
    }
    if (peer < 0) {
      acceptor.reject("a token holder's connection for \"" + in.purpose.substr(0, 160) +
                      "\" is not a p2p link this rank is waiting for");
      continue;
    }
    nezha::applyTuning(in.fd.get(), nezha::SocketTuning{});
    links_[peer] = std::make_unique<Link>();
    links_[peer]->fd = std::move(in.fd);
    --missing;
  }
}

void PeerLinks::startReader(int peer) {
  links_[peer]->reader = std::thread([this, peer] { readLoop(peer); });
}

void PeerLinks::readLoop(int peer) {
  const int fd = links_[peer]->fd.get();
  for (;;) {
    Message m{peer, {}};
    int64_t tag = 0;
    try {
      std::string hdr(kHeaderBytes, '\0');
      nezha::recvAll(fd, hdr.data(), hdr.size(), Clock::now() + kIdle, -1);
      nezha::WireReader r(hdr, "p2p message header from rank " + std::to_string(peer));
      tag = static_cast<int64_t>(r.u64());
      const uint64_t len = r.u64();
      r.finish();
      if (len > kMaxMessage) throw nezha::Error("message length " + std::to_string(len));
      m.data.resize(len);
      nezha::recvAll(fd, m.data.data(), len, Clock::now() + kIdle, -1);
    } catch (const std::exception& e) {
      linkFailed(peer, e.what());
      return;
    }
    Deliver deliver;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto it = posted_.begin(); it != posted_.end(); ++it) {
        if (it->tag == tag && (it->src < 0 || it->src == peer)) {
          deliver = std::move(it->deliver);
          posted_.erase(it);
          break;
        }
      }
      if (!deliver) {
        unexpected_[tag].push_back(std::move(m));
        continue;
      }
    }
    deliver(peer, &m.data, nullptr);
  }
}

void PeerLinks::linkFailed(int peer, const std::string& why) {
  std::vector<Deliver> failed;
  std::string message;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closing_) return;
    broken_.emplace(peer, why);
    message = "nezha backend: p2p link to rank " + std::to_string(peer) + " failed: " + why;
    for (auto it = posted_.begin(); it != posted_.end();) {
      if (it->src == peer || it->src < 0) {
        failed.push_back(std::move(it->deliver));
        it = posted_.erase(it);
      } else {
        ++it;
      }
    }
  }
  if (links_[peer]) ::shutdown(links_[peer]->fd.get(), SHUT_RDWR);
  for (auto& d : failed) {
    d(peer, nullptr, std::make_exception_ptr(std::runtime_error(message)));
  }
}

void PeerLinks::send(int peer, int64_t tag, const void* data, size_t len) {
  TORCH_CHECK(peer >= 0 && peer < size_ && peer != rank_, "nezha backend: send to rank ", peer,
              " (world size ", size_, ", this is rank ", rank_, ")");
  {
    std::lock_guard<std::mutex> lock(mu_);
    TORCH_CHECK(!closing_, "nezha backend: send to rank ", peer,
                " on a process group that was shut down");
    auto b = broken_.find(peer);
    TORCH_CHECK(b == broken_.end(), "nezha backend: p2p link to rank ", peer,
                " failed earlier: ", b->second);
  }
  Link& l = *links_[peer];
  std::lock_guard<std::mutex> lock(l.writeMu);
  nezha::WireWriter hdr;
  hdr.u64(static_cast<uint64_t>(tag)).u64(len);
  try {
    nezha::sendAll(l.fd.get(), hdr.data().data(), hdr.data().size(), Clock::now() + kIdle, -1);
    if (len) nezha::sendAll(l.fd.get(), data, len, Clock::now() + kIdle, -1);
  } catch (const std::exception& e) {
    linkFailed(peer, e.what());
    TORCH_CHECK(false, "nezha backend: send to rank ", peer, " failed: ", e.what());
  }
}

void PeerLinks::post(int src, int64_t tag, Deliver deliver) {
  TORCH_CHECK(src >= -1 && src < size_ && src != rank_, "nezha backend: recv from rank ", src,
              " (world size ", size_, ", this is rank ", rank_, ")");
  std::unique_lock<std::mutex> lock(mu_);
  TORCH_CHECK(!closing_, "nezha backend: recv from rank ", src,
              " on a process group that was shut down");
  auto q = unexpected_.find(tag);
  if (q != unexpected_.end()) {
    for (auto it = q->second.begin(); it != q->second.end(); ++it) {
      if (src < 0 || it->src == src) {
        Message m = std::move(*it);
        q->second.erase(it);
        if (q->second.empty()) unexpected_.erase(q);
        lock.unlock();
        deliver(m.src, &m.data, nullptr);
        return;
      }
    }
  }
  std::string why;
  if (src >= 0 && broken_.count(src)) why = broken_[src];
  if (src < 0 && !broken_.empty()) why = broken_.begin()->second;
  if (!why.empty()) {
    lock.unlock();
    deliver(src, nullptr,
            std::make_exception_ptr(std::runtime_error("nezha backend: p2p link to rank " +
                                                       std::to_string(src) + " failed: " + why)));
    return;
  }
  posted_.push_back(Posted{src, tag, std::move(deliver)});
}

}  // namespace nezha_torch
