#include "control/http_request.h"

#include <cctype>
#include <vector>

namespace nezha {

namespace {
HttpRequest fail(int status, std::string why) {
  HttpRequest r;
  r.error = status;
  r.reason = std::move(why);
  return r;
}

bool isToken(const std::string& s) {
  if (s.empty()) return false;
  for (unsigned char c : s) {
    if (c <= 32 || c >= 127 || c == ':' || c == '(' || c == ')' || c == ',' || c == '"') {
      return false;
    }
  }
  return true;
}

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && (s[b] == ' ' || s[b] == '\t')) ++b;
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t')) --e;
  return s.substr(b, e - b);
}
}  // namespace

size_t httpHeadEnd(const std::string& received) {
  // CRLF is the standard; a bare LF is tolerated (curl and friends never send one, humans with
  // netcat do).
  const size_t crlf = received.find("\r\n\r\n");
  const size_t lf = received.find("\n\n");
  if (crlf == std::string::npos && lf == std::string::npos) return std::string::npos;
  if (crlf == std::string::npos) return lf + 2;
  if (lf == std::string::npos) return crlf + 4;
  return crlf < lf ? crlf + 4 : lf + 2;
}

HttpRequest parseHttpHead(const std::string& head) {
  if (head.size() > kMaxHttpHead) return fail(413, "request head larger than 8 KiB");
  // Split into lines (CRLF or LF).
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < head.size()) {
    size_t nl = head.find('\n', start);
    if (nl == std::string::npos) nl = head.size();
    std::string line = head.substr(start, nl - start);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) break;  // the blank line ends the head
    lines.push_back(line);
    start = nl + 1;
  }
  if (lines.empty()) return fail(400, "empty request");
  const std::string& rl = lines[0];
  const size_t s1 = rl.find(' ');
  const size_t s2 = s1 == std::string::npos ? s1 : rl.find(' ', s1 + 1);
  if (s1 == std::string::npos || s2 == std::string::npos ||
      rl.find(' ', s2 + 1) != std::string::npos) {
    return fail(400, "malformed request line");
  }
  HttpRequest r;
  r.method = rl.substr(0, s1);
  std::string target = rl.substr(s1 + 1, s2 - s1 - 1);
  const std::string version = rl.substr(s2 + 1);
  if (!isToken(r.method)) return fail(400, "malformed method");
  if (target.empty() || target[0] != '/') return fail(400, "the target must be an absolute path");
  for (unsigned char c : target) {
    if (c <= 32 || c >= 127) return fail(400, "malformed target");
  }
  if (version != "HTTP/1.0" && version != "HTTP/1.1") {
    if (version.rfind("HTTP/", 0) == 0) return fail(505, "only HTTP/1.0 and HTTP/1.1");
    return fail(400, "malformed request line");
  }
  const size_t q = target.find('?');
  r.path = q == std::string::npos ? target : target.substr(0, q);
  for (size_t i = 1; i < lines.size(); ++i) {
    const size_t colon = lines[i].find(':');
    if (colon == std::string::npos) return fail(400, "malformed header line");
    std::string name = lines[i].substr(0, colon);
    if (!isToken(name)) return fail(400, "malformed header name");
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    const std::string value = trim(lines[i].substr(colon + 1));
    for (unsigned char c : value) {
      if ((c < 32 && c != '\t') || c == 127) return fail(400, "control character in a header");
    }
    if (r.headers.count(name)) return fail(400, "header \"" + name + "\" given twice");
    r.headers[name] = value;
  }
  if (r.headers.count("content-length") && r.headers["content-length"] != "0") {
    return fail(413, "the control endpoint takes no request body");
  }
  if (r.headers.count("transfer-encoding"))
    return fail(400, "the control endpoint takes no request body");
  return r;
}

}  // namespace nezha
