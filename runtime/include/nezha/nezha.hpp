// libnezha C++ API. The C API (nezha.h) is a thin wrapper over this.
//
// A Communicator joins a job (rendezvous + authentication), connects every rail to every peer,
// probes the rails and then runs collectives whose data is split across rails by the Scheduler:
// small operations go whole to the lowest-latency rail (cold start), large ones are split by
// ratios kept in a data-length table and tuned online (hot start).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace nezha {

class RendezvousServer;

// ---- errors --------------------------------------------------------------------------------
// One root, two families: recoverable rail I/O errors (RailError: the rail's connections are
// broken; the operation may be replayed on surviving rails) and errors that no retry fixes
// (ConfigError for bad input, AuthError for a failed token proof, EnforceError for bug checks).
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
class ConfigError : public Error {
 public:
  using Error::Error;
};
class AuthError : public Error {
 public:
  using Error::Error;
};
class InvalidArgument : public Error {
 public:
  using Error::Error;
};
class EnforceError : public Error {
 public:
  using Error::Error;
};
// The ranks called different operations: the signatures they attached to it
// (Communicator::signNextOp) differ, or they are in different operations. Not a rail failure:
// the rails are fine, the callers are out of step, and the communicator is unusable afterwards
// (a skipped operation shifts every later one). Every rank that compared throws one.
class MismatchError : public Error {
 public:
  MismatchError(const std::string& what, std::vector<std::string> signatures,
                std::vector<int64_t> ops)
      : Error(what), signatures_(std::move(signatures)), ops_(std::move(ops)) {}
  // Per rank: the signature it sent (this rank's own included), "" where none was seen.
  const std::vector<std::string>& signatures() const { return signatures_; }
  // Per rank: the operation number it was in (Communicator's count of operations), -1 where none
  // was seen.
  const std::vector<int64_t>& ops() const { return ops_; }

 private:
  std::vector<std::string> signatures_;
  std::vector<int64_t> ops_;
};
class RailError : public Error {
 public:
  RailError(int rail, const std::string& what) : Error(what), rail_(rail) {}
  // Index of the failed rail in Options::rails, or -1 for the rendezvous connection.
  int rail() const { return rail_; }

 private:
  int rail_;
};

// ---- types ---------------------------------------------------------------------------------
enum class DataType { kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64 };
enum class ReduceOp { kSum, kProd, kMin, kMax };
// kAlltoall last: the numbering of the older kinds is unchanged.
enum class OpKind { kAllreduce, kBroadcast, kAllgather, kReduceScatter, kBarrier, kAlltoall };
// adaptive: cold/hot with online tuning; static: fixed bandwidth-proportional split (MRIB);
// single: everything on the rail with the highest probed bandwidth.
enum class Policy { kAdaptive, kStatic, kSingle };
// What a rail that fails the pre-flight check does to the start (src/preflight/preflight.h):
// fail the start, start without it (it joins through re-admission), wait until it is back, or
// off (no check; a rail that cannot connect ends the start).
enum class PreflightPolicy { kOff, kFail, kDegrade, kWait };

size_t dataTypeSize(DataType t);
const char* toString(DataType t);
const char* toString(ReduceOp op);
const char* toString(OpKind op);
const char* toString(Policy p);
DataType parseDataType(const std::string& s);  // throws ConfigError
ReduceOp parseReduceOp(const std::string& s);
OpKind parseOpKind(const std::string& s);
Policy parsePolicy(const std::string& s);
const char* toString(PreflightPolicy p);
PreflightPolicy parsePreflightPolicy(const std::string& s);

struct RailSpec {
  std::string name;       // unique in the job, e.g. "r0"
  std::string iface;      // network interface the rail's sockets are bound to
  std::string transport;  // "tcp" or "sharp" (allreduce offload; rdma later)
  // Address to bind; empty = the interface's primary (first) IPv4 address. Lets tests put
  // several rails on `lo` (127.0.0.1, 127.0.0.2, ...).
  std::string address;
  // Expected speed in Mbit/s (NEZHA_RAILS "name=iface:tcp@25000", from the RailClass's
  // expectedBandwidthMbps); 0 = unknown. Seeds the split when there is no init probe and is the
  // yardstick of the "degraded" report (a rail measured far below it).
  int64_t expectedMbps = 0;
};

