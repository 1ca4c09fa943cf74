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
  // Abort before our proof leaves: an unproven server learns nothing computed from the token.
  if (!constantTimeEqual(serverMac, mac(token, "server", purpose, nc, ns))) {
    throw AuthError(strCat(peerName,
                           " failed to prove NEZHA_JOB_TOKEN (the tokens differ or it is not a "
                           "peer of this job); our proof was not sent"));
  }
  sendFrame(fd, digestStr(mac(token, "client", purpose, ns, nc)), deadline, rail);
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

std::string ServerHandshake::onHello(const std::string& hello) {
  WireReader r(hello, "auth hello");
  if (r.str(16) != kMagic) throw Error("connection did not start with the nezha handshake");
  purpose_ = r.str(512);
  nc_ = r.str(kNonce);
  r.finish();
  if (nc_.size() != kNonce) throw AuthError("client sent a short nonce");
  if (serves_ && !serves_(purpose_)) {
    throw AuthError(strCat("client asked for purpose \"", purpose_.substr(0, 64),
                           "\", which this listener does not serve"));
  }
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
