// The plugin's rail set-up under attack (nccl/pending_link.h; docs/security.md "NCCL plugin"):
// someone who saw the connect handle on NCCL's bootstrap (its nonce and rail ports) dials the
// receiver's rail listener before the genuine sender does. Without the job token they cannot
// prove the purpose the listener waits for, nor the one of a later rail generation, nor get
// anywhere with bytes that are no handshake: each is refused, the set-up keeps waiting, the
// genuine sender then connects, the receiver gets exactly what it sent, and the listener is
// gone once the rail is connected.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/error.h"
#include "base/sha256.h"
#include "base/socket.h"
#include "bootstrap/auth.h"
#include "nccl/pending_link.h"
#include "test_util.h"

namespace nezha::ncclnet {
namespace {

constexpr char kOtherToken[] = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

Options oneRail() {
  Options o;
  o.rails = nezha::testing::loopbackRails(1);
  o.rails[0].expectedMbps = 10000;
  o.jobToken = nezha::testing::kTestToken;
  o.ioTimeout = std::chrono::milliseconds(20000);
  o.probeBytes = 0;
  return o;
}

// True when nothing listens on the port any more (the connect is refused).
bool refused(const std::string& ip, int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, ip.c_str(), &sa.sin_addr);
  const bool no = ::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0;
  ::close(fd);
  return no;
}

TEST(NcclLinkAuth, AnImpostorWithTheSeenNonceIsRefusedAndChangesNothing) {
  const Options o = oneRail();
  const auto timeout = std::chrono::milliseconds(20000);
  ConnectHandle handle;
  auto listening = PendingLink::listen(o, timeout, handle);
  const std::string ip = ipv4Text(handle.rails[0].ipv4);
  const int port = handle.rails[0].port;
  const Deadline deadline = Clock::now() + std::chrono::seconds(20);
  const std::string nonce(handle.nonce.begin(), handle.nonce.end());
  auto hex = [](const std::string& bytes) {
    return toHex(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  };
  // The sender's first data stream, and the same rail of a later generation (a rebuild's
  // session, failover/readmission.cc).
  const std::string claims[] = {
      strCat("data session=", hex(nonce), " rail=0 from=1 to=0 stream=0"),
      strCat("data session=", hex(nonce + "/rail0/gen99"), " rail=0 from=1 to=0 stream=0"),
  };
  for (const std::string& claim : claims) {
    Fd fd = connectTo(ip, port, "127.0.0.1", "", deadline, 0, "impostor");
    EXPECT_THROW(authenticateAsClient(fd.get(), kOtherToken, claim, deadline, 0, "impostor"),
                 std::exception)
        << claim;
  }
  {  // No token at all: bytes that are no handshake; the listener hangs up.
    Fd fd = connectTo(ip, port, "127.0.0.1", "", deadline, 0, "impostor");
    const char junk[] = "GET / HTTP/1.0\r\n\r\n";
    ASSERT_EQ(::send(fd.get(), junk, sizeof junk, MSG_NOSIGNAL), static_cast<ssize_t>(sizeof junk));
    char b[64];
    EXPECT_LE(::recv(fd.get(), b, sizeof b, 0), 0);
  }
  EXPECT_EQ(listening->take(), nullptr) << "the set-up still waits for its sender";

  auto connecting = PendingLink::connect(o, timeout, handle);
  std::unique_ptr<EngineLink> receiver, sender;
  while (!receiver || !sender) {
    if (!receiver) receiver = listening->take();
    if (!sender) sender = connecting->take();
    std::this_thread::yield();
  }
  std::vector<uint8_t> out(300000), in(out.size(), 0);
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(i * 13 + 5);
  const uint64_t sid = sender->post(out.data(), out.size());
  const uint64_t rid = receiver->post(in.data(), in.size());
  uint64_t bytes = 0;
  while (!sender->test(sid, &bytes)) std::this_thread::yield();
  while (!receiver->test(rid, &bytes)) std::this_thread::yield();
  EXPECT_EQ(in, out);
  EXPECT_EQ(receiver->railState(0), "healthy");
  EXPECT_TRUE(refused(ip, port)) << "the rail's listener closes once its connections are in";
}

}  // namespace
}  // namespace nezha::ncclnet
