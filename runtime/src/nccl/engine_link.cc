#include "nccl/engine_link.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "base/error.h"
#include "failover/op_header.h"
#include "nccl/comm_error.h"
#include "schedule/algo_table.h"
#include "schedule/probe.h"

namespace nezha::ncclnet {

namespace {

// The head's payload limit when NEZHA_ROUND_FREE_BYTES is 0 (every operation then holds its
// round): the knob's default, so a small message is still one operation.
constexpr uint64_t kDefaultHeadBytes = 64 << 10;

// The control mesh's silence window at the least: the runtime's default progress floor.
constexpr std::chrono::milliseconds kLeastSilence{1000};

std::vector<RailInfo> railInfos(const Options& o) {
  std::vector<RailInfo> rails;
  for (const RailSpec& s : o.rails)
    rails.push_back(RailInfo{s.name, s.iface, s.transport, s.address});
  return rails;
}

std::vector<std::string> railNames(const Options& o) {
  std::vector<std::string> names;
  for (const RailSpec& s : o.rails) names.push_back(s.name);
  return names;
}

}  // namespace

EngineLink::EngineLink(const Options& options, std::vector<std::unique_ptr<Transport>> transports,
                       const JobTable& job, LinkMemory memory)
    : o_(options),
      memory_(std::move(memory)),
      rails_(railInfos(o_)),
      engine_(o_, rails_, metrics_,
              [this](int rail) {
                // A rebuilt rdma rail opens on the same domain, so NCCL's keys stay valid.
                const auto& d = memory_.domains;
                return makeTransport(o_, rail, rails_[rail].address,
                                     static_cast<size_t>(rail) < d.size() ? d[rail] : nullptr);
              }),
      headLimit_(o_.roundFreeBytes > 0 ? o_.roundFreeBytes : kDefaultHeadBytes) {
  if (o_.worldSize != 2 || (o_.rank != kSender && o_.rank != kReceiver)) {
    throw ConfigError(strCat("EngineLink: rank ", o_.rank, " of ", o_.worldSize,
                             " (a connection is rank 1 sending to rank 0)"));
  }
  if (transports.size() != rails_.size()) {
    throw ConfigError(strCat("EngineLink: ", transports.size(), " connected rails for ",
                             rails_.size(), " rails in the options"));
  }
  // The agreement rides the rails' own control connections, as in the communicator
  // (comm/communicator_setup.cc): silence long enough for a loaded machine to answer. Never
  // below the runtime's default floor (1 s), though the plugin's floor is lower
  // (nccl/plugin_context.cc): at 400 ms a black-holed rail's control connection made rounds
  // give up on a live peer, and 2 of 7 black-hole runs stalled the loop for the whole hole.
  const auto silence = std::max(o_.progressFloor, kLeastSilence);
  mesh_ = std::make_unique<ControlMesh>(
      o_.rank, o_.worldSize, rails_.size(), silence,
      [this](int peer, int rail, uint64_t gen) { engine_.onPeerRailDown(peer, rail, gen); },
      o_.failover ? o_.peerSilence : std::chrono::milliseconds(0));
  for (size_t i = 0; i < transports.size(); ++i) {
    mesh_->attach(static_cast<int>(i), transports[i]->releaseControl());
  }
  std::vector<std::unique_ptr<Channel>> channels;
  for (auto& t : transports) channels.push_back(std::move(t));
  const std::vector<bool> usable(rails_.size(), true);
  engine_.adoptChannels(std::move(channels), usable);
  engine_.setAgreement(mesh_.get());
  const AlgoTable algo;
  engine_.setJob(job, algo.options());
  // Both ends measure the rails together (schedule/probe.h), so they plan the same splits.
  RailRunner runOn = [this](int r, const std::function<void(Channel&, Scratch&)>& fn) {
    engine_.runOn(r, fn);
  };
  auto agreeMax = [this](std::vector<double>& v) { engine_.agree(v, o_.ioTimeout); };
  agreeOnMemoryPath();
  ProbeResult probe = probeRails(o_, algo.options(), usable, runOn, agreeMax);
  // Without a bandwidth probe (NEZHA_PROBE_BYTES=0) the rails' expected speeds seed the split
  // when every rail has one, as in the communicator; the tuner takes over from there.
  const bool seedFromClasses =
      o_.probeBytes == 0 && std::all_of(o_.rails.begin(), o_.rails.end(),
                                        [](const RailSpec& r) { return r.expectedMbps > 0; });
  for (size_t i = 0; i < rails_.size(); ++i) {
    if (seedFromClasses)
      probe.bandwidth[i] = static_cast<double>(o_.rails[i].expectedMbps) * 1e6 / 8;
    rails_[i].latencySeconds = probe.latency[i];
    rails_[i].bandwidthBytesPerSecond = probe.bandwidth[i];
  }
  counters_.railBytes.assign(rails_.size(), 0);
  sched_ = std::make_unique<Scheduler>(o_, probe, Table(railNames(o_)));
  engine_.setScheduler(sched_.get());
  thread_ = std::thread([this] { loop(); });
}

EngineLink::~EngineLink() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  // A message in flight must not keep the link's thread waiting for a peer that may never post
  // its half (NCCL closes comms with requests outstanding when it aborts): the round and every
  // rail's exchange fail now, and the thread sees stop_ once the unit has given up.
  mesh_->closeAll();
  for (size_t r = 0; r < rails_.size(); ++r) engine_.abortRail(static_cast<int>(r));
  thread_.join();
}

