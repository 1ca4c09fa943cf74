// The control endpoint's HTTP/1.x request-head parser: a pure function over the bytes received,
// kept apart from sockets so it can be fuzzed (runtime/fuzz/). It accepts only what the endpoint
// needs (request line + headers, no body) and answers anything else with a status and reason.
#pragma once

#include <cstddef>
#include <map>
#include <string>

namespace nezha {

// Largest request head the endpoint reads; more is a 413.
inline constexpr size_t kMaxHttpHead = 8192;

struct HttpRequest {
  int error = 0;       // 0 = parsed; else the HTTP status to answer (400, 413, 505)
  std::string reason;  // why, for the error body
  std::string method;  // "GET", "POST", ...
  std::string path;    // without the query string
  std::map<std::string, std::string> headers;  // names lower-cased, values trimmed
};

// Where the head ends (the index just past the blank line), or npos while it is incomplete.
size_t httpHeadEnd(const std::string& received);

// Parses a complete head (up to and including the blank line).
HttpRequest parseHttpHead(const std::string& head);

}  // namespace nezha
