// One NCCL connection — a send comm on one host and the recv comm it pairs with on the other —
// as a two-rank job of the failover engine (failover/failover_engine.h): rank 0 receives, rank 1
// sends, over the connection's rail channels. This is how the plugin's data path reuses the
// runtime's striping (schedule/: the learned split per message size), failure handling
// (watchdog reasons, the per-operation agreement, replay on the survivors), re-admission and
// drain/restore instead of keeping its own.
//
// Each posted message is one unit of work, run by the link's own thread in posting order (NCCL
// matches a connection's sends and receives in order, so unit k on the sender is unit k on the
// receiver):
//   1. the head, one operation on the cold rail: both ends send the engine's operation header
//      (failover/op_header.h), the sender's size and the receiver's room (NCCL tells the
//      receiver only how much it may receive); a message up to NEZHA_ROUND_FREE_BYTES follows
//      its header, so it is one operation, and one that skips its round (each end needs the
//      other's header to finish, as in a small allreduce: failover_engine.h, round-free);
//   2. a larger message as a second operation split by the scheduler, each slice a send
//      (sender) or receive (receiver) of its byte range on its rail; a failed rail's slices are
//      redone on the survivors from the sender's buffer, which NCCL keeps until the send
//      completes.
// Zero copy (LinkMemory::zeroCopy, nccl/gpu_memory.h: NCCL's buffers may be GPU memory) keeps
// every byte of a message away from the CPU: the head carries only the header (no payload, no
// kept copy, nothing read into scratch), so every message of one byte or more is the second
// operation, whose slices carry the message's registration on their rail (IoOp::region) and
// move by direct placement (transport/verbs/verbs_peer.h); a replayed slice is re-posted from
// the same registered buffer with the surviving rail's keys. Small messages so pay a second
// operation: the price of never staging GPU bytes through host memory.
// post() and test() only touch a queue under a mutex, so NCCL's proxy thread never waits on the
// network (the engine's operations block; they run on the link's thread).
//
// The rails arrive connected (their control connections not yet released): building them is
// the caller's job (nccl/pending_link.h: the transports' own authenticated connect).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/rendezvous.h"
#include "failover/control_mesh.h"
#include "failover/failover_engine.h"
#include "nccl/gpu_memory.h"
#include "nccl/net_abi.h"
#include "nezha/nezha.hpp"
#include "schedule/scheduler.h"
#include "transport/transport.h"

namespace nezha::ncclnet {

// What one link did, for the plugin's /metrics and stats (the runtime's metric names). Counts
// by (rail, reason), as the engine records them (FailoverEvent::reason).
struct LinkCounters {
  using ByRailReason = std::map<std::pair<std::string, std::string>, uint64_t>;
  ByRailReason failovers, readmissions, readmissionRejections, drains;
  std::vector<uint64_t> railBytes;  // message bytes each rail carried, by rail index
  std::string lastFailure;          // the engine's own error of the latest failover
  void add(const LinkCounters& other);
};

class EngineLink {
 public:
  // The engine ranks. The receiver is rank 0 because it listens: the transports' connect
  // (transport/peer_mesh.h) has higher ranks dial lower ones, and NCCL's listen() is on the
  // receiving end.
  static constexpr int kReceiver = 0;
  static constexpr int kSender = 1;

  // `options`: rank (kReceiver or kSender), worldSize 2, the rails, the failover knobs.
  // `transports`: connected, index = rail. `job`: what a rebuilt rail connects with
  // (re-admission). `memory`: the domains rebuilt rails open on and whether messages are zero
  // copy; both ends must agree on zero copy (ConfigError naming both otherwise: a zero-copy end
  // cannot take ring chunks). Starts the link's thread.
  EngineLink(const Options& options, std::vector<std::unique_ptr<Transport>> transports,
             const JobTable& job, LinkMemory memory = {});
  // Fails the unit in flight (its rails and rounds are cut), stops the link's thread; units
  // not started are dropped. The peer's link fails its messages from then on.
  ~EngineLink();
  EngineLink(const EngineLink&) = delete;
  EngineLink& operator=(const EngineLink&) = delete;

  // Never blocks. Sender: `bytes` of `data` to send; receiver: room for up to `bytes`. The
  // buffer must stay valid until test() reported the message done. Returns the message's id.
  // `reg`: NCCL's registration of the buffer (regMr's mhandle), required in zero copy for a
  // message of some bytes (CommError ncclInvalidArgument otherwise, or when the buffer lies
  // outside it); unused when host-staged.
  uint64_t post(void* data, uint64_t bytes, const Registration* reg = nullptr);
  // Never blocks. True once message `id` is done (then forgotten); `*bytes` = the message's
  // size as sent. Throws CommError naming the cause when the message or the link failed.
  bool test(uint64_t id, uint64_t* bytes, int* railsUsed = nullptr);