// Defaults match the NEZHA_* variables declared in src/params.cc (see runtime/README.md).
struct Options {
  int rank = 0;
  int worldSize = 1;
  std::vector<RailSpec> rails;
  std::string rendezvousHost = "127.0.0.1";  // rank 0's address or DNS name
  int rendezvousPort = 0;  // rank 0 listens here; 0 = pick one (only for in-process use)
  std::string jobToken;    // shared secret; required when worldSize > 1
  Policy policy = Policy::kAdaptive;
  std::optional<size_t> coldThreshold;  // bytes; nullopt = auto (from the probe)
  int streamsPerPeer = 2;
  std::chrono::milliseconds rendezvousTimeout{60000};
  std::chrono::milliseconds ioTimeout{30000};  // a rail with no progress for this long fails
  // Replay: after every operation all ranks agree over a surviving rail which slices failed and
  // redo them on the survivors; false: fail-stop (the first rail failure ends the communicator).
  bool failover = true;
  // With failover: a cold allreduce, allgather or reduce_scatter up to this many bytes, with
  // every rail alive, skips its per-operation agreement round; a later round (a failure, a
  // different rail or kind, every 16th operation) confirms it (failover/failover.cc). 0 = off.
  size_t roundFreeBytes = 64 << 10;
  // Least no-progress deadline of an operation slice; the deadline is max(floor, 4 x the
  // slice's predicted time), capped by ioTimeout, so a slow rail is not taken for a dead one.
  std::chrono::milliseconds progressFloor{1000};
  // A failed rail re-enters the split once its link has been up (and it failed no earlier than)
  // this long on every rank; doubles per re-admission (flap damping), not per rejected probe:
  // a rail must carry its share within a second of its heal (failover/readmission.cc).
  // 0 = never re-admit.
  std::chrono::milliseconds readmitHoldDown{300};
  // Progress watchdog: a rail whose slice moves nothing for this long while another rail of the
  // same operation moves data fails (black hole, carrier up); 0 = off. It bounds the stall of
  // the operation in flight when a rail turns into a black hole (goal: <= 0.5 s).
  std::chrono::milliseconds watchdog{400};
  // Every rank sends a heartbeat on every rail's control connection to its O(log N)
  // dissemination neighbours every peerSilence / 5; a neighbour heard on no rail for this long
  // is unreachable (all rails between us down, or its host gone) and the verdict is flooded to
  // every rank: a slice waiting on data that has not moved for as long fails at once, and so
  // does an agreement round waiting for that peer. 0 = no heartbeats (silence is then judged only
  // after the progress deadline, with the progress floor as window).
  std::chrono::milliseconds peerSilence{500};
  // While a failed rail may come back, a large operation runs in waves of about this many bytes
  // per rail (whole 4 MiB chunks), with the per-op round between them, so the rail re-enters
  // mid-operation instead of at the next one. 0 = re-admission at operation boundaries only.
  size_t waveBytes = size_t(8) << 20;
  // A slice still running max(watchdog, slowFactor x its predicted time) after every other rail
  // finished its part fails as slow (gray failure); it comes back through re-admission with the
  // share its probe measures.
  double slowFactor = 3;
  // A re-admitted rail whose measured share of the job's bandwidth is below this stays out.
  double slowFloor = 0.02;
  // Control endpoint "host:port" or ":port" = the default-route interface (GET /status,
  // /metrics; POST /rails/{name}/drain, /restore with the job's control credential); empty =
  // none. Port 0 picks one (see Communicator::controlPort()). Never a rail's address.
  std::string controlAddr;
  // This process's index on its node (NEZHA_LOCAL_RANK, else LOCAL_RANK): several processes per
  // pod each get their own control port, base + localRank.
  int localRank = 0;
  // The job's name (NEZHA_JOB_NAME, set by the operator): the `job` label of every metric.
  std::string jobName;
  size_t probeBytes = 1 << 20;  // bandwidth probe size per rail
  // Pre-flight check of every rail before the first operation (src/preflight/preflight.h).
  PreflightPolicy preflight = PreflightPolicy::kDegrade;
  std::chrono::milliseconds preflightTimeout{10000};  // connect + transfer, per rail
  size_t preflightBytes = 64 << 10;                   // transfer each way per checked pair
  std::chrono::milliseconds preflightWait{600000};    // kWait: longest wait for failed rails
  int tuneInterval = 5;                               // agree timing stats every N operations
  std::string tablePath;                              // optional data-length table to start from
  size_t ringThreshold = 64 << 10;    // allreduce slices below this use recursive doubling
  size_t chainThreshold = 256 << 10;  // broadcasts above this: pipelined chain
  size_t socketBuffer = 4 << 20;      // SO_SNDBUF/SO_RCVBUF per data stream; 0 = kernel autotune
  // TCP rails: ask for an immediate ACK after every receive on a data socket, so a sender
  // limited by its congestion window never waits out the peer's delayed-ACK timer (40 ms).
  bool tcpQuickAck = true;
  // TCP rails: the sockets' congestion control (TCP_CONGESTION): "auto" = reno, else cubic
  // (whichever this network namespace may use), "host" = the host's default, or a name such as
  // "cubic". One flow stalling stalls the whole split operation, so a host default that pauses
  // flows on purpose (BBR v1 drains each flow to 4 packets for ~200 ms every 10 s) costs a
  // multi-rail job more than one bulk flow (src/base/congestion_control.h; NEZHA_TCP_CONGESTION).
  std::string tcpCongestion = "auto";
  size_t minSliceBytes = 32 << 10;  // a hot split never gives a rail less than this
  double tuneGain = 0.6;            // step of the online ratio update (0..1]
  bool verbose = false;
  // SHARP collective library to dlopen for sharp rails; empty = libsharp_coll.so on the loader's
  // search path (NEZHA_SHARP_LIBRARY).
  std::string sharpLibrary;
  // Algorithm table, "nezha-algo/v1" JSON text (src/schedule/algo_table.h; NEZHA_ALGO_TABLE
  // names its file): per collective, size and rank count the algorithm and transport, and the
  // cold threshold per rank count. Empty = the built-in rules (from the two thresholds).
  // Every rank must hold the same table (the rendezvous compares digests).
  std::string algoTable;
  // Rank 0 only: a server made by startRendezvousServer() to use instead of starting one.
  std::shared_ptr<class RendezvousServer> server;

