// Error helpers. The exception classes themselves are public (nezha/nezha.hpp).
#pragma once

#include <sstream>
#include <string>

#include "nezha/nezha.hpp"

namespace nezha {

// Bug checks: a violated invariant inside libnezha, never bad user input (that is ConfigError).
// Usage: NEZHA_ENFORCE(cond) or NEZHA_ENFORCE(cond, "message parts", value, ...).
#define NEZHA_ENFORCE(...) NEZHA_ENFORCE_IMPL(__VA_ARGS__, "")
#define NEZHA_ENFORCE_IMPL(cond, ...)                                                  \
  do {                                                                                 \
    if (!(cond)) {                                                                     \
      ::nezha::enforceFailed(__FILE__, __LINE__, #cond, ::nezha::strCat(__VA_ARGS__)); \
    }                                                                                  \
  } while (0)

template <typename... Args>
std::string strCat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
inline std::string strCat() { return {}; }

[[noreturn]] void enforceFailed(const char* file, int line, const char* cond,
                                const std::string& msg);
// errno text for system call failures, e.g. "connect: Connection refused".
std::string sysError(const char* call, int err);

}  // namespace nezha