  // Drain / restore of a rail (the control endpoint): applied at the next agreed round.
  void request(int rail, FailoverEngine::Request what) { engine_.request(rail, what); }
  // Fails the rail's exchange in flight now (tests; an operator's cut).
  void abortRail(int rail) { engine_.abortRail(rail); }
  // This host's link of `rail` lost / regained carrier (the plugin's one LinkWatcher,
  // nccl/plugin_context.h): the rail leaves at once with reason "carrier", and is not rebuilt
  // before its link has been back for the hold-down (failover_engine.h). Any thread.
  void onLinkDown(int rail) { engine_.onLinkDown(static_cast<size_t>(rail)); }
  void onLinkUp(int rail) { engine_.onLinkUp(static_cast<size_t>(rail)); }
  // Another connection of this process found `rail` silent (FailoverEngine::suspectRail). Any
  // thread.
  void suspectRail(int rail) { engine_.suspectRail(static_cast<size_t>(rail)); }
  // Called on the link's thread when it found a rail silent itself (the plugin tells the other
  // connections, nccl/plugin_context.h). Set before the first message.
  void setSilenceListener(std::function<void(int rail)> fn) {
    engine_.setSilenceListener(std::move(fn));
  }
  // What the engine recorded (failovers, re-admissions, drains). Read it only while no message
  // is in flight: the link's thread writes it during a unit.
  const Metrics& metrics() const { return metrics_; }
  // Any thread: the counters as of the last finished message.
  LinkCounters counters() const;
  bool sending() const { return o_.rank == kSender; }
  // healthy | drained | probing | failed (what /status reports); same rule as metrics().
  std::string railState(int rail) const { return engine_.railState(static_cast<size_t>(rail)); }

 private:
  struct Unit {
    uint64_t id = 0;
    char* data = nullptr;
    uint64_t bytes = 0;
    bool done = false;
    uint64_t moved = 0;
    int railsUsed = 0;
    std::vector<uint64_t> railBytes;  // by rail
    // Zero copy: the registration's keys for [data, data + bytes) on each rail.
    std::vector<std::optional<IoRegion>> regions;
    std::string error;  // empty = succeeded
    ncclResult_t code = ncclSuccess;
  };

  void loop();
  void run(Unit& u);
  // The head operation: the sender's size and the receiver's room cross in the engine's
  // operation headers (failover/op_header.h), with the payload when it fits in the head.
  // Returns the size sent; throws CommError on both ends when it exceeds the room.
  uint64_t runHead(Unit& u);
  // The bytes a message may carry in its head: none in zero copy.
  uint64_t headPayloadLimit() const { return memory_.zeroCopy ? 0 : headLimit_; }
  // Both ends agree on zero copy, or the link cannot be built.
  void agreeOnMemoryPath();
  // Every tuneInterval operations both ends agree on the slice timings (scheduler.h).
  void agreeOnTimings(uint64_t op);
  // The link's thread, between units: copies what the engine recorded into counters_.
  void publishCounters(const std::vector<uint64_t>& bytesByRail);

  const Options o_;
  const LinkMemory memory_;
  std::vector<RailInfo> rails_;
  Metrics metrics_;
  FailoverEngine engine_;
  std::unique_ptr<ControlMesh> mesh_;
  std::unique_ptr<Scheduler> sched_;
  uint64_t nextOp_ = 0;  // the link's thread
  // Messages up to this size ride in the head operation (NEZHA_ROUND_FREE_BYTES, so they skip
  // the round like the communicator's small operations; 64 KiB when that is 0).
  const uint64_t headLimit_;

  mutable std::mutex mu_;
  LinkCounters counters_;  // under mu_
  std::condition_variable wake_;
  std::deque<Unit*> queue_;                          // posted, not started
  std::map<uint64_t, std::unique_ptr<Unit>> units_;  // posted, not yet reported done
  uint64_t nextId_ = 0;
  // The link failed for good: every later message fails with the same cause.
  std::string failure_;
  ncclResult_t failureCode_ = ncclSuccess;
  bool stop_ = false;

  std::thread thread_;  // last: joined before the state above goes
};

}  // namespace nezha::ncclnet
