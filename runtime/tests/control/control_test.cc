// The control endpoint (NEZHA_CONTROL_ADDR) over real HTTP on loopback: /status in the shape
// the operator's prober reads, Prometheus /metrics, drain/restore applied at the same operation
// on every rank (asked on one rank only), and malformed requests answered with 4xx.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "test_util.h"
#include "util/json.h"

namespace nezha {
namespace {

// Sends `raw` to 127.0.0.1:port and returns the whole reply.
std::string httpRaw(int port, const std::string& raw) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  EXPECT_EQ(::send(fd, raw.data(), raw.size(), MSG_NOSIGNAL), static_cast<ssize_t>(raw.size()));
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::recv(fd, buf, sizeof(buf), 0)) > 0) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return out;
}
std::string http(int port, const std::string& method, const std::string& path) {
  return httpRaw(port, method + " " + path + " HTTP/1.1\r\nHost: x\r\n\r\n");
}
std::string body(const std::string& reply) { return reply.substr(reply.find("\r\n\r\n") + 4); }

TEST(ControlTest, StatusMetricsDrainRestoreAndBadRequests) {
  auto comms = testing::makeJob(testing::jobOptions(2, 2, [](Options& o) {
    o.coldThreshold = 0;
    o.minSliceBytes = 0;
    o.probeBytes = 0;
    o.controlAddr = "127.0.0.1:0";
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
  std::string met = body(http(port0, "GET", "/metrics"));
  EXPECT_NE(met.find("nezha_ops_total 2"), std::string::npos) << met;
  EXPECT_NE(met.find("nezha_rail_up{rail=\"r1\"} 1"), std::string::npos) << met;
  EXPECT_NE(met.find("nezha_rail_bytes_total{rail=\"r0\"}"), std::string::npos) << met;

  // Drain asked on rank 1 only: both ranks stop using r1 from the same operation on.
  std::string d = http(port1, "POST", "/rails/r1/drain");
  EXPECT_NE(d.find("202"), std::string::npos) << d;
  ops(1, &share);  // the agreement at the end of this op applies the drain
  ops(1, &share);
  EXPECT_EQ(share, std::vector<double>(2, 0.0));
  j = parseJson(body(http(port0, "GET", "/status")), "status");
  EXPECT_EQ(j.at("rails")[1].at("state"), "drained");

  // Restore asked on rank 0: r1 carries a share again on both ranks.
  EXPECT_NE(http(port0, "POST", "/rails/r1/restore").find("202"), std::string::npos);
  ops(2, &share);
  EXPECT_GT(share[0], 0.0);
  EXPECT_GT(share[1], 0.0);

  // Malformed or unknown requests: 4xx, and the endpoint keeps serving.
  EXPECT_NE(httpRaw(port0, "GARBAGE\r\n\r\n").find(" 400 "), std::string::npos);
  EXPECT_NE(httpRaw(port0, "GET nopath HTTP/1.1\r\n\r\n").find(" 400 "), std::string::npos);
  EXPECT_NE(http(port0, "GET", "/nothing").find(" 404 "), std::string::npos);
  EXPECT_NE(http(port0, "POST", "/rails/zz/drain").find(" 404 "), std::string::npos);
  EXPECT_NE(http(port0, "POST", "/rails/r1/explode").find(" 404 "), std::string::npos);
  EXPECT_NE(http(port0, "GET", "/rails/r1/drain").find(" 405 "), std::string::npos);
  EXPECT_NE(http(port0, "POST", "/status").find(" 405 "), std::string::npos);
  EXPECT_NE(httpRaw(port0, std::string(10000, 'A')).find(" 413 "), std::string::npos);
  EXPECT_NE(http(port0, "GET", "/status").find("200 OK"), std::string::npos);
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
