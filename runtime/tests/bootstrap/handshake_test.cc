// The token handshake (bootstrap/auth.h) against the attacks it must stop: an impostor server
// fishing for a client's proof, a client claiming a purpose the listener does not serve, and a
// proof made for one purpose offered for another. Real sockets (a socketpair), real frames.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <chrono>
#include <string>
#include <thread>

#include "base/error.h"
#include "base/sha256.h"
#include "base/socket.h"
#include "base/wire.h"
#include "bootstrap/auth.h"
#include "test_util.h"

namespace nezha {
namespace {

using namespace std::chrono_literals;

struct Pair {
  Fd client, server;
};
Pair socketPair() {
  int fds[2];
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  return {Fd(fds[0]), Fd(fds[1])};
}

std::string helloFor(const std::string& purpose, const std::string& nonce) {
  return WireWriter().str("NZA1").str(purpose).str(nonce).data();
}

// A server that does not hold the token answers the hello with a challenge it cannot back: the
// client must abort without sending its proof, so the impostor gets nothing computed from the
// token (nothing to replay or to grind against).
TEST(HandshakeTest, ClientSendsNoProofToAnUnprovenServer) {
  Pair p = socketPair();
  std::string afterChallenge = "unset";
  std::thread impostor([&] {
    const Deadline d = Clock::now() + 10s;
    const std::string wrongToken(64, 'f');
    ServerHandshake fake(wrongToken);
    sendFrame(p.server.get(), fake.onHello(recvFrame(p.server.get(), d, -1)), d, -1);
    // Whatever the client sends next; EOF (after the client gave up) reads as "".
    char buf[256];
    const ssize_t n = ::recv(p.server.get(), buf, sizeof(buf), 0);
    afterChallenge = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
  });
  try {
    authenticateAsClient(p.client.get(), testing::kTestToken, "rendezvous", Clock::now() + 10s, -1,
                         "impostor");
    ADD_FAILURE() << "authenticated against a server without the token";
  } catch (const AuthError& e) {
    EXPECT_NE(std::string(e.what()).find("our proof was not sent"), std::string::npos) << e.what();
  }
  p.client.reset();  // the client closes: the impostor reads EOF, not a proof
  impostor.join();
  EXPECT_EQ(afterChallenge, "");
}

// A listener refuses a purpose it does not serve before computing anything from the token.
TEST(HandshakeTest, ServerRefusesAPurposeItDoesNotServe) {
  const std::string token = testing::kTestToken;
  ServerHandshake rendezvous(token, [](const std::string& p) { return p == "rendezvous"; });
  try {
    rendezvous.onHello(helloFor("data rail=0 from=1 to=0 stream=0", std::string(32, 'n')));
    ADD_FAILURE() << "the rendezvous accepted a rail's purpose";
  } catch (const AuthError& e) {
    EXPECT_NE(std::string(e.what()).find("purpose \"data rail=0"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(rendezvous.onHello(helloFor("rendezvous", std::string(32, 'n'))));
}

// The purpose is bound into both MACs: a proof computed for one purpose does not pass for
// another, even with the right token and nonces.
TEST(HandshakeTest, AProofForOnePurposeIsRefusedForAnother) {
  const std::string token = testing::kTestToken;
  const std::string nc(32, 'c');
  for (const bool samePurpose : {true, false}) {
    ServerHandshake server(token);
    const std::string challenge = server.onHello(helloFor("data rail=0 from=1 to=0", nc));
    WireReader r(challenge, "challenge");
    const std::string ns = r.str(32);
    const std::string provenFor = samePurpose ? "data rail=0 from=1 to=0" : "rendezvous";
    const std::string msg = WireWriter().str("client").str(provenFor).str(ns).str(nc).data();
    const Digest proof = hmacSha256(token.data(), token.size(), msg.data(), msg.size());
    bool accepted = false;
    server.onProof(std::string(reinterpret_cast<const char*>(proof.data()), proof.size()),
                   accepted);
    EXPECT_EQ(accepted, samePurpose) << provenFor;
  }
}

}  // namespace
}  // namespace nezha
