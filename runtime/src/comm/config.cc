#include "comm/config.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>

#include "base/congestion_control.h"
#include "base/error.h"
#include "base/params.h"
#include "base/socket.h"
#include "schedule/algo_table.h"

namespace nezha {

static bool validRailName(const std::string& s) {
  if (s.empty() || s.size() > 32) return false;
  for (char c : s) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

static void checkTransport(const std::string& transport, const std::string& where) {
  // sharp: the library is loaded when the rail is built (transport/sharp/sharp_library.h).
  if (transport == "tcp" || transport == "sharp") return;
#ifdef NEZHA_WITH_VERBS
  if (transport == "rdma") return;
#else
  if (transport == "rdma") {
    throw ConfigError(strCat(where,
                             ": transport \"rdma\" is not available in this build (libnezha was "
                             "built without libibverbs: NEZHA_WITH_VERBS=OFF or no rdma-core)"));
  }
#endif
  throw ConfigError(
      strCat(where, ": unknown transport \"", transport, "\" (want tcp, rdma or sharp)"));
}

std::vector<RailSpec> parseRails(const std::string& text, const std::string& what) {
  if (text.empty()) {
    throw ConfigError(
        strCat(what, " is empty; want name=iface:transport[@Mbit/s],... e.g. r0=eth0:tcp"));
  }
  std::vector<RailSpec> rails;
  std::set<std::string> names;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    std::string entry =
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    std::string where = strCat(what, " entry \"", entry, "\"");
    if (entry.empty()) throw ConfigError(strCat(what, "=\"", text, "\" has an empty entry"));
    size_t eq = entry.find('=');
    if (eq == std::string::npos) {
      throw ConfigError(strCat(where, " has no '='; want name=iface:transport"));
    }
    size_t colon = entry.find(':', eq);
    if (colon == std::string::npos) {
      throw ConfigError(strCat(where, " has no ':transport'; want name=iface:transport"));
    }
    RailSpec r;
    r.name = entry.substr(0, eq);
    r.iface = entry.substr(eq + 1, colon - eq - 1);
    r.transport = entry.substr(colon + 1);
    // Optional "@<Mbit/s>": the rail's expected speed (RailClass expectedBandwidthMbps).
    if (size_t at = r.transport.find('@'); at != std::string::npos) {
      r.expectedMbps =
          parseInt(r.transport.substr(at + 1), strCat(where, " expected Mbit/s"), 1, 100000000);
      r.transport.resize(at);
    }
    if (!validRailName(r.name)) {
      throw ConfigError(
          strCat(where, ": rail name \"", r.name, "\" must be 1-32 characters of [A-Za-z0-9_-]"));
    }
    if (r.iface.empty() || r.iface.size() > 15) {
      throw ConfigError(
          strCat(where, ": interface name \"", r.iface, "\" must be 1-15 characters"));
    }
    checkTransport(r.transport, where);
    if (!names.insert(r.name).second) {
      throw ConfigError(strCat(what, ": rail name \"", r.name, "\" appears twice"));
    }
    rails.push_back(r);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (rails.size() > 16) throw ConfigError(strCat(what, " lists ", rails.size(), " rails; max 16"));
  return rails;
}

std::pair<std::string, int> parseHostPort(const std::string& text, const std::string& what) {
  size_t colon = text.rfind(':');
  if (text.empty() || colon == std::string::npos || colon == 0) {
    throw ConfigError(strCat(what, "=\"", text, "\" is not host:port"));
  }
  std::string host = text.substr(0, colon);
  int port = static_cast<int>(parseInt(text.substr(colon + 1), strCat(what, " port"), 1, 65535));
  return {host, port};
}

// A token must carry at least 256 bits, judged by its alphabet: 64 hex digits (what the operator
// writes: 32 random bytes, hex), 43 base64 characters, or 32 bytes of anything else. The token
// itself never appears in the error.
void checkTokenStrength(const std::string& token) {
  const bool hex = std::all_of(token.begin(), token.end(),
                               [](unsigned char c) { return std::isxdigit(c) != 0; });
  const bool base64 = std::all_of(token.begin(), token.end(), [](unsigned char c) {
    return std::isalnum(c) != 0 || c == '+' || c == '/' || c == '-' || c == '_' || c == '=';
  });
  const size_t need = hex ? 64 : base64 ? 43 : 32;
  if (token.size() < need) {
    throw ConfigError(strCat("NEZHA_JOB_TOKEN is too short: ", token.size(), " ",
                             hex      ? "hex digits"
                             : base64 ? "base64 characters"
                                      : "bytes",
                             " give less than 32 random bytes (want >= ", need,
                             "; e.g. `openssl rand -hex 32`)"));
  }
}

// The token from NEZHA_JOB_TOKEN_FILE (what the operator mounts: a read-only Secret volume, which
// unlike an environment variable is not inherited by every child process) or NEZHA_JOB_TOKEN
// (bare use). Both set must agree, so a stale variable never silently wins or loses.
std::string jobTokenFromEnv() {
  const std::string inEnv = paramString("NEZHA_JOB_TOKEN");
  const std::string path = paramString("NEZHA_JOB_TOKEN_FILE");
  if (path.empty()) return inEnv;
  std::string token;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f != nullptr) {
    char buf[4096];
    size_t n = 0;
    while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0 && token.size() < (64 << 10)) {
      token.append(buf, n);
    }
    const bool failed = std::ferror(f) != 0;
    std::fclose(f);
    if (failed) f = nullptr;  // e.g. a directory
  }
  if (f == nullptr) {
    throw ConfigError(strCat("NEZHA_JOB_TOKEN_FILE=", path.substr(0, 256),
                             ": cannot read file (is the token Secret mounted?)"));
  }
  if (!token.empty() && token.back() == '\n') token.pop_back();
  if (!inEnv.empty() && inEnv != token) {
    throw ConfigError(
        "NEZHA_JOB_TOKEN_FILE and NEZHA_JOB_TOKEN are both set and hold different tokens; set "
        "only one (NEZHA_JOB_TOKEN_FILE in pods)");
  }
  return token;
}

