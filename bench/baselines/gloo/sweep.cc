#include "sweep.h"

#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/math.h>

#include <chrono>
#include <cstdint>
#include <cstring>

#include "concurrent.h"
#include "rail_split.h"

namespace gloobench {
namespace {

// Input element i on rank r is (r+1) * (1 + i % 13): small integers, so the float sum over ranks
// is exact and --check can compare with ==.
template <typename T>
void FillInput(std::vector<T>& in, int rank) {
  for (size_t i = 0; i < in.size(); i++) in[i] = static_cast<T>((rank + 1) * (1 + i % 13));
}

template <typename T>
bool CheckOutput(const T* out, size_t count, int worldSize) {
  const int64_t rankSum = static_cast<int64_t>(worldSize) * (worldSize + 1) / 2;
  for (size_t i = 0; i < count; i++) {
    if (out[i] != static_cast<T>(rankSum * static_cast<int64_t>(1 + i % 13))) return false;
  }
  return true;
}

void Barrier(const std::shared_ptr<gloo::Context>& context, uint32_t tag) {
  gloo::BarrierOptions b(context);
  b.setTag(tag);
  gloo::barrier(b);
}

template <typename T>
std::vector<SizeResult> Sweep(const std::vector<std::shared_ptr<gloo::Context>>& rails,
                              const BenchOptions& opts, const RowCallback& onRow) {
  const std::vector<uint64_t> sizes = SweepSizes(opts);
  const size_t maxCount = sizes.back() / sizeof(T);
  std::vector<T> in(maxCount);
  std::vector<T> out(maxCount);
  FillInput(in, opts.rank);

  // Elements [offset, offset + count) on one rail's context.
  auto allreduceOn = [&](size_t rail, size_t offset, size_t count, uint32_t tag) {
    gloo::AllreduceOptions o(rails[rail]);
    o.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
    o.setInput(in.data() + offset, count);
    o.setOutput(out.data() + offset, count);
    o.setReduceFunction(
        static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<T>));
    o.setTag(tag);
    o.setTimeout(std::chrono::milliseconds(opts.timeoutMs));
    gloo::allreduce(o);
  };
  // Tags only need to differ between ops in flight at once on one context; ops here run one at
  // a time, and the chunks of one op are on different contexts, so they share the op's tag.
  uint32_t tag = 0;
  auto allreduce = [&](size_t count) {
    const uint32_t opTag = tag++;
    if (rails.size() == 1) {
      allreduceOn(0, 0, count, opTag);  // one rail: the plain Gloo ring, no thread
      return;
    }
    const std::vector<uint64_t> counts = SplitCounts(count, opts.split.shares);
    std::vector<size_t> offsets(counts.size(), 0);
    for (size_t i = 1; i < counts.size(); i++) offsets[i] = offsets[i - 1] + counts[i - 1];
    RunConcurrently(rails.size(), [&](size_t i) {
      if (counts[i] > 0) allreduceOn(i, offsets[i], counts[i], opTag);
    });
  };

  std::vector<SizeResult> results;
  for (uint64_t bytes : sizes) {
    const size_t count = bytes / sizeof(T);
    if (opts.check) std::memset(out.data(), 0xff, bytes);  // a stale result must not pass
    for (int i = 0; i < opts.warmup; i++) allreduce(count);
    // Start every rank's clock together so rank 0's mean is the collective's time, not its own
    // head start or lag.
    Barrier(rails.front(), tag++);
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < opts.iters; i++) allreduce(count);
    const auto end = std::chrono::steady_clock::now();

    SizeResult r;
    r.bytes = bytes;
    r.count = count;
    r.timeUs = std::chrono::duration<double, std::micro>(end - start).count() / opts.iters;
    r.algbwGBps = r.timeUs > 0 ? static_cast<double>(bytes) / (r.timeUs * 1e3) : 0;
    r.busbwGBps = r.algbwGBps * AllreduceBusFactor(opts.worldSize);
    for (uint64_t c : SplitCounts(count, opts.split.shares)) r.railBytes.push_back(c * sizeof(T));
    r.check = !opts.check ? "skipped"
                          : (CheckOutput(out.data(), count, opts.worldSize) ? "ok" : "failed");
    results.push_back(r);
    onRow(r);
  }
  return results;
}

}  // namespace

std::vector<SizeResult> RunSweep(const std::vector<std::shared_ptr<gloo::Context>>& rails,
                                 const BenchOptions& opts, const RowCallback& onRow) {
  switch (opts.dtype) {
    case DType::kFloat32:
      return Sweep<float>(rails, opts, onRow);
    case DType::kFloat64:
      return Sweep<double>(rails, opts, onRow);
    case DType::kInt32:
      return Sweep<int32_t>(rails, opts, onRow);
    case DType::kInt64:
      return Sweep<int64_t>(rails, opts, onRow);
  }
  return {};
}

}  // namespace gloobench
