#include "bench_report.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iomanip>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace gloobench {

double AllreduceBusFactor(int worldSize) {
  return worldSize > 1 ? 2.0 * (worldSize - 1) / worldSize : 1.0;
}

std::vector<std::string> RailNames(const BenchOptions& opts) {
  if (!opts.HandSplit()) return {opts.railName};
  return opts.split.ifaces;
}

void PrintTableHeader(std::ostream& out, const BenchOptions& opts) {
  out << "# gloo-bench allreduce " << DTypeName(opts.dtype) << ", " << opts.worldSize
      << " ranks, ring, ";
  if (opts.HandSplit()) {
    out << "hand split over tcp devices on";
    for (size_t i = 0; i < opts.split.ifaces.size(); i++) {
      out << (i > 0 ? ", " : " ") << opts.split.ifaces[i] << " (" << std::setprecision(4)
          << opts.split.shares[i] << ")";
    }
    out << "\n";
  } else {
    out << "tcp device on " << opts.iface << " (" << opts.railName << ")\n";
  }
  out << std::setw(12) << "bytes" << std::setw(12) << "count" << std::setw(14) << "time_us"
      << std::setw(12) << "algbw GB/s" << std::setw(12) << "busbw GB/s" << std::setw(8) << "check"
      << "\n";
}

void PrintTableRow(std::ostream& out, const SizeResult& r) {
  out << std::setw(12) << r.bytes << std::setw(12) << r.count << std::setw(14) << std::fixed
      << std::setprecision(1) << r.timeUs << std::setw(12) << std::setprecision(4) << r.algbwGBps
      << std::setw(12) << r.busbwGBps << std::setw(8) << r.check << "\n"
      << std::flush;
}

namespace {

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string JsonNumber(double v) {
  if (!std::isfinite(v)) return "null";  // JSON has no inf/nan
  std::ostringstream s;
  s << std::setprecision(9) << v;
  return s.str();
}

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(" \t", colon + 1));
    }
  }
  return "unknown";
}

}  // namespace

std::string RenderJson(const BenchOptions& opts, const std::vector<SizeResult>& results) {
  struct utsname u {};
  uname(&u);
  char hostname[256] = {0};
  gethostname(hostname, sizeof(hostname) - 1);

  const std::vector<std::string> names = RailNames(opts);
  std::ostringstream j;
  j << "{\"tool\":\"gloo-bench\",\"op\":" << JsonString(opts.op)
    << ",\"dtype\":" << JsonString(DTypeName(opts.dtype)) << ",\"world_size\":" << opts.worldSize
    << ",\"policy\":" << JsonString(opts.HandSplit() ? "hand-split" : "single")
    << ",\"algorithm\":\"ring\",\"rails\":[";
  for (size_t k = 0; k < names.size(); k++) {
    j << (k > 0 ? "," : "") << "{\"name\":" << JsonString(names[k])
      << ",\"iface\":" << JsonString(opts.split.ifaces[k]) << ",\"transport\":\"tcp\"}";
  }
  j << "],\"host\":{\"hostname\":" << JsonString(hostname)
    << ",\"cpus\":" << std::thread::hardware_concurrency()
    << ",\"cpu_model\":" << JsonString(CpuModel()) << ",\"kernel\":" << JsonString(u.release)
    << "},\"warmup\":" << opts.warmup << ",\"iters\":" << opts.iters << ",\"results\":[";
  for (size_t i = 0; i < results.size(); i++) {
    const SizeResult& r = results[i];
    if (i > 0) j << ",";
    j << "{\"bytes\":" << r.bytes << ",\"count\":" << r.count
      << ",\"time_us\":" << JsonNumber(r.timeUs) << ",\"algbw_gbps\":" << JsonNumber(r.algbwGBps)
      << ",\"busbw_gbps\":" << JsonNumber(r.busbwGBps) << ",\"split\":{";
    for (size_t k = 0; k < names.size(); k++) {
      j << (k > 0 ? "," : "") << JsonString(names[k]) << ":" << JsonNumber(opts.split.shares[k]);
    }
    j << "},\"rail_bytes\":{";
    for (size_t k = 0; k < names.size(); k++) {
      const uint64_t railBytes = k < r.railBytes.size() ? r.railBytes[k] : 0;
      j << (k > 0 ? "," : "") << JsonString(names[k]) << ":" << railBytes;
    }
    j << "},\"check\":" << JsonString(r.check) << "}";
  }
  j << "]}\n";
  return j.str();
}

void WriteJsonFile(const std::string& path, const std::string& doc) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) throw std::runtime_error("--json: cannot write '" + tmp + "'");
    out << doc;
    if (!out.flush()) throw std::runtime_error("--json: write to '" + tmp + "' failed");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    throw std::runtime_error("--json: cannot rename '" + tmp + "' to '" + path + "'");
  }
}

}  // namespace gloobench
