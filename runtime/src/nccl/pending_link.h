// One NCCL connection's EngineLink while it is being built, off NCCL's proxy thread: NCCL calls
// connect() and accept() again and again until they hand back a comm, and must never wait in
// them (docs/nccl.md "Connection set-up"). The set-up itself blocks — each rail's connections
// are opened and authenticated, then both ends measure the rails together (EngineLink's
// constructor) — so it runs on a thread of its own and take() only looks at the result.
//
// The rails connect the transports' own way (transport/peer_mesh.h): every connection proves
// the job token with an HMAC challenge-response whose purpose binds the session (the handle's
// random nonce), the rail, the direction and the stream; a rebuilt rail adds its generation to
// the session (failover/readmission.cc), so only the next generation can replace a rail. The
// receiver (EngineLink::kReceiver, rank 0) listens; each rail's listener is open from listen()
// until its peer's connections are in (or the set-up gave up), and never while a rail is live.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "nccl/engine_link.h"
#include "nccl/handle.h"
#include "nezha/nezha.hpp"

namespace nezha::ncclnet {

class PendingLink {
 public:
  using Duration = std::chrono::milliseconds;
  // Receiver: opens every rail's listener now and fills `handle` (nonce, rail ports) for NCCL
  // to carry to the sender. `base`: the plugin's rails and engine knobs.
  // The set-up fails (take() throws) when it is not done within `timeout`. `memory`: the
  // domains the rails open on and the memory path (nccl/gpu_memory.h: GpuMemory::linkMemory).
  static std::unique_ptr<PendingLink> listen(const Options& base, Duration timeout,
                                             ConnectHandle& handle, LinkMemory memory = {});
  // Sender: dials the rails `handle` names (decoded, magic checked, by the caller).
  static std::unique_ptr<PendingLink> connect(const Options& base, Duration timeout,
                                              const ConnectHandle& handle, LinkMemory memory = {});
  // Gives up on a set-up still running: it ends by itself (at the connect deadline at the
  // latest) and frees what it built; NCCL closing a listen comm never waits for its peer.
  ~PendingLink();
  PendingLink(const PendingLink&) = delete;
  PendingLink& operator=(const PendingLink&) = delete;

  // Never blocks. The link once it is built (once; later calls return null), null while it is
  // being built. Throws CommError naming the cause when the set-up failed.
  std::unique_ptr<EngineLink> take();

  struct State;

 private:
  explicit PendingLink(std::shared_ptr<State> state) : state_(std::move(state)) {}
  std::shared_ptr<State> state_;
};

// The engine's options for one end of a connection: `base` with rank `rank` of 2.
Options linkOptions(const Options& base, int rank);

}  // namespace nezha::ncclnet
