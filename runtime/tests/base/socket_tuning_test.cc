// SocketTuning's congestion control: a listener's accepted sockets and a connecting socket both
// run the one asked for (the kernel otherwise gives each the host's default), and a name the
// kernel refuses is a ConfigError that names its setting before any socket is made.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <chrono>
#include <string>
#include <thread>

#include "base/error.h"
#include "base/socket.h"

namespace nezha {
namespace {

using namespace std::chrono_literals;

std::string congestionOf(int fd) {
  char name[16] = {};
  socklen_t len = sizeof(name);
  EXPECT_EQ(getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, &len), 0);
  return std::string(name);
}

// reno: the one algorithm every kernel has and lets every network namespace use.
TEST(SocketTuningTest, BothEndsRunTheCongestionControlAskedFor) {
  SocketTuning tuning;
  tuning.congestion = "reno";
  Fd listen = listenOn("127.0.0.1", 0, "", 16, tuning);
  const int port = localPort(listen.get());
  std::thread dialer([&] {
    Fd fd = connectTo("127.0.0.1", port, "", "", Clock::now() + 10s, -1, "test", tuning);
    EXPECT_EQ(congestionOf(fd.get()), "reno");
  });
  Fd accepted = acceptUntil(listen.get(), Clock::now() + 10s, -1, "test");
  dialer.join();
  EXPECT_EQ(congestionOf(accepted.get()), "reno");
}

TEST(SocketTuningTest, RefusedNamesAreConfigErrorsNamingTheSetting) {
  EXPECT_NO_THROW(checkCongestionControl("reno", "NEZHA_TCP_CONGESTION"));
  try {
    checkCongestionControl("nosuchcc", "NEZHA_TCP_CONGESTION");
    FAIL() << "no error for an algorithm the kernel lacks";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("NEZHA_TCP_CONGESTION=\"nosuchcc\": the kernel refuses it"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("this kernel has: "), std::string::npos) << what;
  }
  EXPECT_THROW(checkCongestionControl("", "X"), ConfigError);
  EXPECT_THROW(checkCongestionControl("a_name_far_too_long", "X"), ConfigError);
  SocketTuning bad;
  bad.congestion = "nosuchcc";
  EXPECT_THROW(listenOn("127.0.0.1", 0, "", 16, bad), ConfigError);
}

}  // namespace
}  // namespace nezha
