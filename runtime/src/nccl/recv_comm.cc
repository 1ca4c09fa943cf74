#include "nccl/recv_comm.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/error.h"

namespace nezha::ncclnet {

namespace {

constexpr uint64_t kAckEveryBytes = 256 * 1024;
constexpr std::chrono::milliseconds kAckEveryTime{2};
constexpr size_t kMaxDataBody = kDataHeaderBody + kMaxChunk;

}  // namespace

// ---- ListenComm ------------------------------------------------------------------------------

ListenComm::ListenComm(PluginContext& ctx) : ctx_(ctx) {
  randomBytes(handle_.nonce.data(), handle_.nonce.size());
  acceptor_ = std::make_unique<RailAcceptor>(ctx_, handle_.nonce);
  handle_.rails = acceptor_->addresses();
}

std::unique_ptr<RecvComm> ListenComm::accept() {
  if (acceptor_ == nullptr)
    throw CommError(ncclInvalidUsage, "accept() after the connection was accepted");
  auto first = acceptor_->poll();
  if (first.empty()) return nullptr;
  return std::make_unique<RecvComm>(ctx_, std::move(acceptor_), std::move(first));
}

// ---- RecvComm --------------------------------------------------------------------------------

RecvComm::RecvComm(PluginContext& ctx, std::unique_ptr<RailAcceptor> acceptor,
                   std::vector<RailAcceptor::Accepted> first)
    : ctx_(ctx),
      acceptor_(std::move(acceptor)),
      rails_(ctx.config().rails.size()),
      scratch_(64 * 1024),
      lastAck_(Clock::now()),
      noLiveSince_(Clock::now()) {
  for (auto& a : first) install(a.rail, std::move(a.fd), a.epoch);
}

RecvComm::~RecvComm() {
  constexpr std::chrono::milliseconds kFlushBudget{200};
  const auto deadline = Clock::now() + kFlushBudget;
  try {
    queueAck(Clock::now(), true);
  } catch (...) {
  }
  for (auto& r : rails_) {
    while (r.live() && !r.out.empty() && Clock::now() < deadline) {
      pollfd p{r.fd.get(), POLLOUT, 0};
      if (::poll(&p, 1, msLeft(deadline)) <= 0) break;
      const std::string& f = r.out.front();
      const ssize_t w = ::send(r.fd.get(), f.data() + r.outPos, f.size() - r.outPos, MSG_NOSIGNAL);
      if (w <= 0) break;
      r.outPos += static_cast<size_t>(w);
      if (r.outPos == f.size()) {
        r.out.pop_front();
        r.outPos = 0;
      }
    }
  }
}

bool RecvComm::anyLive() const {
  return std::any_of(rails_.begin(), rails_.end(), [](const Rail& r) { return r.live(); });
}

void RecvComm::install(size_t index, Fd fd, uint32_t epoch) {
  // The acceptor admitted only the rail's next epoch. A connection it replaces may have stopped
  // mid-chunk: that chunk stays uncovered and the sender resends it.
  acceptor_->installed(index, epoch);
  rails_[index] = Rail{};
  Rail& r = rails_[index];
  r.fd = std::move(fd);
  r.epoch = epoch;
  // Receives posted while this rail was out may have had their CTS lost with another rail.
  for (const auto& [group, req] : requests_) {
    Cts c;
    c.group = group;
    for (const auto& e : req->entries) c.entries.push_back({e.tag, e.capacity});
    r.out.push_back(encodeCts(c));
  }
  ackDue_ = true;
}

void RecvComm::drop(Rail& r, size_t index, const std::string& why) {
  ctx_.info(strCat("rail ", ctx_.config().rails[index].name, " connection dropped: ", why));
  const uint32_t epoch = r.epoch;
  const uint64_t consumed = r.consumed;
  r = Rail{};
  r.epoch = epoch;  // the acceptor takes the next epoch (or this one again, see rail_acceptor.h)
  r.consumed = consumed;
  acceptor_->lost(index);
}

void RecvComm::railDown(const RailDown& d) {
  if (d.rail >= rails_.size()) throw FrameError(strCat("rail-down for rail ", d.rail));
  Rail& r = rails_[d.rail];
  // An older epoch's notice (the rail is already back) changes nothing.
  if (r.live() && r.epoch == d.epoch) drop(r, d.rail, "the sender gave it up (RAIL_DOWN)");
}

void RecvComm::beginData(Rail& r) {
  r.dst = nullptr;
  r.entry = nullptr;
  r.req = nullptr;
  r.left = r.cur.payload();
  auto it = requests_.find(r.cur.group);
  if (it == requests_.end()) {
    if (r.cur.group >= nextGroup_)
      throw FrameError(strCat("data for receive #", r.cur.group, " never posted"));
    return;  // a late copy for a receive that completed: dropped
  }
  RecvRequest& req = *it->second;
  if (r.cur.entry >= req.entries.size()) {
    throw FrameError(
        strCat("data for receive ", int(r.cur.entry), " of a group of ", req.entries.size()));
  }
  RecvEntry& e = req.entries[r.cur.entry];
  if (!e.sized) {
    if (r.cur.total > e.capacity) {
      throw FrameError(
          strCat("a ", r.cur.total, "-byte message for a ", e.capacity, "-byte receive"));
    }
    e.sized = true;
    e.total = r.cur.total;
    e.chunkBytes = r.cur.chunkBytes;
    e.covered.assign(r.cur.chunks(), false);
  } else if (e.total != r.cur.total || e.chunkBytes != r.cur.chunkBytes) {
    throw FrameError("chunks of one message disagree on its size");
  }
  if (e.covered[r.cur.chunk]) return;  // already here (a replay): dropped
  r.dst = e.data + r.cur.offset();
  r.entry = &e;
  r.req = &req;
}

void RecvComm::finishFrame(Rail& r, size_t index) {
  r.consumed += kLengthPrefix + r.frameLen;
  if (r.entry != nullptr && !r.entry->covered[r.cur.chunk]) {
    RecvEntry& e = *r.entry;
    e.covered[r.cur.chunk] = true;
    e.coveredCount += 1;
    ctx_.counters(index).bytesReceived += r.cur.payload();
    // Another rail still writing this chunk (the copy a failed-over sender gave up on) now
    // drops the rest: once a request completes NCCL owns its buffer again.
    for (auto& other : rails_) {
      if (&other != &r && other.state == ReadState::kPayload && other.entry == &e &&
          other.cur.chunk == r.cur.chunk) {
        other.dst = nullptr;
        other.entry = nullptr;
      }
    }
    if (e.coveredCount == e.covered.size()) {
      e.done = true;
      r.req->doneCount += 1;
      ackDue_ = true;
    }
  }
  if (r.entry == nullptr && r.cur.chunkBytes == 0) ackDue_ = true;  // a probe: answer it now
  r.state = ReadState::kHeader;
  r.have = 0;
  r.frameLen = 0;
  r.entry = nullptr;
  r.req = nullptr;
  r.dst = nullptr;
}

void RecvComm::readData(Rail& r, size_t index, Clock::time_point) {
  // Per chunk: one recv() for the length prefix and header together, one for the payload
  // straight into NCCL's buffer (this runs on NCCL's proxy thread for every byte).
  constexpr size_t kHeaderBytes = kLengthPrefix + kDataHeaderBody;
  try {
    for (;;) {
      uint8_t* into;
      size_t want;
      if (r.state == ReadState::kPayload) {
        into = r.dst != nullptr ? r.dst : scratch_.data();
        want = r.dst != nullptr ? r.left : std::min<uint64_t>(r.left, scratch_.size());
      } else {
        // Up to a DATA frame's header; a PROBE's payload may start inside it (handled below).
        into = r.hdr + r.have;
        want = kHeaderBytes - r.have;
      }
      const ssize_t n = ::recv(r.fd.get(), into, want, 0);
      if (n == 0) {
        drop(r, index, "the sender closed it");
        return;
      }
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        drop(r, index, sysError("recv", errno));
        return;
      }
      const auto got = static_cast<size_t>(n);
      if (r.state == ReadState::kPayload) {
        r.left -= got;
        if (r.dst != nullptr) r.dst += got;
      } else {
        r.have += got;
        if (r.have >= kLengthPrefix && r.frameLen == 0)
          r.frameLen = decodeLength(r.hdr, kMaxDataBody);
        if (r.have > kLengthPrefix) {
          const auto type = static_cast<FrameType>(r.hdr[kLengthPrefix]);
          if (type == FrameType::kRailDown && r.have == kHeaderBytes) {
            if (r.frameLen != kRailDownBody) throw FrameError("rail-down frame of the wrong size");
            const RailDown d = decodeRailDown(
                std::string(reinterpret_cast<const char*>(r.hdr + kLengthPrefix), kRailDownBody));
            r.consumed += kHeaderBytes;
            r.have = 0;
            r.frameLen = 0;
            ackDue_ = true;
            railDown(d);  // may drop this very rail when the notice names it (a stale copy)
            if (!r.live()) return;
            continue;
          }
          if (type == FrameType::kRailDown) {
            // the rest of its fixed-size body is still to come
          } else if (type == FrameType::kProbe) {
            const uint64_t bodyHave = r.have - kLengthPrefix;  // type byte + payload bytes
            if (r.frameLen < 1 || bodyHave > r.frameLen)
              throw FrameError("probe frame shorter than what followed it");
            r.cur = DataHeader{};  // chunkBytes 0 marks the probe
            r.dst = nullptr;
            r.entry = nullptr;
            r.left = r.frameLen - bodyHave;
            r.state = ReadState::kPayload;
          } else if (type != FrameType::kData) {
            throw FrameError(
                strCat("unexpected frame type ", int(r.hdr[kLengthPrefix]), " from the sender"));
          } else if (r.have == kHeaderBytes) {
            if (r.frameLen < kDataHeaderBody)
              throw FrameError("data frame shorter than its header");
            r.cur = decodeDataHeader(
                std::string(reinterpret_cast<const char*>(r.hdr + kLengthPrefix), kDataHeaderBody),
                r.frameLen);
            beginData(r);
            r.state = ReadState::kPayload;
          }
        }
      }
      if (r.state == ReadState::kPayload && r.left == 0) finishFrame(r, index);
    }
  } catch (const FrameError& e) {
    ctx_.warn(strCat("rail ", ctx_.config().rails[index].name,
                     ": bad frame from the sender: ", e.what()));
    drop(r, index, e.what());
  }
}