void EngineLink::agreeOnMemoryPath() {
  // Element-wise max over both ends: {some end is zero-copy, some end is host-staged}.
  std::vector<double> paths{memory_.zeroCopy ? 1.0 : 0.0, memory_.zeroCopy ? 0.0 : 1.0};
  engine_.agree(paths, o_.ioTimeout);
  if (paths[0] > 0 && paths[1] > 0) {
    throw ConfigError(strCat(
        "this end is ", memory_.zeroCopy ? "zero-copy" : "host-staged", ", its peer ",
        memory_.zeroCopy ? "host-staged" : "zero-copy",
        ": both hosts must take GPU memory alike (docs/nccl.md \"GPU memory\": every rail rdma "
        "and every HCA taking dma-bufs, on both)"));
  }
}

uint64_t EngineLink::post(void* data, uint64_t bytes, const Registration* reg) {
  // Outside the lock: the registration's keys per rail (NCCL keeps the handle until deregMr).
  std::vector<std::optional<IoRegion>> regions;
  if (memory_.zeroCopy && bytes > 0) {
    if (reg == nullptr) {
      throw CommError(ncclInvalidArgument,
                      strCat("a message of ", bytes,
                             " bytes without its memory handle: zero copy moves only registered "
                             "buffers (regMr)"));
    }
    try {
      for (size_t r = 0; r < rails_.size(); ++r) regions.push_back(reg->keysFor(r, data, bytes));
    } catch (const InvalidArgument& e) {
      throw CommError(ncclInvalidArgument, e.what());
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto u = std::make_unique<Unit>();
  u->id = nextId_++;
  u->data = static_cast<char*>(data);
  u->bytes = bytes;
  u->regions = std::move(regions);
  if (!failure_.empty()) {
    u->done = true;
    u->error = failure_;
    u->code = failureCode_;
  } else {
    queue_.push_back(u.get());
  }
  const uint64_t id = u->id;
  units_.emplace(id, std::move(u));
  wake_.notify_one();
  return id;
}

bool EngineLink::test(uint64_t id, uint64_t* bytes, int* railsUsed) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = units_.find(id);
  if (it == units_.end()) {
    throw CommError(ncclInvalidArgument, strCat("test: no message ", id, " in flight"));
  }
  Unit& u = *it->second;
  if (!u.done) return false;
  const std::string error = u.error;
  const ncclResult_t code = u.code;
  if (bytes) *bytes = u.moved;
  if (railsUsed) *railsUsed = u.railsUsed;
  units_.erase(it);
  if (!error.empty()) throw CommError(code, error);
  return true;
}

void EngineLink::loop() {
  for (;;) {
    Unit* u = nullptr;
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      u = queue_.front();
      queue_.pop_front();
    }
    std::string error;
    ncclResult_t code = ncclSuccess;
    try {
      run(*u);
    } catch (const CommError& e) {  // misuse the two ends agreed on (a message too large)
      error = e.what();
      code = e.code;
    } catch (const std::exception& e) {  // the engine gave up: every rail gone, ends disagreed
      error = e.what();
      code = ncclSystemError;
    }
    std::lock_guard<std::mutex> lock(mu_);
    publishCounters(u->railBytes);
    u->done = true;
    if (error.empty()) continue;
    // Both ends stop at the same message, so neither waits for a peer that moved on: this
    // message and every one after it fail with the first cause.
    failure_ = error;
    failureCode_ = code;
    for (Unit* failed : queue_) failed->done = true;
    queue_.push_front(u);
    for (Unit* failed : queue_) {
      failed->error = error;
      failed->code = code;
    }
    queue_.clear();
  }
}

