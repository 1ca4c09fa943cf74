// nezha-sharp-aggregator (TEST ONLY): the aggregation node behind the libsharp_coll.so test
// double. Runs in the test bed's switch namespace on an address of the SHARP rail's bridge, so
// every contribution really crosses the rail, like a SHARP switch reducing in the network.
//
//   nezha-sharp-aggregator --listen IP:PORT [--stats FILE] [--hello-timeout-ms MS]
//
// Groups: ranks join (job id, nonce, size, rank) with a Hello; once the whole group joined,
// every member is told so. Operations: every member sends one contribution per operation; when
// all are in and their headers agree, the aggregator reduces them in rank order (libnezha's
// kernels, so the result is bit-identical for every member) and sends each member the result.
// A member that disconnects breaks its group: every other member's connection is closed (their
// library reports the tree gone). It is a listener: a connection that does not send a valid
// Hello within the hello timeout, sends garbage, claims a taken rank or a formed group, or
// exceeds the payload limit is closed and counted, and nothing else is affected.
//
// --stats FILE: JSON counters, rewritten (atomically) at start and after every change; the
// test bed reads it to check that allreduces were really done here.
#include <arpa/inet.h>
#include <fcntl.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "base/reduce.h"
#include "transport/sharp/sharp_api.h"
#include "wire.h"

namespace {

using Clock = std::chrono::steady_clock;
namespace wire = nezha::sharpdouble;
using namespace nezha::sharp;

std::atomic<bool> stopFlag{false};
void onSignal(int) { stopFlag = true; }

constexpr size_t kMaxOutBytes = 256u << 20;  // a member that stops reading is dropped

struct Conn {
  int fd = -1;
  bool member = false;
  Clock::time_point since;
  std::string in, out;
  std::pair<uint64_t, uint64_t> group{0, 0};
  uint32_t rank = 0;
};

struct Group {
  uint32_t size = 0;
  std::vector<int> members;  // fd per rank, -1 = not joined
  uint32_t joined = 0;
  bool ready = false;
  bool opOpen = false;
  wire::OpHeader head{};
  std::vector<std::string> contrib;
  uint32_t have = 0;
};

struct Stats {
  uint64_t groupsFormed = 0, groupsClosed = 0, groupsFailed = 0, allreduces = 0, bytesReduced = 0,
           rejected = 0, opErrors = 0;
};

bool toNezha(int32_t dt, nezha::DataType& out) {
  switch (dt) {
    case SHARP_DTYPE_FLOAT:
      out = nezha::DataType::kFloat32;
      return true;
    case SHARP_DTYPE_DOUBLE:
      out = nezha::DataType::kFloat64;
      return true;
    case SHARP_DTYPE_FLOAT_SHORT:
      out = nezha::DataType::kFloat16;
      return true;
    case SHARP_DTYPE_BFLOAT16:
      out = nezha::DataType::kBFloat16;
      return true;
    case SHARP_DTYPE_INT:
      out = nezha::DataType::kInt32;
      return true;
    case SHARP_DTYPE_LONG:
      out = nezha::DataType::kInt64;
      return true;
    default:
      return false;
  }
}

bool toNezha(int32_t op, nezha::ReduceOp& out) {
  switch (op) {
    case SHARP_OP_SUM:
      out = nezha::ReduceOp::kSum;
      return true;
    case SHARP_OP_MIN:
      out = nezha::ReduceOp::kMin;
      return true;
    case SHARP_OP_MAX:
      out = nezha::ReduceOp::kMax;
      return true;
    default:
      return false;  // PROD and the logical/bitwise/loc operators: not aggregated (as in hardware)
  }
}

class Aggregator {
 public:
  Aggregator(int listenFd, std::string statsPath, std::chrono::milliseconds helloTimeout)
      : listen_(listenFd), statsPath_(std::move(statsPath)), helloTimeout_(helloTimeout) {}

  void run() {
    writeStats();
    while (!stopFlag) {
      std::vector<pollfd> fds;
      fds.push_back({listen_, POLLIN, 0});
      for (const auto& [fd, c] : conns_) {
        fds.push_back({fd, static_cast<short>(POLLIN | (c.out.empty() ? 0 : POLLOUT)), 0});
      }
      const int r = poll(fds.data(), fds.size(), 100);
      if (r < 0 && errno != EINTR) {
        std::perror("nezha-sharp-aggregator: poll");
        return;
      }
      if (r > 0) {
        if (fds[0].revents & POLLIN) acceptAll();
        for (size_t i = 1; i < fds.size(); ++i) {
          if (fds[i].revents == 0 || conns_.count(fds[i].fd) == 0) continue;
          service(fds[i].fd, fds[i].revents);
        }
      }
      expireHellos();
    }
  }