// Each rank reads its own copy (a ConfigMap in a pod); the rendezvous then checks all agree.
static std::string readAlgoTableFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  if (in) ss << in.rdbuf();
  if (!in) throw ConfigError(strCat("NEZHA_ALGO_TABLE=", path, ": cannot read file"));
  return ss.str();
}

void validateOptions(const Options& o) {
  if (o.worldSize < 1) throw ConfigError(strCat("world size ", o.worldSize, " must be >= 1"));
  if (o.rank < 0 || o.rank >= o.worldSize) {
    throw ConfigError(strCat("rank ", o.rank, " is out of range for world size ", o.worldSize,
                             " (NEZHA_RANK must be < NEZHA_WORLD_SIZE)"));
  }
  if (o.rails.empty()) throw ConfigError("no rails configured (NEZHA_RAILS)");
  std::set<std::string> names;
  for (const auto& r : o.rails) {
    if (!validRailName(r.name)) throw ConfigError(strCat("rail name \"", r.name, "\" is invalid"));
    if (!names.insert(r.name).second) {
      throw ConfigError(strCat("rail name \"", r.name, "\" appears twice"));
    }
    checkTransport(r.transport, strCat("rail ", r.name));
  }
  // A SHARP rail only reduces (allreduce offload): broadcasts, gathers, barriers, large and
  // unsupported allreduces and every failover need a rail that moves bytes.
  if (std::all_of(o.rails.begin(), o.rails.end(),
                  [](const RailSpec& r) { return r.transport == "sharp"; })) {
    throw ConfigError(
        "NEZHA_RAILS has only sharp rails; a SHARP rail only offloads allreduce, so the job "
        "needs at least one tcp or rdma rail too (e.g. r0=eth1:tcp,ib0=ib0:sharp)");
  }
  if (!o.algoTable.empty()) AlgoTable::parse(o.algoTable, "algorithm table");
  if (o.worldSize > 1 && o.jobToken.empty()) {
    throw ConfigError(
        "NEZHA_JOB_TOKEN is empty; a job with more than one rank needs a shared secret "
        "(NEZHA_JOB_TOKEN_FILE or NEZHA_JOB_TOKEN)");
  }
  if (o.worldSize > 1) checkTokenStrength(o.jobToken);
  if (o.socketBuffer > (size_t(256) << 20)) {
    throw ConfigError(strCat("socket buffer ", o.socketBuffer, " bytes is above 256 MiB"));
  }
  if (o.streamsPerPeer < 1 || o.streamsPerPeer > 16) {
    throw ConfigError(strCat("streams per peer ", o.streamsPerPeer, " must be in [1, 16]"));
  }
  if (o.tuneInterval < 1) throw ConfigError("tune interval must be >= 1");
  resolveCongestionControl(o.tcpCongestion, "NEZHA_TCP_CONGESTION");
  if (!(o.tuneGain > 0 && o.tuneGain <= 1)) throw ConfigError("tune gain must be in (0, 1]");
}