void RecvComm::queueAck(Clock::time_point now, bool force) {
  bool due = force || ackDue_;
  for (const auto& r : rails_) {
    if (r.consumed - r.ackedUpTo >= kAckEveryBytes) due = true;
    if (r.consumed > r.ackedUpTo && now - lastAck_ >= kAckEveryTime) due = true;
  }
  if (!due) return;
  Ack a;
  for (auto& r : rails_) {
    a.rails.push_back(RailAck{r.epoch, r.consumed});
    r.ackedUpTo = r.consumed;
  }
  const std::string frame = encodeAck(a);
  for (auto& r : rails_) {
    if (!r.live()) continue;
    // An ACK not yet started is stale once a newer one exists: replace it.
    const bool lastUnstarted = r.out.size() > 1 || (r.out.size() == 1 && r.outPos == 0);
    if (lastUnstarted && frameType(r.out.back().substr(kLengthPrefix)) == FrameType::kAck) {
      r.out.back() = frame;
    } else {
      if (r.out.empty()) r.outSince = now;
      r.out.push_back(frame);
    }
  }
  lastAck_ = now;
  ackDue_ = false;
}

void RecvComm::writeOut(Rail& r, size_t index, Clock::time_point now) {
  while (!r.out.empty()) {
    const std::string& f = r.out.front();
    const ssize_t w = ::send(r.fd.get(), f.data() + r.outPos, f.size() - r.outPos, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      drop(r, index, sysError("send", errno));
      return;
    }
    r.outSince = now;
    r.outPos += static_cast<size_t>(w);
    if (r.outPos == f.size()) {
      r.out.pop_front();
      r.outPos = 0;
    }
  }
  if (!r.out.empty() && now - r.outSince > ctx_.config().stall) {
    drop(r, index, "control frames stopped draining (link up, traffic lost?)");
  }
}

