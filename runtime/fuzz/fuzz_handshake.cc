// The server side of the token handshake, fed a hello and a proof split from the input. Any
// bytes are refused with an error; a proof is only accepted with the right MAC (never here).
// The same bytes as a control request's Authorization header must never verify either.
#include <cstddef>
#include <cstdint>
#include <string>

#include "bootstrap/auth.h"
#include "control/request_auth.h"
#include "nezha/nezha.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string token(64, 'a');
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  const size_t cut = size > 0 ? data[0] % (size + 1) : 0;
  nezha::ServerHandshake hs(token);
  try {
    hs.onHello(bytes.substr(0, cut));
  } catch (const nezha::Error&) {
    return 0;
  }
  bool accepted = true;
  hs.onProof(bytes.substr(cut), accepted);
  if (accepted) __builtin_trap();  // a random proof must never pass
  nezha::ControlRequestVerifier verifier;
  if (verifier.check(nezha::controlCredential(token), "POST", "/rails/r0/drain", bytes, 0)
          .empty()) {
    __builtin_trap();  // a random signature must never pass
  }
  return 0;
}
