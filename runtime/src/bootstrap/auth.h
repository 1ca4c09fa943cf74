// Mutual challenge-response on a fresh connection: both ends prove they hold NEZHA_JOB_TOKEN
// with HMAC-SHA256 over fresh nonces; the token itself never crosses the wire. The `purpose`
// string (e.g. "data rail=1 from=3 to=0 stream=1") is bound into both MACs, so a client
// cannot claim another identity than the one it authenticated, and a listener refuses a purpose
// it does not serve (the rendezvous takes only "rendezvous", a rail only "data ..."), so a proof
// made for one purpose is never accepted for another.
//
//   client -> server  frame: "NZA1", purpose, client nonce
//   server -> client  frame: server nonce, HMAC(token, "server" | purpose | nc | ns)
//   client -> server  frame: HMAC(token, "client" | purpose | ns | nc)
//   server -> client  frame: 1 byte, 1 = accepted, 0 = refused
//
// The client checks the server's MAC before it sends its own: a server that cannot prove the
// token (an impostor listening where a peer should be) gets nothing computed from it.
#pragma once

#include <functional>
#include <string>

#include "base/socket.h"

namespace nezha {

// The key of the control endpoint's mutating requests (drain, restore):
// lowercase hex of HMAC-SHA256(key = job token, message = "nezha/control/v1"). Derived, so the
// token itself never crosses the wire; whoever holds the token (the job's ranks, the operator
// that created its Secret) can compute it. Rotating the token rotates it.
// Mutating control requests are signed with it per request (control/request_auth.h); it is
// never sent itself.
std::string controlCredential(const std::string& token);

// Client side. Throws AuthError if the server fails its proof or refuses ours.
void authenticateAsClient(int fd, const std::string& token, const std::string& purpose,
                          Deadline deadline, int rail, const std::string& peerName);

// Server side, as pure steps over whole frames, so a server can run many handshakes at once
// without blocking on any of them (bootstrap/acceptor.h). Each throws AuthError on bad input.
class ServerHandshake {
 public:
  // Which purposes this listener serves; an empty one serves any.
  using PurposeCheck = std::function<bool(const std::string& purpose)>;
  explicit ServerHandshake(const std::string& token, PurposeCheck serves = nullptr)
      : token_(token), serves_(std::move(serves)) {}
  // The token is held by reference (it is a secret: one copy, owned by the caller), so a
  // temporary would dangle: refuse it at compile time.
  explicit ServerHandshake(std::string&& token, PurposeCheck serves = nullptr) = delete;
  // The client's hello -> the challenge frame to send back. A purpose this listener does not
  // serve throws AuthError before anything is computed from the token.
  std::string onHello(const std::string& hello);
  // The client's proof -> the verdict frame to send back; `accepted` tells which it is.
  std::string onProof(const std::string& proof, bool& accepted);
  const std::string& purpose() const { return purpose_; }
  static constexpr size_t kMaxHello = 4 + 16 + 4 + 512 + 4 + 32;
  static constexpr size_t kMaxProof = 64;

 private:
  const std::string& token_;  // not owned; outlives the handshake
  PurposeCheck serves_;
  std::string purpose_, nc_, ns_;
};

}  // namespace nezha
