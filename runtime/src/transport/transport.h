// The setup half of the transport seam: how one rail is brought up between all ranks and handed
// to the communicator as a Channel (channel.h, the data half collectives see).
//
// Lifecycle, driven by the communicator (comm/communicator_setup.cc) at start and by re-admission
// (failover/readmission.cc) when a healed rail comes back:
//   1. makeTransport()   opens what peers will dial (a listening socket, a QP's address) now,
//                        so endpoint() can be published at rendezvous;
//   2. connect(job, …)   reaches the peers it connects at start-up (TCP: the set of
//                        peer_set.h, O(log N), the rest on first use in exchange(); verbs:
//                        every peer), authenticates every connection with the job token and
//                        the job table's session (a rebuilt rail gets a new session suffix,
//                        so nothing of an old generation is taken for the new one); TCP and
//                        verbs open their connections with peer_mesh.h;
//   3. releaseControl()  hands over one TCP connection per peer connected at start-up for the
//                        control mesh (failover/control_mesh.h); every transport provides
//                        them, because failure agreement must not depend on the data path it
//                        judges;
//   4. exchange()*       the data path (channel.h);
//   5. abort() / destruction: connections closed, registered memory and queues released (RAII:
//                        the object owns every fd and NIC resource it opened).
//
// Health: a transport that learns out of band that its rail is unusable (verbs async events
// such as a port error) reports it through the health listener, from any thread; the
// communicator then treats it like a carrier loss (shuts the rail, tells peers). TCP has no
// such events: carrier comes from the netlink link watch, and a dead path shows up as a
// RailError in exchange().
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/socket.h"
#include "bootstrap/rendezvous.h"
#include "transport/channel.h"

namespace nezha {

// A connect() that could not reach `peer` on the rail (pre-flight reports the pair).
class PeerConnectError : public RailError {
 public:
  PeerConnectError(int rail, int peer, const std::string& what)
      : RailError(rail, what), peer_(peer) {}
  int peer() const { return peer_; }

 private:
  int peer_;
};

class Transport : public Channel {
 public:
  // What peers need to reach this rank on the rail (published at rendezvous).
  virtual RailEndpoint endpoint() const = 0;
  // Connects to the peers it connects at start-up (see above) and authenticates each
  // connection; throws PeerConnectError (naming the peer it could not reach), RailError or
  // AuthError. Called once, from one thread (rails
  // connect concurrently, each on its own), before any exchange.
  virtual void connect(const JobTable& job, Deadline deadline) = 0;
  // The control connections opened by connect(), indexed by peer (own rank and peers not
  // connected at start-up: invalid). Once.
  virtual std::vector<Fd> releaseControl() = 0;
  // Connections to this rail's listener that were not peers of the job (stray, idle, garbage,
  // wrong token) and were turned away during connect().
  virtual uint64_t rejectedConnections() const = 0;
  // `why` names the event (e.g. "mlx5_0 port 1: IBV_EVENT_PORT_ERR"). Set before connect();
  // called from any thread, at most once per event; must not block.
  using HealthListener = std::function<void(const std::string& why)>;
  virtual void setHealthListener(HealthListener listener) { health_ = std::move(listener); }

 protected:
  void reportUnhealthy(const std::string& why) const {
    if (health_) health_(why);
  }

 private:
  HealthListener health_;
};

class VerbsDevice;

// The transport named by o.rails[railIndex].transport, bound to `address` (the rail's IP).
// `domain`: an rdma rail opens on that device's protection domain (VerbsChannel), so memory
// registered there can be posted from (IoOp::region); ignored by other transports. Throws
// ConfigError for a transport this build does not have.
std::unique_ptr<Transport> makeTransport(const Options& o, int railIndex,
                                         const std::string& address,
                                         std::shared_ptr<const VerbsDevice> domain = nullptr);

}  // namespace nezha
