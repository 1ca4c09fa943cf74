#include "nccl/send_comm.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/error.h"
#include "bootstrap/auth.h"
#include "nccl/rail_purpose.h"

namespace nezha::ncclnet {

namespace {

constexpr uint32_t kProbeBytes = 4096;
constexpr double kRateSmoothing = 0.25;
// How far ahead a rail may run: enough to keep its pipe full for this long at its measured
// rate (bigger only queues bytes a failure would have to replay).
constexpr double kWindowSeconds = 0.02;
constexpr uint64_t kMaxWindow = 16u << 20;
constexpr std::chrono::milliseconds kCarrierPoll{50};
// Re-measuring idle rails (see schedule()): how often, and below which fraction of the fastest
// rail's speed a rail counts as slow and is re-measured less often.
constexpr std::chrono::milliseconds kRemeasure{100};
constexpr std::chrono::milliseconds kRemeasureSlow{1000};
constexpr double kSlowRatio = 16;
// A redial waits at least this long before giving up: long enough for the kernel's first SYN
// retransmission (1 s) after a link comes back with stale neighbour entries.
constexpr std::chrono::milliseconds kRedialPatience{1500};

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Drop queued bytes and send RST: a failed rail's socket must not deliver stale bytes later.
void abortSocket(Fd& fd) {
  if (!fd.valid()) return;
  linger l{1, 0};
  setsockopt(fd.get(), SOL_SOCKET, SO_LINGER, &l, sizeof l);
  fd.reset();
}

const char* stateName(int s) {
  static const char* names[] = {"connecting", "probing", "live", "failed", "authenticating"};
  return names[s];
}

}  // namespace

SendComm::SendComm(PluginContext& ctx, const ConnectHandle& peer)
    : ctx_(ctx), peer_(peer), created_(Clock::now()) {
  const auto& cfg = ctx_.config();
  if (peer_.rails.size() != cfg.rails.size()) {
    throw CommError(ncclInvalidUsage,
                    strCat("the peer listens on ", peer_.rails.size(), " rails, this process has ",
                           cfg.rails.size(), " (NEZHA_RAILS must list the same rails everywhere)"));
  }
  rails_.resize(cfg.rails.size());
  const auto now = Clock::now();
  noLiveSince_ = now;
  for (size_t i = 0; i < rails_.size(); ++i) {
    rails_[i].index = i;
    startConnect(rails_[i], now);
  }
}

SendComm::~SendComm() {
  for (auto& r : rails_) {
    stopAuth(r);
    r.fd.reset();
  }
}

void SendComm::stopAuth(Rail& r) {
  if (!r.auth.valid()) return;
  ::shutdown(r.fd.get(), SHUT_RDWR);
  r.auth.wait();
  r.auth = {};
}

double SendComm::assumedRate(const Rail& r) const {
  if (r.rate > 0) return r.rate;
  const auto mbps = ctx_.config().rails[r.index].expectedMbps;
  return mbps > 0 ? double(mbps) * 1e6 / 8 : 125e6;  // unknown: 1 Gbit/s, corrected by acks
}

uint64_t SendComm::window(const Rail& r) const {
  const uint64_t chunk = ctx_.config().chunkBytes;
  const auto w = static_cast<uint64_t>(assumedRate(r) * kWindowSeconds);
  return std::clamp<uint64_t>(w, 2 * chunk, std::max<uint64_t>(kMaxWindow, 2 * chunk));
}

void SendComm::startConnect(Rail& r, Clock::time_point now) {
  const auto& rail = ctx_.config().rails[r.index];
  r.state = RailState::kFailed;
  r.since = now;
  r.nextAttempt = now + ctx_.config().readmitInterval;
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) {
    r.reason = sysError("socket", errno);
    return;
  }
  // Bound to the rail's device and address: its bytes can never take another NIC's route.
  setsockopt(fd.get(), SOL_SOCKET, SO_BINDTODEVICE, rail.iface.c_str(),
             static_cast<socklen_t>(rail.iface.size()));
  sockaddr_in src{};
  src.sin_family = AF_INET;
  src.sin_addr.s_addr = rail.ipv4;
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&src), sizeof src) != 0) {
    r.reason = sysError("bind", errno);
    return;
  }
  int one = 1;
  setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  // The sender's congestion control is the one that paces the data (checked at init, so a
  // failure here is a rail failure with its reason, never a silent fallback).
  const std::string& cc = ctx_.config().tcpCongestion;
  if (!cc.empty() && setsockopt(fd.get(), IPPROTO_TCP, TCP_CONGESTION, cc.data(),
                                static_cast<socklen_t>(cc.size())) != 0) {
    r.reason = sysError("setsockopt TCP_CONGESTION", errno);
    return;
  }
  sockaddr_in dst{};
  dst.sin_family = AF_INET;
  dst.sin_addr.s_addr = peer_.rails[r.index].ipv4;
  dst.sin_port = htons(peer_.rails[r.index].port);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&dst), sizeof dst) != 0 &&
      errno != EINPROGRESS) {
    r.reason = sysError("connect", errno);
    return;
  }
  r.fd = std::move(fd);
  r.epoch = r.accepted + 1;
  r.state = RailState::kConnecting;
  r.out.clear();
  r.outPos = 0;
  r.queued = r.acked = 0;
  r.inflight.clear();
  r.in.clear();
}

