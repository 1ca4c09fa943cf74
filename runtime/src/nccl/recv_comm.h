// The receiving end of one NCCL connection, and the listener that precedes it.
//
// Rail connections arrive authenticated through the RailAcceptor (nccl/rail_acceptor.h: the
// job token, the handle's nonce, the rail's next epoch); a rail's listener is open only while
// its connection is expected. An irecv becomes a CTS (tags and sizes) sent on every live rail;
// DATA chunks land directly in the posted buffers (a chunk already received is read and
// dropped, so a replay after a failover is harmless) and ACKs report how much of each rail's
// stream is handled. A RAIL_DOWN from the sender, or a broken connection, drops the rail and
// opens its listener for the re-admission.
#pragma once

#include <poll.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/socket.h"
#include "nccl/comm_error.h"
#include "nccl/frame.h"
#include "nccl/handle.h"
#include "nccl/plugin_context.h"
#include "nccl/rail_acceptor.h"

namespace nezha::ncclnet {

struct RecvEntry {
  uint8_t* data = nullptr;
  uint64_t capacity = 0;
  int32_t tag = 0;
  bool sized = false;  // a first chunk told us the message's size
  uint64_t total = 0;
  uint32_t chunkBytes = 0;
  std::vector<bool> covered;
  uint32_t coveredCount = 0;
  bool done = false;
};

struct RecvRequest {
  uint64_t group = 0;
  std::vector<RecvEntry> entries;
  size_t doneCount = 0;
  bool done() const { return doneCount == entries.size(); }
};

class RecvComm;

class ListenComm {
 public:
  explicit ListenComm(PluginContext& ctx);
  const ConnectHandle& handle() const { return handle_; }
  // The connection, once one rail's connection passed its token handshake; nullptr until then.
  std::unique_ptr<RecvComm> accept();

 private:
  PluginContext& ctx_;
  ConnectHandle handle_;
  std::unique_ptr<RailAcceptor> acceptor_;
};

class RecvComm {
 public:
  RecvComm(PluginContext& ctx, std::unique_ptr<RailAcceptor> acceptor,
           std::vector<RailAcceptor::Accepted> first);
  // Gives queued ACKs a moment (bounded) to leave: the sender completes its last sends on them.
  ~RecvComm();
  RecvComm(const RecvComm&) = delete;
  RecvComm& operator=(const RecvComm&) = delete;

  RecvRequest* irecv(int n, void** data, const uint64_t* sizes, const int* tags);
  // True when every receive of the request is complete; sizes[i] = bytes received. Frees it.
  bool test(RecvRequest* req, int* sizes);
  bool anyLive() const;
  // Connections the rail listeners refused (for the harness and /metrics).
  uint64_t rejectedConnections() const { return acceptor_->rejected(); }

 private:
  enum class ReadState { kHeader, kPayload };
  struct Rail {
    Fd fd;
    uint32_t epoch = 0;
    uint64_t consumed = 0;
    uint64_t ackedUpTo = 0;
    // Control frames waiting to go out (CTS first, then the newest ACK).
    std::deque<std::string> out;
    size_t outPos = 0;
    Clock::time_point outSince{};  // when out last made progress while non-empty
    // Reading the current frame.
    ReadState state = ReadState::kHeader;
    uint8_t hdr[kLengthPrefix + kDataHeaderBody] = {};
    size_t have = 0;        // header bytes read (length prefix included)
    uint32_t frameLen = 0;  // 0 until the length prefix is in
    DataHeader cur;
    uint8_t* dst = nullptr;  // where payload goes, or nullptr = discard
    uint64_t left = 0;
    RecvEntry* entry = nullptr;  // the entry the current chunk completes
    RecvRequest* req = nullptr;
    bool live() const { return fd.valid(); }
  };

  void pump();
  void install(size_t rail, Fd fd, uint32_t epoch);
  void drop(Rail& r, size_t index, const std::string& why);
  void readData(Rail& r, size_t index, Clock::time_point now);
  void beginData(Rail& r);
  void finishFrame(Rail& r, size_t index);
  void railDown(const RailDown& d);
  void queueAck(Clock::time_point now, bool force);
  void writeOut(Rail& r, size_t index, Clock::time_point now);

  PluginContext& ctx_;
  std::unique_ptr<RailAcceptor> acceptor_;
  std::vector<Rail> rails_;
  std::map<uint64_t, std::unique_ptr<RecvRequest>> requests_;
  uint64_t nextGroup_ = 0;
  std::vector<uint8_t> scratch_;  // where dropped payloads go
  std::vector<int> acceptorFds_;  // pump()'s, kept to spare an allocation per call
  std::vector<pollfd> pfds_;
  Clock::time_point lastAck_{};
  Clock::time_point noLiveSince_{};
  bool ackDue_ = false;
};

}  // namespace nezha::ncclnet
