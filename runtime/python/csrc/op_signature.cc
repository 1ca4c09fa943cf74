#include "op_signature.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <memory>
#include <optional>
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

// One field of every rank's signature (by rank; empty: it sent none): "count: rank 0 100, rank 1
// 200", or "" when every rank agrees. Counts that legitimately differ (alltoall's splits) compare
// as equal.
template <class Value>
std::string disagreement(const char* field, const std::vector<std::optional<OpSignature>>& all,
                         Value value, bool anyMatches = false) {
  std::vector<std::pair<std::string, std::vector<int>>> holders;  // by lowest rank holding it
  for (size_t r = 0; r < all.size(); ++r) {
    if (!all[r]) continue;  // sent none: named apart
    const std::string v = value(*all[r]);
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

SignatureCheck::SignatureCheck(std::shared_ptr<nezha::Communicator> comm, int rank, int size,
                               std::chrono::milliseconds timeout, bool enabled)
    : comm_(*comm), weak_(comm), rank_(rank), size_(size), timeout_(timeout), enabled_(enabled) {}

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
  auto issued = std::make_shared<Issued>();  // shared: the Work's progress() may outlive run()
  sig.seq = next_++;
  issued->sig = sig;
  issued->op = "collective #" + std::to_string(sig.seq) + " (this rank " + std::to_string(rank_) +
               ": " + sig.describe() + ")";
  return issued;
}

namespace {
std::string rankList(const std::vector<int>& ranks) {
  std::ostringstream out;
  for (size_t i = 0; i < ranks.size(); ++i) out << (i ? "," : "") << ranks[i];
  return out.str();
}
}  // namespace

std::string SignatureCheck::progress(const Issued& issued,
                                     const std::weak_ptr<nezha::Communicator>& comm) {
  const std::shared_ptr<nezha::Communicator> c = comm.lock();
  const std::vector<int> behind = c ? c->peersNotStarted() : std::vector<int>{};
  return issued.op + (behind.empty() ? ", which every rank issued (one is stuck in it or slow),"
                                     : ", which rank(s) " + rankList(behind) + " have not issued,");
}

// libnezha's view of the disagreement (every rank's signature as it arrived) named field by
// field, as the same message on every rank.
void SignatureCheck::failMismatch(const Issued& issued, const nezha::MismatchError& e) {
  const std::vector<std::string>& got = e.signatures();
  std::vector<std::optional<OpSignature>> all(got.size());
  std::vector<int> unsigned_;
  for (size_t r = 0; r < got.size(); ++r) {
    if (got[r].size() < kWireBytes) {
      unsigned_.push_back(static_cast<int>(r));
    } else {
      all[r] = decode(std::vector<char>(got[r].begin(), got[r].begin() + kWireBytes));
    }
  }
  std::vector<std::string> fields;
  for (std::string d :
       {disagreement("collective", all,
                     [](const OpSignature& s) { return c10d::opTypeToString(s.collective); }),
        disagreement("dtype", all, [](const OpSignature& s) { return dtypeName(s.dtype); }),
        disagreement(
            "count", all, [](const OpSignature& s) { return countName(s.count); }, true),
        disagreement("reduce op", all, [](const OpSignature& s) { return reduceName(s.reduceOp); }),
        disagreement("root", all, [](const OpSignature& s) { return std::to_string(s.root); }),
        disagreement("sequence number", all,
                     [](const OpSignature& s) { return std::to_string(s.seq); })}) {
    if (!d.empty()) fields.push_back(d);
  }
  if (!unsigned_.empty()) {
    fields.push_back("signature: rank(s) " + rankList(unsigned_) +
                     " sent none (did not call a collective here, or called it unchecked)");
  }
  if (fields.empty()) fields.push_back(std::string("libnezha: ") + e.what());
  std::ostringstream why;
  why << "nezha backend: MismatchError: ranks called different collectives as " << issued.op
      << "; ";
  for (size_t i = 0; i < fields.size(); ++i) why << (i ? "; " : "") << fields[i];
  why << ". Every rank must issue the same collectives with the same arguments in the same "
         "order; the output tensors hold undefined values and this process group must be "
         "recreated.";
  fail(why.str());
}

void SignatureCheck::run(const std::shared_ptr<Issued>& issued,
                         const std::function<void()>& collective) {
  throwIfBroken();
  if (!enabled_ || size_ == 1) return collective();
  const std::vector<char> wire = encode(issued->sig);
  comm_.signNextOp(wire.data(), wire.size());
  const auto started = std::chrono::steady_clock::now();
  try {
    collective();
  } catch (const nezha::MismatchError& e) {
    failMismatch(*issued, e);
  } catch (const nezha::RailError& e) {
    // A collective some rank never started fails here after libnezha's wait for a late peer
    // (capped by the group's timeout, backend.cc): name those ranks, as gloo's timeout does.
    // Other errors (a bad argument found on every rank) are the collective's own: rethrown,
    // and the group stays usable.
    const std::vector<int> behind = comm_.peersNotStarted();
    if (behind.empty()) throw;
    const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - started);
    const std::string when =
        waited >= timeout_
            ? "timed out after " + std::to_string(waited.count()) + " ms, the group's timeout is " +
                  std::to_string(timeout_.count()) + " ms (init_process_group(timeout=))"
            : "failed after " + std::to_string(waited.count()) +
                  " ms, within the group's timeout of " + std::to_string(timeout_.count()) + " ms";
    fail("nezha backend: " + issued->op + ": rank(s) " + rankList(behind) + " did not start it (" +
         when + "; it failed: " + e.what() + "): a rank skipped this collective, is stuck or died");
  }
}

}  // namespace nezha_torch
