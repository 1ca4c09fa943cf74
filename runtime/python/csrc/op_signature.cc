#include "op_signature.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <map>
#include <memory>
#include <sstream>
#include <vector>

namespace nezha_torch {

namespace {

constexpr size_t kWireBytes = 24;

void put(std::vector<char>& out, uint64_t v, size_t bytes) {
  for (size_t i = 0; i < bytes; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
}

uint64_t get(const std::vector<char>& in, size_t at, size_t bytes) {
  uint64_t v = 0;
  for (size_t i = 0; i < bytes; ++i) v |= uint64_t(static_cast<uint8_t>(in[at + i])) << (8 * i);
  return v;
}

std::vector<char> encode(const OpSignature& s) {
  std::vector<char> out;
  out.reserve(kWireBytes);
  put(out, static_cast<uint8_t>(s.collective), 1);
  put(out, static_cast<uint8_t>(s.dtype), 1);
  put(out, s.reduceOp, 1);
  put(out, 0, 1);
  put(out, static_cast<uint32_t>(s.root), 4);
  put(out, s.count, 8);
  put(out, s.seq, 8);
  return out;
}

OpSignature decode(const std::vector<char>& in) {
  OpSignature s;
  s.collective = static_cast<c10d::OpType>(get(in, 0, 1));
  s.dtype = static_cast<int8_t>(get(in, 1, 1));
  s.reduceOp = static_cast<uint8_t>(get(in, 2, 1));
  s.root = static_cast<int32_t>(static_cast<uint32_t>(get(in, 4, 4)));
  s.count = get(in, 8, 8);
  s.seq = get(in, 16, 8);
  return s;
}

std::string dtypeName(int8_t d) {
  return d == OpSignature::kNoDtype ? "-" : c10::toString(static_cast<at::ScalarType>(d));
}

std::string reduceName(uint8_t r) {
  switch (r) {
    case c10d::ReduceOp::SUM:
      return "SUM";
    case c10d::ReduceOp::AVG:
      return "AVG";
    case c10d::ReduceOp::PRODUCT:
      return "PRODUCT";
    case c10d::ReduceOp::MIN:
      return "MIN";
    case c10d::ReduceOp::MAX:
      return "MAX";
    case c10d::ReduceOp::PREMUL_SUM:
      return "PREMUL_SUM";
    case OpSignature::kNoReduce:
      return "-";
    default:
      return "op" + std::to_string(r);
  }
}

std::string countName(uint64_t c) {
  return c == OpSignature::kAnyCount ? "any" : std::to_string(c);
}

// One field of every rank's signature: "count: rank 0 has 100, rank 1 has 200", or "" when
// every rank agrees. Counts that legitimately differ (alltoall's splits) compare as equal.
template <class Value>
std::string disagreement(const char* field, const std::vector<OpSignature>& all, Value value,
                         bool anyMatches = false) {
  std::vector<std::pair<std::string, std::vector<int>>> holders;  // by lowest rank holding it
  for (size_t r = 0; r < all.size(); ++r) {
    const std::string v = value(all[r]);
    if (anyMatches && v == "any") continue;
    auto it =
        std::find_if(holders.begin(), holders.end(), [&](const auto& h) { return h.first == v; });
    if (it == holders.end()) it = holders.insert(holders.end(), {v, {}});
    it->second.push_back(static_cast<int>(r));
  }
  if (holders.size() <= 1) return "";
  std::ostringstream out;
  out << field << ": ";
  bool first = true;
  for (const auto& [v, ranks] : holders) {
    out << (first ? "" : ", ") << (ranks.size() == 1 ? "rank " : "ranks ");
    for (size_t i = 0; i < ranks.size(); ++i) out << (i ? "," : "") << ranks[i];
    out << " " << v;
    first = false;
  }
  return out.str();
}

}  // namespace

OpSignature OpSignature::of(c10d::OpType collective, const at::Tensor& like, uint64_t count,
                            std::optional<c10d::ReduceOp> reduce, int32_t root) {
  OpSignature s;
  s.collective = collective;
  s.dtype = like.defined() ? static_cast<int8_t>(like.scalar_type()) : kNoDtype;
  s.count = count;
  s.reduceOp = reduce ? static_cast<uint8_t>(reduce->op_) : kNoReduce;
  s.root = root;
  return s;
}

std::string OpSignature::describe() const {
  std::ostringstream out;
  out << c10d::opTypeToString(collective) << " " << dtypeName(dtype) << "[" << countName(count)
      << "]";
  if (reduceOp != kNoReduce) out << " " << reduceName(reduceOp);
  if (root != kNoRoot) out << " root " << root;
  return out.str();
}

SignatureCheck::SignatureCheck(PeerLinks& links, int rank, int size,
                               std::chrono::milliseconds timeout, bool enabled)
    : links_(links), rank_(rank), size_(size), timeout_(timeout), enabled_(enabled) {}

void SignatureCheck::fail(const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (broken_.empty()) broken_ = why;
  }
  C10_THROW_ERROR(DistBackendError, why);
}

struct SignatureCheck::Issued {
  OpSignature sig;
  std::string op;  // "collective #3 (this rank 0: ALLREDUCE Float[8] SUM)", for messages
  std::string sendError;
  mutable std::mutex mu;  // also locked by progress(), on a const Issued
  std::condition_variable cv;
  int pending = 0;
  std::map<int, std::vector<char>> got;  // peer -> its signature, as it arrived
  std::exception_ptr error;
};

void SignatureCheck::throwIfBroken() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!broken_.empty()) {
    C10_THROW_ERROR(DistBackendError,
                    "nezha backend: this process group must be recreated (destroy it and create "
                    "a new one): an earlier collective failed its cross-rank check: " +
                        broken_);
  }
}