Options Options::fromEnv() {
  Options o;
  o.rails = parseRails(paramString("NEZHA_RAILS"));
  if (!paramIsSet("NEZHA_WORLD_SIZE") && !paramIsSet("WORLD_SIZE")) {
    throw ConfigError("NEZHA_WORLD_SIZE (or WORLD_SIZE) is not set");
  }
  o.worldSize = static_cast<int>(paramInt("NEZHA_WORLD_SIZE", 1, 1 << 20, "WORLD_SIZE"));
  if (!paramIsSet("NEZHA_RANK") && !paramIsSet("RANK")) {
    throw ConfigError("NEZHA_RANK (or RANK) is not set");
  }
  o.rank = static_cast<int>(paramInt("NEZHA_RANK", 0, (1 << 20) - 1, "RANK"));
  if (o.rank >= o.worldSize) {
    throw ConfigError(strCat("NEZHA_RANK=", o.rank, " must be < NEZHA_WORLD_SIZE=", o.worldSize));
  }
  if (o.worldSize > 1) {
    if (!paramIsSet("NEZHA_RENDEZVOUS")) {
      throw ConfigError("NEZHA_RENDEZVOUS is not set; want host:port of rank 0's rendezvous");
    }
    auto hp = parseHostPort(paramString("NEZHA_RENDEZVOUS"), "NEZHA_RENDEZVOUS");
    o.rendezvousHost = hp.first;
    o.rendezvousPort = hp.second;
  }
  readEngineKnobsFromEnv(o);
  validateOptions(o);
  return o;
}

