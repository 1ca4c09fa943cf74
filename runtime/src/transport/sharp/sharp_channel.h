// SHARP rail (`transport: sharp`): allreduce offloaded to the InfiniBand switches' aggregation
// trees through NVIDIA's SHARP collective library (libsharp_coll.so, loaded at run time:
// sharp_library.h), behind the CollectiveOffload seam (transport/offload.h).
//
// A SHARP rail is an IB port whose IP interface (IPoIB) the rail names. Besides the offload it
// keeps one authenticated TCP connection per peer on that interface (a TcpChannel with one
// stream), which gives the rail what every transport must provide: its share of the control mesh
// (releaseControl), the start-up check's transfer, and the out-of-band barrier/bcast/gather the
// library needs to create its context and group. They run on this rail's own thread inside
// connect(), which is what lets a SHARP rail be rebuilt in the background on re-admission like
// any other (failover/readmission.cc); a new generation is a new SHARP job id and group.
// exchange() moves bytes over those TCP connections, so a collective the scheduler should never
// send here still completes; the scheduler sends a SHARP rail only small allreduces of types and
// operators it supports (schedule/scheduler.h).
//
// Data path: the input is copied into a staging buffer registered once with the library
// (re-registered only when a larger operation comes), the result lands in a second one and is
// copied out: user buffers change every call, registration is expensive, and the cold path's
// messages are small. Completion: sharp_coll_do_allreduce_nb, then sharp_coll_req_test polled
// with back-off under the channel's progress timeout, abort flag and progress watch; the status
// comes from sharp_coll_req_wait once complete.
//
// Driven the way the library's own callers drive it (nccl-rdma-sharp-plugins, UCC tl/sharp):
//  - the init spec starts from sharp_coll_default_config; the group passes no world-rank list
//    (NULL: group rank = job rank) and the process's real on-node rank;
//  - capabilities are queried after sharp_coll_init, and a datatype the fabric's SHARP
//    generation lacks (bfloat16 before SHARPv3) is never offered: supports() says no, so the
//    scheduler keeps it on the byte rails. Every rank's capabilities are ANDed over the
//    out-of-band gather so all ranks make the same choice. Said once per process in the log,
//    and in /status through supports();
//  - a request is freed only once sharp_coll_req_test reports it complete. When the runtime
//    gives up on one (progress timeout, abort), the request and the registered staging buffers
//    it may still write into stay alive until the SHARP context is finalized (destructor);
//    the library's own timeout stays infinite because the runtime owns the deadline.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "transport/sharp/sharp_library.h"
#include "transport/tcp/tcp_channel.h"
#include "transport/transport.h"

namespace nezha {

class SharpChannel : public Transport, public CollectiveOffload {
 public:
  // Loads the library now (ConfigError naming the rail if absent) and opens the rail's listener.
  SharpChannel(const Options& o, int railIndex, const std::string& address);
  ~SharpChannel() override;

  RailEndpoint endpoint() const override { return tcp_->endpoint(); }
  // Connects the TCP side, then creates the SHARP context and group (collective over the job,
  // out-of-band collectives on the TCP side). Throws RailError when the library refuses.
  void connect(const JobTable& job, Deadline deadline) override;
  std::vector<Fd> releaseControl() override { return tcp_->releaseControl(); }
  uint64_t rejectedConnections() const override { return tcp_->rejectedConnections(); }

  int rank() const override { return tcp_->rank(); }
  int size() const override { return tcp_->size(); }
  int railIndex() const override { return rail_; }
  const std::string& name() const override { return tcp_->name(); }
  void exchange(std::vector<IoOp>& ops) override;
  void abort() override;
  void setProgressTimeout(std::chrono::milliseconds t) override;
  void setPeersStillComing(std::function<bool()> fn) override;
  void setProgressWatch(ProgressWatch fn) override;
  CollectiveOffload* offload() override { return this; }

  // Also false before connect() and for types the fabric's capabilities lack.
  bool supports(DataType dt, ReduceOp op) const override;
  void allreduce(const void* in, void* out, size_t count, DataType dt, ReduceOp op) override;

  // What SHARP reduces on any fabric that has the datatype (sum, min, max of 16/32/64-bit
  // floats and 32/64-bit integers; PROD is in the API's enum but no SHARP generation aggregates
  // it). supports() further requires the fabric's capabilities.
  static bool supported(DataType dt, ReduceOp op);
  // The DataTypes the capabilities' datatype mask allows (bit per DataType value).
  static uint32_t offloadTypesFrom(uint64_t sharpDtypeMask);
  // The library's device string (ib_dev_list) for the rail: "<hca>:<port>" of the HCA port
  // behind the rail's interface, found in sysfs like the verbs transport does
  // (transport/verbs/discovery.h); without one (no HCA behind the interface), the interface
  // name itself, and `why` says what discovery found. The test double's fake HCAs are named
  // after the rail interfaces.
  static std::string deviceFor(const std::string& rail, const std::string& iface,
                               const std::string& ipv4, const std::string& sysfsRoot,
                               std::string* why = nullptr);

 private:
  struct Staging {
    std::vector<char> bytes;
    void* mr = nullptr;
  };
  void ensureStaging(Staging& s, size_t bytes);
  void releaseStaging(Staging& s);
  // Out-of-band collectives for the library, over the TCP side (C callbacks; never throw).
  static int oobBarrier(void* ctx);
  static int oobBcast(void* ctx, void* buf, int len, int root);
  static int oobGather(void* ctx, int root, void* sbuf, void* rbuf, int len);
  void bcast(void* buf, size_t len, int root);
  void gather(int root, const void* sbuf, void* rbuf, size_t len);
  [[noreturn]] void fail(const std::string& what);
  void queryCapabilities();

  int rail_;
  std::string railName_, iface_;
  std::chrono::milliseconds ioTimeout_;
  std::chrono::milliseconds progressTimeout_{0};  // 0 = ioTimeout_
  std::function<bool()> peersStillComing_;
  ProgressWatch progressWatch_;
  std::unique_ptr<TcpChannel> tcp_;
  std::shared_ptr<sharp::SharpLibrary> lib_;
  std::string device_, discovery_;  // ib_dev_list; what discovery said when it found no HCA
  sharp::sharp_coll_context* ctx_ = nullptr;
  sharp::sharp_coll_comm* comm_ = nullptr;
  Staging send_, recv_;
  std::string oobError_;  // what the last failed out-of-band collective saw
  int localRank_;
  // Bit per DataType the fabric reduces (0 until connect() queried the capabilities).
  std::atomic<uint32_t> offloadTypes_{0};
  // A request the runtime gave up on before it completed: never freed before it completes
  // (it may still write into recv_), released in the destructor before the context goes.
  void* abandoned_ = nullptr;
  std::atomic<bool> aborted_{false};
  bool broken_ = false;
};

}  // namespace nezha
