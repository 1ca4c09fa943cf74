// Environment parsing: every malformed case fails with a ConfigError whose message names the
// variable (or flag) and the offending piece.
#include "comm/config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <ostream>

#include "base/error.h"
#include "base/params.h"
#include "test_util.h"

namespace nezha {
namespace {

// Sets NEZHA_* variables for one test and restores a clean slate afterwards.
class EnvTest : public ::testing::Test {
 protected:
  void SetUp() override { clear(); }
  void TearDown() override { clear(); }
  static void clear() {
    for (const auto& p : allParams()) unsetenv(p.env);
    // The launcher fallbacks too: a case that sets LOCAL_RANK=x must not leak into the next.
    for (const char* v : {"RANK", "WORLD_SIZE", "LOCAL_RANK"}) unsetenv(v);
  }
  static void set(const std::map<std::string, std::string>& vars) {
    for (const auto& [k, v] : vars) setenv(k.c_str(), v.c_str(), 1);
  }
  static void setValid() {
    set({{"NEZHA_RAILS", "r0=lo:tcp,r1=lo:tcp"},
         {"NEZHA_RANK", "1"},
         {"NEZHA_WORLD_SIZE", "2"},
         {"NEZHA_RENDEZVOUS", "127.0.0.1:29500"},
         {"NEZHA_JOB_TOKEN", nezha::testing::kTestToken}});
  }
  // The ConfigError message of Options::fromEnv(), or "" if it succeeded.
  static std::string error() {
    try {
      Options::fromEnv();
      return "";
    } catch (const ConfigError& e) {
      return e.what();
    }
  }
};

TEST_F(EnvTest, ValidEnvironment) {
  setValid();
  set({{"NEZHA_POLICY", "static"}, {"NEZHA_COLD_THRESHOLD", "64K"}});
  Options o = Options::fromEnv();
  EXPECT_EQ(o.rank, 1);
  EXPECT_EQ(o.worldSize, 2);
  ASSERT_EQ(o.rails.size(), 2u);
  EXPECT_EQ(o.rails[1].name, "r1");
  EXPECT_EQ(o.rails[1].iface, "lo");
  EXPECT_EQ(o.rails[1].transport, "tcp");
  EXPECT_EQ(o.rendezvousHost, "127.0.0.1");
  EXPECT_EQ(o.rendezvousPort, 29500);
  EXPECT_EQ(o.policy, Policy::kStatic);
  EXPECT_EQ(*o.coldThreshold, 65536u);
  EXPECT_EQ(o.rails[1].expectedMbps, 0);
  EXPECT_EQ(o.preflight, PreflightPolicy::kDegrade);
}

TEST_F(EnvTest, PeerSilenceAndWaves) {
  setValid();
  Options o = Options::fromEnv();
  EXPECT_EQ(o.peerSilence.count(), 500);
  EXPECT_EQ(o.waveBytes, size_t(8) << 20);
  set({{"NEZHA_PEER_SILENCE_MS", "0"}, {"NEZHA_WAVE_BYTES", "0"}});
  o = Options::fromEnv();
  EXPECT_EQ(o.peerSilence.count(), 0);  // no heartbeats
  EXPECT_EQ(o.waveBytes, 0u);           // re-admission at operation boundaries only
  set({{"NEZHA_PEER_SILENCE_MS", "20"}});
  EXPECT_NE(error().find("NEZHA_PEER_SILENCE_MS=20 is too short"), std::string::npos) << error();
  set({{"NEZHA_PEER_SILENCE_MS", "500"}, {"NEZHA_WAVE_BYTES", "lots"}});
  EXPECT_NE(error().find("NEZHA_WAVE_BYTES"), std::string::npos) << error();
}

TEST_F(EnvTest, ExpectedRailSpeedAndPreflight) {
  setValid();
  set({{"NEZHA_RAILS", "r0=lo:tcp@25000,r1=lo:tcp"},
       {"NEZHA_PREFLIGHT", "wait"},
       {"NEZHA_PREFLIGHT_TIMEOUT_MS", "1500"},
       {"NEZHA_PREFLIGHT_BYTES", "1M"}});
  Options o = Options::fromEnv();
  EXPECT_EQ(o.rails[0].transport, "tcp");
  EXPECT_EQ(o.rails[0].expectedMbps, 25000);
  EXPECT_EQ(o.rails[1].expectedMbps, 0);
  EXPECT_EQ(o.preflight, PreflightPolicy::kWait);
  EXPECT_EQ(o.preflightTimeout.count(), 1500);
  EXPECT_EQ(o.preflightBytes, size_t(1) << 20);
}

// rdma rails are accepted when libnezha was built with libibverbs, refused at start otherwise.
TEST_F(EnvTest, RdmaRailsDependOnTheBuild) {
  setValid();
  set({{"NEZHA_RAILS", "r0=lo:rdma,r1=lo:tcp"}});
#ifdef NEZHA_WITH_VERBS
  EXPECT_EQ(error(), "");
#else
  EXPECT_NE(error().find("transport \"rdma\" is not available in this build (libnezha was built "
                         "without libibverbs"),
            std::string::npos)
      << error();
#endif
}

TEST_F(EnvTest, DefaultsAndFallbacks) {
  set({{"NEZHA_RAILS", "r0=lo:tcp"}, {"RANK", "0"}, {"WORLD_SIZE", "1"}});
  Options o = Options::fromEnv();
  EXPECT_EQ(o.rank, 0);
  EXPECT_EQ(o.worldSize, 1);
  EXPECT_EQ(o.policy, Policy::kAdaptive);
  EXPECT_FALSE(o.coldThreshold.has_value());  // auto
  EXPECT_EQ(o.streamsPerPeer, 2);
  EXPECT_TRUE(o.failover);
  EXPECT_EQ(o.progressFloor.count(), 1000);
  set({{"NEZHA_FAILOVER", "stop"}, {"NEZHA_PROGRESS_FLOOR_MS", "250"}});
  o = Options::fromEnv();
  EXPECT_FALSE(o.failover);
  EXPECT_EQ(o.progressFloor.count(), 250);
}

// The token as a mounted file (what the operator gives pods): read whole, one trailing newline
// ignored, and the env form still works alone; a file that cannot be read or disagrees with the
// variable is a ConfigError naming NEZHA_JOB_TOKEN_FILE.
TEST_F(EnvTest, JobTokenFromAMountedFile) {
  setValid();
  unsetenv("NEZHA_JOB_TOKEN");
  char path[] = "/tmp/nezha-token-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  const std::string content = std::string(nezha::testing::kTestToken) + "\n";
  ASSERT_EQ(write(fd, content.data(), content.size()), static_cast<ssize_t>(content.size()));
  close(fd);
  set({{"NEZHA_JOB_TOKEN_FILE", path}});
  EXPECT_EQ(Options::fromEnv().jobToken, nezha::testing::kTestToken);
  // Both set and equal: fine. Different: refused, naming both, never picking one silently.
  set({{"NEZHA_JOB_TOKEN", nezha::testing::kTestToken}});
  EXPECT_EQ(Options::fromEnv().jobToken, nezha::testing::kTestToken);
  set({{"NEZHA_JOB_TOKEN", std::string(64, 'e')}});
  EXPECT_NE(error().find("NEZHA_JOB_TOKEN_FILE and NEZHA_JOB_TOKEN are both set and hold "
                         "different tokens"),
            std::string::npos)
      << error();
  unsetenv("NEZHA_JOB_TOKEN");
  // Only one newline is dropped: a token file with two ends in a newline, which then differs.
  FILE* f = fopen(path, "w");
  ASSERT_NE(f, nullptr);
  fputs((std::string(nezha::testing::kTestToken) + "\n\n").c_str(), f);
  fclose(f);
  EXPECT_EQ(Options::fromEnv().jobToken, std::string(nezha::testing::kTestToken) + "\n");
  unlink(path);
  EXPECT_NE(error().find(strCat("NEZHA_JOB_TOKEN_FILE=", path, ": cannot read file")),
            std::string::npos)
      << error();
  set({{"NEZHA_JOB_TOKEN_FILE", "/tmp"}});  // a directory
  EXPECT_NE(error().find("NEZHA_JOB_TOKEN_FILE=/tmp: cannot read file"), std::string::npos)
      << error();
  // Empty file: the job has no secret.
  char empty[] = "/tmp/nezha-token-XXXXXX";
  const int efd = mkstemp(empty);
  ASSERT_GE(efd, 0);
  close(efd);
  set({{"NEZHA_JOB_TOKEN_FILE", empty}});
  EXPECT_NE(error().find("NEZHA_JOB_TOKEN is empty"), std::string::npos) << error();
  unlink(empty);
}

struct BadCase {
  const char* name;
  std::map<std::string, std::string> vars;  // applied over a valid environment
  std::string message;                      // must appear in the error
};

// gtest prints parameters in ctest names and failures; without this it dumps raw bytes.
void PrintTo(const BadCase& c, std::ostream* os) { *os << c.name; }

class BadEnvTest : public EnvTest, public ::testing::WithParamInterface<BadCase> {};

TEST_P(BadEnvTest, ClearErrorNamingTheField) {
  setValid();
  for (const auto& [k, v] : GetParam().vars) {
    if (v == "<unset>") {
      unsetenv(k.c_str());
    } else {
      setenv(k.c_str(), v.c_str(), 1);
    }
  }
  std::string err = error();
  EXPECT_NE(err.find(GetParam().message), std::string::npos) << "got: \"" << err << "\"";
}

INSTANTIATE_TEST_SUITE_P(
    Malformed, BadEnvTest,
    ::testing::Values(
        BadCase{"RailsUnset", {{"NEZHA_RAILS", "<unset>"}}, "NEZHA_RAILS is empty"},
        BadCase{"RailsNoEquals", {{"NEZHA_RAILS", "eth0:tcp"}}, "has no '='"},
        BadCase{"RailsNoTransport", {{"NEZHA_RAILS", "r0=eth0"}}, "has no ':transport'"},
        BadCase{"RailsEmptyEntry", {{"NEZHA_RAILS", "r0=lo:tcp,,r1=lo:tcp"}}, "empty entry"},
        BadCase{"RailsTrailingComma", {{"NEZHA_RAILS", "r0=lo:tcp,"}}, "empty entry"},
        BadCase{"RailsBadName", {{"NEZHA_RAILS", "r 0=lo:tcp"}}, "rail name \"r 0\""},
        BadCase{"RailsEmptyName", {{"NEZHA_RAILS", "=lo:tcp"}}, "rail name \"\""},
        BadCase{"RailsEmptyIface", {{"NEZHA_RAILS", "r0=:tcp"}}, "interface name \"\""},
        BadCase{"RailsLongIface", {{"NEZHA_RAILS", "r0=abcdefghijklmnopq:tcp"}}, "1-15 characters"},
        BadCase{
            "RailsUnknownTransport", {{"NEZHA_RAILS", "r0=lo:udp"}}, "unknown transport \"udp\""},
        BadCase{"RailsExpectedZero",
                {{"NEZHA_RAILS", "r0=lo:tcp@0"}},
                "NEZHA_RAILS entry \"r0=lo:tcp@0\" expected Mbit/s"},
        BadCase{"RailsExpectedNotNumber", {{"NEZHA_RAILS", "r0=lo:tcp@fast"}}, "expected Mbit/s"},
        BadCase{"PreflightUnknown", {{"NEZHA_PREFLIGHT", "later"}}, "NEZHA_PREFLIGHT=\"later\""},
        BadCase{"PreflightBytesZero", {{"NEZHA_PREFLIGHT_BYTES", "0"}}, "NEZHA_PREFLIGHT_BYTES"},
        BadCase{"RailsDuplicateName", {{"NEZHA_RAILS", "r0=lo:tcp,r0=lo:tcp"}}, "appears twice"},
        BadCase{"RankUnset", {{"NEZHA_RANK", "<unset>"}}, "NEZHA_RANK (or RANK) is not set"},
        BadCase{"RankNotNumber", {{"NEZHA_RANK", "one"}}, "NEZHA_RANK=\"one\" is not an integer"},
        BadCase{"RankNegative", {{"NEZHA_RANK", "-1"}}, "NEZHA_RANK=-1 is out of range"},
        BadCase{"RankTooLarge", {{"NEZHA_RANK", "2"}}, "NEZHA_RANK=2 must be < NEZHA_WORLD_SIZE=2"},
        BadCase{"RankFallbackBad", {{"NEZHA_RANK", "<unset>"}, {"RANK", "x"}}, "RANK=\"x\""},
        BadCase{
            "WorldUnset", {{"NEZHA_WORLD_SIZE", "<unset>"}}, "NEZHA_WORLD_SIZE (or WORLD_SIZE)"},
        BadCase{"WorldZero", {{"NEZHA_WORLD_SIZE", "0"}}, "NEZHA_WORLD_SIZE=0 is out of range"},
        BadCase{"WorldTrailingJunk", {{"NEZHA_WORLD_SIZE", "4x"}}, "is not an integer"},
        BadCase{
            "RendezvousUnset", {{"NEZHA_RENDEZVOUS", "<unset>"}}, "NEZHA_RENDEZVOUS is not set"},
        BadCase{"RendezvousNoPort", {{"NEZHA_RENDEZVOUS", "10.0.0.1"}}, "is not host:port"},
        BadCase{
            "RendezvousBadPort", {{"NEZHA_RENDEZVOUS", "h:99999"}}, "NEZHA_RENDEZVOUS port=99999"},
        BadCase{"RendezvousEmptyHost", {{"NEZHA_RENDEZVOUS", ":80"}}, "is not host:port"},
        BadCase{"TokenMissing", {{"NEZHA_JOB_TOKEN", "<unset>"}}, "NEZHA_JOB_TOKEN is empty"},
        BadCase{"TokenShortHex",
                {{"NEZHA_JOB_TOKEN", std::string(63, 'a')}},
                "NEZHA_JOB_TOKEN is too short: 63 hex digits"},
        BadCase{"TokenShortBase64",
                {{"NEZHA_JOB_TOKEN", std::string(42, 'z')}},
                "NEZHA_JOB_TOKEN is too short: 42 base64 characters"},
        BadCase{"TokenShortBytes",
                {{"NEZHA_JOB_TOKEN", std::string(31, '!')}},
                "NEZHA_JOB_TOKEN is too short: 31 bytes"},
        BadCase{"SocketBufferTooLarge",
                {{"NEZHA_SOCKET_BUFFER", "2G"}},
                "NEZHA_SOCKET_BUFFER=2147483648 bytes is out of range [0, 268435456]"},
        BadCase{"ProbeBytesTooLarge",
                {{"NEZHA_PROBE_BYTES", "2G"}},
                "NEZHA_PROBE_BYTES=2147483648 bytes is out of range"},
        BadCase{"MinSliceTooLarge",
                {{"NEZHA_MIN_SLICE_BYTES", "4G"}},
                "NEZHA_MIN_SLICE_BYTES=4294967296 bytes is out of range"},
        BadCase{"BytesOverflow",
                {{"NEZHA_RING_THRESHOLD", "99999999999999G"}},
                "NEZHA_RING_THRESHOLD=\"99999999999999G\" is too large"},
        BadCase{"LocalRankNegative",
                {{"NEZHA_LOCAL_RANK", "-1"}},
                "NEZHA_LOCAL_RANK=-1 is out of range"},
        BadCase{"LocalRankFallbackJunk",
                {{"NEZHA_LOCAL_RANK", "<unset>"}, {"LOCAL_RANK", "x"}},
                "LOCAL_RANK=\"x\""},
        BadCase{
            "PolicyUnknown", {{"NEZHA_POLICY", "fastest"}}, "NEZHA_POLICY=\"fastest\" is unknown"},
        BadCase{
            "ColdThresholdJunk", {{"NEZHA_COLD_THRESHOLD", "big"}}, "NEZHA_COLD_THRESHOLD=\"big\""},
        BadCase{"ColdThresholdUnit", {{"NEZHA_COLD_THRESHOLD", "64X"}}, "unknown unit \"X\""},
        BadCase{"StreamsZero", {{"NEZHA_STREAMS_PER_PEER", "0"}}, "NEZHA_STREAMS_PER_PEER=0"},
        BadCase{"QuickAckNotABool", {{"NEZHA_TCP_QUICKACK", "2"}}, "NEZHA_TCP_QUICKACK=2"},
        BadCase{"CongestionNotAName",
                {{"NEZHA_TCP_CONGESTION", "Cubic!"}},
                "NEZHA_TCP_CONGESTION=\"Cubic!\" is not a congestion control name"},
        BadCase{"CongestionUnknownToTheKernel",
                {{"NEZHA_TCP_CONGESTION", "nosuchcc"}},
                "NEZHA_TCP_CONGESTION=\"nosuchcc\": the kernel refuses it"},
        BadCase{"TimeoutJunk", {{"NEZHA_IO_TIMEOUT_MS", "10s"}}, "NEZHA_IO_TIMEOUT_MS=\"10s\""},
        BadCase{"GainRange", {{"NEZHA_TUNE_GAIN", "2"}}, "NEZHA_TUNE_GAIN=2 is out of range"},
        BadCase{"ProbeBytesJunk", {{"NEZHA_PROBE_BYTES", "-1"}}, "NEZHA_PROBE_BYTES=\"-1\""},
        BadCase{"VerboseJunk", {{"NEZHA_VERBOSE", "yes"}}, "NEZHA_VERBOSE=\"yes\""},
        BadCase{"FailoverUnknown",
                {{"NEZHA_FAILOVER", "sometimes"}},
                "NEZHA_FAILOVER=\"sometimes\" is unknown"},
        BadCase{"ProgressFloorTiny",
                {{"NEZHA_PROGRESS_FLOOR_MS", "1"}},
                "NEZHA_PROGRESS_FLOOR_MS=1 is out of range"}),
    [](const ::testing::TestParamInfo<BadCase>& i) { return std::string(i.param.name); });

TEST(ParseBytesTest, Units) {
  EXPECT_EQ(parseBytes("4096", "x"), 4096u);
  EXPECT_EQ(parseBytes("1K", "x"), 1024u);
  EXPECT_EQ(parseBytes("256M", "x"), 256u << 20);
  EXPECT_EQ(parseBytes("2GiB", "x"), size_t(2) << 30);
  EXPECT_THROW(parseBytes("", "x"), ConfigError);
  EXPECT_THROW(parseBytes("1.5M", "x"), ConfigError);
  EXPECT_THROW(parseBytes("99999999999999999999", "x"), ConfigError);
}

TEST(ValidateOptionsTest, RejectsBadHandBuiltOptions) {
  Options o;
  o.rails = {{"r0", "lo", "tcp", ""}};
  o.worldSize = 2;
  o.rank = 2;
  o.jobToken = nezha::testing::kTestToken;
  EXPECT_THROW(validateOptions(o), ConfigError);
  o.rank = 0;
  o.jobToken = "";
  EXPECT_THROW(validateOptions(o), ConfigError);
  o.jobToken = nezha::testing::kTestToken;
  o.rails.clear();
  EXPECT_THROW(validateOptions(o), ConfigError);
}

}  // namespace
}  // namespace nezha
