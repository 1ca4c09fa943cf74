#include "bootstrap/rendezvous.h"

#include <poll.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "base/error.h"
#include "base/json.h"
#include "base/sha256.h"
#include "base/wire.h"
#include "bootstrap/acceptor.h"
#include "bootstrap/auth.h"
#include "bootstrap/primary_address.h"

namespace nezha {

namespace {
constexpr char kPurpose[] = "rendezvous";
// A client's handshake and registration must arrive within this; others are served meanwhile.
constexpr auto kPerClientBudget = std::chrono::seconds(5);
// A rank sends its hello right after connecting; a connection silent this long is dropped.
constexpr auto kHelloDeadline = std::chrono::milliseconds(1000);
// Pending handshakes one source IP may hold (a pod's local ranks are far fewer).
constexpr size_t kMaxPendingPerSource = 64;
// A registration names at most 64 rails of short strings.
constexpr size_t kMaxRegistration = 64 << 10;

}  // namespace

std::string encodeRankInfo(const RankInfo& info) {
  WireWriter w;
  w.u32(static_cast<uint32_t>(info.rank)).u32(static_cast<uint32_t>(info.worldSize));
  w.str(info.fingerprint).u32(static_cast<uint32_t>(info.rails.size()));
  for (const auto& r : info.rails) {
    w.str(r.name).str(r.transport).str(r.address).u32(static_cast<uint32_t>(r.port));
    w.u8(r.linkUp ? 1 : 0);
  }
  return w.data();
}

RankInfo decodeRankInfo(const std::string& data) {
  WireReader r(data, "rendezvous registration");
  RankInfo info;
  info.rank = static_cast<int>(r.u32());
  info.worldSize = static_cast<int>(r.u32());
  info.fingerprint = r.str();
  uint32_t n = r.u32();
  if (n > 64) throw Error(strCat("malformed rendezvous registration: ", n, " rails"));
  for (uint32_t i = 0; i < n; ++i) {
    RailEndpoint e;
    e.name = r.str(64);
    e.transport = r.str(64);
    e.address = r.str(64);
    e.port = static_cast<int>(r.u32());
    const uint8_t up = r.u8();
    if (up > 1) throw Error(strCat("malformed rendezvous registration: link state ", up));
    e.linkUp = up == 1;
    info.rails.push_back(e);
  }
  r.finish();
  return info;
}

namespace {
std::string railList(const RankInfo& info) {
  std::string s = "[";
  for (size_t i = 0; i < info.rails.size(); ++i) {
    s += strCat(i ? "," : "", info.rails[i].name, ":", info.rails[i].transport);
  }
  return s + "]";
}

// The "key=value" settings of fingerprint `a` that `b` does not share (all of `a` if none
// differ key by key), so a mismatch names just the settings that differ.
std::string settingsOnlyIn(const std::string& a, const std::string& b) {
  auto split = [](const std::string& f) {
    std::vector<std::string> parts;
    size_t start = 0;
    while (start <= f.size()) {
      size_t semi = f.find(';', start);
      if (semi == std::string::npos) semi = f.size();
      parts.push_back(f.substr(start, semi - start));
      start = semi + 1;
    }
    return parts;
  };
  const std::vector<std::string> pa = split(a), pb = split(b);
  std::string out;
  for (const std::string& p : pa) {
    if (std::find(pb.begin(), pb.end(), p) == pb.end()) out += strCat(out.empty() ? "" : ";", p);
  }
  return out.empty() ? a : out;
}

// Why `got` cannot join a job described by `want` ("" if it can).
std::string disagreement(const RankInfo& want, const RankInfo& got) {
  if (got.worldSize != want.worldSize) {
    return strCat("rank ", got.rank, " has world size ", got.worldSize, " but rank 0 has ",
                  want.worldSize);
  }
  if (got.rank < 0 || got.rank >= want.worldSize) {
    return strCat("a rank registered as ", got.rank, ", outside world size ", want.worldSize);
  }
  if (railList(got) != railList(want)) {
    return strCat("rank ", got.rank, " has rails ", railList(got), " but rank 0 has ",
                  railList(want));
  }
  if (got.fingerprint != want.fingerprint) {
    return strCat("rank ", got.rank, " has settings {",
                  settingsOnlyIn(got.fingerprint, want.fingerprint), "} but rank 0 has {",
                  settingsOnlyIn(want.fingerprint, got.fingerprint), "}");
  }
  return "";
}
}  // namespace

namespace {
// Expected rail speeds seed the split without a probe: ranks must agree on them.
std::string expectedRates(const Options& o) {
  std::string s;
  for (const RailSpec& r : o.rails) s += strCat(s.empty() ? "" : "/", r.expectedMbps);
  return s;
}
}  // namespace

// The algorithm table's identity: whitespace and key order do not count.
std::string algoTableDigest(const std::string& text) {
  if (text.empty()) return "builtin";
  std::string canonical = text;
  try {
    canonical = nlohmann::json::parse(text).dump();  // sorted keys, no whitespace
  } catch (const std::exception&) {
    // Not JSON: validateOptions refuses it before the rendezvous; digest the bytes anyway.
  }
  const Digest d = sha256(canonical.data(), canonical.size());
  return "sha256:" + toHex(d.data(), 8);
}

std::string configFingerprint(const Options& o) {
  return strCat("policy=", toString(o.policy),
                ";cold=", o.coldThreshold ? std::to_string(*o.coldThreshold) : std::string("auto"),
                ";streams=", o.streamsPerPeer, ";probe=", o.probeBytes,
                ";tune_interval=", o.tuneInterval, ";tune_gain=", o.tuneGain,
                ";ring=", o.ringThreshold, ";chain=", o.chainThreshold,
                ";min_slice=", o.minSliceBytes, ";failover=", o.failover ? "replay" : "stop",
                ";slow_floor=", o.slowFloor, ";preflight=", toString(o.preflight),
                ";preflight_bytes=", o.preflightBytes, ";expected_mbps=", expectedRates(o),
                ";algo_table=", algoTableDigest(o.algoTable));
}

RendezvousServer::RendezvousServer(const Options& rank0) : options_(rank0) {
  host_ = rank0.rendezvousHost;
  // The pod's primary address, never the wildcard: that would listen on the rails too, which no
  // NetworkPolicy covers (bootstrap/primary_address.h says how the address is chosen).
  std::string routes;
  if (std::ifstream in("/proc/net/route"); in) {
    std::stringstream ss;
    ss << in.rdbuf();
    routes = ss.str();
  }
  bindAddress_ = rendezvousBindAddress(rank0.rendezvousHost, routes);
  listen_ = listenOn(bindAddress_, rank0.rendezvousPort, "");
  port_ = localPort(listen_.get());
  thread_ = std::thread([this] { serve(); });
}

RendezvousServer::~RendezvousServer() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

uint64_t RendezvousServer::rejectedConnections() const { return rejected_.load(); }

namespace {
std::string errorFrame(const std::string& why) {
  return WireWriter().u8(0).str("rendezvous rejected the job: " + why).data();
}

void reply(int fd, const std::string& msg) {
  try {
    sendFrame(fd, msg, Clock::now() + kPerClientBudget, -1);
  } catch (const Error&) {
    // The client went away; it will report its own error.
  }
}
}  // namespace

// Handshakes of all clients progress together (bootstrap/acceptor.h), so idle or hostile
// connections cost only their own deadline; registrations are judged one at a time as they
// complete.
void RendezvousServer::serve() {
  const Deadline deadline = Clock::now() + options_.rendezvousTimeout;
  HandshakeAcceptor::Options ao;
  ao.listener = "rendezvous";
  ao.perConnection = kPerClientBudget;
  ao.firstFrameMax = kMaxRegistration;
  ao.serves = [](const std::string& purpose) { return purpose == kPurpose; };
  // Its clients retry a connection closed before authentication, so idle or crowding
  // connections can be shed early (bootstrap/acceptor.h).
  ao.helloDeadline = kHelloDeadline;
  ao.maxPendingPerSource = kMaxPendingPerSource;
  HandshakeAcceptor acceptor(listen_.get(), options_.jobToken, ao);
  Joining state;
  while (!stop_ && Clock::now() < deadline && state.answered < options_.worldSize) {
    AcceptedPeer peer;
    try {
      // Wake up now and then to notice stop_.
      peer = acceptor.next(std::min(deadline, Clock::now() + std::chrono::milliseconds(100)), -1,
                           "rendezvous");
    } catch (const RailError&) {
      rejected_ = acceptor.rejectedTotal();
      continue;
    }
    rejected_ = acceptor.rejectedTotal();
    RankInfo info;
    try {
      info = decodeRankInfo(peer.firstFrame);
    } catch (const Error& e) {
      acceptor.reject(strCat("a token holder sent a malformed registration: ", e.what()));
      continue;
    }
    admit(state, std::move(peer.fd), info);
  }
  rejected_ = acceptor.rejectedTotal();
  answerStragglers(state);
}

// One registration: a disagreement fails the whole job (every waiting rank is told why); the
// last rank to join gets everyone the job table.
void RendezvousServer::admit(Joining& st, Fd conn, const RankInfo& info) {
  if (st.fatal.empty()) {
    RankInfo want;
    want.worldSize = options_.worldSize;
    want.fingerprint = configFingerprint(options_);
    for (const auto& r : options_.rails) want.rails.push_back({r.name, r.transport, "", 0});
    std::string why = disagreement(want, info);
    if (why.empty() && st.joined.count(info.rank)) {
      why = strCat("two processes registered as rank ", info.rank);
    }
    if (!why.empty()) {
      st.fatal = why;
      for (auto& [rank, fd] : st.conns) {
        reply(fd.get(), errorFrame(st.fatal));
        ++st.answered;
      }
      st.conns.clear();
    }
  }
  if (!st.fatal.empty()) {
    reply(conn.get(), errorFrame(st.fatal));
    ++st.answered;
    return;
  }
  st.joined[info.rank] = info;
  st.conns[info.rank] = std::move(conn);
  if (static_cast<int>(st.joined.size()) < options_.worldSize) return;
  std::string session(16, '\0');
  randomBytes(session.data(), session.size());
  WireWriter w;
  w.u8(1).str(session).u32(static_cast<uint32_t>(st.joined.size()));
  for (const auto& [rank, ri] : st.joined) w.str(encodeRankInfo(ri));
  for (auto& [rank, fd] : st.conns) {
    reply(fd.get(), w.data());
    ++st.answered;
  }
  st.conns.clear();
}

// Ranks still waiting at the deadline learn who is missing instead of timing out blind.
void RendezvousServer::answerStragglers(Joining& st) {
  if (st.conns.empty()) return;
  std::string missing;
  for (int r = 0; r < options_.worldSize; ++r) {
    if (!st.joined.count(r)) missing += strCat(missing.empty() ? "" : ",", r);
  }
  std::string why =
      strCat("only ", st.joined.size(), " of ", options_.worldSize, " ranks joined within ",
             options_.rendezvousTimeout.count(), " ms (missing ranks: ", missing, ")");
  for (auto& [rank, fd] : st.conns) reply(fd.get(), errorFrame(why));
}

JobTable decodeJobTable(const std::string& answer, int worldSize, size_t railCount) {
  WireReader r(answer, "rendezvous answer");
  if (r.u8() != 1) throw ConfigError(r.str());
  JobTable table;
  table.session = r.str(64);
  uint32_t n = r.u32();
  if (static_cast<int>(n) != worldSize) {
    throw Error(strCat("malformed rendezvous answer: ", n, " ranks"));
  }
  for (uint32_t i = 0; i < n; ++i) table.ranks.push_back(decodeRankInfo(r.str(1 << 16)));
  r.finish();
  for (int i = 0; i < worldSize; ++i) {
    if (table.ranks[i].rank != i || table.ranks[i].rails.size() != railCount) {
      throw Error(strCat("malformed rendezvous answer: entry ", i, " is rank ", table.ranks[i].rank,
                         " with ", table.ranks[i].rails.size(), " rails"));
    }
  }
  return table;
}

namespace {
// Connects and authenticates, retrying while the server closes the connection before the
// handshake finished: a listener under a flood of idle sockets may evict or refuse a newcomer
// (bootstrap/acceptor.h), and rank 0 may not listen yet. A failed proof is not retried.
Fd connectAuthenticated(const Options& o, Deadline deadline, Deadline replyDeadline,
                        const std::string& where) {
  auto pause = std::chrono::milliseconds(10);
  for (;;) {
    Fd fd = connectTo(o.rendezvousHost, o.rendezvousPort, "", "", deadline, -1, where);
    try {
      authenticateAsClient(fd.get(), o.jobToken, kPurpose, replyDeadline, -1, where);
      return fd;
    } catch (const RailError& e) {  // closed or reset before the handshake completed
      if (Clock::now() + pause >= deadline) {
        throw RailError(-1, strCat(where,
                                   ": the server closed every connection before the "
                                   "token handshake completed (last: ",
                                   e.what(), ")"));
      }
    }
    std::this_thread::sleep_for(pause);  // back off: the server is shedding connections
    pause = std::min(pause * 2, std::chrono::milliseconds(500));
  }
}
}  // namespace

JobTable rendezvous(const Options& o, const RankInfo& mine) {
  const Deadline deadline = Clock::now() + o.rendezvousTimeout;
  std::string where = strCat("rendezvous ", o.rendezvousHost, ":", o.rendezvousPort);
  // The server answers once everyone joined; allow a little beyond our own deadline so the
  // server's "missing ranks" message (sent at its deadline) can arrive.
  Deadline replyDeadline = deadline + std::chrono::seconds(2);
  Fd fd = connectAuthenticated(o, deadline, replyDeadline, where);
  sendFrame(fd.get(), encodeRankInfo(mine), replyDeadline, -1);
  std::string answer;
  try {
    answer = recvFrame(fd.get(), replyDeadline, -1, 16 << 20);
  } catch (const RailError& e) {
    throw RailError(-1, strCat(where, ": no answer (", e.what(), ")"));
  }
  JobTable table = decodeJobTable(answer, o.worldSize, o.rails.size());
  return table;
}

std::shared_ptr<RendezvousServer> startRendezvousServer(const Options& rank0Options) {
  return std::make_shared<RendezvousServer>(rank0Options);
}
int rendezvousServerPort(const RendezvousServer& server) { return server.port(); }

}  // namespace nezha
