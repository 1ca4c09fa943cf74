// Mutual challenge-response on a fresh connection: both ends prove they hold NEZHA_JOB_TOKEN
// with HMAC-SHA256 over fresh nonces; the token itself never crosses the wire. The `purpose`
// string (e.g. "data rail=1 from=3 to=0 stream=1") is bound into both MACs, so a client
// cannot claim another identity than the one it authenticated.
//
//   client -> server  frame: "NZA1", purpose, client nonce
//   server -> client  frame: server nonce, HMAC(token, "server" | purpose | nc | ns)
//   client -> server  frame: HMAC(token, "client" | purpose | ns | nc)
//   server -> client  frame: 1 byte, 1 = accepted, 0 = refused
#pragma once

#include <string>

#include "util/socket.h"

namespace nezha {

// Client side. Throws AuthError if the server fails its proof or refuses ours.
void authenticateAsClient(int fd, const std::string& token, const std::string& purpose,
                          Deadline deadline, int rail, const std::string& peerName);

// Server side. Returns the client's purpose string after a successful proof; throws AuthError
// (after telling the client it was refused) if the proof fails.
std::string authenticateClient(int fd, const std::string& token, Deadline deadline, int rail);

}  // namespace nezha
