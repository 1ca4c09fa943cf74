#include "control/request_auth.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "base/error.h"
#include "base/sha256.h"

namespace nezha {

namespace {
bool allHex(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](unsigned char c) {
    return std::isdigit(c) != 0 || (c >= 'a' && c <= 'f');
  });
}

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(' ');
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(' ') - b + 1);
}

// The scheme's "key=value, ..." parameters; false when malformed or a key repeats.
bool parseParams(const std::string& text, std::map<std::string, std::string>& out) {
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    const std::string part = trim(text.substr(start, comma - start));
    const size_t eq = part.find('=');
    if (eq == std::string::npos || !out.emplace(part.substr(0, eq), part.substr(eq + 1)).second) {
      return false;
    }
    start = comma + 1;
  }
  return true;
}
}  // namespace

std::string controlRequestSignature(const std::string& credential, const std::string& method,
                                    const std::string& path, const std::string& timestamp,
                                    const std::string& nonce) {
  const std::string message =
      strCat("nezha-control-v2\n", method, "\n", path, "\n", timestamp, "\n", nonce);
  const Digest d = hmacSha256(credential.data(), credential.size(), message.data(), message.size());
  return toHex(d.data(), d.size());
}

std::string signControlRequest(const std::string& credential, const std::string& method,
                               const std::string& path, int64_t unixSeconds,
                               const std::string& nonce) {
  const std::string ts = std::to_string(unixSeconds);
  return strCat(kControlAuthScheme, " ts=", ts, ", nonce=", nonce,
                ", sig=", controlRequestSignature(credential, method, path, ts, nonce));
}

std::string ControlRequestVerifier::check(const std::string& credential, const std::string& method,
                                          const std::string& path, const std::string& authorization,
                                          int64_t nowUnixSeconds) {
  const std::string scheme = strCat(kControlAuthScheme, " ");
  std::map<std::string, std::string> p;
  if (authorization.compare(0, scheme.size(), scheme) != 0 ||
      !parseParams(authorization.substr(scheme.size()), p) || p.size() != 3 || !p.count("ts") ||
      !p.count("nonce") || !p.count("sig")) {
    return strCat("malformed Authorization: want \"", kControlAuthScheme,
                  " ts=<unix seconds>, nonce=<hex>, sig=<hex>\"");
  }
  const std::string &ts = p["ts"], &nonce = p["nonce"], &sig = p["sig"];
  if (ts.empty() || ts.size() > 12 ||
      !std::all_of(ts.begin(), ts.end(), [](unsigned char c) { return std::isdigit(c) != 0; })) {
    return "malformed Authorization: ts is not unix seconds";
  }
  if (nonce.size() < 32 || nonce.size() > 64 || !allHex(nonce)) {
    return "malformed Authorization: nonce must be 32 to 64 lowercase hex digits";
  }
  // Compare digests of both (fixed length), so timing says nothing about the signature.
  const std::string want = controlRequestSignature(credential, method, path, ts, nonce);
  if (!constantTimeEqual(sha256(want.data(), want.size()), sha256(sig.data(), sig.size()))) {
    return "wrong signature for this job's control endpoint";
  }
  const int64_t when = std::strtoll(ts.c_str(), nullptr, 10);
  if (when < nowUnixSeconds - kWindow.count() || when > nowUnixSeconds + kWindow.count()) {
    return strCat("stale request: signed at ", when, ", now ", nowUnixSeconds, " (window ",
                  kWindow.count(), " s; check the clocks)");
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = seen_.begin(); it != seen_.end();) {
    it = it->second < nowUnixSeconds - kWindow.count() ? seen_.erase(it) : std::next(it);
  }
  if (seen_.count(nonce)) return "replayed request: this nonce was already used";
  if (seen_.size() >= kMaxRemembered) return "too many signed requests in the window; retry";
  seen_.emplace(nonce, when);
  return "";
}

}  // namespace nezha