  // Reads NEZHA_* (with RANK/WORLD_SIZE fallbacks); throws ConfigError naming the variable.
  static Options fromEnv();
};

// What the scheduler did for the most recent operation (for nezha-bench and metrics).
struct OpReport {
  OpKind op = OpKind::kBarrier;
  size_t bytes = 0;
  bool hot = false;
  std::map<std::string, double> split;      // rail -> share of the elements
  std::map<std::string, size_t> railBytes;  // rail -> bytes of the operation it carried
  std::map<std::string, double> railSeconds;
  bool replayed = false;  // some slices failed and were redone on surviving rails
};

// Counters since the communicator was built (this rank's view).
struct RailMetrics {
  bool alive = true;    // false once a failover removed the rail from the split
  uint64_t slices = 0;  // operation slices this rail carried
  uint64_t bytes = 0;   // operation bytes it carried (same unit as OpReport::railBytes)
  double seconds = 0;   // time its slices took
  bool slow = false;    // out because its last re-admission probe measured it below the floor
};
// One rail leaving the split, identical on every rank (decided by the failure agreement).
struct FailoverEvent {
  uint64_t op = 0;          // operation number (0-based) during which the rail failed
  std::string rail;         // rail name
  double unixSeconds = 0;   // when this rank agreed on the failure
  double stallSeconds = 0;  // op start -> failure agreed on this rank (detection + agreement)
  std::string localError;   // this rank's own error on the rail, empty if a peer saw it
  std::vector<int> ranks;   // ranks that saw the failure themselves (the rest were told)
  // Why, as one word: failovers "carrier" (link lost here or on a peer), "watchdog" (nothing
  // moved while other rails did), "slow" (far behind its prediction while the others were
  // done), "transport" (the transport's own health event), "error" (the connection failed),
  // "peer" (another rank saw it), "preflight" (failed the start-up check, at op 0);
  // re-admissions "probe" (rebuilt, end-to-end probe passed);
  // rejected re-admissions "probe" (it failed) or "slow" (below the bandwidth floor); drains
  // "operator".
  std::string reason;
  // Re-admissions and rejected ones: the bandwidth the probe measured (bytes/s, agreed); for a
  // probe stopped early as slow, the floor's bandwidth it could not reach (an upper bound).
  double measuredBandwidth = 0;
};
struct Metrics {
  uint64_t ops = 0;             // collectives incl. barriers
  uint64_t replayedSlices = 0;  // slices redone on surviving rails after a failure
  // Failure-agreement rounds whose result was not from this operation on every rank (a cut
  // completed the previous round on one side only); the rail is then failed.
  uint64_t agreementMismatches = 0;
  std::vector<FailoverEvent> failovers;
  // Rails re-entering the split (stallSeconds = time the reconnect + probe took; they run in
  // the background while operations continue on the other rails).
  std::vector<FailoverEvent> readmissions;
  // Re-admission attempts that did not pass (probe failed, or the rail is below the floor).
  std::vector<FailoverEvent> rejectedReadmissions;
  // Rails drained or restored through the control endpoint (reason "operator").
  std::vector<FailoverEvent> drains, restores;
  uint64_t hotOps = 0;      // split across several rails
  uint64_t agreements = 0;  // timing agreement rounds
  // Operations that skipped the per-operation agreement round (Options::roundFreeBytes), and
  // those this rank redid with its peers after a peer failed one it had finished.
  uint64_t roundFreeOps = 0, keptRedos = 0;
  // Rounds held between waves of a large operation while a failed rail may come back (it can
  // re-enter there instead of at the next operation), and re-admissions made at such a round.
  uint64_t waveRounds = 0, midOpReadmissions = 0;
  // Stray, idle or garbage connections the rails' listeners turned away (connect, rebuilds).
  uint64_t railRejectedConnections = 0;
  std::map<std::string, RailMetrics> rails;
};

