#include "sweep.h"

#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/math.h>

#include <chrono>
#include <cstdint>
#include <cstring>

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
std::vector<SizeResult> Sweep(const std::shared_ptr<gloo::Context>& context,
                              const BenchOptions& opts, const RowCallback& onRow) {
  const std::vector<uint64_t> sizes = SweepSizes(opts);
  const size_t maxCount = sizes.back() / sizeof(T);
  std::vector<T> in(maxCount);
  std::vector<T> out(maxCount);
  FillInput(in, opts.rank);

  // Tags only need to differ between ops in flight at once; ops here run one at a time.
  uint32_t tag = 0;
  auto allreduce = [&](size_t count) {
    gloo::AllreduceOptions o(context);
    o.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
    o.setInput(in.data(), count);
    o.setOutput(out.data(), count);
    o.setReduceFunction(
        static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<T>));
    o.setTag(tag++);
    o.setTimeout(std::chrono::milliseconds(opts.timeoutMs));
    gloo::allreduce(o);
  };

  std::vector<SizeResult> results;
  for (uint64_t bytes : sizes) {
    const size_t count = bytes / sizeof(T);
    if (opts.check) std::memset(out.data(), 0xff, bytes);  // a stale result must not pass
    for (int i = 0; i < opts.warmup; i++) allreduce(count);
    // Start every rank's clock together so rank 0's mean is the collective's time, not its own
    // head start or lag.
    Barrier(context, tag++);
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < opts.iters; i++) allreduce(count);
    const auto end = std::chrono::steady_clock::now();

    SizeResult r;
    r.bytes = bytes;
    r.count = count;
    r.timeUs = std::chrono::duration<double, std::micro>(end - start).count() / opts.iters;
    r.algbwGBps = r.timeUs > 0 ? static_cast<double>(bytes) / (r.timeUs * 1e3) : 0;
    r.busbwGBps = r.algbwGBps * AllreduceBusFactor(opts.worldSize);
    r.check = !opts.check ? "skipped"
                          : (CheckOutput(out.data(), count, opts.worldSize) ? "ok" : "failed");
    results.push_back(r);
    onRow(r);
  }
  return results;
}

}  // namespace

std::vector<SizeResult> RunSweep(const std::shared_ptr<gloo::Context>& context,
                                 const BenchOptions& opts, const RowCallback& onRow) {
  switch (opts.dtype) {
    case DType::kFloat32:
      return Sweep<float>(context, opts, onRow);
    case DType::kFloat64:
      return Sweep<double>(context, opts, onRow);
    case DType::kInt32:
      return Sweep<int32_t>(context, opts, onRow);
    case DType::kInt64:
      return Sweep<int64_t>(context, opts, onRow);
  }
  return {};
}

}  // namespace gloobench