void RecvComm::pump() {
  // One poll() for the rails and the acceptor's sockets: this runs on every test() NCCL makes.
  for (size_t i = 0; i < rails_.size(); ++i) {
    if (rails_[i].live() && ctx_.drained(i))
      drop(rails_[i], i, "drained through the control endpoint");
  }
  acceptor_->follow();
  acceptorFds_.clear();
  acceptor_->appendPollFds(acceptorFds_);
  pfds_.clear();
  size_t idx[kMaxRails];
  for (size_t i = 0; i < rails_.size(); ++i) {
    if (!rails_[i].live()) continue;
    idx[pfds_.size()] = i;
    pfds_.push_back({rails_[i].fd.get(), short(POLLIN | (rails_[i].out.empty() ? 0 : POLLOUT)), 0});
  }
  const nfds_t railFds = pfds_.size();
  // A handshake waiting to send its next frame is moved on by poll() below on any wake-up.
  for (int fd : acceptorFds_) pfds_.push_back({fd, POLLIN, 0});
  pollfd* pfds = pfds_.data();
  const nfds_t n = pfds_.size();
  auto now = Clock::now();
  bool acceptorReady = acceptor_->due(now);
  if (n > 0 && ::poll(pfds, n, 0) > 0) {
    now = Clock::now();
    for (nfds_t i = 0; i < railFds; ++i) {
      if (pfds[i].revents & (POLLIN | POLLERR | POLLHUP)) readData(rails_[idx[i]], idx[i], now);
    }
    for (nfds_t i = railFds; i < n; ++i) acceptorReady = acceptorReady || pfds[i].revents != 0;
  }
  if (acceptorReady) {
    for (auto& a : acceptor_->poll()) install(a.rail, std::move(a.fd), a.epoch);
  }
  queueAck(now, false);
  for (size_t i = 0; i < rails_.size(); ++i) {
    if (rails_[i].live() && !rails_[i].out.empty()) writeOut(rails_[i], i, now);
  }
  if (anyLive()) {
    noLiveSince_ = now;
  } else if (!requests_.empty() && now - noLiveSince_ > ctx_.config().connectTimeout) {
    const std::string msg = "every rail from the peer is down and none came back";
    ctx_.noteFailure(msg);
    throw CommError(ncclRemoteError, msg);
  }
}

