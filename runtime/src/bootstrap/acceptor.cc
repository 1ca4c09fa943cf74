#include "bootstrap/acceptor.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <tuple>
#include <utility>

#include "base/error.h"
#include "bootstrap/auth.h"

namespace nezha {

namespace {
std::string frame(const std::string& payload) {
  std::string out(4, '\0');
  const uint32_t n = static_cast<uint32_t>(payload.size());
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>(n >> (8 * i));
  return out + payload;
}

// The peer's "ip" and "ip:port" ("?" when unknown, e.g. already gone).
std::pair<std::string, std::string> peerAddress(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof(a);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0 || a.sin_family != AF_INET) {
    return {"?", "?"};
  }
  char ip[INET_ADDRSTRLEN] = "?";
  ::inet_ntop(AF_INET, &a.sin_addr, ip, sizeof(ip));
  return {ip, strCat(ip, ":", ntohs(a.sin_port))};
}

// Thrown inside a handshake to reject its connection with a counted reason.
struct Rejected {
  std::string reason, detail;
};
}  // namespace

struct HandshakeAcceptor::Pending {
  enum Stage { kHello, kProof, kFirstFrame, kDone };
  Pending(Fd f, const std::string& token, const HandshakeAcceptor::Options& o)
      : fd(std::move(f)),
        hs(token, o.serves),
        deadline(Clock::now() + o.perConnection),
        helloDeadline(o.helloDeadline.count() > 0
                          ? std::min(deadline, Clock::now() + o.helloDeadline)
                          : deadline) {
    std::tie(source, peer) = peerAddress(fd.get());
  }
  // When it is dropped: its own deadline, or sooner while it has sent nothing.
  Deadline expiry() const { return anyByte ? deadline : helloDeadline; }
  Fd fd;
  ServerHandshake hs;
  Deadline deadline, helloDeadline;
  std::string source, peer;  // "ip" (the per-source cap), "ip:port" (logs)
  Stage stage = kHello;
  std::string in, out;  // bytes received and not yet used; bytes still to send
  size_t outSent = 0;
  bool refused = false;    // the proof failed: reject once the verdict is out
  bool anyByte = false;    // something arrived (idle vs stalled, for the log)
  std::string firstFrame;  // kFirstFrame's payload
};

HandshakeAcceptor::HandshakeAcceptor(int listenFd, const std::string& token, Options options)
    : listen_(listenFd), token_(token), options_(std::move(options)) {
  setNonBlocking(listen_, true);  // accept until EAGAIN, never block on an empty queue
}

HandshakeAcceptor::~HandshakeAcceptor() = default;

uint64_t HandshakeAcceptor::rejectedTotal() const {
  uint64_t n = 0;
  for (const auto& [reason, count] : rejected_) n += count;
  return n;
}

void HandshakeAcceptor::count(const std::string& reason, const std::string& detail) {
  if (rejected_[reason]++ == 0) {
    std::fprintf(stderr,
                 "nezha: %s: rejected a connection (%s%s%s); further '%s' rejections are counted, "
                 "not logged\n",
                 options_.listener.c_str(), reason.c_str(), detail.empty() ? "" : ": ",
                 detail.c_str(), reason.c_str());
  }
}

void HandshakeAcceptor::reject(const std::string& reason) { count("unexpected", reason); }

bool HandshakeAcceptor::makeRoom(const std::string& source) {
  size_t fromSource = 0;
  for (const auto& p : pending_) fromSource += p->source == source ? 1 : 0;
  const bool sourceFull =
      options_.maxPendingPerSource > 0 && fromSource >= options_.maxPendingPerSource;
  if (!sourceFull && pending_.size() < options_.maxPending) return true;
  // pending_ is in arrival order: the first idle match is the oldest.
  for (auto it = pending_.begin(); it != pending_.end(); ++it) {
    if ((*it)->anyByte || (sourceFull && (*it)->source != source)) continue;
    count("evicted", strCat((*it)->peer, " sent nothing and made room for a newer connection (",
                            sourceFull ? "per-source" : "total", " limit of ",
                            sourceFull ? options_.maxPendingPerSource : options_.maxPending,
                            " pending handshakes)"));
    pending_.erase(it);
    return true;
  }
  return false;
}

