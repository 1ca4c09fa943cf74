// The control endpoint's request-head parser: any bytes give a request or an HTTP error status.
#include <cstddef>
#include <cstdint>
#include <string>

#include "control/http_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  const size_t end = nezha::httpHeadEnd(bytes);
  if (end != std::string::npos && end > bytes.size()) __builtin_trap();
  const nezha::HttpRequest r =
      nezha::parseHttpHead(end == std::string::npos ? bytes : bytes.substr(0, end));
  if (r.error == 0 && (r.path.empty() || r.path[0] != '/' || r.method.empty())) __builtin_trap();
  if (r.error != 0 && r.error != 400 && r.error != 413 && r.error != 505) __builtin_trap();
  return 0;
}
