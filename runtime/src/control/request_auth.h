// Signed control requests. A mutating request (POST /rails/{name}/drain|restore) carries
//
//   Authorization: Nezha-HMAC-SHA256 ts=<unix seconds>, nonce=<32..64 hex>, sig=<64 hex>
//
// where sig = lowercase hex of HMAC-SHA256(key = controlCredential(job token), message =
// "nezha-control-v2\n" METHOD "\n" PATH "\n" ts "\n" nonce). The credential itself never
// crosses the wire; a request is accepted only within kWindow of its timestamp and only once
// (its nonce is remembered for the window), so a sniffed request cannot be replayed, moved to
// another rail or action, or kept for later (docs/security.md "Control endpoint"). The
// operator's client signs the same way (operator/internal/prober/http.go).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace nezha {

inline constexpr char kControlAuthScheme[] = "Nezha-HMAC-SHA256";

// The hex signature of one request.
std::string controlRequestSignature(const std::string& credential, const std::string& method,
                                    const std::string& path, const std::string& timestamp,
                                    const std::string& nonce);

// The Authorization header value for a request signed now (used by tests and tools).
std::string signControlRequest(const std::string& credential, const std::string& method,
                               const std::string& path, int64_t unixSeconds,
                               const std::string& nonce);

class ControlRequestVerifier {
 public:
  static constexpr std::chrono::seconds kWindow{30};
  // Most nonces remembered at once; only validly signed requests are remembered, so only a
  // token holder can fill it (then further requests are refused until the window moves on).
  static constexpr size_t kMaxRemembered = 65536;

  // "" when `authorization` is a valid, fresh, first-seen signature of method+path (its nonce
  // is then spent); else why it is refused, for the 401 body. Thread-safe.
  std::string check(const std::string& credential, const std::string& method,
                    const std::string& path, const std::string& authorization,
                    int64_t nowUnixSeconds);

 private:
  std::mutex mu_;
  std::map<std::string, int64_t> seen_;  // nonce -> its request's timestamp
};

}  // namespace nezha
