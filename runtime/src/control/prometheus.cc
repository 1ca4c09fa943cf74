#include "control/prometheus.h"

#include <cmath>
#include <cstdio>

#include "base/error.h"

namespace nezha {

namespace {
bool validName(const std::string& s) {
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
                    (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

std::string escapeValue(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}
}  // namespace

void PrometheusText::family(const std::string& name, const char* type, const std::string& help) {
  NEZHA_ENFORCE(validName(name), "bad metric name ", name);
  name_ = name;
  std::string h;
  for (char c : help) h += c == '\n' ? ' ' : c;
  out_ += strCat("# HELP ", name, " ", h, "\n# TYPE ", name, " ", type, "\n");
}

void PrometheusText::sample(const Labels& labels, double value, const char* suffix) {
  std::string ls;
  for (const Labels* set : {static_cast<const Labels*>(&common_), &labels}) {
    for (const auto& [k, v] : *set) {
      NEZHA_ENFORCE(validName(k), "bad label name ", k);
      ls += strCat(ls.empty() ? "" : ",", k, "=\"", escapeValue(v), "\"");
    }
  }
  out_ += strCat(name_, suffix, ls.empty() ? "" : "{", ls, ls.empty() ? "" : "}", " ",
                 number(value), "\n");
}

}  // namespace nezha
