// Every tunable environment variable, declared once with its default and meaning. Options
// carries the parsed values; runtime/README.md lists the same table (keep them in step).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace nezha {

struct Param {
  const char* env;
  const char* defaultValue;  // "" = required / unset
  const char* doc;
};

const std::vector<Param>& allParams();

// Typed readers: the value of `env` (or `fallbackEnv`), else the Param default. Malformed values
// throw ConfigError naming the variable and showing the bad value.
std::string paramString(const char* env, const char* fallbackEnv = nullptr);
long long paramInt(const char* env, long long min, long long max,
                   const char* fallbackEnv = nullptr);
// Byte sizes are bounded by what the code using them can hold (e.g. setsockopt takes an int).
size_t paramBytes(const char* env, size_t min = 0, size_t max = size_t(1) << 50);
double paramDouble(const char* env, double min, double max);
bool paramIsSet(const char* env);

// "64K", "1M", "256MiB", "4096" -> bytes (K/M/G = powers of 1024). Throws ConfigError
// mentioning `what` on malformed input.
size_t parseBytes(const std::string& text, const std::string& what);
long long parseInt(const std::string& text, const std::string& what, long long min, long long max);

}  // namespace nezha
