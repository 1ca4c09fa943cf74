// Communicator::alltoall and alltoallv: the personalized exchange as one multi-rail operation.
//
// The unit space the scheduler splits is the largest message of the operation (maxPair
// elements): a slice [a, b) of it carries elements floor(L*a/U) .. floor(L*b/U) of EVERY
// message (L its length, U = maxPair), so however the split, chunking and failover replays
// cut the units, the pieces tile each message exactly and a redone piece rewrites the same
// bytes (collectives/alltoall.cc). Every rank computes the same plan because U and the bytes
// per unit come from agreed numbers: the counts all ranks pass (alltoall) or the count matrix
// alltoallv gathers first.
//
// Not round-free (the failover engine's roundFree): the slice function reads the caller's buffers,
// so a kept copy would need both layouts; small alltoalls hold the per-op round like broadcasts.
#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "comm/communicator_impl.h"

namespace nezha {

using Impl = Communicator::Impl;

namespace {

constexpr size_t kMaxCount = size_t(1) << 50;  // as everywhere in Nezha (communicator.cc)

// Byte range [lo, hi) a layout's blocks touch (lo == hi: none).
std::pair<const char*, const char*> extent(const char* base, const std::vector<size_t>& count,
                                           const std::vector<size_t>& displ, size_t es) {
  const char *lo = nullptr, *hi = nullptr;
  for (size_t p = 0; p < count.size(); ++p) {
    if (count[p] == 0) continue;
    const char* b = base + displ[p] * es;
    const char* e = b + count[p] * es;
    lo = lo == nullptr ? b : std::min(lo, b);
    hi = hi == nullptr ? e : std::max(hi, e);
  }
  return {lo, hi};
}

// The operation after beginOp: own block copied locally, peers' blocks through runOp.
// `maxPair`: the largest message between two different ranks (elements); `widestBytes`: the
// most any rank sends to its peers (bytes). Both agreed.
void runAlltoall(Impl& m, AlltoallLayout l, size_t maxPair, size_t widestBytes) {
  const size_t es = l.elemSize, me = static_cast<size_t>(m.o.rank);
  // Overlapping buffers: the receives would overwrite input that later sends (and replays)
  // still read, so the input is packed into a copy first.
  std::vector<char> packed;
  const auto [slo, shi] = extent(l.send, l.sendCount, l.sendDispl, es);
  const auto [rlo, rhi] = extent(l.recv, l.recvCount, l.recvDispl, es);
  if (slo != nullptr && rlo != nullptr && slo < rhi && rlo < shi) {
    size_t total = 0;
    for (size_t c : l.sendCount) total += c;
    packed.resize(total * es);
    size_t at = 0;
    for (size_t p = 0; p < l.sendCount.size(); ++p) {
      if (l.sendCount[p])
        std::memcpy(packed.data() + at * es, l.send + l.sendDispl[p] * es, l.sendCount[p] * es);
      l.sendDispl[p] = at;
      at += l.sendCount[p];
    }
    l.send = packed.data();
  }
  if (l.sendCount[me]) {
    std::memmove(l.recv + l.recvDispl[me] * es, l.send + l.sendDispl[me] * es,
                 l.sendCount[me] * es);
  }
  if (m.o.worldSize == 1 || maxPair == 0) {
    m.report(OpKind::kAlltoall, Plan{OpKind::kAlltoall, false, {}, 0, es, {}},
             std::vector<double>{});
    return;
  }
  l.units = maxPair;
  l.unitBytes = std::max<size_t>(1, (widestBytes + maxPair - 1) / maxPair);
  const AlltoallLayout& layout = l;
  Impl::MakeSliceFn make = [&m, &layout](const char*, char*) -> Impl::SliceFn {
    return [&m, &layout](Channel& ch, Scratch&, const Slice& sl) {
      nezha::alltoall(ch, layout, sl.offset, sl.count, m.algo);
    };
  };
  Plan plan;
  Impl::Outcome ran = m.engine->runOp(
      OpKind::kAlltoall, [&] { return m.sched->plan(OpKind::kAlltoall, maxPair, l.unitBytes); },
      l.send, 0, l.recv, 0, false, make, plan);
  if (!ran.replayed) m.sched->record(plan, ran.secs);
  m.report(OpKind::kAlltoall, plan, ran);
}

}  // namespace

void Communicator::alltoall(const void* sendbuf, void* recvbuf, size_t count, DataType dtype) {
  Impl& m = *impl_;
  const size_t n = static_cast<size_t>(m.o.worldSize);
  if (count > kMaxCount) throw InvalidArgument(strCat("alltoall: count ", count, " too large"));
  if (count > 0 && (sendbuf == nullptr || recvbuf == nullptr)) {
    throw InvalidArgument(strCat("alltoall: null buffer with count ", count));
  }
  const size_t es = dataTypeSize(dtype);
  AlltoallLayout l;
  l.send = static_cast<const char*>(sendbuf);
  l.recv = static_cast<char*>(recvbuf);
  l.elemSize = es;
  l.sendCount.assign(n, count);
  l.recvCount.assign(n, count);
  for (size_t p = 0; p < n; ++p) {
    l.sendDispl.push_back(p * count);
    l.recvDispl.push_back(p * count);
  }
  m.beginOp(OpKind::kAlltoall, count, dtype, 0);
  runAlltoall(m, std::move(l), count, (n - 1) * count * es);
}

void Communicator::alltoallv(const void* sendbuf, const size_t* sendcounts, const size_t* sdispls,
                             void* recvbuf, const size_t* recvcounts, const size_t* rdispls,
                             DataType dtype) {
  Impl& m = *impl_;
  const size_t n = static_cast<size_t>(m.o.worldSize);
  if (!sendcounts || !sdispls || !recvcounts || !rdispls) {
    throw InvalidArgument("alltoallv: null counts or displacements");
  }
  const size_t es = dataTypeSize(dtype);
  // One small allgather of every rank's send and receive counts (2n int64 each): every rank
  // then checks every pair and finds the same first mismatch, so a bad call is the same
  // InvalidArgument on all ranks, never a hang. A local argument error travels as -1 in the
  // same round.
  std::vector<int64_t> mine(2 * n), all(2 * n * n);
  std::string localError;
  size_t sent = 0, received = 0;
  for (size_t p = 0; p < n; ++p) {
    if (sendcounts[p] > kMaxCount || recvcounts[p] > kMaxCount) {
      localError = strCat("alltoallv: count for rank ", p, " too large");
    }
    mine[p] = static_cast<int64_t>(sendcounts[p]);
    mine[n + p] = static_cast<int64_t>(recvcounts[p]);
    sent += sendcounts[p];
    received += recvcounts[p];
  }
  if (sent > 0 && sendbuf == nullptr) localError = "alltoallv: null sendbuf";
  if (received > 0 && recvbuf == nullptr) localError = "alltoallv: null recvbuf";
  if (!localError.empty()) std::fill(mine.begin(), mine.end(), -1);
  allgather(mine.data(), all.data(), 2 * n, DataType::kInt64);
  auto sends = [&](size_t from, size_t to) { return all[from * 2 * n + to]; };
  auto expects = [&](size_t at, size_t from) { return all[at * 2 * n + n + from]; };
  for (size_t p = 0; p < n; ++p) {
    if (sends(p, 0) < 0) {
      throw InvalidArgument(localError.empty()
                                ? strCat("alltoallv: rank ", p, " passed invalid arguments")
                                : localError);
    }
  }
  size_t maxPair = 0, widestBytes = 0;
  for (size_t p = 0; p < n; ++p) {
    size_t out = 0;
    for (size_t q = 0; q < n; ++q) {
      if (sends(p, q) != expects(q, p)) {
        throw InvalidArgument(strCat("alltoallv: rank ", q, " expects ", expects(q, p),
                                     " elements from rank ", p, ", which sends ", sends(p, q)));
      }
      if (q == p) continue;
      maxPair = std::max(maxPair, static_cast<size_t>(sends(p, q)));
      out += static_cast<size_t>(sends(p, q));
    }
    widestBytes = std::max(widestBytes, out * es);
  }
  AlltoallLayout l;
  l.send = static_cast<const char*>(sendbuf);
  l.recv = static_cast<char*>(recvbuf);
  l.elemSize = es;
  l.sendCount.assign(sendcounts, sendcounts + n);
  l.sendDispl.assign(sdispls, sdispls + n);
  l.recvCount.assign(recvcounts, recvcounts + n);
  l.recvDispl.assign(rdispls, rdispls + n);
  m.beginOp(OpKind::kAlltoall, maxPair, dtype, 1);
  runAlltoall(m, std::move(l), maxPair, widestBytes);
}

}  // namespace nezha