 private:
  void acceptAll() {
    for (;;) {
      const int fd = accept4(listen_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;
      const int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      Conn c;
      c.fd = fd;
      c.since = Clock::now();
      conns_[fd] = std::move(c);
    }
  }

  void service(int fd, short revents) {
    if (revents & (POLLIN | POLLHUP | POLLERR)) {
      char buf[65536];
      for (;;) {
        const ssize_t n = recv(fd, buf, sizeof(buf), 0);
        if (n > 0) {
          conns_[fd].in.append(buf, static_cast<size_t>(n));
          if (!consume(fd)) return;
          continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) break;
        lost(fd);  // EOF or error
        return;
      }
    }
    if (conns_.count(fd) != 0) flush(fd);
  }

  // Parses what arrived; false when the connection was closed.
  bool consume(int fd) {
    Conn& c = conns_[fd];
    if (!c.member) {
      if (c.in.size() < sizeof(wire::Hello)) return true;
      wire::Hello h;
      std::memcpy(&h, c.in.data(), sizeof(h));
      c.in.erase(0, sizeof(h));
      return join(fd, h);
    }
    for (;;) {
      Conn& m = conns_[fd];
      if (m.in.size() < sizeof(wire::OpHeader)) return true;
      wire::OpHeader h;
      std::memcpy(&h, m.in.data(), sizeof(h));
      if (h.magic != wire::kOpMagic || h.bytes > wire::kMaxPayload || h.bytes == 0) {
        ++stats_.rejected;
        failGroup(m.group, "malformed operation header");
        return false;
      }
      if (m.in.size() < sizeof(h) + h.bytes) return true;
      std::string payload = m.in.substr(sizeof(h), h.bytes);
      m.in.erase(0, sizeof(h) + h.bytes);
      if (!contribute(fd, h, std::move(payload))) return false;
    }
  }

  bool join(int fd, const wire::Hello& h) {
    Conn& c = conns_[fd];
    const auto key = std::make_pair(h.jobId, h.nonce);
    auto it = groups_.find(key);
    const bool bad = h.magic != wire::kHelloMagic || h.version != wire::kVersion || h.size == 0 ||
                     h.size > wire::kMaxGroup || h.rank >= h.size ||
                     (it != groups_.end() && (it->second.size != h.size || it->second.ready ||
                                              it->second.members[h.rank] != -1));
    if (bad) {
      ++stats_.rejected;
      drop(fd);
      writeStats();
      return false;
    }
    Group& g = groups_[key];
    if (g.size == 0) {
      g.size = h.size;
      g.members.assign(h.size, -1);
      g.contrib.assign(h.size, std::string());
    }
    g.members[h.rank] = fd;
    ++g.joined;
    c.member = true;
    c.group = key;
    c.rank = h.rank;
    if (g.joined == g.size) {
      g.ready = true;
      ++stats_.groupsFormed;
      const wire::HelloReply ok{wire::kReplyMagic, 0};
      for (int m : g.members) queue(m, &ok, sizeof(ok));
      writeStats();
    }
    return true;
  }

  bool contribute(int fd, const wire::OpHeader& h, std::string payload) {
    const auto key = conns_[fd].group;
    const uint32_t rank = conns_[fd].rank;
    Group& g = groups_[key];
    if (!g.ready) {
      failGroup(key, "operation before the group formed");
      return false;
    }
    if (!g.opOpen) {
      g.opOpen = true;
      g.head = h;
    } else if (h.seq != g.head.seq || h.dtype != g.head.dtype || h.op != g.head.op ||
               h.count != g.head.count || h.bytes != g.head.bytes || !g.contrib[rank].empty()) {
      failGroup(key, "members disagree on the operation");
      return false;
    }
    g.contrib[rank] = std::move(payload);
    if (++g.have < g.size) return true;
    reduceAndReply(g);
    return conns_.count(fd) != 0;
  }

  void reduceAndReply(Group& g) {
    nezha::DataType dt;
    nezha::ReduceOp op;
    const wire::OpHeader h = g.head;
    const bool ok =
        toNezha(h.dtype, dt) && toNezha(h.op, op) && h.count * nezha::dataTypeSize(dt) == h.bytes;
    std::string result;
    if (ok) {
      result = std::move(g.contrib[0]);
      for (uint32_t r = 1; r < g.size; ++r) {
        nezha::reduceInto(result.data(), g.contrib[r].data(), h.count, dt, op);
      }
      ++stats_.allreduces;
      stats_.bytesReduced += h.bytes * g.size;
    } else {
      ++stats_.opErrors;
    }
    const wire::OpReply reply{wire::kReplyMagic, ok ? 0 : SHARP_COLL_ENOT_SUPP, h.seq,
                              ok ? h.bytes : 0};
    for (int m : g.members) {
      queue(m, &reply, sizeof(reply));
      if (ok) queue(m, result.data(), result.size());
    }
    for (auto& c : g.contrib) c.clear();
    g.have = 0;
    g.opOpen = false;
    writeStats();
  }

  void queue(int fd, const void* p, size_t n) {
    auto it = conns_.find(fd);
    if (it == conns_.end()) return;
    it->second.out.append(static_cast<const char*>(p), n);
    if (it->second.out.size() > kMaxOutBytes) return lost(fd);
    flush(fd);
  }

  void flush(int fd) {
    auto it = conns_.find(fd);
    if (it == conns_.end()) return;
    std::string& out = it->second.out;
    while (!out.empty()) {
      const ssize_t n = send(fd, out.data(), out.size(), MSG_NOSIGNAL);
      if (n > 0) {
        out.erase(0, static_cast<size_t>(n));
      } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
        return;
      } else {
        return lost(fd);
      }
    }
  }