void HandshakeAcceptor::acceptReady() {
  for (;;) {
    Fd fd(::accept4(listen_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (!fd.valid()) return;  // EAGAIN (nothing more), or the client already gave up
    auto p = std::make_unique<Pending>(std::move(fd), token_, options_);
    if (!makeRoom(p->source)) {
      count("too many", strCat(p->peer,
                               ": every pending handshake of its source (or of all) is "
                               "under way"));
      continue;  // closed by Fd
    }
    pending_.push_back(std::move(p));
  }
}

bool HandshakeAcceptor::progress(Pending& p) {
  try {
    for (;;) {
      // Send what is queued first; the next frame is only read once the answer is out.
      while (p.outSent < p.out.size()) {
        ssize_t n = ::send(p.fd.get(), p.out.data() + p.outSent, p.out.size() - p.outSent,
                           MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return false;
        if (n <= 0) throw Rejected{"closed", strCat(p.peer, " went away mid-handshake")};
        p.outSent += static_cast<size_t>(n);
      }
      p.out.clear();
      p.outSent = 0;
      if (p.refused) throw Rejected{"wrong token", strCat(p.peer, " failed the token proof")};
      if (p.stage == Pending::kDone) return true;
      const size_t max = p.stage == Pending::kHello   ? ServerHandshake::kMaxHello
                         : p.stage == Pending::kProof ? ServerHandshake::kMaxProof
                                                      : options_.firstFrameMax;
      // A whole frame yet?
      if (p.in.size() >= 4) {
        uint32_t len = 0;
        for (int i = 0; i < 4; ++i) len |= uint32_t(static_cast<uint8_t>(p.in[i])) << (8 * i);
        if (len > max) {
          throw Rejected{"garbage", strCat(p.peer, " sent a ", len, "-byte frame (limit ", max,
                                           "; not a nezha peer?)")};
        }
        if (p.in.size() >= 4 + size_t(len)) {
          const std::string payload = p.in.substr(4, len);
          p.in.erase(0, 4 + size_t(len));
          switch (p.stage) {
            case Pending::kHello:
              p.out = frame(p.hs.onHello(payload));
              p.stage = Pending::kProof;
              break;
            case Pending::kProof: {
              bool accepted = false;
              p.out = frame(p.hs.onProof(payload, accepted));
              p.refused = !accepted;
              p.stage = options_.firstFrameMax > 0 ? Pending::kFirstFrame : Pending::kDone;
              break;
            }
            case Pending::kFirstFrame:
              p.firstFrame = payload;
              p.stage = Pending::kDone;
              break;
            case Pending::kDone:
              break;
          }
          continue;
        }
      }
      char buf[1024];
      const size_t want = std::min(sizeof(buf), 4 + max - std::min(p.in.size(), 4 + max));
      ssize_t n = ::recv(p.fd.get(), buf, std::max<size_t>(want, 1), MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return false;
      if (n <= 0) {
        throw Rejected{"closed", strCat(p.peer, p.anyByte ? " closed mid-handshake"
                                                          : " closed without a byte")};
      }
      p.anyByte = true;
      p.in.append(buf, static_cast<size_t>(n));
    }
  } catch (const Rejected& r) {
    count(r.reason, r.detail);
  } catch (const AuthError& e) {  // a purpose this listener does not serve
    count("wrong purpose", strCat(p.peer, ": ", e.what()));
  } catch (const Error& e) {  // malformed hello (WireReader) or a bad magic
    count("garbage", strCat(p.peer, ": ", e.what()));
  }
  p.fd.reset();
  return true;
}

void HandshakeAcceptor::dropExpired() {
  const auto now = Clock::now();
  for (auto& p : pending_) {
    if (p->expiry() > now) continue;
    count("idle", strCat(p->peer, p->anyByte ? " stalled" : " sent nothing", " for ",
                         std::chrono::duration_cast<std::chrono::milliseconds>(
                             p->expiry() - (p->deadline - options_.perConnection))
                             .count(),
                         " ms"));
    p.reset();
  }
  pending_.erase(std::remove(pending_.begin(), pending_.end(), nullptr), pending_.end());
}

AcceptedPeer HandshakeAcceptor::next(Deadline deadline, int rail, const std::string& what) {
  std::vector<pollfd> pfds;
  for (;;) {
    if (!ready_.empty()) {
      AcceptedPeer peer = std::move(ready_.front());
      ready_.erase(ready_.begin());
      return peer;
    }
    const auto now = Clock::now();
    if (now >= deadline)
      throw RailError(rail, strCat(what, ": timed out waiting for a connection"));
    Deadline wake = deadline;
    pfds.assign(1, pollfd{listen_, POLLIN, 0});
    for (const auto& p : pending_) {
      wake = std::min(wake, p->expiry());
      pfds.push_back(pollfd{p->fd.get(), static_cast<short>(p->out.empty() ? POLLIN : POLLOUT), 0});
    }
    const int n = ::poll(pfds.data(), pfds.size(), msLeft(wake));
    if (n < 0 && errno != EINTR) throw RailError(rail, sysError("poll", errno));
    // Handshakes first (their indices match pfds), then new connections.
    for (size_t i = 0; i < pending_.size(); ++i) {
      if (pfds[i + 1].revents != 0) step(i);
    }
    pending_.erase(std::remove(pending_.begin(), pending_.end(), nullptr), pending_.end());
    for (auto& peer : ready_) setNonBlocking(peer.fd.get(), false);
    // A listening socket only hangs up when its owner shut it down to stop this wait (another
    // part of its setup failed); accept() would fail at once, forever.
    if ((pfds[0].revents & (POLLHUP | POLLERR | POLLNVAL)) != 0)
      throw RailError(rail, strCat(what, ": the listening socket was shut down"));
    if (pfds[0].revents != 0) acceptReady();
    dropExpired();
  }
}

void HandshakeAcceptor::step(size_t i) {
  Pending& p = *pending_[i];
  if (!progress(p)) return;
  if (p.fd.valid())
    ready_.push_back(AcceptedPeer{std::move(p.fd), p.hs.purpose(), std::move(p.firstFrame)});
  pending_[i].reset();
}

std::vector<AcceptedPeer> HandshakeAcceptor::poll() {
  acceptReady();
  for (size_t i = 0; i < pending_.size(); ++i) step(i);
  pending_.erase(std::remove(pending_.begin(), pending_.end(), nullptr), pending_.end());
  dropExpired();
  return std::exchange(ready_, {});
}

void HandshakeAcceptor::appendPollFds(std::vector<int>& fds) const {
  fds.push_back(listen_);
  for (const auto& p : pending_) fds.push_back(p->fd.get());
}

Deadline HandshakeAcceptor::nextExpiry() const {
  Deadline first = Deadline::max();
  for (const auto& p : pending_) first = std::min(first, p->expiry());
  return first;
}

}  // namespace nezha