void SendComm::finishConnect(Rail& r, Clock::time_point now) {
  int err = 0;
  socklen_t len = sizeof err;
  getsockopt(r.fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
  if (err != 0) {
    fail(r, sysError("connect", err), now);
    return;
  }
  // The token handshake on its own thread; the proxy thread goes on with the other rails.
  const auto& cfg = ctx_.config();
  const auto budget = everLive_ ? std::max<Clock::duration>(cfg.stall, kRedialPatience)
                                : Clock::duration(cfg.connectTimeout);
  const std::string purpose =
      encodeRailPurpose(RailPurpose{static_cast<uint16_t>(r.index), r.epoch, peer_.nonce});
  const std::string peerName =
      strCat("the receiver on rail ", cfg.rails[r.index].name, " (",
             ipv4Text(peer_.rails[r.index].ipv4), ":", peer_.rails[r.index].port, ")");
  r.auth = std::async(std::launch::async,
                      [fd = r.fd.get(), token = cfg.jobToken, purpose, deadline = r.since + budget,
                       rail = static_cast<int>(r.index), peerName] {
                        authenticateAsClient(fd, token, purpose, deadline, rail, peerName);
                      });
  r.state = RailState::kAuthenticating;
}

void SendComm::finishAuth(Rail& r, Clock::time_point now) {
  try {
    r.auth.get();
  } catch (const std::exception& e) {
    r.auth = {};
    fail(r, strCat("token handshake: ", e.what()), now);
    return;
  }
  r.auth = {};
  r.accepted = r.epoch;
  r.since = now;
  r.lastProgress = now;
  if (!everLive_ || r.reason.empty()) {
    // First connection of the comm: nothing failed yet, so no probe is owed.
    r.state = RailState::kLive;
    everLive_ = true;
    return;
  }
  // Re-admission: a probe must reach the receiver and its acknowledgement come back on this rail.
  static const std::string zeros(kProbeBytes, '\0');
  r.out.push_back(Segment{encodeProbeHeader(kProbeBytes),
                          reinterpret_cast<const uint8_t*>(zeros.data()), kProbeBytes});
  r.queued += kLengthPrefix + 1 + kProbeBytes;
  r.probeEnd = r.queued;
  r.inflight.push_back(Record{r.queued, nullptr, 0});
  r.state = RailState::kProbing;
}

void SendComm::fail(Rail& r, const std::string& why, Clock::time_point now) {
  const bool wasLive = r.state == RailState::kLive;
  const bool receiverHasIt = wasLive || r.state == RailState::kProbing;
  const std::string what =
      strCat("rail ", ctx_.config().rails[r.index].name, " (", ctx_.config().rails[r.index].iface,
             ") ", stateName(int(r.state)), " -> failed: ", why);
  stopAuth(r);
  abortSocket(r.fd);
  if (receiverHasIt) announceDown(r, now);
  // Unacknowledged chunks go back to the head of the queue, in their order.
  uint64_t replayed = 0;
  for (auto it = r.inflight.rbegin(); it != r.inflight.rend(); ++it) {
    if (it->msg == nullptr) continue;
    it->msg->inflight -= 1;
    if (!it->msg->acked[it->chunk]) {
      pending_.emplace_front(it->msg, it->chunk);
      replayed += 1;
    }
  }
  r.inflight.clear();
  r.out.clear();
  r.outPos = 0;
  r.in.clear();
  r.state = RailState::kFailed;
  r.reason = why;
  r.since = now;
  r.nextAttempt = now + ctx_.config().readmitInterval;
  if (!wasLive) {
    ctx_.info(strCat(what, " (re-admission attempt)"));
  } else {
    ctx_.counters(r.index).failures += 1;
    ctx_.counters(r.index).chunksReplayed += replayed;
    ctx_.warn(strCat(what, "; ", replayed, " chunks go to the other rails"));
    ctx_.noteFailure(what);
  }
}

void SendComm::announceDown(const Rail& down, Clock::time_point now) {
  const std::string frame = encodeRailDown(RailDown{static_cast<uint16_t>(down.index), down.epoch});
  for (auto& r : rails_) {
    if (&r == &down || (r.state != RailState::kLive && r.state != RailState::kProbing)) continue;
    if (r.unacked() == 0) r.lastProgress = now;  // idle until now: the stall clock starts
    r.out.push_back(Segment{frame, nullptr, 0});
    r.queued += frame.size();
    r.inflight.push_back(Record{r.queued, nullptr, 0});
  }
}

void SendComm::handleCts(const Cts& c) {
  if (c.group < nextCts_) return;  // a copy that came over another rail
  early_.emplace(c.group, c);
  while (!early_.empty() && early_.begin()->first == nextCts_) {
    OpenGroup g;
    g.seq = nextCts_;
    for (const auto& e : early_.begin()->second.entries)
      g.entries.push_back({e.tag, e.size, false});
    open_.push_back(std::move(g));
    early_.erase(early_.begin());
    nextCts_ += 1;
  }
  if (early_.size() > 1024) {
    throw CommError(ncclRemoteError, strCat("the receiver posted receives out of order (",
                                            early_.size(), " waiting for #", nextCts_, ")"));
  }
}

void SendComm::handleAck(Rail& from, const Ack& a, Clock::time_point now) {
  for (size_t i = 0; i < rails_.size(); ++i) {
    Rail& r = rails_[i];
    const RailAck& ra = a.rails[i];
    if (r.state == RailState::kFailed || r.state == RailState::kConnecting) continue;
    if (ra.epoch != r.epoch) continue;
    // The probe counts only when its acknowledgement came back on the rail itself (both
    // directions work); the same ACK may have reached us on another rail first.
    if (r.state == RailState::kProbing && &r == &from && ra.consumed >= r.probeEnd) {
      r.state = RailState::kLive;
      r.since = now;
      r.rate = 0;  // measure afresh: the path may have changed while it was out
      ctx_.counters(i).readmissions += 1;
      ctx_.info(strCat("rail ", ctx_.config().rails[i].name, " is back (probe acknowledged)"));
    }
    if (ra.consumed <= r.acked) continue;
    if (ra.consumed > r.queued) {
      throw CommError(ncclRemoteError,
                      strCat("the receiver acknowledged ", ra.consumed, " bytes on rail ", i,
                             " but only ", r.queued, " were sent"));
    }
    const uint64_t delta = ra.consumed - r.acked;
    const double dt = seconds(now - r.lastProgress);
    if (dt > 0.0005 && r.state == RailState::kLive) {
      const double sample = double(delta) / dt;
      r.rate = r.rate > 0 ? (1 - kRateSmoothing) * r.rate + kRateSmoothing * sample : sample;
    }
    r.acked = ra.consumed;
    r.lastProgress = now;
    ctx_.counters(i).bytesSent += delta;
    while (!r.inflight.empty() && r.inflight.front().end <= r.acked) {
      Record rec = r.inflight.front();
      r.inflight.pop_front();
      if (rec.msg == nullptr) continue;
      rec.msg->inflight -= 1;
      if (!rec.msg->acked[rec.chunk]) {
        rec.msg->acked[rec.chunk] = true;
        rec.msg->ackedCount += 1;
      }
    }
  }
}

void SendComm::readControl(Rail& r, Clock::time_point now) {
  char buf[4096];
  std::string closed;  // why the stream ended; frames read before that still count
  for (;;) {
    const ssize_t n = ::recv(r.fd.get(), buf, sizeof buf, 0);
    if (n > 0) {
      r.in.append(buf, static_cast<size_t>(n));
      if (r.in.size() > (1u << 20)) {
        fail(r, "the receiver sent more control bytes than it could mean", now);
        return;
      }
      continue;
    }
    if (n == 0) {
      closed = "the receiver closed the connection";
      break;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
    closed = sysError("recv", errno);
    break;
  }
  size_t pos = 0;
  try {
    while (r.in.size() - pos >= kLengthPrefix) {
      const uint32_t len =
          decodeLength(reinterpret_cast<const uint8_t*>(r.in.data() + pos), kMaxControlBody);
      if (r.in.size() - pos < kLengthPrefix + len) break;
      const std::string body = r.in.substr(pos + kLengthPrefix, len);
      pos += kLengthPrefix + len;
      switch (frameType(body)) {
        case FrameType::kCts:
          handleCts(decodeCts(body));
          break;
        case FrameType::kAck:
          handleAck(r, decodeAck(body, rails_.size()), now);
          break;
        default:
          throw FrameError("unexpected frame type from the receiver");
      }
      if (r.state == RailState::kFailed) return;
    }
  } catch (const FrameError& e) {
    fail(r, strCat("bad frame from the receiver: ", e.what()), now);
    return;
  }
  r.in.erase(0, pos);
  if (!closed.empty()) fail(r, closed, now);
}

void SendComm::writeOut(Rail& r, Clock::time_point now) {
  while (!r.out.empty()) {
    iovec iov[16];
    int n = 0;
    size_t skip = r.outPos;
    for (auto it = r.out.begin(); it != r.out.end() && n < 15; ++it) {
      const Segment& s = *it;
      if (skip < s.owned.size()) {
        iov[n++] = {const_cast<char*>(s.owned.data()) + skip, s.owned.size() - skip};
        skip = 0;
      } else {
        skip -= s.owned.size();
      }
      if (s.payloadLen > 0 && skip < s.payloadLen) {
        iov[n++] = {const_cast<uint8_t*>(s.payload) + skip, s.payloadLen - skip};
        skip = 0;
      } else if (s.payloadLen > 0) {
        skip -= s.payloadLen;
      }
    }
    msghdr mh{};
    mh.msg_iov = iov;
    mh.msg_iovlen = static_cast<size_t>(n);
    const ssize_t w = ::sendmsg(r.fd.get(), &mh, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      fail(r, sysError("send", errno), now);
      return;
    }
    size_t left = static_cast<size_t>(w) + r.outPos;
    while (!r.out.empty() && left >= r.out.front().size()) {
      left -= r.out.front().size();
      r.out.pop_front();
    }
    r.outPos = left;
  }
}

void SendComm::schedule(Clock::time_point now) {
  const uint64_t chunkBytes = ctx_.config().chunkBytes;
  while (!pending_.empty()) {
    auto [msg, chunk] = pending_.front();
    Rail* best = nullptr;
    double bestFinish = 0;
    const uint64_t bytes =
        msg->size == 0 ? 0
                       : std::min<uint64_t>(chunkBytes, msg->size - uint64_t(chunk) * chunkBytes);
    for (auto& r : rails_) {
      if (r.state != RailState::kLive) continue;
      // When would this chunk be through if it went here (what is queued first, then it)?
      // Full rails take part too: when the quickest finish is on a rail whose window is full,
      // waiting for it beats handing the chunk to a much slower rail (a gray rail 40x slower
      // must not become the overflow of the fast ones).
      const double finish = double(r.unacked() + bytes + 64) / assumedRate(r);
      if (best == nullptr || finish < bestFinish) {
        best = &r;
        bestFinish = finish;
      }
    }
    if (best == nullptr) return;
    if (best->unacked() >= window(*best)) {
      // Fall back to a rail with room only if it would still finish within the best's time.
      Rail* room = nullptr;
      for (auto& r : rails_) {
        if (r.state != RailState::kLive || r.unacked() >= window(r)) continue;
        const double finish = double(r.unacked() + bytes + 64) / assumedRate(r);
        if (finish <= 2 * bestFinish &&
            (room == nullptr ||
             finish < double(room->unacked() + bytes + 64) / assumedRate(*room))) {
          room = &r;
        }
      }
      if (room == nullptr) return;
      best = room;
    }
    // A rail that has carried nothing for a while gets this chunk anyway, so its speed is
    // measured again: an estimate that went low (a noisy sample, a path that healed) must not
    // starve the rail for good. Rails far slower than the best are re-measured only rarely.
    double fastest = 0;
    for (const auto& r : rails_)
      fastest = std::max(fastest, r.state == RailState::kLive ? assumedRate(r) : 0.0);
    for (auto& r : rails_) {
      if (&r == best || r.state != RailState::kLive || r.unacked() != 0) continue;
      const auto every = assumedRate(r) * kSlowRatio < fastest ? kRemeasureSlow : kRemeasure;
      if (now - r.lastProgress >= every) {
        best = &r;
        break;
      }
    }
    pending_.pop_front();
    DataHeader h;
    h.entry = msg->entry;
    h.group = msg->group;
    h.chunk = chunk;
    h.chunkBytes = static_cast<uint32_t>(chunkBytes);
    h.total = msg->size;
    if (best->unacked() == 0) best->lastProgress = now;  // idle until now: the stall clock starts
    best->out.push_back(Segment{encodeDataHeader(h), msg->data + h.offset(), h.payload()});
    best->queued += kLengthPrefix + kDataHeaderBody + h.payload();
    best->inflight.push_back(Record{best->queued, msg, chunk});
    msg->inflight += 1;
  }
}

void SendComm::checkTimers(Clock::time_point now) {
  const auto& cfg = ctx_.config();
  for (auto& r : rails_) {
    const auto& rail = cfg.rails[r.index];
    if (ctx_.drained(r.index)) {
      // The operator took it out (control endpoint): no data, no redial until restored.
      if (r.state != RailState::kFailed) fail(r, "drained through the control endpoint", now);
      continue;
    }
    if (r.state != RailState::kFailed && now >= r.nextCarrierCheck) {
      r.nextCarrierCheck = now + kCarrierPoll;
      if (!linkHasCarrier(rail.iface)) {
        fail(r, strCat(rail.iface, " has no carrier"), now);
        continue;
      }
    }
    switch (r.state) {
      case RailState::kAuthenticating:
        if (r.auth.wait_for(std::chrono::seconds(0)) == std::future_status::ready)
          finishAuth(r, now);
        break;
      case RailState::kConnecting:
        if (now - r.since > (everLive_ ? std::max<Clock::duration>(cfg.stall, kRedialPatience)
                                       : cfg.connectTimeout)) {
          fail(r,
               strCat("connect to ", ipv4Text(peer_.rails[r.index].ipv4), ":",
                      peer_.rails[r.index].port, " did not complete"),
               now);
        }
        break;
      case RailState::kProbing:
      case RailState::kLive:
        if (r.unacked() > 0 && now - r.lastProgress > cfg.stall) {
          fail(r,
               strCat("stalled: ", r.unacked(), " bytes unacknowledged for ",
                      std::chrono::duration_cast<std::chrono::milliseconds>(now - r.lastProgress)
                          .count(),
                      " ms (link up, traffic lost?)"),
               now);
        }
        break;
      case RailState::kFailed:
        if (now >= r.nextAttempt && linkHasCarrier(rail.iface)) startConnect(r, now);
        break;
    }
  }
}

void SendComm::throwIfAllDown(Clock::time_point now) {
  bool anyLive = false;
  for (const auto& r : rails_) anyLive = anyLive || r.state == RailState::kLive;
  if (anyLive) {
    noLiveSince_ = now;
    return;
  }
  const bool work = !pending_.empty() || !requests_.empty();
  const auto limit = everLive_ ? ctx_.config().stall : ctx_.config().connectTimeout;
  if (!work && everLive_) return;
  if (now - noLiveSince_ <= limit) return;
  std::string why;
  for (const auto& r : rails_) {
    why += strCat(why.empty() ? "" : "; ", ctx_.config().rails[r.index].name, ": ",
                  r.reason.empty() ? stateName(int(r.state)) : r.reason);
  }
  const std::string msg = strCat(
      everLive_ ? "every rail to the peer is down (" : "no rail reached the peer (", why, ")");
  ctx_.noteFailure(msg);
  throw CommError(ncclRemoteError, msg);
}

void SendComm::pump() {
  auto now = Clock::now();
  pollfd pfds[kMaxRails];
  size_t idx[kMaxRails];
  nfds_t n = 0;
  for (auto& r : rails_) {
    // A rail mid-handshake belongs to its thread; checkTimers() collects it.
    if (r.state == RailState::kFailed || r.state == RailState::kAuthenticating) continue;
    short ev = POLLIN;
    if (r.state == RailState::kConnecting || !r.out.empty()) ev |= POLLOUT;
    pfds[n] = {r.fd.get(), ev, 0};
    idx[n++] = r.index;
  }
  if (n > 0 && ::poll(pfds, n, 0) > 0) {
    now = Clock::now();
    for (nfds_t i = 0; i < n; ++i) {
      Rail& r = rails_[idx[i]];
      if (pfds[i].revents == 0) continue;
      if (r.state == RailState::kConnecting) {
        if (pfds[i].revents & (POLLOUT | POLLERR | POLLHUP)) finishConnect(r, now);
        continue;
      }
      if (pfds[i].revents & (POLLIN | POLLERR | POLLHUP)) readControl(r, now);
    }
  }
  schedule(now);
  for (auto& r : rails_) {
    if ((r.state == RailState::kLive || r.state == RailState::kProbing) && !r.out.empty())
      writeOut(r, now);
  }
  checkTimers(now);
  schedule(now);  // a failed rail's chunks find a new rail in this same call
  throwIfAllDown(now);
}

bool SendComm::connected() {
  pump();
  for (const auto& r : rails_) {
    if (r.state == RailState::kLive) return true;
  }
  return false;
}

SendRequest* SendComm::isend(const void* data, uint64_t size, int tag) {
  pump();
  for (auto g = open_.begin(); g != open_.end(); ++g) {
    for (size_t e = 0; e < g->entries.size(); ++e) {
      OpenEntry& oe = g->entries[e];
      if (oe.matched || oe.tag != tag) continue;
      if (size > oe.size) {
        throw CommError(ncclInvalidUsage, strCat("send of ", size, " bytes (tag ", tag,
                                                 ") into a receive of ", oe.size, " bytes"));
      }
      oe.matched = true;
      auto req = std::make_unique<SendRequest>();
      req->data = static_cast<const uint8_t*>(data);
      req->size = size;
      req->group = g->seq;
      req->entry = static_cast<uint8_t>(e);
      req->chunks = size == 0 ? 1
                              : static_cast<uint32_t>((size + ctx_.config().chunkBytes - 1) /
                                                      ctx_.config().chunkBytes);
      req->acked.assign(req->chunks, false);
      for (uint32_t c = 0; c < req->chunks; ++c) pending_.emplace_back(req.get(), c);
      if (std::all_of(g->entries.begin(), g->entries.end(),
                      [](const OpenEntry& x) { return x.matched; })) {
        open_.erase(g);
      }
      SendRequest* out = req.get();
      requests_.push_back(std::move(req));
      pump();
      return out;
    }
  }
  return nullptr;
}

bool SendComm::test(SendRequest* req, uint64_t* size) {
  pump();
  if (!req->done()) return false;
  if (size != nullptr) *size = req->size;
  requests_.remove_if([req](const std::unique_ptr<SendRequest>& p) { return p.get() == req; });
  return true;
}

}  // namespace nezha::ncclnet