  // A connection ended (EOF, error): a stray is counted, a member breaks its group.
  void lost(int fd) {
    auto it = conns_.find(fd);
    if (it == conns_.end()) return;
    if (!it->second.member) {
      ++stats_.rejected;
      drop(fd);
      writeStats();
      return;
    }
    // Leaving between operations is a member's comm_destroy (the group is done); leaving with
    // an operation open or before the group formed strands the others.
    auto g = groups_.find(it->second.group);
    const bool clean = g != groups_.end() && g->second.ready && !g->second.opOpen;
    failGroup(it->second.group, clean ? nullptr : "a member left");
  }

  // Closes every member's connection; `why` null = an orderly end (not counted as a failure).
  void failGroup(std::pair<uint64_t, uint64_t> key, const char* why) {
    auto it = groups_.find(key);
    if (it == groups_.end()) return;
    if (why != nullptr) {
      std::fprintf(stderr, "nezha-sharp-aggregator: group %016llx failed: %s\n",
                   static_cast<unsigned long long>(key.first), why);
    }
    for (int m : it->second.members) {
      if (m >= 0) drop(m);
    }
    groups_.erase(it);
    ++(why != nullptr ? stats_.groupsFailed : stats_.groupsClosed);
    writeStats();
  }

  void drop(int fd) {
    close(fd);
    conns_.erase(fd);
  }

  void expireHellos() {
    const auto now = Clock::now();
    std::vector<int> late;
    for (const auto& [fd, c] : conns_) {
      if (!c.member && now - c.since > helloTimeout_) late.push_back(fd);
    }
    for (int fd : late) {
      ++stats_.rejected;
      drop(fd);
    }
    if (!late.empty()) writeStats();
  }

  void writeStats() {
    if (statsPath_.empty()) return;
    const std::string tmp = statsPath_ + ".tmp";
    {
      std::ofstream out(tmp);
      out << "{\"groups_formed\": " << stats_.groupsFormed
          << ", \"groups_closed\": " << stats_.groupsClosed
          << ", \"groups_failed\": " << stats_.groupsFailed
          << ", \"allreduces\": " << stats_.allreduces
          << ", \"bytes_reduced\": " << stats_.bytesReduced
          << ", \"rejected_connections\": " << stats_.rejected
          << ", \"op_errors\": " << stats_.opErrors << ", \"groups_open\": " << groups_.size()
          << "}\n";
    }
    std::rename(tmp.c_str(), statsPath_.c_str());
  }

  int listen_;
  std::string statsPath_;
  std::chrono::milliseconds helloTimeout_;
  std::map<int, Conn> conns_;
  std::map<std::pair<uint64_t, uint64_t>, Group> groups_;
  Stats stats_;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "nezha-sharp-aggregator: %s\n"
               "usage: nezha-sharp-aggregator --listen IP:PORT [--stats FILE] "
               "[--hello-timeout-ms MS]\n",
               why);
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  std::string listenAt, statsPath;
  long helloMs = 2000;
  const option longOpts[] = {{"listen", required_argument, nullptr, 'l'},
                             {"stats", required_argument, nullptr, 's'},
                             {"hello-timeout-ms", required_argument, nullptr, 't'},
                             {"help", no_argument, nullptr, 'h'},
                             {nullptr, 0, nullptr, 0}};
  for (int c; (c = getopt_long(argc, argv, "l:s:t:h", longOpts, nullptr)) != -1;) {
    switch (c) {
      case 'l':
        listenAt = optarg;
        break;
      case 's':
        statsPath = optarg;
        break;
      case 't': {
        char* end = nullptr;
        helloMs = std::strtol(optarg, &end, 10);
        if (*end != '\0' || helloMs < 1 || helloMs > 600000) {
          usage("--hello-timeout-ms: want 1..600000");
        }
        break;
      }
      case 'h':
        usage("help");
      default:
        usage("unknown option");
    }
  }
  if (optind != argc) usage("unexpected argument");
  const size_t colon = listenAt.rfind(':');
  if (colon == std::string::npos) usage("--listen: want IP:PORT");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  char* end = nullptr;
  const long port = std::strtol(listenAt.c_str() + colon + 1, &end, 10);
  if (*end != '\0' || port < 1 || port > 65535 ||
      inet_pton(AF_INET, listenAt.substr(0, colon).c_str(), &addr.sin_addr) != 1) {
    usage("--listen: want IPv4:PORT");
  }
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(fd, 256) != 0) {
    std::fprintf(stderr, "nezha-sharp-aggregator: cannot listen on %s: %s\n", listenAt.c_str(),
                 std::strerror(errno));
    return 1;
  }
  struct sigaction sa {};
  sa.sa_handler = onSignal;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  Aggregator(fd, statsPath, std::chrono::milliseconds(helloMs)).run();
  close(fd);
  return 0;
}
