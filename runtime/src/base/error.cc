#include "base/error.h"

#include <cstring>

namespace nezha {

void enforceFailed(const char* file, int line, const char* cond, const std::string& msg) {
  throw EnforceError(strCat("nezha bug check failed at ", file, ":", line, ": ", cond,
                            msg.empty() ? "" : " (", msg, msg.empty() ? "" : ")"));
}

std::string sysError(const char* call, int err) {
  char buf[256];
  // GNU strerror_r returns the message pointer (may not use buf).
  const char* text = strerror_r(err, buf, sizeof(buf));
  return strCat(call, ": ", text);
}

}  // namespace nezha
