#include "bootstrap/auth.h"

#include "core/error.h"
#include "util/sha256.h"
#include "util/wire.h"

namespace nezha {

namespace {
constexpr char kMagic[] = "NZA1";
constexpr size_t kNonce = 32;

Digest mac(const std::string& token, const char* role, const std::string& purpose,
           const std::string& first, const std::string& second) {
  WireWriter w;
  w.str(role).str(purpose).str(first).str(second);
  return hmacSha256(token.data(), token.size(), w.data().data(), w.data().size());
}

std::string digestStr(const Digest& d) {
  return std::string(reinterpret_cast<const char*>(d.data()), d.size());
}
}  // namespace

void authenticateAsClient(int fd, const std::string& token, const std::string& purpose,
                          Deadline deadline, int rail, const std::string& peerName) {
  std::string nc(kNonce, '\0');
  randomBytes(nc.data(), nc.size());
  sendFrame(fd, WireWriter().str(kMagic).str(purpose).str(nc).data(), deadline, rail);

  std::string reply = recvFrame(fd, deadline, rail);
  WireReader r(reply, "auth challenge from " + peerName);
  std::string ns = r.str(kNonce);
  Digest serverMac;
  r.bytes(serverMac.data(), serverMac.size());
  r.finish();
  if (ns.size() != kNonce) throw AuthError(strCat(peerName, " sent a short nonce"));
  bool serverOk = constantTimeEqual(serverMac, mac(token, "server", purpose, nc, ns));

  // Prove ourselves even if the server failed, so the server can log the refusal too.
  sendFrame(fd, digestStr(mac(token, "client", purpose, ns, nc)), deadline, rail);
  if (!serverOk) {
    throw AuthError(strCat(peerName,
                           " failed to prove NEZHA_JOB_TOKEN (the tokens differ or it is not a "
                           "peer of this job)"));
  }
  std::string verdict = recvFrame(fd, deadline, rail);
  if (verdict != std::string(1, '\1')) {
    throw AuthError(strCat(peerName, " refused our NEZHA_JOB_TOKEN proof"));
  }
}

std::string authenticateClient(int fd, const std::string& token, Deadline deadline, int rail) {
  std::string hello = recvFrame(fd, deadline, rail);
  WireReader r(hello, "auth hello");
  if (r.str(16) != kMagic) throw AuthError("connection did not start with the nezha handshake");
  std::string purpose = r.str(512);
  std::string nc = r.str(kNonce);
  r.finish();
  if (nc.size() != kNonce) throw AuthError("client sent a short nonce");

  std::string ns(kNonce, '\0');
  randomBytes(ns.data(), ns.size());
  Digest m = mac(token, "server", purpose, nc, ns);
  sendFrame(fd, WireWriter().str(ns).bytes(m.data(), m.size()).data(), deadline, rail);

  std::string proof = recvFrame(fd, deadline, rail, 64);
  Digest got{};
  bool ok = proof.size() == got.size();
  if (ok) {
    std::copy(proof.begin(), proof.end(), got.begin());
    ok = constantTimeEqual(got, mac(token, "client", purpose, ns, nc));
  }
  sendFrame(fd, std::string(1, ok ? '\1' : '\0'), deadline, rail);
  if (!ok) {
    throw AuthError(strCat("refused a client (\"", purpose, "\"): wrong NEZHA_JOB_TOKEN proof"));
  }
  return purpose;
}

}  // namespace nezha