std::shared_ptr<SignatureCheck::Issued> SignatureCheck::issue(OpSignature sig) {
  throwIfBroken();
  auto issued = std::make_shared<Issued>();  // shared: a late delivery may outlive run()
  sig.seq = next_++;
  issued->sig = sig;
  issued->op = "collective #" + std::to_string(sig.seq) + " (this rank " + std::to_string(rank_) +
               ": " + sig.describe() + ")";
  if (!enabled_ || size_ == 1) return issued;
  issued->pending = size_ - 1;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    // Receives match in post order, peers send in issue order: this is their signature of the
    // same operation number, whatever order the operations then run in.
    links_.post(p, kTag, [issued](int src, const std::vector<char>* msg, std::exception_ptr err) {
      std::lock_guard<std::mutex> lock(issued->mu);
      if (err && !issued->error) issued->error = err;
      if (!err) issued->got[src] = *msg;
      --issued->pending;
      issued->cv.notify_all();
    });
  }
  const std::vector<char> wire = encode(sig);
  try {
    for (int p = 0; p < size_; ++p) {
      if (p != rank_) links_.send(p, kTag, wire.data(), wire.size());
    }
  } catch (const std::exception& e) {
    issued->sendError = e.what();  // run() fails the operation with it
  }
  return issued;
}

std::string SignatureCheck::progress(const Issued& issued, int rank, int size, bool enabled) {
  if (!enabled || size == 1) return issued.op;
  std::lock_guard<std::mutex> lock(issued.mu);
  std::ostringstream missing;
  for (int p = 0, n = 0; p < size; ++p) {
    if (p != rank && !issued.got.count(p)) missing << (n++ ? "," : "") << p;
  }
  const std::string ranks = missing.str();
  return issued.op + (ranks.empty() ? ", which every rank issued (one is stuck in it or slow),"
                                    : ", which rank(s) " + ranks + " have not issued,");
}

