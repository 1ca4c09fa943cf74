#include "failover/signed_channel.h"

#include <cstdio>
#include <utility>

#include "base/error.h"

namespace nezha {

SignedChannel::SignedChannel(Channel& inner, uint64_t op, std::string signature)
    : inner_(inner),
      op_(op),
      signature_(std::move(signature)),
      header_(encodeSignedHeader(SignedHeader{op_, signature_})) {}

void SignedChannel::exchange(std::vector<IoOp>& ops) {
  if (sent_) return inner_.exchange(ops);
  sent_ = true;
  const int n = size(), me = rank();
  theirs_.assign(n, std::string(kSignedHeaderBytes, '\0'));
  std::vector<size_t> received(n, 0);  // header bytes landed, by peer (onRecv)
  std::vector<IoOp> all;
  all.reserve(ops.size() + 2 * static_cast<size_t>(n));  // no reallocation: `after` points in
  // The header is one element (align = its length): the transport never cuts it across a
  // peer's streams, so it rides whole on one of them, in the same write as the data queued
  // behind it there (TCP gathers a stream's parts, transport/tcp/tcp_channel.cc pump()), and
  // arrives in the same read.
  for (int p = 0; p < n; ++p) {
    if (p != me)
      all.push_back(IoOp::send(p, header_.data(), kSignedHeaderBytes, kSignedHeaderBytes));
  }
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    all.push_back(IoOp::recv(p, theirs_[p].data(), kSignedHeaderBytes, kSignedHeaderBytes,
                             [&received, p](size_t, size_t len) { received[p] += len; }));
  }
  const size_t front = all.size();
  all.insert(all.end(), ops.begin(), ops.end());
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].after) all[front + i].after = &all[front + (ops[i].after - ops.data())];
  }
  try {
    inner_.exchange(all);
  } catch (const RailError&) {
    // A peer that found the disagreement first stops its part, which fails this exchange: the
    // headers that arrived say why, and a mismatch is what the caller must hear, not a rail.
    compare(received);
    throw;
  }
  compare(std::vector<size_t>(n, kSignedHeaderBytes));
}

void SignedChannel::compare(const std::vector<size_t>& received) const {
  const int n = size(), me = rank();
  std::vector<std::string> signatures(n);
  std::vector<int64_t> ops(n, -1);
  signatures[me] = signature_;
  ops[me] = static_cast<int64_t>(op_);
  bool differs = false;
  for (int p = 0; p < n; ++p) {
    if (p == me || received[p] < kSignedHeaderBytes) continue;
    try {
      const SignedHeader h = decodeSignedHeader(theirs_[p]);
      signatures[p] = h.signature;
      ops[p] = static_cast<int64_t>(h.op);
      differs = differs || h.signature != signature_ || h.op != op_;
    } catch (const Error&) {
      differs = true;  // not a signed header: the peer did not sign this operation
    }
  }
  if (differs) throw MismatchError(describeMismatch(op_, signatures, ops), signatures, ops);
}

namespace {
std::string hex(const std::string& bytes) {
  size_t end = bytes.size();
  while (end > 0 && bytes[end - 1] == '\0') --end;  // the zero padding says nothing
  std::string out;
  char two[3];
  for (size_t i = 0; i < end; ++i) {
    std::snprintf(two, sizeof two, "%02x", static_cast<unsigned char>(bytes[i]));
    out += two;
  }
  return out.empty() ? "(empty)" : out;
}
}  // namespace

std::string describeMismatch(uint64_t op, const std::vector<std::string>& signatures,
                             const std::vector<int64_t>& ops) {
  // Ranks grouped by what they sent, in order of the lowest rank of each group.
  std::vector<std::pair<std::string, std::vector<int>>> groups;
  for (size_t r = 0; r < signatures.size(); ++r) {
    const std::string what = ops[r] < 0
                                 ? "no signed header that arrived"
                                 : strCat("operation ", ops[r], ", signature ", hex(signatures[r]));
    size_t g = 0;
    while (g < groups.size() && groups[g].first != what) ++g;
    if (g == groups.size()) groups.push_back({what, {}});
    groups[g].second.push_back(static_cast<int>(r));
  }
  std::string out = strCat("operation ", op,
                           ": the ranks called different operations (their signatures, "
                           "Communicator::signNextOp, disagree): ");
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto& ranks = groups[g].second;
    out += strCat(g ? "; " : "", ranks.size() == 1 ? "rank " : "ranks ");
    for (size_t i = 0; i < ranks.size(); ++i) out += strCat(i ? "," : "", ranks[i]);
    out += strCat(" sent ", groups[g].first);
  }
  return out +
         " (every rank must call the same operations with the same arguments in the same "
         "order; this communicator is unusable now)";
}

}  // namespace nezha