struct RailInfo {
  std::string name, iface, transport, address;
  double latencySeconds = 0;  // probe, agreed across ranks
  double bandwidthBytesPerSecond = 0;
};

class Communicator {
 public:
  // Joins the job: rendezvous, authenticated rail connections, probe. Throws on failure.
  explicit Communicator(const Options& options);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const;
  int worldSize() const;
  const Options& options() const;
  std::vector<RailInfo> rails() const;
  size_t coldThreshold() const;

  // sendbuf == recvbuf: in-place.
  void allreduce(const void* sendbuf, void* recvbuf, size_t count, DataType dtype, ReduceOp op);
  void broadcast(void* buf, size_t count, DataType dtype, int root);
  // recvbuf holds worldSize*count elements.
  void allgather(const void* sendbuf, void* recvbuf, size_t count, DataType dtype);
  // sendbuf holds worldSize*recvcount elements.
  void reduceScatter(const void* sendbuf, void* recvbuf, size_t recvcount, DataType dtype,
                     ReduceOp op);
  void barrier();

  // Signs the next operation this rank starts (any of the calls above or below; the rooted and
  // composed ones sign the operation they run as): `bytes` (at most 32, zero-padded) travel in
  // that operation's first frames to every peer of each rail it uses, ahead of its data, and
  // each rank compares them with its own before it accepts the operation's result. When a peer
  // sent other bytes or is in another operation, the operation throws MismatchError on every
  // rank that compared (each sees every peer on a rail the operation used) and the
  // communicator is unusable afterwards. What the bytes mean is the caller's (the torch
  // backend: collective, dtype, count, reduce op, root, sequence number). A later call replaces
  // a signature not yet used; every rank must sign the same operations (an unsigned peer is
  // out of step). Costs a 44-byte header each way per peer and rail, in the operation's first
  // exchange and on TCP in the same write as its data: no message and no wait of its own
  // (failover/signed_channel.h). C: nezha_sign_next_op, NEZHA_ERR_MISMATCH.
  void signNextOp(const void* bytes, size_t length);

