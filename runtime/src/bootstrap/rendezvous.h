// Rendezvous: every rank dials rank 0's server (NEZHA_RENDEZVOUS), proves the job token and
// registers its per-rail listening addresses; once all ranks joined, each receives the full
// address table. The server also checks that ranks agree (world size, rails, tunables that
// change algorithms) and sends every rank the same clear error when they do not.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/socket.h"
#include "nezha/nezha.hpp"

namespace nezha {

struct RailEndpoint {
  std::string name, transport, address;
  int port = 0;
  // The rail's link had carrier on this rank when it registered. A rail down on any rank at
  // start is left out of the split on every rank and joins later through re-admission.
  bool linkUp = true;
};

struct RankInfo {
  int rank = 0;
  int worldSize = 0;
  std::string fingerprint;  // "key=value;..." of settings all ranks must share
  std::vector<RailEndpoint> rails;
};

struct JobTable {
  std::string session;  // random id of this job instance, bound into data handshakes
  std::vector<RankInfo> ranks;
};

// The wire form of a rank's registration and of the server's answer. Decoders check every
// length and count (malformed input: Error naming what was malformed; a refusal from the
// server: ConfigError with its reason).
std::string encodeRankInfo(const RankInfo& info);
RankInfo decodeRankInfo(const std::string& data);
JobTable decodeJobTable(const std::string& answer, int worldSize, size_t railCount);

// Settings every rank must share; differences are reported by key.
std::string configFingerprint(const Options& o);

class RendezvousServer {
 public:
  // Binds the rendezvous port on the pod's primary address now (rendezvousBindAddress, so the
  // port is known) and serves on a thread until every rank was answered or the timeout passes.
  // Throws ConfigError naming NEZHA_RENDEZVOUS when there is no such address.
  explicit RendezvousServer(const Options& rank0);
  ~RendezvousServer();
  RendezvousServer(const RendezvousServer&) = delete;
  RendezvousServer& operator=(const RendezvousServer&) = delete;
  int port() const { return port_; }
  const std::string& host() const { return host_; }
  const std::string& bindAddress() const { return bindAddress_; }

  // Connections turned away so far (stray, idle, garbage, wrong token).
  uint64_t rejectedConnections() const;

 private:
  struct Joining {
    std::map<int, RankInfo> joined;
    std::map<int, Fd> conns;  // ranks waiting for the answer
    std::string fatal;        // the disagreement that fails the job, once known
    int answered = 0;
  };
  void serve();
  void admit(Joining& st, Fd conn, const RankInfo& info);
  void answerStragglers(Joining& st);
  std::atomic<uint64_t> rejected_{0};
  Options options_;
  std::string host_, bindAddress_;
  int port_ = 0;
  Fd listen_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Client side, run by every rank (rank 0 too). Throws RailError(-1) if the server cannot be
// reached in time, AuthError on token mismatch, ConfigError if the server reports
// disagreement.
JobTable rendezvous(const Options& o, const RankInfo& mine);

}  // namespace nezha
