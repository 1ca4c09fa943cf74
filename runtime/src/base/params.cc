#include "base/params.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "base/error.h"

namespace nezha {

const std::vector<Param>& allParams() {
  static const std::vector<Param> params = {
      {"NEZHA_RAILS", "", "rails as name=iface:transport,... (transport: tcp, rdma or sharp)"},
      {"NEZHA_RANK", "", "this process's rank (falls back to RANK)"},
      {"NEZHA_WORLD_SIZE", "", "number of ranks (falls back to WORLD_SIZE)"},
      {"NEZHA_RENDEZVOUS", "", "host:port rank 0 listens on and others dial (needed if >1 rank)"},
      {"NEZHA_JOB_TOKEN", "",
       "per-job secret of >= 32 random bytes, proven by HMAC-SHA256 (needed if >1 rank; "
       "bare use: in pods use NEZHA_JOB_TOKEN_FILE)"},
      {"NEZHA_JOB_TOKEN_FILE", "",
       "file holding NEZHA_JOB_TOKEN (a mounted read-only Secret; one trailing newline ignored), "
       "so the token is not inherited by every child process"},
      {"NEZHA_LOCAL_RANK", "0",
       "this process's index on its node (falls back to LOCAL_RANK); offsets the control port"},
      {"NEZHA_LOCAL_WORLD_SIZE", "1",
       "processes on this node (falls back to LOCAL_WORLD_SIZE); the NCCL plugin's /status "
       "reports it"},
      {"NEZHA_POLICY", "adaptive", "adaptive | static | single"},
      {"NEZHA_COLD_THRESHOLD", "auto", "bytes below which an op runs whole on one rail, or auto"},
      {"NEZHA_STREAMS_PER_PEER", "2", "TCP connections per peer per rail (1..16)"},
      {"NEZHA_RENDEZVOUS_TIMEOUT_MS", "60000", "how long to wait for all ranks to join"},
      {"NEZHA_IO_TIMEOUT_MS", "30000", "a rail with no progress for this long fails"},
      {"NEZHA_FAILOVER", "replay", "replay (agree + redo failed slices on survivors) | stop"},
      {"NEZHA_ROUND_FREE_BYTES", "64K",
       "cold allreduce/allgather/reduce_scatter up to this size skip the per-op agreement round "
       "(a later round confirms them; 0 = a round after every op)"},
      {"NEZHA_READMIT_HOLDDOWN_MS", "300",
       "a failed rail re-enters after its link is up this long on all ranks (0 = never)"},
      {"NEZHA_JOB_NAME", "", "the job's name: the job label of the runtime's metrics"},
      {"NEZHA_WATCHDOG_MS", "400",
       "a rail that moves nothing this long while another rail moves data fails (0 = off)"},
      {"NEZHA_PEER_SILENCE_MS", "500",
       "a peer heard on no rail this long (heartbeats every 1/5 of it) is unreachable (0 = off)"},
      {"NEZHA_WAVE_BYTES", "8M",
       "while a failed rail may return, large ops run in waves of this much per rail with a round "
       "between them, where it can re-enter (0 = at op boundaries only)"},
      {"NEZHA_SLOW_FACTOR", "3",
       "a slice still running this many times its prediction (and the watchdog) after the others "
       "finished "
       "fails as slow"},
      {"NEZHA_SLOW_FLOOR", "0.02",
       "a re-admitted rail below this share of the job's measured bandwidth stays out"},
      {"NEZHA_CONTROL_ADDR", "",
       "control endpoint host:port, or :port = the default-route interface (+ local rank)"},
      {"NEZHA_PROGRESS_FLOOR_MS", "1000",
       "least no-progress deadline of an op slice (deadline = max(floor, 4 x predicted))"},
      {"NEZHA_PROBE_BYTES", "1M", "allreduce size of the per-rail bandwidth probe at init (<= 1G)"},
      {"NEZHA_TUNE_INTERVAL", "5", "operations between agreements on timing statistics"},
      {"NEZHA_TUNE_GAIN", "0.6", "step of the online split update (0..1]"},
      {"NEZHA_TABLE", "", "data-length table JSON to start from (rank 0 reads and shares it)"},
      {"NEZHA_RING_THRESHOLD", "64K", "allreduce slices below this use recursive doubling"},
      {"NEZHA_CHAIN_THRESHOLD", "256K", "broadcasts above this use the pipelined chain"},
      {"NEZHA_ALGO_TABLE", "",
       "algorithm table JSON (nezha-algo/v1, written by nezha-tune --algorithms); every rank "
       "reads its own copy and all must hold the same"},
      {"NEZHA_SOCKET_BUFFER", "4M",
       "socket send/receive buffer per stream (0 = autotune, <= 256M)"},
      {"NEZHA_TCP_QUICKACK", "1",
       "TCP rails: 1 = immediate ACK after every receive on a data socket (no delayed-ACK "
       "stalls), 0 = the kernel's delayed ACKs"},
      {"NEZHA_TCP_CONGESTION", "auto",
       "TCP rails: the sockets' congestion control: auto = reno, else cubic (whichever this "
       "namespace may use; they suit striping, BBR v1 does not), host = the host's default, or a "
       "name (e.g. cubic, dctcp)"},
      {"NEZHA_MIN_SLICE_BYTES", "32K", "smallest per-rail slice of a split operation (<= 1G)"},
      {"NEZHA_PREFLIGHT", "degrade",
       "a rail failing the start-up check: fail | degrade (start without it) | wait | off"},
      {"NEZHA_PREFLIGHT_TIMEOUT_MS", "10000",
       "budget of the start-up check per rail (connect to every peer + transfer)"},
      {"NEZHA_PREFLIGHT_BYTES", "64K",
       "start-up check transfer each way per checked pair (<= 16M)"},
      {"NEZHA_PREFLIGHT_WAIT_MS", "600000",
       "NEZHA_PREFLIGHT=wait: how long to wait for failed rails before failing the start"},
      {"NEZHA_RDMA_SYSFS_ROOT", "/sys",
       "test-only: where RDMA discovery reads sysfs (the libibverbs test double's fixture tree)"},
      {"NEZHA_VERBOSE", "0", "1 = log setup and tuning decisions to stderr"},
      {"NEZHA_SHARP_LIBRARY", "",
       "sharp rails: the SHARP collective library to dlopen (default libsharp_coll.so on the "
       "loader path; it ships with HPC-X / DOCA-OFED)"},
      // The NCCL net plugin (libnccl-net-nezha.so) reads NEZHA_RAILS and these.
      {"NEZHA_NCCL_CONNECT_TIMEOUT_MS", "10000",
       "NCCL plugin: how long a connection may wait for its first rail"},
      {"NEZHA_NCCL_CONTROL_ADDR", "",
       "NCCL plugin: the control endpoint (/status, /metrics, signed drain/restore) at "
       "host:port or :port (+ local rank)"},
  };
  return params;
}

static const Param& findParam(const char* env) {
  for (const auto& p : allParams()) {
    if (std::strcmp(p.env, env) == 0) return p;
  }
  NEZHA_ENFORCE(false, "undeclared parameter ", env);
}

bool paramIsSet(const char* env) {
  const char* v = std::getenv(env);
  return v != nullptr && *v != '\0';
}

std::string paramString(const char* env, const char* fallbackEnv) {
  const Param& p = findParam(env);
  if (paramIsSet(env)) return std::getenv(env);
  if (fallbackEnv != nullptr && paramIsSet(fallbackEnv)) return std::getenv(fallbackEnv);
  return p.defaultValue;
}

static std::string nameOf(const char* env, const char* fallbackEnv) {
  if (!paramIsSet(env) && fallbackEnv != nullptr && paramIsSet(fallbackEnv)) return fallbackEnv;
  return env;
}

long long parseInt(const std::string& text, const std::string& what, long long min, long long max) {
  if (text.empty()) throw ConfigError(strCat(what, " is empty; want an integer"));
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || end == text.c_str() || *end != '\0') {
    throw ConfigError(strCat(what, "=\"", text, "\" is not an integer"));
  }
  if (v < min || v > max) {
    throw ConfigError(strCat(what, "=", v, " is out of range [", min, ", ", max, "]"));
  }
  return v;
}