  // Ranks that, as far as this rank has heard (the control mesh's heartbeats and questions),
  // have not started the operation this rank is in: with a collective that does not finish, the
  // ranks that never called it. Any thread, also while an operation runs on another.
  std::vector<int> peersNotStarted() const;

  // Personalized exchange (core/communicator_alltoall.cc): block p of sendbuf (count elements
  // at sendbuf + p*count) goes to rank p, which receives it as block `rank()` of its recvbuf.
  // Each block moves once, straight to its rank, split across rails like the collectives above
  // (every pair's message is cut in the same proportions, so each rail carries its share of
  // every message) and failover-protected like them. The algorithm per rail slice comes from
  // the algorithm table's "alltoall" rows (pairwise exchange or a direct all-at-once post).
  // The buffers may overlap (then the input is copied first).
  void alltoall(const void* sendbuf, void* recvbuf, size_t count, DataType dtype);
  // Rank r sends sendcounts[p] elements from sendbuf + sdispls[p] to rank p, which receives
  // them at recvbuf + rdispls[r]; recvcounts[p] must equal what p sends here (checked on every
  // rank: a mismatch is InvalidArgument on all ranks, not a hang). Counts/displacements are in
  // elements, worldSize entries each. Same data path as alltoall, after one small allgather
  // of every rank's counts (to check them and agree on the split).
  void alltoallv(const void* sendbuf, const size_t* sendcounts, const size_t* sdispls,
                 void* recvbuf, const size_t* recvcounts, const size_t* rdispls, DataType dtype);

  // Rooted collectives (core/communicator_compose.cc). Each is built from the collectives
  // above, so it is split across rails and failover-protected like them, at a bandwidth cost:
  // reduce = allreduce, gather = allgather, scatter = broadcast of the root's whole buffer.
  // recvbuf may be null on non-root ranks of reduce and gather, sendbuf on non-roots of scatter.
  void reduce(const void* sendbuf, void* recvbuf, size_t count, DataType dtype, ReduceOp op,
              int root);
  // recvbuf (root) holds worldSize*count elements.
  void gather(const void* sendbuf, void* recvbuf, size_t count, DataType dtype, int root);
  // sendbuf (root) holds worldSize*count elements.
  void scatter(const void* sendbuf, void* recvbuf, size_t count, DataType dtype, int root);

  // Changes the cold/hot threshold from the next operation on. Like a collective, every rank
  // must make the same call at the same point (nezha-tune uses it to time cold vs hot).
  void setColdThreshold(size_t bytes);
  // Replaces the algorithm table ("nezha-algo/v1" JSON, see Options::algoTable) from the next
  // operation on; "" = the built-in rules. Every rank must make the same call with the same
  // table at the same point (nezha-tune uses it to time one algorithm against another). The
  // cold threshold is left as it is. Throws ConfigError naming a bad field.
  void setAlgoTable(const std::string& json);
  std::string algoTableJson() const;  // the table in force, as JSON

  // Breaks rail `rail`'s connections (fault injection): the operation in flight and later ones
  // that use the rail fail with RailError(rail) here and on the peers. Any thread.
  void abortRail(int rail);

  // Port of the control endpoint (0 if none).
  int controlPort() const;

  const OpReport& lastReport() const;
  const Metrics& metrics() const;
  // Data-length table as JSON (identical on every rank).
  std::string tableJson() const;
  void saveTable(const std::string& path) const;

  struct Impl;

 private:
  // NEZHA_PREFLIGHT=wait: barriers until every rail that failed the start-up check is back
  // (re-admitted after an end-to-end probe), or NEZHA_PREFLIGHT_WAIT_MS passed on some rank.
  void waitForPreflightRails();
  std::unique_ptr<Impl> impl_;
};

// Rank 0 of an in-process job can start the rendezvous server first to learn its port.
// Used by tests and tools that run ranks as threads; normal jobs let rank 0's Communicator
// start it at Options::rendezvousPort.
std::shared_ptr<RendezvousServer> startRendezvousServer(const Options& rank0Options);
int rendezvousServerPort(const RendezvousServer& server);

}  // namespace nezha
