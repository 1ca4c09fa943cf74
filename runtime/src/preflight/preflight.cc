#include "preflight/preflight.h"

#include <algorithm>
#include <memory>

#include "base/error.h"
#include "transport/peer_set.h"

namespace nezha {

const char* toString(PreflightPolicy p) {
  switch (p) {
    case PreflightPolicy::kOff:
      return "off";
    case PreflightPolicy::kFail:
      return "fail";
    case PreflightPolicy::kDegrade:
      return "degrade";
    case PreflightPolicy::kWait:
      return "wait";
  }
  return "?";
}

PreflightPolicy parsePreflightPolicy(const std::string& s) {
  for (PreflightPolicy p : {PreflightPolicy::kOff, PreflightPolicy::kFail,
                            PreflightPolicy::kDegrade, PreflightPolicy::kWait}) {
    if (s == toString(p)) return p;
  }
  throw ConfigError(
      strCat("NEZHA_PREFLIGHT=\"", s, "\" is unknown (want fail, degrade, wait or off)"));
}

std::vector<int> preflightPeers(int rank, int worldSize) { return peersUsed(rank, worldSize); }

unsigned char preflightByte(int from, int to, int rail, size_t offset) {
  // Differs between directions, pairs and rails, and along the buffer (a shifted or truncated
  // stream does not pass).
  uint64_t x = offset * 0x9E3779B97F4A7C15ull ^ (uint64_t(from) << 40) ^ (uint64_t(to) << 20) ^
               uint64_t(rail);
  x ^= x >> 29;
  return static_cast<unsigned char>(x * 0xBF58476D1CE4E5B9ull >> 56);
}

std::vector<PreflightFailure> checkTransfers(Channel& channel, const std::vector<int>& peers,
                                             size_t bytes) {
  const int me = channel.rank(), rail = channel.railIndex();
  const size_t n = peers.size();
  std::vector<std::vector<unsigned char>> out(n), in(n);
  std::vector<size_t> arrived(n, 0);
  std::vector<IoOp> ops;
  ops.reserve(2 * n);
  for (size_t i = 0; i < n; ++i) {
    out[i].resize(bytes);
    for (size_t b = 0; b < bytes; ++b) out[i][b] = preflightByte(me, peers[i], rail, b);
    in[i].assign(bytes, 0);
    ops.push_back(IoOp::send(peers[i], out[i].data(), bytes));
    ops.push_back(IoOp::recv(peers[i], in[i].data(), bytes, 1,
                             [&arrived, i](size_t, size_t len) { arrived[i] += len; }));
  }
  std::string error;
  try {
    channel.exchange(ops);
  } catch (const RailError& e) {
    error = e.what();
  }
  std::vector<PreflightFailure> failures;
  for (size_t i = 0; i < n; ++i) {
    PreflightFailure f;
    f.rank = me;
    f.rail = rail;
    f.peer = peers[i];
    if (arrived[i] < bytes) {
      f.reason = strCat("transfer: ", arrived[i], " of ", bytes, " bytes arrived (", error, ")");
      failures.push_back(f);
      continue;
    }
    for (size_t b = 0; b < bytes; ++b) {
      if (in[i][b] != preflightByte(peers[i], me, rail, b)) {
        f.reason = strCat("transfer: byte ", b, " of ", bytes, " arrived wrong");
        failures.push_back(f);
        break;
      }
    }
  }
  if (failures.empty() && !error.empty()) {
    // Every byte arrived, yet the rail failed (e.g. a send that never completed): the rail is
    // unusable all the same; the peer is not known.
    failures.push_back({me, rail, -1, strCat("transfer: ", error)});
  }
  return failures;
}

std::string describeFailures(const std::vector<PreflightFailure>& failures,
                             const std::vector<std::string>& railNames, size_t limit) {
  std::string s;
  for (size_t i = 0; i < failures.size() && i < limit; ++i) {
    const PreflightFailure& f = failures[i];
    const std::string rail =
        f.rail >= 0 && size_t(f.rail) < railNames.size() ? railNames[f.rail] : "?";
    s += strCat(i ? "; " : "", "rail ", rail, ": rank ", f.rank, " -> ",
                f.peer >= 0 ? strCat("rank ", f.peer) : std::string("a peer"),
                f.reason.empty() ? "" : strCat(" (", f.reason, ")"));
  }
  if (failures.size() > limit) s += strCat("; and ", failures.size() - limit, " more");
  return s;
}

}  // namespace nezha
