// The sending end of one NCCL connection, striped over every rail of the job.
//
// A message is cut into chunks (NEZHA_NCCL_CHUNK). Rails pull chunks in order, each chunk going
// to the rail that would finish it first given what that rail already has in flight and its
// measured rate, so a 2x faster rail carries 2x the bytes and a small message goes whole to the
// quickest idle rail. The receiver acknowledges how far it has consumed each rail's stream; a
// message (and NCCL's request) completes only when every chunk is acknowledged, so a send is
// never reported done while a failing rail may still hold its bytes. A rail fails on a socket
// error, a lost carrier, or when acknowledged bytes stop moving for NEZHA_NCCL_STALL_MS while it
// has bytes in flight (a black hole: link up, traffic dropped). Its unacknowledged chunks go
// back to the head of the queue for the surviving rails (the receiver drops duplicates), and a
// RAIL_DOWN on the surviving rails tells the receiver to drop its end and listen for the rail
// again. Every NEZHA_NCCL_READMIT_MS a failed rail redials; it carries data again only after a
// probe went to the receiver and its acknowledgement came back on that same rail.
//
// Every rail connection first proves the job token (bootstrap/auth.h) with a purpose naming
// the handle's nonce, the rail and the epoch (nccl/rail_purpose.h): the epoch after the last
// one the receiver accepted. The handshake runs on a short-lived thread so NCCL's proxy thread
// never waits on a slow or silent peer; the comm takes the socket back once it is done.
//
// Single-threaded by contract: NCCL drives one comm from one proxy thread at a time. All
// progress happens in pump(), called from isend() and test().
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <future>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/socket.h"
#include "nccl/comm_error.h"
#include "nccl/frame.h"
#include "nccl/handle.h"
#include "nccl/plugin_context.h"

namespace nezha::ncclnet {

struct SendRequest {
  const uint8_t* data = nullptr;
  uint64_t size = 0;
  uint64_t group = 0;
  uint8_t entry = 0;
  uint32_t chunks = 0;
  std::vector<bool> acked;
  uint32_t ackedCount = 0;
  uint32_t inflight = 0;  // records naming this message on some rail's stream
  bool done() const { return ackedCount == chunks && inflight == 0; }
};

class SendComm {
 public:
  SendComm(PluginContext& ctx, const ConnectHandle& peer);
  ~SendComm();
  SendComm(const SendComm&) = delete;
  SendComm& operator=(const SendComm&) = delete;

  // Drives the initial connects; true once a rail carries data (the others keep connecting).
  bool connected();
  // nullptr when the receiver has not posted a matching receive yet (NCCL retries).
  SendRequest* isend(const void* data, uint64_t size, int tag);
  // True when the request is done; the request is freed then.
  bool test(SendRequest* req, uint64_t* size);

 private:
  enum class RailState { kConnecting, kProbing, kLive, kFailed, kAuthenticating };
  struct Record {
    uint64_t end = 0;            // stream offset just past this record
    SendRequest* msg = nullptr;  // nullptr = a probe
    uint32_t chunk = 0;
  };
  struct Segment {
    std::string owned;  // header bytes
    const uint8_t* payload = nullptr;
    size_t payloadLen = 0;
    size_t size() const { return owned.size() + payloadLen; }
  };
  struct Rail {
    size_t index = 0;
    RailState state = RailState::kFailed;
    Fd fd;
    uint32_t epoch = 0;      // of the current connection (or attempt)
    uint32_t accepted = 0;   // the last epoch the receiver accepted
    std::future<void> auth;  // the handshake under way (kAuthenticating); owns fd meanwhile
    std::deque<Segment> out;
    size_t outPos = 0;    // bytes of out.front() already written
    uint64_t queued = 0;  // stream offset past the last queued record
    uint64_t acked = 0;   // what the receiver acknowledged (this epoch)
    std::deque<Record> inflight;
    uint64_t probeEnd = 0;
    double rate = 0;                   // bytes/s, smoothed, measured from acknowledgements
    Clock::time_point lastProgress{};  // last ack advance (or when the rail became busy)
    Clock::time_point since{};         // entered its state
    Clock::time_point nextAttempt{};
    Clock::time_point nextCarrierCheck{};
    std::string in;      // partial control frame
    std::string reason;  // why it last failed
    uint64_t unacked() const { return queued - acked; }
  };

  void pump();
  void startConnect(Rail& r, Clock::time_point now);
  void finishConnect(Rail& r, Clock::time_point now);
  void finishAuth(Rail& r, Clock::time_point now);
  // Stops a handshake thread (shutting its socket down wakes it) and waits for it.
  void stopAuth(Rail& r);
  // RAIL_DOWN for `down`'s connection on every other rail the receiver has.
  void announceDown(const Rail& down, Clock::time_point now);
  void fail(Rail& r, const std::string& why, Clock::time_point now);
  void readControl(Rail& r, Clock::time_point now);
  void handleCts(const Cts& c);
  void handleAck(Rail& from, const Ack& a, Clock::time_point now);
  void writeOut(Rail& r, Clock::time_point now);
  void schedule(Clock::time_point now);
  void checkTimers(Clock::time_point now);
  uint64_t window(const Rail& r) const;
  double assumedRate(const Rail& r) const;
  void throwIfAllDown(Clock::time_point now);

  PluginContext& ctx_;
  ConnectHandle peer_;
  std::vector<Rail> rails_;
  // Posted receives the sender has not matched yet, in the receiver's order.
  struct OpenEntry {
    int32_t tag;
    uint64_t size;
    bool matched;
  };
  struct OpenGroup {
    uint64_t seq;
    std::vector<OpenEntry> entries;
  };
  std::deque<OpenGroup> open_;
  std::map<uint64_t, Cts> early_;  // CTS that arrived ahead of an earlier one
  uint64_t nextCts_ = 0;
  std::list<std::unique_ptr<SendRequest>> requests_;
  std::deque<std::pair<SendRequest*, uint32_t>> pending_;  // chunks waiting for a rail
  Clock::time_point created_;
  Clock::time_point noLiveSince_{};
  bool everLive_ = false;
};

}  // namespace nezha::ncclnet
