#include "p2p.h"

#include <c10/util/Exception.h>
#include <sys/socket.h>

#include <cstring>

#include "base/sha256.h"
#include "nezha/nezha.hpp"

namespace nezha_torch {

namespace {

using nezha::Clock;

constexpr char kMagic[4] = {'N', 'Z', 'P', '2'};
constexpr size_t kNonce = 16;
constexpr uint64_t kMaxMessage = uint64_t(1) << 40;
// Between messages a link may stay idle for as long as the job runs.
constexpr auto kIdle = std::chrono::hours(24 * 365);

void putU32(char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>(v >> (8 * i));
}
uint32_t getU32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t(static_cast<uint8_t>(p[i])) << (8 * i);
  return v;
}
void putU64(char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>(v >> (8 * i));
}
uint64_t getU64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t(static_cast<uint8_t>(p[i])) << (8 * i);
  return v;
}

// Proof of the job token for one side ('c' connector, 's' acceptor) of the link low<->high,
// bound to both nonces so neither a replay nor a reflection passes.
nezha::Digest proof(const std::string& token, char side, int low, int high, const char* nonceC,
                    const char* nonceS) {
  std::string msg(1, side);
  char ranks[8];
  putU32(ranks, static_cast<uint32_t>(low));
  putU32(ranks + 4, static_cast<uint32_t>(high));
  msg.append(ranks, 8).append(nonceC, kNonce).append(nonceS, kNonce);
  return nezha::hmacSha256(token.data(), token.size(), msg.data(), msg.size());
}

std::string keyOf(int rank) { return "nezha/p2p/" + std::to_string(rank); }

}  // namespace

PeerLinks::PeerLinks(c10d::Store& store, int rank, int size, const std::string& address,
                     const std::string& token, std::chrono::milliseconds timeout)
    : rank_(rank), size_(size), token_(token), links_(static_cast<size_t>(size)) {
  if (size <= 1) return;
  listen_ = nezha::listenOn(address, 0, "");
  const std::string where = address + ":" + std::to_string(nezha::localPort(listen_.get()));
  store.set(keyOf(rank), std::vector<uint8_t>(where.begin(), where.end()));
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
    char hello[4 + 4 + kNonce];
    std::memcpy(hello, kMagic, 4);
    putU32(hello + 4, static_cast<uint32_t>(rank_));
    nezha::randomBytes(hello + 8, kNonce);
    nezha::sendAll(fd.get(), hello, sizeof(hello), deadline, -1);
    char reply[kNonce + 32];
    nezha::recvAll(fd.get(), reply, sizeof(reply), deadline, -1);
    nezha::Digest theirs;
    std::memcpy(theirs.data(), reply + kNonce, 32);
    TORCH_CHECK(nezha::constantTimeEqual(theirs, proof(token_, 's', rank_, peer, hello + 8, reply)),
                "nezha backend: rank ", peer,
                " failed the job-token proof on its p2p link (different NEZHA_JOB_TOKEN?)");
    const nezha::Digest mine = proof(token_, 'c', rank_, peer, hello + 8, reply);
    nezha::sendAll(fd.get(), mine.data(), mine.size(), deadline, -1);
    nezha::applyTuning(fd.get(), nezha::SocketTuning{});
    links_[peer] = std::make_unique<Link>();
    links_[peer]->fd = std::move(fd);
  } catch (const nezha::Error& e) {
    TORCH_CHECK(false, "nezha backend: ", what, " at ", where, ": ", e.what());
  }
}

void PeerLinks::acceptFrom(std::chrono::milliseconds timeout) {
  const Clock::time_point deadline = Clock::now() + timeout;
  int missing = rank_;  // ranks 0..rank-1 connect to us
  while (missing > 0) {
    nezha::Fd fd;
    try {
      fd = nezha::acceptUntil(listen_.get(), deadline, -1, "p2p links");
    } catch (const nezha::Error& e) {
      TORCH_CHECK(false, "nezha backend: rank ", rank_, " waited for p2p links from ", missing,
                  " lower rank(s): ", e.what());
    }
    try {
      // A stray or unauthenticated connection is dropped; the deadline bounds the wait.
      char hello[4 + 4 + kNonce];
      nezha::recvAll(fd.get(), hello, sizeof(hello), deadline, -1);
      const int peer = static_cast<int>(getU32(hello + 4));
      if (std::memcmp(hello, kMagic, 4) != 0 || peer < 0 || peer >= rank_ || links_[peer]) {
        continue;
      }
      char reply[kNonce + 32];
      nezha::randomBytes(reply, kNonce);
      const nezha::Digest mine = proof(token_, 's', peer, rank_, hello + 8, reply);
      std::memcpy(reply + kNonce, mine.data(), 32);
      nezha::sendAll(fd.get(), reply, sizeof(reply), deadline, -1);
      nezha::Digest theirs;
      nezha::recvAll(fd.get(), theirs.data(), theirs.size(), deadline, -1);
      if (!nezha::constantTimeEqual(theirs, proof(token_, 'c', peer, rank_, hello + 8, reply))) {
        continue;
      }
      nezha::applyTuning(fd.get(), nezha::SocketTuning{});
      links_[peer] = std::make_unique<Link>();
      links_[peer]->fd = std::move(fd);
      --missing;
    } catch (const nezha::Error&) {
      if (Clock::now() >= deadline) {
        TORCH_CHECK(false, "nezha backend: rank ", rank_, " timed out waiting for p2p links");
      }
    }
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
      char hdr[16];
      nezha::recvAll(fd, hdr, sizeof(hdr), Clock::now() + kIdle, -1);
      tag = static_cast<int64_t>(getU64(hdr));
      const uint64_t len = getU64(hdr + 8);
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
  char hdr[16];
  putU64(hdr, static_cast<uint64_t>(tag));
  putU64(hdr + 8, len);
  try {
    nezha::sendAll(l.fd.get(), hdr, sizeof(hdr), Clock::now() + kIdle, -1);
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
