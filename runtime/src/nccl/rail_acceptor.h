// Every rail's listening socket of one NCCL connection, open only while a connection on that
// rail is expected: from listen() until the rail's first connection is in, and again from the
// moment the receiver loses the rail (its connection broke, or the sender sent RAIL_DOWN) until
// the sender's re-admission is in. A live rail has no listener at all, nor has a rail the
// operator drained.
//
// Each connection must pass bootstrap/auth's token handshake (HandshakeAcceptor, at most
// kMaxPendingPerSource pending handshakes per source address, idle ones evicted first, so a
// flood from elsewhere cannot push out the sender's reconnect) with a purpose
// (nccl/rail_purpose.h) that names this connection's nonce, the listener's rail and the rail's
// next epoch — the current epoch + 1, or the current epoch again once its connection is gone
// (the sender never saw the verdict of a handshake the receiver accepted, so it retries that
// epoch). Anything else is refused before the token is used; nothing else changes.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/socket.h"
#include "bootstrap/acceptor.h"
#include "nccl/handle.h"
#include "nccl/plugin_context.h"

namespace nezha::ncclnet {

class RailAcceptor {
 public:
  struct Accepted {
    size_t rail;
    Fd fd;  // non-blocking, authenticated
    uint32_t epoch;
  };
  static constexpr size_t kMaxPending = 32;
  static constexpr size_t kMaxPendingPerSource = 4;

  // Opens every rail's listener (the first connection of each rail is expected).
  RailAcceptor(PluginContext& ctx, const Nonce& nonce);
  ~RailAcceptor();
  RailAcceptor(const RailAcceptor&) = delete;
  RailAcceptor& operator=(const RailAcceptor&) = delete;

  const std::vector<RailAddress>& addresses() const { return addresses_; }
  // The rail's connection of `epoch` is in use: its listener closes.
  void installed(size_t rail, uint32_t epoch);
  // The rail's connection is gone: its listener opens again, on the same port (unless the
  // operator drained the rail: then when it is restored, see follow()).
  void lost(size_t rail);
  // Opens or closes listeners as the operator drains and restores rails (PluginContext).
  void follow();
  bool listening(size_t rail) const { return rails_[rail].acceptor != nullptr; }
  // Whether `epoch` may take the rail now (see the top of this file).
  bool acceptsEpoch(size_t rail, uint32_t epoch) const;

  // Never blocks: moves every handshake on and returns the connections that completed one.
  std::vector<Accepted> poll();
  // The sockets worth a poll() and whether a handshake's deadline has passed, so a comm can
  // fold them into its own poll and call poll() above only when it has work.
  void appendPollFds(std::vector<int>& fds) const;
  bool due(Clock::time_point now) const;
  // Connections refused so far (no token, wrong token, wrong purpose or epoch, idle, ...).
  uint64_t rejected() const;

 private:
  struct Rail {
    Fd listener;
    std::unique_ptr<HandshakeAcceptor> acceptor;
    uint32_t epoch = 0;  // of the connection installed last
    bool live = false;
    uint64_t rejectedBefore = 0;  // by acceptors of this rail already closed
  };
  void open(size_t rail);
  void close(size_t rail);
  bool serves(size_t rail, const std::string& purpose) const;

  PluginContext& ctx_;
  Nonce nonce_;
  std::vector<Rail> rails_;
  std::vector<RailAddress> addresses_;
};

}  // namespace nezha::ncclnet