void SignatureCheck::run(const std::shared_ptr<Issued>& issued,
                         const std::function<void()>& collective) {
  throwIfBroken();
  if (!enabled_ || size_ == 1) return collective();
  const OpSignature& sig = issued->sig;
  const std::string& op = issued->op;
  if (!issued->sendError.empty()) {
    fail("nezha backend: " + op +
         " could not send its signature to the other ranks: " + issued->sendError);
  }
  // The collective runs while the signatures travel: waiting for them first cost one more
  // small-message latency per operation, +70 % at 1 KiB on the test bed (bench/README.md,
  // "Signature cost"). Every peer sent its signature when it issued the operation, before its
  // data, so once the collective is done here, theirs are here or about to be.
  std::exception_ptr failed;
  const auto started = std::chrono::steady_clock::now();
  try {
    collective();
  } catch (...) {
    failed = std::current_exception();
  }
  std::vector<OpSignature> all(size_);
  all[rank_] = sig;
  std::vector<int> silent;
  {
    std::unique_lock<std::mutex> lock(issued->mu);
    // A failed collective (a size mismatch breaks the data path like a rail) took at least an
    // I/O deadline, long after any peer that started it sent its signature: a short grace
    // suffices to tell "mismatched" and "never started" from a real rail failure.
    const auto wait = failed ? std::min(timeout_, kGraceAfterFailure) : timeout_;
    issued->cv.wait_for(lock, wait, [&] { return issued->pending == 0 || issued->error; });
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      auto it = issued->got.find(p);
      if (it == issued->got.end()) {
        silent.push_back(p);
      } else if (it->second.size() != kWireBytes) {
        lock.unlock();
        fail("nezha backend: malformed collective signature from rank " + std::to_string(p) + " (" +
             std::to_string(it->second.size()) + " bytes)");
      } else {
        all[p] = decode(it->second);
      }
    }
  }
  std::vector<std::string> fields;
  if (silent.empty()) {
    for (std::string d :
         {disagreement("collective", all,
                       [](const OpSignature& s) { return c10d::opTypeToString(s.collective); }),
          disagreement("dtype", all, [](const OpSignature& s) { return dtypeName(s.dtype); }),
          disagreement(
              "count", all, [](const OpSignature& s) { return countName(s.count); }, true),
          disagreement("reduce op", all,
                       [](const OpSignature& s) { return reduceName(s.reduceOp); }),
          disagreement("root", all, [](const OpSignature& s) { return std::to_string(s.root); }),
          disagreement("sequence number", all,
                       [](const OpSignature& s) { return std::to_string(s.seq); })}) {
      if (!d.empty()) fields.push_back(d);
    }
  }
  if (!fields.empty()) {
    std::ostringstream why;
    why << "nezha backend: MismatchError: ranks called different collectives as " << op << "; ";
    for (size_t i = 0; i < fields.size(); ++i) why << (i ? "; " : "") << fields[i];
    why << ". Every rank must issue the same collectives with the same arguments in the same "
           "order; the output tensors hold undefined values and this process group must be "
           "recreated.";
    fail(why.str());
  }
  if (!silent.empty()) {
    std::ostringstream ranks;
    for (size_t i = 0; i < silent.size(); ++i) ranks << (i ? "," : "") << silent[i];
    std::string cause = "no error here";
    if (failed) {
      try {
        std::rethrow_exception(failed);
      } catch (const std::exception& e) {
        cause = std::string("it failed: ") + e.what();
      }
    }
    const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - started);
    // The group's timeout also caps libnezha's wait for a late peer (backend.cc), so a peer
    // that never starts the operation ends it here after about that long, as gloo's timeout.
    const std::string when =
        waited >= timeout_
            ? "timed out after " + std::to_string(waited.count()) + " ms, the group's timeout is " +
                  std::to_string(timeout_.count()) + " ms (init_process_group(timeout=))"
            : "failed after " + std::to_string(waited.count()) +
                  " ms, within the group's timeout of " + std::to_string(timeout_.count()) + " ms";
    fail("nezha backend: " + op + ": rank(s) " + ranks.str() + " did not start it (" + when + "; " +
         cause + "): a rank skipped this collective, is stuck or died");
  }
  if (failed) std::rethrow_exception(failed);  // every rank ran the same operation: a real failure
}

}  // namespace nezha_torch
