#include "bootstrap/auth.h"

#include "base/error.h"
#include "base/sha256.h"
#include "base/wire.h"

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

std::string controlCredential(const std::string& token) {
  static constexpr char kMessage[] = "nezha/control/v1";
  const Digest d = hmacSha256(token.data(), token.size(), kMessage, sizeof(kMessage) - 1);
  return toHex(d.data(), d.size());
}

bool controlCredentialMatches(const std::string& token, const std::string& presented) {
  const std::string want = controlCredential(token);
  // Compare digests of both (fixed length), so timing says nothing about the credential.
  const Digest a = sha256(want.data(), want.size()), b = sha256(presented.data(), presented.size());
  return constantTimeEqual(a, b);
}

std::string ServerHandshake::onHello(const std::string& hello) {
  WireReader r(hello, "auth hello");
  if (r.str(16) != kMagic) throw AuthError("connection did not start with the nezha handshake");
  purpose_ = r.str(512);
  nc_ = r.str(kNonce);
  r.finish();
  if (nc_.size() != kNonce) throw AuthError("client sent a short nonce");
  ns_.assign(kNonce, '\0');
  randomBytes(ns_.data(), ns_.size());
  Digest m = mac(token_, "server", purpose_, nc_, ns_);
  return WireWriter().str(ns_).bytes(m.data(), m.size()).data();
}

std::string ServerHandshake::onProof(const std::string& proof, bool& accepted) {
  Digest got{};
  accepted = proof.size() == got.size() && !ns_.empty();
  if (accepted) {
    std::copy(proof.begin(), proof.end(), got.begin());
    accepted = constantTimeEqual(got, mac(token_, "client", purpose_, ns_, nc_));
  }
  return std::string(1, accepted ? '\1' : '\0');
}

}  // namespace nezha
