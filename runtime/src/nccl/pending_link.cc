#include "nccl/pending_link.h"

#include <arpa/inet.h>

#include <mutex>
#include <thread>
#include <utility>

#include "base/error.h"
#include "base/socket.h"
#include "nccl/comm_error.h"
#include "transport/transport.h"

namespace nezha::ncclnet {

struct PendingLink::State {
  std::mutex mu;
  bool done = false;
  std::unique_ptr<EngineLink> link;
  std::string error;
};

namespace {

using Transports = std::vector<std::unique_ptr<Transport>>;

// The two ranks of a connection's job table; the handle's nonce is the session, so the
// connections of one NCCL connection can never be taken for another's.
JobTable twoRankJob(const Nonce& nonce, size_t rails) {
  JobTable job;
  job.session.assign(reinterpret_cast<const char*>(nonce.data()), nonce.size());
  for (int rank : {EngineLink::kReceiver, EngineLink::kSender}) {
    RankInfo info;
    info.rank = rank;
    info.worldSize = 2;
    info.rails.resize(rails);
    job.ranks.push_back(std::move(info));
  }
  return job;
}

Transports openRails(const Options& o, const LinkMemory& memory) {
  Transports transports;
  for (size_t r = 0; r < o.rails.size(); ++r) {
    transports.push_back(makeTransport(o, static_cast<int>(r), o.rails[r].address,
                                       r < memory.domains.size() ? memory.domains[r] : nullptr));
  }
  return transports;
}

// The set-up's thread: connect every rail, then build the link (both ends probe together).
// Holds the state, not the PendingLink, so an abandoned set-up frees what it built itself.
void build(std::shared_ptr<PendingLink::State> state, Options o, Transports transports,
           JobTable job, LinkMemory memory, Deadline deadline) {
  std::unique_ptr<EngineLink> link;
  std::string error;
  try {
    for (auto& t : transports) t->connect(job, deadline);
    link = std::make_unique<EngineLink>(o, std::move(transports), job, std::move(memory));
  } catch (const std::exception& e) {
    error = e.what();
  }
  std::lock_guard<std::mutex> lock(state->mu);
  state->link = std::move(link);
  state->error = error.empty() ? "" : strCat("connection set-up: ", error);
  state->done = true;
}

std::shared_ptr<PendingLink::State> start(Options o, Transports transports, JobTable job,
                                          LinkMemory memory, PendingLink::Duration timeout) {
  auto state = std::make_shared<PendingLink::State>();
  std::thread(build, state, std::move(o), std::move(transports), std::move(job), std::move(memory),
              Clock::now() + timeout)
      .detach();
  return state;
}

}  // namespace

Options linkOptions(const Options& base, int rank) {
  Options o = base;
  o.rank = rank;
  o.worldSize = 2;
  return o;
}

std::unique_ptr<PendingLink> PendingLink::listen(const Options& base, Duration timeout,
                                                 ConnectHandle& handle, LinkMemory memory) {
  const Options o = linkOptions(base, EngineLink::kReceiver);
  randomBytes(handle.nonce.data(), handle.nonce.size());
  Transports transports = openRails(o, memory);
  JobTable job = twoRankJob(handle.nonce, transports.size());
  handle.rails.clear();
  for (size_t r = 0; r < transports.size(); ++r) {
    const RailEndpoint ep = transports[r]->endpoint();
    job.ranks[EngineLink::kReceiver].rails[r] = ep;
    // The sender is never dialled (peer_mesh.h: lower ranks are dialled): its entry names the
    // rail only, which is what a rebuild reads before it agrees on fresh ports.
    job.ranks[EngineLink::kSender].rails[r] = RailEndpoint{ep.name, ep.transport, "", 0};
    in_addr a{};
    inet_pton(AF_INET, ep.address.c_str(), &a);
    handle.rails.push_back(RailAddress{a.s_addr, static_cast<uint16_t>(ep.port)});
  }
  return std::unique_ptr<PendingLink>(
      new PendingLink(start(o, std::move(transports), std::move(job), std::move(memory), timeout)));
}

std::unique_ptr<PendingLink> PendingLink::connect(const Options& base, Duration timeout,
                                                  const ConnectHandle& handle, LinkMemory memory) {
  const Options o = linkOptions(base, EngineLink::kSender);
  if (handle.rails.size() != o.rails.size()) {
    throw CommError(
        ncclInvalidUsage,
        strCat("connect handle names ", handle.rails.size(), " rails, this process has ",
               o.rails.size(), " (NEZHA_RAILS must list the same rails on every host)"));
  }
  Transports transports = openRails(o, memory);
  JobTable job = twoRankJob(handle.nonce, transports.size());
  for (size_t r = 0; r < transports.size(); ++r) {
    job.ranks[EngineLink::kSender].rails[r] = transports[r]->endpoint();
    const RailEndpoint& mine = job.ranks[EngineLink::kSender].rails[r];
    job.ranks[EngineLink::kReceiver].rails[r] = RailEndpoint{
        mine.name, mine.transport, ipv4Text(handle.rails[r].ipv4), handle.rails[r].port};
  }
  return std::unique_ptr<PendingLink>(
      new PendingLink(start(o, std::move(transports), std::move(job), std::move(memory), timeout)));
}

PendingLink::~PendingLink() = default;

std::unique_ptr<EngineLink> PendingLink::take() {
  std::lock_guard<std::mutex> lock(state_->mu);
  if (!state_->done) return nullptr;
  if (!state_->error.empty()) throw CommError(ncclSystemError, state_->error);
  return std::move(state_->link);
}

}  // namespace nezha::ncclnet
