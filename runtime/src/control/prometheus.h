// A small writer for the Prometheus text exposition format (version 0.0.4): every family gets
// its HELP and TYPE lines before its samples, label values are escaped, names are checked. The
// runtime keeps no metrics library (libnezha is copied into users' images); this is the only
// part of the format it needs.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace nezha {

class PrometheusText {
 public:
  using Labels = std::vector<std::pair<std::string, std::string>>;
  // Labels every sample carries (job, rank).
  explicit PrometheusText(Labels common) : common_(std::move(common)) {}
  // Starts a family; `type` is counter, gauge or summary.
  void family(const std::string& name, const char* type, const std::string& help);
  // A sample of the current family (`suffix` for summaries: "_sum", "_count").
  void sample(const Labels& labels, double value, const char* suffix = "");
  const std::string& text() const { return out_; }

 private:
  Labels common_;
  std::string name_;
  std::string out_;
};

}  // namespace nezha
