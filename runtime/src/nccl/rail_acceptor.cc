#include "nccl/rail_acceptor.h"

#include <algorithm>

#include "base/error.h"
#include "nccl/rail_purpose.h"

namespace nezha::ncclnet {

namespace {

// A sender's handshake completes within a round trip or two; these only bound what an idle or
// stalled stranger may hold.
constexpr std::chrono::milliseconds kHandshakeDeadline{2000};
constexpr std::chrono::milliseconds kHelloDeadline{1000};

bool sameNonce(const Nonce& a, const Nonce& b) {
  uint8_t diff = 0;  // constant time
  for (size_t i = 0; i < a.size(); ++i) diff |= a[i] ^ b[i];
  return diff == 0;
}

}  // namespace

RailAcceptor::RailAcceptor(PluginContext& ctx, const Nonce& nonce)
    : ctx_(ctx), nonce_(nonce), rails_(ctx.config().rails.size()) {
  for (size_t i = 0; i < rails_.size(); ++i) {
    addresses_.push_back(RailAddress{ctx_.config().rails[i].ipv4, 0});
    open(i);
  }
}

RailAcceptor::~RailAcceptor() = default;

void RailAcceptor::open(size_t i) {
  Rail& r = rails_[i];
  if (r.acceptor != nullptr) return;
  const auto& rail = ctx_.config().rails[i];
  SocketTuning tuning;  // accepted sockets inherit the congestion control
  tuning.congestion = ctx_.config().tcpCongestion;
  // The first time on any port; afterwards on the port the sender has in its handle.
  r.listener = listenOn(rail.ip, addresses_[i].port, rail.iface, 16, tuning);
  addresses_[i].port = static_cast<uint16_t>(localPort(r.listener.get()));
  HandshakeAcceptor::Options o;
  o.listener = strCat("NCCL plugin rail ", rail.name);
  o.perConnection = kHandshakeDeadline;
  o.helloDeadline = kHelloDeadline;  // the sender sends its hello at once and redials
  o.maxPending = kMaxPending;
  o.maxPendingPerSource = kMaxPendingPerSource;
  o.serves = [this, i](const std::string& purpose) { return serves(i, purpose); };
  r.acceptor = std::make_unique<HandshakeAcceptor>(r.listener.get(), ctx_.config().jobToken, o);
}

void RailAcceptor::close(size_t i) {
  Rail& r = rails_[i];
  if (r.acceptor == nullptr) return;
  r.rejectedBefore += r.acceptor->rejectedTotal();
  r.acceptor.reset();  // drops its pending handshakes
  r.listener.reset();
}

bool RailAcceptor::acceptsEpoch(size_t i, uint32_t epoch) const {
  const Rail& r = rails_[i];
  return epoch == r.epoch + 1 || (epoch == r.epoch && epoch > 0 && !r.live);
}

bool RailAcceptor::serves(size_t i, const std::string& purpose) const {
  const auto p = decodeRailPurpose(purpose);
  return p && sameNonce(p->nonce, nonce_) && p->rail == i && acceptsEpoch(i, p->epoch);
}

void RailAcceptor::installed(size_t i, uint32_t epoch) {
  rails_[i].epoch = epoch;
  rails_[i].live = true;
  close(i);
}

void RailAcceptor::follow() {
  for (size_t i = 0; i < rails_.size(); ++i) {
    if (ctx_.drained(i)) {
      close(i);
    } else if (!rails_[i].live && !listening(i)) {
      lost(i);
    }
  }
}

void RailAcceptor::lost(size_t i) {
  rails_[i].live = false;
  if (ctx_.drained(i)) return;
  try {
    open(i);
  } catch (const std::exception& e) {
    // Someone else took the port while the rail was live: the sender's handle still names it,
    // so this rail cannot come back in this connection; the others carry on.
    ctx_.warn(strCat("rail ", ctx_.config().rails[i].name, ": cannot listen again on port ",
                     addresses_[i].port, " for its re-admission: ", e.what()));
  }
}

std::vector<RailAcceptor::Accepted> RailAcceptor::poll() {
  std::vector<Accepted> out;
  for (size_t i = 0; i < rails_.size(); ++i) {
    if (rails_[i].acceptor == nullptr) continue;
    bool taken = false;
    for (AcceptedPeer& peer : rails_[i].acceptor->poll()) {
      // serves() admitted the purpose; one connection per rail and epoch goes on.
      const auto p = decodeRailPurpose(peer.purpose);
      if (taken || !p || !acceptsEpoch(i, p->epoch)) {
        rails_[i].acceptor->reject(strCat("a second connection for ", peer.purpose));
        continue;
      }
      taken = true;
      out.push_back(Accepted{i, std::move(peer.fd), p->epoch});
    }
  }
  return out;
}

void RailAcceptor::appendPollFds(std::vector<int>& fds) const {
  for (const auto& r : rails_) {
    if (r.acceptor != nullptr) r.acceptor->appendPollFds(fds);
  }
}

bool RailAcceptor::due(Clock::time_point now) const {
  return std::any_of(rails_.begin(), rails_.end(), [now](const Rail& r) {
    return r.acceptor != nullptr && r.acceptor->nextExpiry() <= now;
  });
}

uint64_t RailAcceptor::rejected() const {
  uint64_t n = 0;
  for (const auto& r : rails_)
    n += r.rejectedBefore + (r.acceptor != nullptr ? r.acceptor->rejectedTotal() : 0);
  return n;
}

}  // namespace nezha::ncclnet
