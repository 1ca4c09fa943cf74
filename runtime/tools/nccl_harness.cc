// nezha-nccl-harness: drives an NCCL net plugin exactly as NCCL's proxy thread does, without
// NCCL or a GPU. Ranks are processes (on the test bed: one per network namespace) that trade
// connect handles through files in --dir, then:
//   --mode p2p   tagged sends into grouped receives, many requests in flight, sizes from 0 bytes
//                to several chunks, every byte checked (a schedule both ends derive from --seed)
//   --mode ring  ring allreduce (reduce-scatter + allgather, float32 sums of small integers so
//                the result is exact), the way NCCL runs one over the net; every element checked
//   --mode stream  rank 0 streams to rank 1 (one direction, NCCL send/recv), every byte checked
//   --transport plain  the same ring or stream over one plain TCP socket per neighbour on --iface
//                (the NCCL-socket-like baseline of the benchmark), no plugin at all
// Output: one JSON object on stdout (checks, timings, busbw, the plugin's per-rail counters).
#include <arpa/inet.h>
#include <dlfcn.h>
#include <getopt.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iomanip>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "nccl/net_abi.h"

namespace {

using Clock = std::chrono::steady_clock;

// Wall-clock time, for traces a benchmark lines up with the faults it injects (same host).
double unixSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

struct Args {
  std::string plugin;
  std::string dir;
  std::string mode = "ring";
  std::string transport = "plugin";
  std::string iface;  // plain transport: the rail to use
  int rank = -1;
  int world = 0;
  int version = 12;
  uint64_t bytes = 4 << 20;
  uint64_t slot = 512 * 1024;  // ring mode: bytes per isend (NCCL: buffer size / NCCL_STEPS)
  int iters = 10;
  double seconds = 0;  // ring: run at least this long (loop mode for failure scenarios)
  // ring --seconds loop: stop early, at the next operation, once DIR/<stopFile> exists (a
  // scenario that checks something while traffic flows ends the loop when it is done).
  std::string stopFile;
  uint32_t seed = 1;
  int timeoutMs = 60000;
  int idleSleepUs = 0;
};

// NCCL's logger, as NCCL hands it to the plugin: warnings always, INFO lines (the plugin's
// failover records, its choices at init) when NCCL_DEBUG=INFO or TRACE, as NCCL decides.
void ncclLikeLogger(ncclDebugLogLevel level, unsigned long /*flags*/, const char* file, int line,
                    const char* fmt, ...) {
  static const bool info = [] {
    const char* d = std::getenv("NCCL_DEBUG");
    return d != nullptr && (std::strcmp(d, "INFO") == 0 || std::strcmp(d, "TRACE") == 0);
  }();
  if (level != NCCL_LOG_WARN && !(info && level >= NCCL_LOG_INFO)) return;
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  std::fprintf(stderr, "NCCL %s %s:%d %s\n", level == NCCL_LOG_WARN ? "WARN" : "INFO", file, line,
               msg);
}

[[noreturn]] void die(const std::string& msg) {
  std::fprintf(stderr, "nezha-nccl-harness: %s\n", msg.c_str());
  std::exit(1);
}

void usage() {
  std::fprintf(
      stderr,
      "usage: nezha-nccl-harness --plugin LIB --rank R --world N --dir DIR\n"
      "         [--mode p2p|ring|stream] [--transport plugin|plain --iface IF] [--version "
      "8|11|12]\n"
      "         [--bytes B] [--iters K] [--seconds S] [--seed N] [--timeout-ms MS] [--slot B]\n"
      "         [--idle-sleep-us US] [--stop-file NAME]\n");
  std::exit(2);
}

uint64_t parseNumber(const char* flag, const char* v) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long n = std::strtoull(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0') die(std::string(flag) + ": not a number: " + v);
  return n;
}

Args parseArgs(int argc, char** argv) {
  static const option opts[] = {{"plugin", required_argument, nullptr, 'p'},
                                {"rank", required_argument, nullptr, 'r'},
                                {"world", required_argument, nullptr, 'w'},
                                {"dir", required_argument, nullptr, 'd'},
                                {"mode", required_argument, nullptr, 'm'},
                                {"transport", required_argument, nullptr, 't'},
                                {"iface", required_argument, nullptr, 'i'},
                                {"version", required_argument, nullptr, 'v'},
                                {"bytes", required_argument, nullptr, 'b'},
                                {"iters", required_argument, nullptr, 'n'},
                                {"seconds", required_argument, nullptr, 's'},
                                {"seed", required_argument, nullptr, 'S'},
                                {"timeout-ms", required_argument, nullptr, 'T'},
                                {"slot", required_argument, nullptr, 'L'},
                                {"idle-sleep-us", required_argument, nullptr, 'I'},
                                {"stop-file", required_argument, nullptr, 'X'},
                                {"help", no_argument, nullptr, 'h'},
                                {nullptr, 0, nullptr, 0}};
  Args a;
  int c;
  while ((c = getopt_long(argc, argv, "", opts, nullptr)) != -1) {
    switch (c) {
      case 'p':
        a.plugin = optarg;
        break;
      case 'r':
        a.rank = static_cast<int>(parseNumber("--rank", optarg));
        break;
      case 'w':
        a.world = static_cast<int>(parseNumber("--world", optarg));
        break;
      case 'd':
        a.dir = optarg;
        break;
      case 'm':
        a.mode = optarg;
        break;
      case 't':
        a.transport = optarg;
        break;
      case 'i':
        a.iface = optarg;
        break;
      case 'v':
        a.version = static_cast<int>(parseNumber("--version", optarg));
        break;
      case 'b':
        a.bytes = parseNumber("--bytes", optarg);
        break;
      case 'n':
        a.iters = static_cast<int>(parseNumber("--iters", optarg));
        break;
      case 's':
        a.seconds = std::atof(optarg);
        break;
      case 'S':
        a.seed = static_cast<uint32_t>(parseNumber("--seed", optarg));
        break;
      case 'T':
        a.timeoutMs = static_cast<int>(parseNumber("--timeout-ms", optarg));
        break;
      case 'L':
        a.slot = parseNumber("--slot", optarg);
        break;
      case 'I':
        a.idleSleepUs = static_cast<int>(parseNumber("--idle-sleep-us", optarg));
        break;
      case 'X':
        a.stopFile = optarg;
        break;
      default:
        usage();
    }
  }
  if (optind != argc || a.dir.empty() || a.world < 2 || a.rank < 0 || a.rank >= a.world) usage();
  if (a.mode != "p2p" && a.mode != "ring" && a.mode != "stream") {
    die("--mode must be p2p, ring or stream");
  }
  if (a.mode == "stream" && a.world != 2) die("--mode stream needs --world 2");
  if (a.transport == "plugin" && a.plugin.empty()) die("--plugin is required");
  if (a.transport == "plain" && (a.iface.empty() || a.mode == "p2p"))
    die("--transport plain needs --iface and --mode ring or stream");
  if (a.transport != "plugin" && a.transport != "plain") die("--transport must be plugin or plain");
  if (a.version != 8 && a.version != 11 && a.version != 12) die("--version must be 8, 11 or 12");
  if (a.slot < 1024 || a.slot > (1u << 30)) die("--slot must be 1K..1G bytes");
  if (a.slot % sizeof(float) != 0) die("--slot must be a multiple of 4 bytes (float32 elements)");
  return a;
}

// ---- handle exchange through files --------------------------------------------------------
void writeBlob(const std::string& dir, const std::string& name, const void* data, size_t n) {
  const std::string tmp = dir + "/." + name + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary);
    f.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
    if (!f) die("cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), (dir + "/" + name).c_str()) != 0) die("cannot publish " + name);
}

std::string readBlob(const std::string& dir, const std::string& name, size_t n,
                     Clock::time_point deadline) {
  const std::string path = dir + "/" + name;
  for (;;) {
    std::ifstream f(path, std::ios::binary);
    if (f) {
      std::string s(n, '\0');
      f.read(s.data(), static_cast<std::streamsize>(n));
      if (static_cast<size_t>(f.gcount()) == n) return s;
    }
    if (Clock::now() > deadline) die("timed out waiting for " + path);
    std::this_thread::sleep_for(
        std::chrono::milliseconds(5));  // polling a file: no event to wait on
  }
}

// ---- the plugin, behind one interface for v8, v11 and v12
// ----------------------------------------
class Net {
 public:
  explicit Net(const Args& a) {
    lib_ = dlopen(a.plugin.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib_ == nullptr) die(std::string("dlopen: ") + dlerror());
    if (a.version == 12) {
      v12_ = loadVirtual<ncclNet_v12_t, ncclNetProperties_v12_t>("ncclNetPlugin_v12", "v12");
    } else if (a.version == 11) {
      v11_ = loadVirtual<ncclNet_v11_t, ncclNetProperties_v11_t>("ncclNetPlugin_v11", "v11");
    } else {
      v8_ = static_cast<const ncclNet_v8_t*>(dlsym(lib_, "ncclNetPlugin_v8"));
      if (v8_ == nullptr) die("the plugin has no ncclNetPlugin_v8");
      check(v8_->init(ncclLikeLogger), "init");
      ncclNetProperties_v8_t p{};
      check(v8_->getProperties(0, &p), "getProperties");
      name_ = describeProps(p, "v8");
      maxRecvs_ = p.maxRecvs;
    }
    int ndev = 0;
    check(call([&](const auto& n) { return n.devices(&ndev); },
               [&](const ncclNet_v8_t& n) { return n.devices(&ndev); }),
          "devices");
    if (ndev != 1) die("expected one device, the plugin reports " + std::to_string(ndev));
    stats_ = reinterpret_cast<int (*)(char*, int)>(dlsym(lib_, "nezhaNcclStats"));
  }
  // v11 and v12: the table, initialised, its one device described.
  template <typename Table, typename Props>
  const Table* loadVirtual(const char* symbol, const char* version) {
    const auto* table = static_cast<const Table*>(dlsym(lib_, symbol));
    if (table == nullptr) die(std::string("the plugin has no ") + symbol);
    check(table->init(&ctx_, 1, nullptr, ncclLikeLogger, nullptr), "init");
    Props p{};
    check(table->getProperties(0, &p), "getProperties");
    name_ = describeProps(p, version);
    maxRecvs_ = p.maxRecvs;
    return table;
  }
  template <typename Props>
  static std::string describeProps(const Props& p, const char* version) {
    return std::string(p.name) + " " + version + " speed " + std::to_string(p.speed) +
           " Mbit/s maxRecvs " + std::to_string(p.maxRecvs);
  }
  // One call through whichever table was loaded: v11 and v12 share their calls' signatures.
  template <typename Virtual, typename V8>
  ncclResult_t call(Virtual&& virt, V8&& v8) const {
    if (v12_ != nullptr) return virt(*v12_);
    if (v11_ != nullptr) return virt(*v11_);
    return v8(*v8_);
  }
  static void check(ncclResult_t rc, const char* what) {
    if (rc != ncclSuccess) die(std::string(what) + " failed with ncclResult " + std::to_string(rc));
  }
  const std::string& describe() const { return name_; }
  // The most receives one irecv may group (getProperties): NCCL never groups more.
  int maxRecvs() const { return maxRecvs_; }
  void* listen(void* handle) {
    void* l = nullptr;
    check(call([&](const auto& n) { return n.listen(ctx_, 0, handle, &l); },
               [&](const ncclNet_v8_t& n) { return n.listen(0, handle, &l); }),
          "listen");
    return l;
  }
  ncclResult_t connect(void* handle, void** send) {
    return call([&](const auto& n) { return n.connect(ctx_, 0, handle, send, nullptr); },
                [&](const ncclNet_v8_t& n) { return n.connect(0, handle, send, nullptr); });
  }
  ncclResult_t accept(void* listen, void** recv) {
    return call([&](const auto& n) { return n.accept(listen, recv, nullptr); },
                [&](const ncclNet_v8_t& n) { return n.accept(listen, recv, nullptr); });
  }
  void* regMr(void* comm, void* data, size_t n) {
    void* mh = nullptr;
    auto reg = [&](const auto& net) { return net.regMr(comm, data, n, NCCL_PTR_HOST, &mh); };
    check(call(reg, reg), "regMr");
    return mh;
  }
  ncclResult_t isend(void* comm, void* data, size_t n, int tag, void* mh, void** req) {
    return call([&](const auto& net) { return net.isend(comm, data, n, tag, mh, nullptr, req); },
                [&](const ncclNet_v8_t& net) {
                  return net.isend(comm, data, static_cast<int>(n), tag, mh, req);
                });
  }
  ncclResult_t irecv(void* comm, int n, void** data, const size_t* sizes, int* tags, void** mh,
                     void** req) {
    std::vector<size_t> wide(sizes, sizes + n);
    std::vector<int> narrow(sizes, sizes + n);
    return call(
        [&](const auto& net) {
          return net.irecv(comm, n, data, wide.data(), tags, mh, nullptr, req);
        },
        [&](const ncclNet_v8_t& net) {
          return net.irecv(comm, n, data, narrow.data(), tags, mh, req);
        });
  }
  ncclResult_t test(void* req, int* done, int* sizes) {
    auto t = [&](const auto& net) { return net.test(req, done, sizes); };
    return call(t, t);
  }
  void closeAll(void* send, void* recv, void* listen) {
    auto closeS = [&](const auto& net) { return net.closeSend(send); };
    auto closeR = [&](const auto& net) { return net.closeRecv(recv); };
    auto closeL = [&](const auto& net) { return net.closeListen(listen); };
    check(call(closeS, closeS), "closeSend");
    check(call(closeR, closeR), "closeRecv");
    check(call(closeL, closeL), "closeListen");
  }
  std::string stats() const {
    if (stats_ == nullptr) return "null";
    std::string s(8192, '\0');
    const int n = stats_(s.data(), static_cast<int>(s.size()));
    if (n < 0) return "null";
    s.resize(std::min<size_t>(static_cast<size_t>(n), s.size() - 1));
    return s;
  }