RecvRequest* RecvComm::irecv(int n, void** data, const uint64_t* sizes, const int* tags) {
  if (n < 1 || n > int(kMaxGrouped)) {
    throw CommError(ncclInvalidArgument,
                    strCat("irecv of ", n, " grouped receives (maxRecvs is ", kMaxGrouped, ")"));
  }
  auto req = std::make_unique<RecvRequest>();
  req->group = nextGroup_++;
  Cts c;
  c.group = req->group;
  for (int i = 0; i < n; ++i) {
    RecvEntry e;
    e.data = static_cast<uint8_t*>(data[i]);
    e.capacity = sizes[i];
    e.tag = tags[i];
    req->entries.push_back(std::move(e));
    c.entries.push_back({tags[i], sizes[i]});
  }
  const std::string frame = encodeCts(c);
  const auto now = Clock::now();
  for (auto& r : rails_) {
    if (!r.live()) continue;
    if (r.out.empty()) r.outSince = now;
    r.out.push_back(frame);
  }
  RecvRequest* out = req.get();
  requests_.emplace(out->group, std::move(req));
  pump();
  return out;
}

bool RecvComm::test(RecvRequest* req, int* sizes) {
  pump();
  if (!req->done()) return false;
  if (sizes != nullptr) {
    for (size_t i = 0; i < req->entries.size(); ++i)
      sizes[i] = static_cast<int>(req->entries[i].total);
  }
  requests_.erase(req->group);
  return true;
}

}  // namespace nezha::ncclnet