void EngineLink::agreeOnTimings(uint64_t op) {
  if (!sched_->agreementDue(op)) return;
  std::vector<double> stats = sched_->pendingStats();
  if (stats.empty()) return;
  engine_.confirmKept();  // a peer that failed the last round-free operation is in that round
  engine_.agree(stats, o_.ioTimeout);
  sched_->applyAgreed(stats);
  ++metrics_.agreements;
}

namespace {

// The head operation's slice (both ends, the same plan: one unit on the cold rail). Both ends
// send their operation header; the sender's payload follows its header when the message fits in
// the head. The receiver reads the sender's header first, so it learns the size before it reads
// a byte of payload: a message larger than its room is read into scratch, never into `out`.
// Re-runnable: reads only `in` (the kept copy when the operation is redone).
FailoverEngine::MakeSliceFn makeHeadSlice(bool sending, uint64_t op, uint64_t headLimit,
                                          std::shared_ptr<std::string> peerHeader) {
  return [=](const char* in, char* out) -> FailoverEngine::SliceFn {
    return [=](Channel& ch, Scratch& scratch, const Slice&) {
      const int peer = sending ? EngineLink::kReceiver : EngineLink::kSender;
      std::string theirs(kOpHeaderBytes, '\0');
      const OpHeader mine = decodeOpHeader(std::string(in, kOpHeaderBytes), op);
      const size_t sent = sending && mine.value <= headLimit ? mine.value : 0;
      // Ops match one for one on both ends (channel.h): the header and the payload are two.
      std::vector<IoOp> ops{IoOp::send(peer, in, kOpHeaderBytes),
                            IoOp::recv(peer, theirs.data(), kOpHeaderBytes)};
      if (sent > 0) ops.push_back(IoOp::send(peer, in + kOpHeaderBytes, sent));
      ch.exchange(ops);
      if (!sending) {
        const uint64_t size = decodeOpHeader(theirs, op).value;
        if (size > 0 && size <= headLimit) {
          const bool fits = size <= mine.value;  // else the link fails it; `out` stays untouched
          std::vector<IoOp> data{IoOp::recv(peer, fits ? out : scratch.get(0, size), size)};
          ch.exchange(data);
        }
      }
      *peerHeader = std::move(theirs);
    };
  };
}

}  // namespace

uint64_t EngineLink::runHead(Unit& u) {
  const uint64_t op = nextOp_++;
  engine_.beginOp(op);
  const bool sending = o_.rank == kSender;
  const uint64_t payloadLimit = headPayloadLimit();
  std::string in = encodeOpHeader(OpHeader{op, u.bytes});
  if (sending && u.bytes <= payloadLimit) in.append(u.data, u.bytes);
  auto peerHeader = std::make_shared<std::string>();
  const size_t room = sending ? 0 : std::min<uint64_t>(u.bytes, payloadLimit);
  Plan plan;
  const FailoverEngine::Outcome ran = engine_.runOp(
      OpKind::kBroadcast,
      [this] {
        Plan p;
        p.op = OpKind::kBroadcast;
        p.units = 1;
        p.unitBytes = headLimit_;
        p.slices.push_back(Slice{sched_->coldRail(), 0, 1});
        return p;
      },
      in.data(), in.size(), u.data, room, false,
      makeHeadSlice(sending, op, payloadLimit, peerHeader), plan, /*twoWay=*/true);
  const uint64_t theirs = decodeOpHeader(*peerHeader, op).value;
  const uint64_t size = sending ? u.bytes : theirs;
  const uint64_t capacity = sending ? theirs : u.bytes;
  if (size > capacity) {
    throw CommError(ncclInvalidUsage,
                    strCat("message ", u.id, ": the sender's ", size, " bytes exceed the ",
                           capacity, " bytes the receiver posted"));
  }
  u.moved = size;
  u.railBytes.assign(rails_.size(), 0);
  if (size > 0 && size <= payloadLimit) {
    for (const Slice& s : ran.done) u.railBytes[s.rail] = size;  // the rail it finished on
    u.railsUsed = 1;
  }
  return size;
}