 private:
  void* lib_ = nullptr;
  void* ctx_ = nullptr;
  const ncclNet_v8_t* v8_ = nullptr;
  const ncclNet_v11_t* v11_ = nullptr;
  const ncclNet_v12_t* v12_ = nullptr;
  int (*stats_)(char*, int) = nullptr;
  std::string name_;
  int maxRecvs_ = 1;
};

// A send and a receive comm to the ring neighbours, set up the NCCL way: listen, publish the
// handle, then call connect() and accept() without blocking until both are established.
struct Links {
  void* send = nullptr;
  void* recv = nullptr;
  void* listen = nullptr;
};

Links connectRing(Net& net, const Args& a, Clock::time_point deadline) {
  const int right = (a.rank + 1) % a.world;
  const int left = (a.rank + a.world - 1) % a.world;
  char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  Links l;
  l.listen = net.listen(handle);
  writeBlob(a.dir, "handle." + std::to_string(left) + "." + std::to_string(a.rank), handle,
            sizeof handle);
  std::string peer =
      readBlob(a.dir, "handle." + std::to_string(a.rank) + "." + std::to_string(right),
               sizeof handle, deadline);
  while (l.send == nullptr || l.recv == nullptr) {
    if (l.send == nullptr) Net::check(net.connect(peer.data(), &l.send), "connect");
    if (l.recv == nullptr) Net::check(net.accept(l.listen, &l.recv), "accept");
    if (Clock::now() > deadline) die("connect/accept did not complete");
  }
  return l;
}

// A polling pass that made no progress: NCCL's proxy thread yields the CPU (the default). On a
// machine with fewer cores than busy processes (the 2-core test bed), --idle-sleep-us leaves the
// cores to the kernel's TCP work the way a many-core GPU host would; the benchmark says which.
void idle(int sleepUs) {
  if (sleepUs <= 0) {
    sched_yield();
  } else {
    std::this_thread::sleep_for(std::chrono::microseconds(sleepUs));
  }
}

uint8_t pattern(int sender, uint64_t msg, uint64_t i) {
  return static_cast<uint8_t>((sender * 131 + msg * 31 + i * 7 + (i >> 8)) & 0xff);
}

// ---- p2p: tags, groups, concurrency, sizes ----------------------------------------------------
struct GroupPlan {
  std::vector<int> tags;
  std::vector<size_t> sendSizes;
  std::vector<size_t> recvSizes;
  std::vector<int> sendOrder;  // the sender issues the group's sends in this order
};

// Every third group has up to 8 receives, as many as the plugin's maxRecvs allows (NCCL groups no
// more than that); the random stream is the same whatever maxRecvs is, so both ends agree.
std::vector<GroupPlan> planP2p(uint32_t seed, int iters, uint64_t maxBytes, int maxRecvs) {
  std::mt19937 rng(seed);
  std::vector<GroupPlan> plan;
  const size_t sizes[] = {0, 1, 7, 4096, 65537, 131072, 300001};
  for (int g = 0; g < iters; ++g) {
    GroupPlan p;
    const int n = (g % 3 == 2) ? std::min(1 + static_cast<int>(rng() % 8), maxRecvs) : 1;
    for (int e = 0; e < n; ++e) {
      p.tags.push_back(g * 16 + e);
      size_t s = (rng() % 4 == 0) ? static_cast<size_t>(rng() % (maxBytes + 1)) : sizes[rng() % 7];
      s = std::min<size_t>(s, maxBytes);
      p.sendSizes.push_back(s);
      p.recvSizes.push_back(s + ((rng() % 2) ? rng() % 1000 : 0));  // receives may be larger
      p.sendOrder.push_back(e);
    }
    std::shuffle(p.sendOrder.begin(), p.sendOrder.end(), rng);
    plan.push_back(p);
  }
  return plan;
}

int runP2p(Net& net, const Args& a, Links& l, Clock::time_point deadline,
           std::ostringstream& json) {
  const int right = (a.rank + 1) % a.world;
  const int left = (a.rank + a.world - 1) % a.world;
  (void)right;
  const auto sendPlan =
      planP2p(a.seed + static_cast<uint32_t>(a.rank), a.iters, a.bytes, net.maxRecvs());
  const auto recvPlan =
      planP2p(a.seed + static_cast<uint32_t>(left), a.iters, a.bytes, net.maxRecvs());
  constexpr size_t kWindow = 8;  // groups in flight each way
  struct Pending {
    void* req;
    size_t group;
    int entry;  // -1 = a receive group
    std::vector<std::vector<uint8_t>> bufs;
  };
  std::vector<Pending> sends, recvs;
  size_t nextSendGroup = 0, nextSendEntry = 0, nextRecv = 0;
  uint64_t bytesChecked = 0;
  int bad = 0;
  while (nextSendGroup < sendPlan.size() || nextRecv < recvPlan.size() || !sends.empty() ||
         !recvs.empty()) {
    // Post receives ahead, like NCCL's proxy does.
    while (nextRecv < recvPlan.size() && recvs.size() < kWindow) {
      const GroupPlan& p = recvPlan[nextRecv];
      Pending pr{nullptr, nextRecv, -1, {}};
      std::vector<void*> data, mh;
      std::vector<int> tags = p.tags;
      for (size_t s : p.recvSizes) pr.bufs.emplace_back(s + 1, 0xEE);  // +1: a canary past the end
      for (auto& b : pr.bufs) {
        data.push_back(b.data());
        mh.push_back(net.regMr(l.recv, b.data(), b.size()));
      }
      Net::check(net.irecv(l.recv, static_cast<int>(p.tags.size()), data.data(), p.recvSizes.data(),
                           tags.data(), mh.data(), &pr.req),
                 "irecv");
      if (pr.req == nullptr) break;
      recvs.push_back(std::move(pr));
      ++nextRecv;
    }
    // Sends: NULL means "not yet" (no matching receive posted); try again on the next turn.
    while (nextSendGroup < sendPlan.size() && sends.size() < kWindow * 8) {
      const GroupPlan& p = sendPlan[nextSendGroup];
      const int e = p.sendOrder[nextSendEntry];
      Pending ps{nullptr, nextSendGroup, e, {}};
      ps.bufs.emplace_back(p.sendSizes[e]);
      for (size_t i = 0; i < ps.bufs[0].size(); ++i)
        ps.bufs[0][i] = pattern(a.rank, nextSendGroup * 16 + e, i);
      void* mh = net.regMr(l.send, ps.bufs[0].data(), ps.bufs[0].size());
      Net::check(net.isend(l.send, ps.bufs[0].data(), ps.bufs[0].size(), p.tags[e], mh, &ps.req),
                 "isend");
      if (ps.req == nullptr) break;
      sends.push_back(std::move(ps));
      if (++nextSendEntry == p.sendOrder.size()) {
        nextSendEntry = 0;
        ++nextSendGroup;
      }
    }
    for (auto it = sends.begin(); it != sends.end();) {
      int done = 0, size = -1;
      Net::check(net.test(it->req, &done, &size), "test(send)");
      if (done) {
        if (static_cast<size_t>(size) != it->bufs[0].size()) {
          std::fprintf(stderr, "send size %d, want %zu\n", size, it->bufs[0].size());
          ++bad;
        }
        it = sends.erase(it);
      } else {
        ++it;
      }
    }
    for (auto it = recvs.begin(); it != recvs.end();) {
      int done = 0;
      int sizes[8];
      std::fill(sizes, sizes + 8, -1);
      Net::check(net.test(it->req, &done, sizes), "test(recv)");
      if (!done) {
        ++it;
        continue;
      }
      const GroupPlan& p = recvPlan[it->group];
      for (size_t e = 0; e < p.tags.size(); ++e) {
        const auto& b = it->bufs[e];
        const size_t want = p.sendSizes[e];
        if (static_cast<size_t>(sizes[e]) != want) {
          std::fprintf(stderr, "group %zu entry %zu: size %d, want %zu\n", it->group, e, sizes[e],
                       want);
          ++bad;
        }
        for (size_t i = 0; i < want; ++i) {
          if (b[i] != pattern(left, it->group * 16 + e, i)) {
            std::fprintf(stderr, "group %zu entry %zu: byte %zu is %u, want %u\n", it->group, e, i,
                         b[i], pattern(left, it->group * 16 + e, i));
            ++bad;
            break;
          }
        }
        if (b[b.size() - 1] != 0xEE) {
          std::fprintf(stderr, "group %zu entry %zu: write past the end\n", it->group, e);
          ++bad;
        }
        bytesChecked += want;
      }
      it = recvs.erase(it);
    }
    sched_yield();
    if (Clock::now() > deadline) die("p2p run did not finish before the deadline");
  }
  json << "\"groups\":" << recvPlan.size() << ",\"bytes_checked\":" << bytesChecked
       << ",\"check\":\"" << (bad ? "mismatch" : "ok") << "\"";
  return bad ? 1 : 0;
}

// ---- ring allreduce ---------------------------------------------------------------------------
// Called as the received bytes [offset, offset + len) of an exchange become complete, in order,
// one slot at a time: NCCL's kernels reduce or copy slot k while slot k + 1 is on the wire, so the
// harness does its CPU share the same way rather than idling the rails for it between steps.
using SlotDone = std::function<void(size_t offset, size_t len)>;

// One step of the ring: send `out` to the right while receiving `in` from the left.
class RingTransport {
 public:
  virtual ~RingTransport() = default;
  virtual void exchange(void* out, size_t outBytes, void* in, size_t inBytes, int tag,
                        const SlotDone& onSlot = {}) = 0;
};

// NCCL's shape of one ring step over the net: the step's bytes go as a pipeline of slots
// (NCCL's buffer / NCCL_STEPS: 4 MiB / 8 = 512 KiB), up to 8 receives posted ahead and 8 sends
// in flight, each request polled with test().
class PluginRing : public RingTransport {
 public:
  PluginRing(Net& net, Links& l, size_t slot, int idleSleepUs, Clock::time_point deadline)
      : net_(net), l_(l), slot_(slot), idleSleepUs_(idleSleepUs), deadline_(deadline) {}
  void exchange(void* out, size_t outBytes, void* in, size_t inBytes, int tag,
                const SlotDone& onSlot) override {
    constexpr size_t kSteps = 8;
    auto* o = static_cast<char*>(out);
    auto* i = static_cast<char*>(in);
    const size_t nout = (outBytes + slot_ - 1) / slot_, nin = (inBytes + slot_ - 1) / slot_;
    size_t posted = 0, sent = 0, recvDone = 0, sendDone = 0;
    std::vector<void*> rreq(nin, nullptr), sreq(nout, nullptr);
    while (recvDone < nin || sendDone < nout) {
      while (posted < nin && posted - recvDone < kSteps) {
        void* data = i + posted * slot_;
        size_t size = std::min(slot_, inBytes - posted * slot_);
        void* mh = net_.regMr(l_.recv, data, size);
        Net::check(net_.irecv(l_.recv, 1, &data, &size, &tag, &mh, &rreq[posted]), "irecv");
        if (rreq[posted] == nullptr) break;
        ++posted;
      }
      while (sent < nout && sent - sendDone < kSteps) {
        void* data = o + sent * slot_;
        const size_t size = std::min(slot_, outBytes - sent * slot_);
        void* mh = net_.regMr(l_.send, data, size);
        Net::check(net_.isend(l_.send, data, size, tag, mh, &sreq[sent]), "isend");
        if (sreq[sent] == nullptr) break;  // the receiver has not posted this slot yet
        ++sent;
      }
      bool progress = false;
      for (size_t k = recvDone; k < posted && rreq[k] != nullptr; ++k) {
        int done = 0;
        Net::check(net_.test(rreq[k], &done, nullptr), "test(recv)");
        if (!done) break;  // NCCL consumes slots in order
        rreq[k] = nullptr;
        if (onSlot) onSlot(k * slot_, std::min(slot_, inBytes - k * slot_));
        ++recvDone;
        progress = true;
      }
      for (size_t k = sendDone; k < sent && sreq[k] != nullptr; ++k) {
        int done = 0;
        Net::check(net_.test(sreq[k], &done, nullptr), "test(send)");
        if (!done) break;
        sreq[k] = nullptr;
        ++sendDone;
        progress = true;
      }
      if (!progress) idle(idleSleepUs_);
      if (Clock::now() > deadline_) die("a ring step did not complete before the deadline");
    }
  }