long long paramInt(const char* env, long long min, long long max, const char* fallbackEnv) {
  return parseInt(paramString(env, fallbackEnv), nameOf(env, fallbackEnv), min, max);
}

size_t parseBytes(const std::string& text, const std::string& what) {
  size_t i = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i;
  if (i == 0) {
    throw ConfigError(strCat(what, "=\"", text, "\" is not a byte size (e.g. 4096, 64K, 1M)"));
  }
  if (i > 15) throw ConfigError(strCat(what, "=\"", text, "\" is too large"));
  unsigned long long v = std::stoull(text.substr(0, i));
  std::string suffix = text.substr(i);
  unsigned long long mult = 1;
  if (suffix.empty() || suffix == "B") {
    mult = 1;
  } else if (suffix == "K" || suffix == "KiB" || suffix == "k") {
    mult = 1ULL << 10;
  } else if (suffix == "M" || suffix == "MiB") {
    mult = 1ULL << 20;
  } else if (suffix == "G" || suffix == "GiB") {
    mult = 1ULL << 30;
  } else {
    throw ConfigError(
        strCat(what, "=\"", text, "\" has unknown unit \"", suffix, "\" (use K, M or G)"));
  }
  if (v > (1ULL << 50) / mult) throw ConfigError(strCat(what, "=\"", text, "\" is too large"));
  return static_cast<size_t>(v * mult);
}

size_t paramBytes(const char* env, size_t min, size_t max) {
  const size_t v = parseBytes(paramString(env), env);
  if (v < min || v > max) {
    throw ConfigError(strCat(env, "=", v, " bytes is out of range [", min, ", ", max, "]"));
  }
  return v;
}

double paramDouble(const char* env, double min, double max) {
  std::string text = paramString(env);
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(text.c_str(), &end);
  if (text.empty() || errno != 0 || *end != '\0') {
    throw ConfigError(strCat(env, "=\"", text, "\" is not a number"));
  }
  if (!(v >= min && v <= max)) {
    throw ConfigError(strCat(env, "=", text, " is out of range [", min, ", ", max, "]"));
  }
  return v;
}

}  // namespace nezha