void readEngineKnobsFromEnv(Options& o) {
  o.jobToken = jobTokenFromEnv();
  o.policy = parsePolicy(paramString("NEZHA_POLICY"));
  std::string cold = paramString("NEZHA_COLD_THRESHOLD");
  if (cold != "auto") o.coldThreshold = parseBytes(cold, "NEZHA_COLD_THRESHOLD");
  o.streamsPerPeer = static_cast<int>(paramInt("NEZHA_STREAMS_PER_PEER", 1, 16));
  o.rendezvousTimeout =
      std::chrono::milliseconds(paramInt("NEZHA_RENDEZVOUS_TIMEOUT_MS", 100, 3600000));
  o.ioTimeout = std::chrono::milliseconds(paramInt("NEZHA_IO_TIMEOUT_MS", 100, 3600000));
  std::string failover = paramString("NEZHA_FAILOVER");
  if (failover != "replay" && failover != "stop") {
    throw ConfigError(strCat("NEZHA_FAILOVER=\"", failover, "\" is unknown (want replay or stop)"));
  }
  o.failover = failover == "replay";
  o.roundFreeBytes = paramBytes("NEZHA_ROUND_FREE_BYTES", 0, size_t(16) << 20);
  o.progressFloor = std::chrono::milliseconds(paramInt("NEZHA_PROGRESS_FLOOR_MS", 10, 3600000));
  o.readmitHoldDown = std::chrono::milliseconds(paramInt("NEZHA_READMIT_HOLDDOWN_MS", 0, 3600000));
  o.watchdog = std::chrono::milliseconds(paramInt("NEZHA_WATCHDOG_MS", 0, 3600000));
  o.peerSilence = std::chrono::milliseconds(paramInt("NEZHA_PEER_SILENCE_MS", 0, 3600000));
  o.waveBytes = paramBytes("NEZHA_WAVE_BYTES", 0, size_t(1) << 30);
  if (o.peerSilence.count() > 0 && o.peerSilence.count() < 50) {
    throw ConfigError(strCat("NEZHA_PEER_SILENCE_MS=", o.peerSilence.count(),
                             " is too short (want 0 = off, or at least 50: heartbeats go out every "
                             "fifth of it)"));
  }
  o.slowFactor = paramDouble("NEZHA_SLOW_FACTOR", 1.5, 1000);
  o.slowFloor = paramDouble("NEZHA_SLOW_FLOOR", 0, 0.5);
  o.controlAddr = paramString("NEZHA_CONTROL_ADDR");
  o.jobName = paramString("NEZHA_JOB_NAME");
  o.localRank = static_cast<int>(paramInt("NEZHA_LOCAL_RANK", 0, 4096, "LOCAL_RANK"));
  o.probeBytes = paramBytes("NEZHA_PROBE_BYTES", 0, size_t(1) << 30);
  o.tuneInterval = static_cast<int>(paramInt("NEZHA_TUNE_INTERVAL", 1, 1000000));
  o.tuneGain = paramDouble("NEZHA_TUNE_GAIN", 0.01, 1.0);
  o.tablePath = paramString("NEZHA_TABLE");
  o.ringThreshold = paramBytes("NEZHA_RING_THRESHOLD");
  o.chainThreshold = paramBytes("NEZHA_CHAIN_THRESHOLD");
  if (const std::string path = paramString("NEZHA_ALGO_TABLE"); !path.empty()) {
    o.algoTable = readAlgoTableFile(path);
    AlgoTable::parse(o.algoTable, "NEZHA_ALGO_TABLE=" + path);  // errors name the file
  }
  // The kernel doubles SO_SNDBUF/SO_RCVBUF into an int: stay far below that.
  o.socketBuffer = paramBytes("NEZHA_SOCKET_BUFFER", 0, size_t(256) << 20);
  o.tcpQuickAck = paramInt("NEZHA_TCP_QUICKACK", 0, 1) == 1;
  o.tcpCongestion = paramString("NEZHA_TCP_CONGESTION");
  o.minSliceBytes = paramBytes("NEZHA_MIN_SLICE_BYTES", 0, size_t(1) << 30);
  o.verbose = paramInt("NEZHA_VERBOSE", 0, 1) == 1;
  o.sharpLibrary = paramString("NEZHA_SHARP_LIBRARY");
  o.preflight = parsePreflightPolicy(paramString("NEZHA_PREFLIGHT"));
  o.preflightTimeout =
      std::chrono::milliseconds(paramInt("NEZHA_PREFLIGHT_TIMEOUT_MS", 100, 3600000));
  o.preflightBytes = paramBytes("NEZHA_PREFLIGHT_BYTES", 1, size_t(16) << 20);
  o.preflightWait = std::chrono::milliseconds(paramInt("NEZHA_PREFLIGHT_WAIT_MS", 0, 86400000));
}

const char* toString(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kProd:
      return "prod";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kMax:
      return "max";
  }
  return "?";
}

const char* toString(OpKind op) {
  switch (op) {
    case OpKind::kAllreduce:
      return "allreduce";
    case OpKind::kBroadcast:
      return "broadcast";
    case OpKind::kAllgather:
      return "allgather";
    case OpKind::kReduceScatter:
      return "reduce_scatter";
    case OpKind::kBarrier:
      return "barrier";
    case OpKind::kAlltoall:
      return "alltoall";
  }
  return "?";
}

const char* toString(Policy p) {
  switch (p) {
    case Policy::kAdaptive:
      return "adaptive";
    case Policy::kStatic:
      return "static";
    case Policy::kSingle:
      return "single";
  }
  return "?";
}

ReduceOp parseReduceOp(const std::string& s) {
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax}) {
    if (s == toString(op)) return op;
  }
  throw ConfigError(strCat("unknown reduce op \"", s, "\" (want sum, prod, min or max)"));
}

OpKind parseOpKind(const std::string& s) {
  for (OpKind op : {OpKind::kAllreduce, OpKind::kBroadcast, OpKind::kAllgather,
                    OpKind::kReduceScatter, OpKind::kAlltoall, OpKind::kBarrier}) {
    if (s == toString(op)) return op;
  }
  throw ConfigError(strCat("unknown collective \"", s,
                           "\" (want allreduce, broadcast, allgather, reduce_scatter, alltoall "
                           "or barrier)"));
}

Policy parsePolicy(const std::string& s) {
  for (Policy p : {Policy::kAdaptive, Policy::kStatic, Policy::kSingle}) {
    if (s == toString(p)) return p;
  }
  throw ConfigError(
      strCat("NEZHA_POLICY=\"", s, "\" is unknown (want adaptive, static or single)"));
}

}  // namespace nezha