 private:
  Net& net_;
  Links& l_;
  size_t slot_;
  int idleSleepUs_;
  Clock::time_point deadline_;
};

// The baseline: one TCP connection per neighbour on one interface, blocking I/O, a thread for
// the send side, as NCCL's socket transport would carry it with one socket.
class PlainRing : public RingTransport {
 public:
  PlainRing(const Args& a, Clock::time_point deadline) : slot_(a.slot) {
    const int right = (a.rank + 1) % a.world;
    const int left = (a.rank + a.world - 1) % a.world;
    const int lfd = socket(AF_INET, SOCK_STREAM, 0);
    setsockopt(lfd, SOL_SOCKET, SO_BINDTODEVICE, a.iface.c_str(),
               static_cast<socklen_t>(a.iface.size()));
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    if (bind(lfd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || ::listen(lfd, 4) != 0)
      die("plain: listen failed");
    socklen_t len = sizeof sa;
    getsockname(lfd, reinterpret_cast<sockaddr*>(&sa), &len);
    // Publish "ip port" of our listener on the rail (the left neighbour connects to it).
    const std::string ip = ifaceIp(a.iface);
    const std::string me = ip + " " + std::to_string(ntohs(sa.sin_port)) + "\n";
    std::string padded = me;
    padded.resize(64, ' ');
    writeBlob(a.dir, "plain." + std::to_string(a.rank), padded.data(), padded.size());
    std::string peer = readBlob(a.dir, "plain." + std::to_string(right), 64, deadline);
    std::istringstream is(peer);
    std::string pip;
    int pport = 0;
    is >> pip >> pport;
    send_ = socket(AF_INET, SOCK_STREAM, 0);
    setsockopt(send_, SOL_SOCKET, SO_BINDTODEVICE, a.iface.c_str(),
               static_cast<socklen_t>(a.iface.size()));
    sockaddr_in da{};
    da.sin_family = AF_INET;
    da.sin_port = htons(static_cast<uint16_t>(pport));
    inet_pton(AF_INET, pip.c_str(), &da.sin_addr);
    while (::connect(send_, reinterpret_cast<sockaddr*>(&da), sizeof da) != 0) {
      if (Clock::now() > deadline) die("plain: connect failed");
      close(send_);
      send_ = socket(AF_INET, SOCK_STREAM, 0);
      setsockopt(send_, SOL_SOCKET, SO_BINDTODEVICE, a.iface.c_str(),
                 static_cast<socklen_t>(a.iface.size()));
      std::this_thread::sleep_for(
          std::chrono::milliseconds(10));  // the peer's listener is not up yet
    }
    recv_ = ::accept(lfd, nullptr, nullptr);
    if (recv_ < 0) die("plain: accept failed");
    close(lfd);
    int one = 1;
    setsockopt(send_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    (void)left;
  }
  ~PlainRing() override {
    close(send_);
    close(recv_);
  }
  void exchange(void* out, size_t outBytes, void* in, size_t inBytes, int,
                const SlotDone& onSlot) override {
    std::thread t([&] {
      const char* p = static_cast<const char*>(out);
      size_t left = outBytes;
      while (left > 0) {
        const ssize_t n = ::send(send_, p, left, MSG_NOSIGNAL);
        if (n <= 0) die("plain: send failed");
        p += n;
        left -= static_cast<size_t>(n);
      }
    });
    char* p = static_cast<char*>(in);
    size_t got = 0, handed = 0;  // bytes received; bytes given to onSlot (whole slots, in order)
    while (got < inBytes) {
      const ssize_t n = ::recv(recv_, p + got, inBytes - got, 0);
      if (n <= 0) die("plain: recv failed");
      got += static_cast<size_t>(n);
      for (; onSlot && handed + slot_ <= got; handed += slot_) onSlot(handed, slot_);
    }
    if (onSlot && handed < inBytes) onSlot(handed, inBytes - handed);
    t.join();
  }

 private:
  static std::string ifaceIp(const std::string& iface) {
    const int fd = socket(AF_INET, SOCK_DGRAM, 0);
    ifreq ifr{};
    std::strncpy(ifr.ifr_name, iface.c_str(), IFNAMSIZ - 1);
    if (ioctl(fd, SIOCGIFADDR, &ifr) != 0) die("plain: no IPv4 address on " + iface);
    close(fd);
    char buf[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&ifr.ifr_addr)->sin_addr, buf, sizeof buf);
    return buf;
  }
  size_t slot_;
  int send_ = -1;
  int recv_ = -1;
};

// Reduce-scatter then allgather, N-1 steps each, segments of count/N floats.
// Whether to run another operation of a --seconds loop. Every rank must make the same choice or
// one would wait forever for a peer that already stopped: rank 0's clock decides, and its
// decision travels the ring hop by hop (world - 1 tiny exchanges; only in --seconds loops).
bool anotherOp(const Args& a, RingTransport& t, int ops, Clock::time_point t0) {
  if (ops < a.iters) return true;  // the same on every rank
  if (a.seconds <= 0) return false;
  uint8_t known = 0;  // 0 unknown, 1 continue, 2 stop
  if (a.rank == 0) {
    const bool timeLeft = std::chrono::duration<double>(Clock::now() - t0).count() < a.seconds;
    const bool stopAsked =
        !a.stopFile.empty() && ::access((a.dir + "/" + a.stopFile).c_str(), F_OK) == 0;
    known = timeLeft && !stopAsked ? 1 : 2;
  }
  for (int step = 0; step < a.world - 1; ++step) {
    uint8_t out = known, in = 0;
    if (a.mode == "stream") {  // one direction only: rank 0 tells rank 1
      if (a.rank == 0)
        t.exchange(&out, 1, nullptr, 0, -1);
      else
        t.exchange(nullptr, 0, &in, 1, -1);
    } else {
      t.exchange(&out, 1, &in, 1, -1 - step);
    }
    if (known == 0 && in != 0) known = in;
  }
  if (known == 0) die("the loop decision did not arrive from rank 0");
  return known == 1;
}

// A token passed world - 1 times around the ring: when it returns, every rank has entered.
void ringBarrier(const Args& a, RingTransport& t) {
  for (int step = 0; step < a.world - 1; ++step) {
    uint8_t out = 1, in = 0;
    t.exchange(&out, 1, &in, 1, -100 - step);
  }
}

// The stream's pattern repeats every 64 KiB (7i and i >> 8 both wrap at 256 there), so a
// message is written and checked a period at a time with memcpy/memcmp. A byte-at-a-time loop
// took ~80 ms per 64 MiB on the test bed, time in which the rails idled between operations.
constexpr size_t kPatternPeriod = 64 * 1024;

std::vector<uint8_t> patternPeriod(int sender, uint64_t msg) {
  std::vector<uint8_t> p(kPatternPeriod);
  for (size_t i = 0; i < p.size(); ++i) p[i] = pattern(sender, msg, i);
  return p;
}

void fillPattern(std::vector<uint8_t>& buf, const std::vector<uint8_t>& period) {
  for (size_t at = 0; at < buf.size(); at += period.size())
    std::memcpy(buf.data() + at, period.data(), std::min(period.size(), buf.size() - at));
}

// The first byte that differs from the pattern, or buf.size().
size_t firstMismatch(const std::vector<uint8_t>& buf, const std::vector<uint8_t>& period) {
  for (size_t at = 0; at < buf.size(); at += period.size()) {
    const size_t n = std::min(period.size(), buf.size() - at);
    if (std::memcmp(buf.data() + at, period.data(), n) == 0) continue;
    for (size_t i = 0; i < n; ++i)
      if (buf[at + i] != period[i]) return at + i;
  }
  return buf.size();
}

// One direction only: rank 0 streams --bytes per operation to rank 1 (NCCL's send/recv, a
// pipeline stage), which checks every byte. Each rank times its exchange only (filling and
// checking the buffer are the GPU's work under NCCL); the bandwidth is the slower rank's.
// The receiver does not clear its buffer between operations: consecutive messages differ in
// every byte (the pattern moves by 31 per message), so a byte the plugin failed to write fails
// the check anyway; before the first message the buffer holds a pattern no message has.
int runStream(const Args& a, RingTransport& t, std::ostringstream& json) {
  std::vector<uint8_t> buf(a.bytes);
  if (a.rank != 0) fillPattern(buf, patternPeriod(1, 0));
  int bad = 0, ops = 0;
  std::vector<double> opSeconds;
  const auto t0 = Clock::now();
  while (anotherOp(a, t, ops, t0)) {
    const auto expected = patternPeriod(0, static_cast<uint64_t>(ops));
    if (a.rank == 0) fillPattern(buf, expected);
    const auto s0 = Clock::now();
    if (a.rank == 0) {
      t.exchange(buf.data(), buf.size(), nullptr, 0, ops);
    } else {
      t.exchange(nullptr, 0, buf.data(), buf.size(), ops);
    }
    opSeconds.push_back(std::chrono::duration<double>(Clock::now() - s0).count());
    if (a.rank != 0) {
      const size_t at = firstMismatch(buf, expected);
      if (at != buf.size() && bad++ < 3) std::fprintf(stderr, "op %d byte %zu wrong\n", ops, at);
    }
    ++ops;
  }
  std::sort(opSeconds.begin(), opSeconds.end());
  const double median = opSeconds[opSeconds.size() / 2];
  json << "\"ops\":" << ops << ",\"bytes\":" << a.bytes << ",\"median_op_s\":" << median
       << ",\"max_op_s\":" << opSeconds.back()
       << ",\"busbw_bytes_per_s\":" << double(a.bytes) / median << ",\"check\":\""
       << (bad ? "mismatch" : "ok") << "\"";
  return bad ? 1 : 0;
}

// Ring operations done before a --seconds loop writes DIR/running: past the first (connection
// set-up) and a few in steady state.
constexpr int kRingRunningOps = 3;

int runRing(const Args& a, RingTransport& t, std::ostringstream& json) {
  const size_t count = a.bytes / sizeof(float);
  const int n = a.world;
  const size_t seg = (count + n - 1) / n;
  std::vector<float> data(seg * n), recvBuf(seg);
  int bad = 0, ops = 0;
  const auto t0 = Clock::now();
  const double startUnix = unixSeconds();
  std::vector<double> opSeconds, opEndUnix;
  while (anotherOp(a, t, ops, t0)) {
    for (size_t i = 0; i < data.size(); ++i)
      data[i] = static_cast<float>((a.rank + 1) * ((i + ops) % 97));
    // Every rank starts the timed operation together: a neighbour still checking the last
    // result is the harness's time, not the network's.
    ringBarrier(a, t);
    const auto s0 = Clock::now();
    int tag = 0;
    const size_t segBytes = seg * sizeof(float);
    for (int step = 0; step < n - 1; ++step) {  // reduce-scatter
      const int sendSeg = (a.rank - step + n) % n;
      float* into = &data[((a.rank - step - 1 + 2 * n) % n) * seg];
      // The segment sent and the one reduced into differ, so the send reads `data` directly.
      t.exchange(&data[sendSeg * seg], segBytes, recvBuf.data(), segBytes, tag++,
                 [&](size_t offset, size_t len) {
                   const size_t first = offset / sizeof(float), floats = len / sizeof(float);
                   for (size_t i = first; i < first + floats; ++i) into[i] += recvBuf[i];
                 });
    }
    for (int step = 0; step < n - 1; ++step) {  // allgather: straight into place
      const int sendSeg = (a.rank + 1 - step + n) % n;
      const int recvSeg = (a.rank - step + n) % n;
      t.exchange(&data[sendSeg * seg], segBytes, &data[recvSeg * seg], segBytes, tag++);
    }
    opSeconds.push_back(std::chrono::duration<double>(Clock::now() - s0).count());
    opEndUnix.push_back(unixSeconds());
    const float ranksSum = static_cast<float>(n * (n + 1) / 2);
    for (size_t i = 0; i < data.size(); ++i) {
      const float want = ranksSum * static_cast<float>((i + ops) % 97);
      if (data[i] != want) {
        if (bad++ < 3)
          std::fprintf(stderr, "op %d element %zu: %g, want %g\n", ops, i, double(data[i]),
                       double(want));
      }
    }
    ++ops;
    // A --seconds loop tells failure scenarios it is moving data (run_nccl.sh waits for this
    // file before a fault, rather than a fixed pause that a slow start-up can outlast).
    if (a.seconds > 0 && a.rank == 0 && ops == kRingRunningOps) writeBlob(a.dir, "running", "1", 1);
  }
  std::vector<double> sorted = opSeconds;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[sorted.size() / 2];
  const double busbw = 2.0 * (n - 1) / n * double(seg * n * sizeof(float)) / median;
  json << "\"ops\":" << ops << ",\"bytes\":" << seg * n * sizeof(float)
       << ",\"median_op_s\":" << median << ",\"max_op_s\":" << sorted.back()
       << ",\"busbw_bytes_per_s\":" << busbw << ",\"check\":\"" << (bad ? "mismatch" : "ok")
       << "\"";
  // A --seconds loop's per-operation trace, in the shape bench/harness/chaos.py analyses (the
  // stall and the pace around a fault): [completion time (unix s), duration (us)] per operation.
  if (a.seconds > 0) {
    json << ",\"start_unix\":" << std::fixed << std::setprecision(6) << startUnix
         << ",\"op_trace\":[";
    for (size_t i = 0; i < opSeconds.size(); ++i)
      json << (i ? "," : "") << "[" << opEndUnix[i] << "," << opSeconds[i] * 1e6 << "]";
    json << "]" << std::defaultfloat;
  }
  return bad ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parseArgs(argc, argv);
  const auto deadline =
      Clock::now() + std::chrono::milliseconds(a.timeoutMs) +
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(a.seconds));
  std::ostringstream json;
  json << "{\"rank\":" << a.rank << ",\"world\":" << a.world << ",\"mode\":\"" << a.mode
       << "\",\"transport\":\"" << a.transport << "\",";
  int rc = 0;
  if (a.transport == "plain") {
    PlainRing ring(a, deadline);
    rc = a.mode == "stream" ? runStream(a, ring, json) : runRing(a, ring, json);
  } else {
    Net net(a);
    json << "\"plugin\":\"" << net.describe() << "\",";
    Links l = connectRing(net, a, deadline);
    if (a.mode == "p2p") {
      rc = runP2p(net, a, l, deadline, json);
    } else {
      PluginRing ring(net, l, a.slot, a.idleSleepUs, deadline);
      rc = a.mode == "stream" ? runStream(a, ring, json) : runRing(a, ring, json);
    }
    json << ",\"stats\":" << net.stats();
    net.closeAll(l.send, l.recv, l.listen);
  }
  json << "}";
  std::printf("%s\n", json.str().c_str());
  return rc;
}
