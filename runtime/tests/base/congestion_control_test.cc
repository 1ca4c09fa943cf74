// NEZHA_TCP_CONGESTION's resolution: "auto" takes the first algorithm of its preference that a
// socket here may really run, "host" leaves the socket alone, a name is checked against the
// kernel, and every refusal is a ConfigError naming the setting.
#include "base/congestion_control.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cstring>
#include <string>

#include "base/error.h"
#include "base/socket.h"

namespace nezha {
namespace {

bool kernelLets(const char* name) {
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  return setsockopt(fd.get(), IPPROTO_TCP, TCP_CONGESTION, name,
                    static_cast<socklen_t>(std::strlen(name))) == 0;
}

std::string errorOf(const std::string& setting) {
  try {
    resolveCongestionControl(setting, "NEZHA_TCP_CONGESTION");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(CongestionControlTest, AutoTakesTheFirstPreferredAlgorithmTheKernelLets) {
  std::string want;
  for (const char* name : kAutoCongestionControls) {
    if (kernelLets(name)) {
      want = name;
      break;
    }
  }
  ASSERT_FALSE(want.empty()) << "reno is in every kernel and every namespace may use it";
  const CongestionChoice c = resolveCongestionControl("auto", "NEZHA_TCP_CONGESTION");
  EXPECT_EQ(c.algorithm, want);
  EXPECT_EQ(c.socketOption, want);
  EXPECT_EQ(c.describe(), want + " (auto; host default " + hostCongestionControl() + ")");
}

TEST(CongestionControlTest, HostLeavesTheSocketsOnTheHostsDefault) {
  const CongestionChoice c = resolveCongestionControl("host", "NEZHA_TCP_CONGESTION");
  EXPECT_EQ(c.socketOption, "");
  EXPECT_EQ(c.algorithm, hostCongestionControl());
  EXPECT_NE(c.algorithm, "unknown");
  EXPECT_EQ(c.describe(), c.algorithm + " (host default)");
}

TEST(CongestionControlTest, ANameIsTakenAsIs) {
  const CongestionChoice c = resolveCongestionControl("reno", "NEZHA_TCP_CONGESTION");
  EXPECT_EQ(c.algorithm, "reno");
  EXPECT_EQ(c.socketOption, "reno");
  EXPECT_EQ(c.describe(), "reno (set)");
}

TEST(CongestionControlTest, BadSettingsAreErrorsNamingTheVariable) {
  EXPECT_NE(errorOf("").find("NEZHA_TCP_CONGESTION is empty (want auto, host"), std::string::npos);
  EXPECT_NE(errorOf("Auto").find("NEZHA_TCP_CONGESTION=\"Auto\" is not a congestion control name"),
            std::string::npos);
  const std::string refused = errorOf("nosuchcc");
  EXPECT_NE(refused.find("NEZHA_TCP_CONGESTION=\"nosuchcc\": the kernel refuses it"),
            std::string::npos)
      << refused;
  // The error lists what the user may pick instead.
  EXPECT_NE(refused.find("may use: "), std::string::npos) << refused;
  EXPECT_NE(refused.find("reno"), std::string::npos) << refused;
}

}  // namespace
}  // namespace nezha
