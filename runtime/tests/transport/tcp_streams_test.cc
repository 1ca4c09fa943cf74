// How a TCP rail cuts a message across a peer's streams (TcpChannel::streamsFor): a message
// under two kMinStreamPartBytes stays whole on the first stream, a larger one is cut across
// them. Checked on the wire: two ranks over loopback connections opened here, whose per-socket
// byte counters (TCP_INFO) show which streams carried a message, and every byte compared.
#include <gtest/gtest.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <memory>
#include <vector>

#include "base/socket.h"
#include "test_util.h"
#include "transport/tcp/tcp_channel.h"

namespace nezha {
namespace {

using testing::kTestToken;
using testing::runRanks;

constexpr int kStreams = 3;
constexpr size_t kPart = TcpChannel::kMinStreamPartBytes;

Options pairOptions(int rank) {
  Options o;
  o.rank = rank;
  o.worldSize = 2;
  o.rails = testing::loopbackRails(1);
  o.jobToken = kTestToken;
  o.ioTimeout = std::chrono::milliseconds(20000);
  o.streamsPerPeer = kStreams;
  return o;
}

// Bytes this end of a TCP socket has received so far.
uint64_t bytesReceived(int fd) {
  tcp_info info{};
  socklen_t len = sizeof(info);
  EXPECT_EQ(::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len), 0);
  return info.tcpi_bytes_received;
}

// Two channels over kStreams data connections and a control connection opened by hand (the
// adopting constructor); `watch` keeps a duplicate of rank 1's data sockets to read counters.
struct Pair {
  Pair() {
    const std::string ip = pairOptions(0).rails[0].address;
    const Deadline deadline = Clock::now() + std::chrono::seconds(20);
    Fd listener = listenOn(ip, 0, "");
    const int port = localPort(listener.get());
    std::array<std::vector<Fd>, 2> conns;
    for (int c = 0; c <= kStreams; ++c) {
      conns[0].push_back(connectTo(ip, port, ip, "", deadline, 0, "streams test"));
      conns[1].push_back(acceptUntil(listener.get(), deadline, 0, "streams test"));
    }
    for (int s = 0; s < kStreams; ++s) watch.emplace_back(::dup(conns[1][s].get()));
    for (int rank : {0, 1}) {
      Fd control = std::move(conns[rank].back());
      conns[rank].pop_back();
      channels[rank] = std::make_unique<TcpChannel>(pairOptions(rank), 0, ip,
                                                    std::move(conns[rank]), std::move(control));
    }
  }

  // Rank 0 sends `bytes` to rank 1 (elements of `align` bytes); returns what each of rank 1's
  // streams received for it, after checking every byte.
  std::vector<uint64_t> send(size_t bytes, size_t align = 1) {
    std::vector<uint64_t> before;
    for (const Fd& fd : watch) before.push_back(bytesReceived(fd.get()));
    std::vector<char> out(bytes), in(bytes, 0);
    for (size_t i = 0; i < bytes; ++i) out[i] = static_cast<char>(i * 13 + bytes);
    runRanks(2, [&](int rank) {
      std::vector<IoOp> ops{rank == 0 ? IoOp::send(1, out.data(), bytes, align)
                                      : IoOp::recv(0, in.data(), bytes, align)};
      channels[rank]->exchange(ops);
    });
    EXPECT_EQ(in, out) << bytes << " bytes";
    std::vector<uint64_t> carried;
    for (size_t s = 0; s < watch.size(); ++s) {
      carried.push_back(bytesReceived(watch[s].get()) - before[s]);
    }
    return carried;
  }

  std::array<std::unique_ptr<TcpChannel>, 2> channels;
  std::vector<Fd> watch;
};

TEST(TcpStreams, ASmallMessageStaysWholeOnTheFirstStream) {
  Pair pair;
  for (size_t bytes : {size_t{1}, size_t{1024}, size_t{16} << 10, 2 * kPart - 1}) {
    EXPECT_EQ(pair.send(bytes), (std::vector<uint64_t>{bytes, 0, 0})) << bytes;
  }
}

TEST(TcpStreams, ALargeMessageIsCutAcrossAsManyStreamsAsItFills) {
  Pair pair;
  // Two parts' worth: two streams, halves.
  EXPECT_EQ(pair.send(2 * kPart), (std::vector<uint64_t>{kPart, kPart, 0}));
  // Enough for every stream: all three, whole elements only (4-byte elements of 1 MiB + 4).
  const size_t big = (1 << 20) + 4;
  const std::vector<uint64_t> carried = pair.send(big, 4);
  EXPECT_EQ(carried[0] + carried[1] + carried[2], big);
  for (uint64_t part : carried) {
    EXPECT_GT(part, big / 3 - 4);
    EXPECT_EQ(part % 4, 0u);
  }
}

}  // namespace
}  // namespace nezha
