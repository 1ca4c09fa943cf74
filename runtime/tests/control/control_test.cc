// The control endpoint (NEZHA_CONTROL_ADDR) over real HTTP on loopback: /status in the shape
// the operator's prober reads, Prometheus /metrics, drain/restore applied at the same operation
// on every rank (asked on one rank only), and malformed requests answered with 4xx.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "base/json.h"
#include "base/sha256.h"
#include "base/socket.h"
#include "bootstrap/auth.h"
#include "control/control_address.h"
#include "control/control_server.h"
#include "control/http_client.h"
#include "control/request_auth.h"
#include "test_util.h"

namespace nezha {
namespace {

using namespace std::chrono_literals;
using namespace control_client;  // NOLINT: the HTTP helpers

// The operator computes the same credential in Go (operator/internal/prober/credential_test.go
// holds the same vector): a change on one side alone breaks one of the two tests.
TEST(ControlCredentialTest, MatchesTheOperatorsVector) {
  EXPECT_EQ(controlCredential("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"),
            "b0c6ee25b0f7e6197752d0359198a710aa1914ee42f53468e86d4ece96c1117d");
}

TEST(ControlTest, StatusMetricsDrainRestoreAndBadRequests) {
  auto comms = testing::makeJob(testing::jobOptions(2, 2, [](Options& o) {
    o.coldThreshold = 0;
    o.minSliceBytes = 0;
    o.probeBytes = 0;
    o.controlAddr = "127.0.0.200:0";  // on lo, but no rail's address
  }));
  const int port0 = comms[0]->controlPort(), port1 = comms[1]->controlPort();
  ASSERT_GT(port0, 0);
  ASSERT_NE(port0, port1);
  const size_t count = 40000;
  auto ops = [&](int k, std::vector<double>* share1) {
    testing::runRanks(2, [&](int r) {
      std::vector<int32_t> buf(count, r + 1);
      for (int i = 0; i < k; ++i) {
        comms[r]->allreduce(buf.data(), buf.data(), count, DataType::kInt32, ReduceOp::kSum);
      }
      // In place from r+1 on two ranks: 3 after one op, doubling with each further op.
      const int32_t want = 3 << (k - 1);
      size_t wrong = 0;
      for (size_t j = 0; j < count; ++j) wrong += buf[j] != want;
      EXPECT_EQ(wrong, 0u) << "rank " << r;
      (*share1)[r] = comms[r]->lastReport().split.at("r1");
    });
  };
  std::vector<double> share(2);
  ops(2, &share);
  EXPECT_GT(share[0], 0.0);

  // /status: the prober's fields (rank, rails[].name/state) plus bytes and split.
  std::string st = http(port1, "GET", "/status");
  ASSERT_NE(st.find("200 OK"), std::string::npos) << st;
  Json j = parseJson(body(st), "status");
  EXPECT_EQ(j.at("rank"), 1);
  const Json& rails = j.at("rails");
  ASSERT_EQ(rails.size(), 2u);
  EXPECT_EQ(rails[1].at("name"), "r1");
  EXPECT_EQ(rails[1].at("state"), "healthy");
  EXPECT_GT(rails[1].at("bytes").get<double>(), 0);
  // The start-up check ran on both rails (2 ranks: the one peer) and passed.
  const Json& preflight = j.at("preflight");
  EXPECT_EQ(preflight.at("result"), "passed") << preflight;
  EXPECT_EQ(preflight.at("policy"), "degrade");
  EXPECT_EQ(preflight.at("peers_checked"), 1);
  EXPECT_EQ(preflight.at("failures").size(), 0u);
  std::string met = body(http(port0, "GET", "/metrics"));
  EXPECT_NE(met.find("# TYPE nezha_runtime_operations_total counter\n"), std::string::npos) << met;
  EXPECT_NE(met.find("nezha_runtime_operations_total{job=\"\",rank=\"0\"} 2\n"), std::string::npos)
      << met;
  EXPECT_NE(met.find("nezha_runtime_rail_up{job=\"\",rank=\"0\",rail=\"r1\"} 1\n"),
            std::string::npos)
      << met;
  EXPECT_NE(met.find("nezha_runtime_rail_bytes_total{job=\"\",rank=\"0\",rail=\"r0\"}"),
            std::string::npos)
      << met;
  EXPECT_NE(met.find("# HELP nezha_runtime_failovers_total "), std::string::npos) << met;

  // Drain asked on rank 1 only: both ranks stop using r1 from the same operation on.
  // Without the job's credential nothing changes: 401, and the next ops still use r1.
  std::string denied = http(port1, "POST", "/rails/r1/drain");
  EXPECT_NE(denied.find(" 401 "), std::string::npos) << denied;
  EXPECT_NE(denied.find("WWW-Authenticate: Nezha-HMAC-SHA256"), std::string::npos) << denied;
  EXPECT_NE(body(denied).find("missing signature"), std::string::npos) << denied;
  EXPECT_NE(http(port1, "POST", "/rails/r1/drain", std::string(64, '0')).find(" 401 "),
            std::string::npos);
  EXPECT_NE(http(port1, "POST", "/rails/r1/drain", testing::kTestToken).find(" 401 "),
            std::string::npos);  // the token itself is not the credential
  // The old static bearer form is refused outright.
  EXPECT_NE(httpRaw(port1, "POST /rails/r1/drain HTTP/1.1\r\nAuthorization: Bearer " + kCredential +
                               "\r\n\r\n")
                .find(" 401 "),
            std::string::npos);
  ops(2, &share);
  EXPECT_GT(share[0], 0.0);
  EXPECT_GT(share[1], 0.0);
  const std::string sniffed = signedHead("POST", "/rails/r1/drain", kCredential);
  std::string d = httpRaw(port1, sniffed);
  EXPECT_NE(d.find("202"), std::string::npos) << d;
  ops(1, &share);  // the agreement at the end of this op applies the drain
  ops(1, &share);
  EXPECT_EQ(share, std::vector<double>(2, 0.0));
  j = parseJson(body(http(port0, "GET", "/status")), "status");
  EXPECT_EQ(j.at("rails")[1].at("state"), "drained");

  // Restore asked on rank 0: r1 carries a share again on both ranks.
  EXPECT_NE(http(port0, "POST", "/rails/r1/restore", kCredential).find("202"), std::string::npos);
  ops(2, &share);
  EXPECT_GT(share[0], 0.0);
  EXPECT_GT(share[1], 0.0);
  // The drain request replayed byte for byte (as someone who sniffed it would): refused, and
  // r1 keeps its share.
  const std::string replayed = httpRaw(port1, sniffed);
  EXPECT_NE(replayed.find(" 401 "), std::string::npos) << replayed;
  EXPECT_NE(body(replayed).find("replayed"), std::string::npos) << replayed;
  ops(2, &share);
  EXPECT_GT(share[1], 0.0);

  // Malformed or unknown requests: 4xx, and the endpoint keeps serving.
  EXPECT_NE(httpRaw(port0, "GARBAGE\r\n\r\n").find(" 400 "), std::string::npos);
  EXPECT_NE(httpRaw(port0, "GET nopath HTTP/1.1\r\n\r\n").find(" 400 "), std::string::npos);
  EXPECT_NE(http(port0, "GET", "/nothing").find(" 404 "), std::string::npos);
  EXPECT_NE(http(port0, "POST", "/rails/zz/drain", kCredential).find(" 404 "), std::string::npos);
  EXPECT_NE(http(port0, "POST", "/rails/r1/explode").find(" 404 "), std::string::npos);
  EXPECT_NE(http(port0, "GET", "/rails/r1/drain").find(" 405 "), std::string::npos);
  EXPECT_NE(http(port0, "POST", "/status").find(" 405 "), std::string::npos);
  EXPECT_NE(httpRaw(port0, std::string(10000, 'A')).find(" 413 "), std::string::npos);
  EXPECT_NE(http(port0, "GET", "/status").find("200 OK"), std::string::npos);
}

// Idle clients hold nothing up: five connections that never send a byte, and one that sends
// half a request, while GETs are answered. The idle ones are closed after their own 2 s.
// RailClass expectedBandwidthMbps reaches the runtime as NEZHA_RAILS "...:tcp@Mbit/s": /status
// compares it with the probe's measurement (both numbers) and flags a rail far below it.
TEST(ControlTest, ExpectedRailSpeedIsComparedWithTheMeasurement) {
  auto comms = testing::makeJob(testing::jobOptions(2, 2, [](Options& o) {
    o.rails[0].expectedMbps = 1;          // anything loopback does beats this
    o.rails[1].expectedMbps = 100000000;  // 100 Tbit/s: loopback is far below
    o.controlAddr = "127.0.0.200:0";
  }));
  Json j = parseJson(body(http(comms[0]->controlPort(), "GET", "/status")), "status");
  const Json& rails = j.at("rails");
  EXPECT_EQ(rails[0].at("expected_mbps"), 1);
  EXPECT_GT(rails[0].at("measured_mbps").get<double>(), 1);
  EXPECT_EQ(rails[0].at("degraded"), false) << rails[0];
  EXPECT_EQ(rails[1].at("expected_mbps"), 100000000);
  EXPECT_EQ(rails[1].at("degraded"), true) << rails[1];
  const std::string met = body(http(comms[0]->controlPort(), "GET", "/metrics"));
  EXPECT_NE(met.find("nezha_runtime_rail_degraded{job=\"\",rank=\"0\",rail=\"r1\"} 1"),
            std::string::npos)
      << met;
}

// Without an init probe, expected speeds seed the split (3:1 here) instead of equal shares.
TEST(ControlTest, ExpectedSpeedsSeedTheSplitWithoutAProbe) {
  auto comms = testing::makeJob(testing::jobOptions(2, 2, [](Options& o) {
    o.rails[0].expectedMbps = 3000;
    o.rails[1].expectedMbps = 1000;
    o.probeBytes = 0;
    o.policy = Policy::kStatic;
    o.coldThreshold = 0;
    o.minSliceBytes = 0;
  }));
  std::vector<double> share(2);
  testing::runRanks(2, [&](int r) {
    std::vector<float> buf(1 << 20, 1.0f);
    comms[r]->allreduce(buf.data(), buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum);
    share[r] = comms[r]->lastReport().split.at("r0");
  });
  EXPECT_NEAR(share[0], 0.75, 0.02);
  EXPECT_EQ(share[0], share[1]);
}

TEST(ControlServerTest, IdleConnectionsDoNotDelayAGet) {
  std::atomic<int> served{0};
  ControlServer server("127.0.0.200", 0, [&](const HttpRequest& req) {
    ++served;
    return HttpReply{200, "text/plain", req.path + "\n", ""};
  });
  std::vector<int> idle;
  for (int i = 0; i < 6; ++i) {
    const int fd = connectControl(server.port());
    ASSERT_GE(fd, 0);
    if (i == 5) {
      ASSERT_GT(::send(fd, "GET /sta", 8, MSG_NOSIGNAL), 0);
    }
    idle.push_back(fd);
  }
  // Each GET is answered while the idle connections are still open (their deadline is 2 s;
  // with a one-at-a-time server the first GET would wait behind all six of them).
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 3; ++i) {
    EXPECT_NE(http(server.port(), "GET", "/status").find("200 OK"), std::string::npos);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, ControlServer::kRequestDeadline);
  EXPECT_EQ(served.load(), 3);
  // The idle ones are closed by the server (EOF), counted, and never reached the handler.
  for (int fd : idle) {
    char c;
    timeval tv{5, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    EXPECT_EQ(::recv(fd, &c, 1, 0), 0);
    ::close(fd);
  }
  EXPECT_EQ(server.rejectedConnections(), 6u);
  EXPECT_EQ(served.load(), 3);
}

// A flood of idle sockets from one source neither fills the table nor keeps a request out:
// the source holds at most kMaxPerSource, the oldest idle one is evicted for each newcomer.
TEST(ControlServerTest, IdleFloodFromOneSourceIsEvictedNotServedA503) {
  ControlServer server("127.0.0.200", 0, [](const HttpRequest& req) {
    return HttpReply{200, "text/plain", req.path + "\n", ""};
  });
  constexpr int kIdle = 100;  // more than kMaxConnections (64): the old table answered 503
  std::vector<int> idle;
  for (int i = 0; i < kIdle; ++i) {
    const int fd = connectControl(server.port());
    ASSERT_GE(fd, 0);
    idle.push_back(fd);
  }
  for (int i = 0; i < 3; ++i) {
    const std::string reply = http(server.port(), "GET", "/status");
    EXPECT_NE(reply.find("200 OK"), std::string::npos) << reply;
  }
  // Every idle socket beyond the per-source cap was closed to make room (counted as rejected).
  EXPECT_GE(server.rejectedConnections(),
            static_cast<uint64_t>(kIdle - ControlServer::kMaxPerSource));
  for (int fd : idle) ::close(fd);
}

TEST(ControlServerTest, GarbageAndStrayConnectionsAreAnsweredOrDropped) {
  ControlServer server("127.0.0.200", 0, [](const HttpRequest&) {
    return HttpReply{200, "text/plain", "ok\n", ""};
  });
  std::string noise(500, '\0');
  for (size_t i = 0; i < noise.size(); ++i) noise[i] = static_cast<char>((i * 131 + 7) & 0xff);
  EXPECT_NE(httpRaw(server.port(), noise + "\r\n\r\n").find(" 400 "), std::string::npos);
  EXPECT_NE(httpRaw(server.port(), "GET / HTTP/2.0\r\n\r\n").find(" 505 "), std::string::npos);
  EXPECT_NE(
      httpRaw(server.port(), "POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello").find(" 413 "),
      std::string::npos);
  EXPECT_NE(httpRaw(server.port(), "GET / HTTP/1.1\r\nA: 1\r\nA: 2\r\n\r\n").find(" 400 "),
            std::string::npos);
  EXPECT_NE(http(server.port(), "GET", "/").find("200 OK"), std::string::npos);
}

TEST(ControlAddressTest, PrimaryAddressLocalRankAndRailsRefused) {
  const std::string routes =
      "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\n"
      "lo\t0000007F\t00000000\t0001\t0\t0\t0\t000000FF\n"
      "lo\t00000000\t0100007F\t0003\t0\t0\t0\t00000000\n";
  EXPECT_EQ(defaultRouteInterface(routes), "lo");
  EXPECT_EQ(defaultRouteInterface("Iface\tDestination\n"), "");
  ControlAddress a = resolveControlAddress(":9402", 0, {"10.0.0.1"}, routes);
  EXPECT_EQ(a.host, "127.0.0.1");  // lo's first address
  EXPECT_EQ(a.port, 9402);
  EXPECT_EQ(resolveControlAddress(":9402", 3, {}, routes).port, 9405);  // one port per process
  EXPECT_EQ(resolveControlAddress("10.1.2.3:0", 3, {}, routes).port, 0);
  auto error = [&](const std::string& addr, const std::vector<std::string>& rails,
                   const std::string& table) {
    try {
      resolveControlAddress(addr, 0, rails, table);
      return std::string();
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
  };
  EXPECT_NE(error("10.0.0.1:9402", {"10.0.0.1"}, routes).find("is a rail's address"),
            std::string::npos);
  EXPECT_NE(error("0.0.0.0:9402", {}, routes).find("wildcard"), std::string::npos);
  EXPECT_NE(error(":9402", {}, "Iface\n").find("no default route"), std::string::npos);
  EXPECT_NE(error("nonsense", {}, routes).find("NEZHA_CONTROL_ADDR"), std::string::npos);
  EXPECT_EQ(error(":65535", {}, routes), "");
  try {
    resolveControlAddress(":65535", 1, {}, routes);
    FAIL() << "port above 65535 accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("above 65535"), std::string::npos) << e.what();
  }
}

TEST(ControlTest, BadControlAddressIsAConfigError) {
  Options o;
  o.rails = testing::loopbackRails(1);
  o.controlAddr = "nonsense";
  try {
    Communicator c(o);
    FAIL() << "bad NEZHA_CONTROL_ADDR accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("NEZHA_CONTROL_ADDR"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace nezha