void EngineLink::run(Unit& u) {
  const uint64_t size = runHead(u);
  if (size <= headPayloadLimit()) return;  // carried by the head operation
  const uint64_t op = nextOp_++;
  engine_.beginOp(op);
  agreeOnTimings(op);
  const bool sending = o_.rank == kSender;
  // Zero copy: each slice names the registration on its own rail, so a slice replayed on a
  // survivor re-posts from the same buffer with that rail's keys (direct placement).
  const std::vector<std::optional<IoRegion>>* regions = memory_.zeroCopy ? &u.regions : nullptr;
  FailoverEngine::MakeSliceFn make = [sending, regions](const char*,
                                                        char* buf) -> FailoverEngine::SliceFn {
    return [sending, regions, buf](Channel& ch, Scratch&, const Slice& s) {
      std::vector<IoOp> ops{sending ? IoOp::send(kReceiver, buf + s.offset, s.count)
                                    : IoOp::recv(kSender, buf + s.offset, s.count)};
      if (regions != nullptr) ops[0].region = regions->at(s.rail);
      ch.exchange(ops);
    };
  };
  Plan plan;
  FailoverEngine::Outcome ran = engine_.runOp(
      OpKind::kBroadcast, [&] { return sched_->plan(OpKind::kBroadcast, size, 1); }, u.data, 0,
      u.data, 0, false, make, plan);
  if (!ran.replayed) sched_->record(plan, ran.secs);
  for (const Slice& s : ran.done) u.railBytes[s.rail] += s.count;
  u.railsUsed = static_cast<int>(
      std::count_if(u.railBytes.begin(), u.railBytes.end(), [](uint64_t b) { return b > 0; }));
}

void EngineLink::publishCounters(const std::vector<uint64_t>& bytesByRail) {
  auto count = [](const std::vector<FailoverEvent>& events, LinkCounters::ByRailReason& into) {
    into.clear();
    for (const FailoverEvent& e : events) ++into[{e.rail, e.reason}];
  };
  count(metrics_.failovers, counters_.failovers);
  count(metrics_.readmissions, counters_.readmissions);
  count(metrics_.rejectedReadmissions, counters_.readmissionRejections);
  count(metrics_.drains, counters_.drains);
  for (size_t r = 0; r < bytesByRail.size(); ++r) counters_.railBytes[r] += bytesByRail[r];
  for (auto it = metrics_.failovers.rbegin(); it != metrics_.failovers.rend(); ++it) {
    if (!it->localError.empty()) {
      counters_.lastFailure = it->localError;
      break;
    }
  }
}

LinkCounters EngineLink::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_;
}

void LinkCounters::add(const LinkCounters& other) {
  for (const auto& pair : {std::make_pair(&failovers, &other.failovers),
                           std::make_pair(&readmissions, &other.readmissions),
                           std::make_pair(&readmissionRejections, &other.readmissionRejections),
                           std::make_pair(&drains, &other.drains)}) {
    for (const auto& [key, n] : *pair.second) (*pair.first)[key] += n;
  }
  if (railBytes.size() < other.railBytes.size()) railBytes.resize(other.railBytes.size(), 0);
  for (size_t r = 0; r < other.railBytes.size(); ++r) railBytes[r] += other.railBytes[r];
  if (!other.lastFailure.empty()) lastFailure = other.lastFailure;
}

}  // namespace nezha::ncclnet
