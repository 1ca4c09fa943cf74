#include "schedule/tuner.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"

namespace nezha {

std::vector<double> tuneRatios(const std::vector<double>& current, const std::vector<double>& bytes,
                               const std::vector<double>& seconds, double gain) {
  const size_t n = current.size();
  NEZHA_ENFORCE(bytes.size() == n && seconds.size() == n, "stat sizes differ");
  double usedMass = 0, rateSum = 0;
  std::vector<double> rate(n, 0);
  for (size_t i = 0; i < n; ++i) {
    if (bytes[i] > 0 && seconds[i] > 0) {
      rate[i] = bytes[i] / seconds[i];
      rateSum += rate[i];
      usedMass += current[i];
    }
  }
  std::vector<double> next = current;
  if (rateSum <= 0 || usedMass <= 0) return next;
  for (size_t i = 0; i < n; ++i) {
    if (rate[i] <= 0) continue;
    double target = usedMass * rate[i] / rateSum;
    next[i] = (1 - gain) * current[i] + gain * target;
  }
  double sum = 0;
  for (double v : next) sum += v;
  for (double& v : next) v /= sum;
  return next;
}

std::vector<double> ratiosFromBandwidth(const std::vector<double>& bandwidth) {
  double sum = 0;
  for (double b : bandwidth) sum += std::max(b, 0.0);
  std::vector<double> r(bandwidth.size(), 1.0 / static_cast<double>(bandwidth.size()));
  if (sum <= 0) return r;
  for (size_t i = 0; i < r.size(); ++i) r[i] = std::max(bandwidth[i], 0.0) / sum;
  return r;
}

size_t autoColdThreshold(const std::vector<double>& latency, const std::vector<double>& bandwidth,
                         size_t minBytes, size_t maxBytes) {
  NEZHA_ENFORCE(latency.size() == bandwidth.size() && !latency.empty(), "probe sizes differ");
  if (latency.size() == 1) return maxBytes;  // one rail: nothing to split
  double maxLat = 0, bwSum = 0;
  for (size_t i = 0; i < latency.size(); ++i) {
    maxLat = std::max(maxLat, latency[i]);
    bwSum += bandwidth[i];
  }
  for (size_t s = minBytes; s < maxBytes; s *= 2) {
    double cold = INFINITY;
    for (size_t i = 0; i < latency.size(); ++i) {
      if (bandwidth[i] > 0)
        cold = std::min(cold, latency[i] + static_cast<double>(s) / bandwidth[i]);
    }
    double hot = maxLat + static_cast<double>(s) / bwSum;
    if (hot < cold) return s;
  }
  return maxBytes;
}

int lowestLatencyRail(const std::vector<double>& latency) {
  int best = 0;
  for (size_t i = 1; i < latency.size(); ++i) {
    if (latency[i] < latency[best]) best = static_cast<int>(i);
  }
  return best;
}

int highestBandwidthRail(const std::vector<double>& bandwidth) {
  int best = 0;
  for (size_t i = 1; i < bandwidth.size(); ++i) {
    if (bandwidth[i] > bandwidth[best]) best = static_cast<int>(i);
  }
  return best;
}

}  // namespace nezha
