#include "base/json.h"

#include <cmath>

#include "base/error.h"

namespace nezha {

Json parseJson(const std::string& text, const std::string& what) {
  try {
    return Json::parse(text, /*cb=*/nullptr, /*allow_exceptions=*/true, /*ignore_comments=*/false);
  } catch (const Json::exception& e) {
    // e.what() is "[json.exception.parse_error.101] parse error at line 1, column 3: ...".
    std::string why = e.what();
    const size_t bracket = why.find("] ");
    if (why.rfind("[json.exception.", 0) == 0 && bracket != std::string::npos) {
      why = why.substr(bracket + 2);
    }
    throw ConfigError(strCat(what, ": not valid JSON (", why, ")"));
  }
}

std::string dumpJson(const Json& j, int indent) {
  return j.dump(indent, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace);
}

namespace {
[[noreturn]] void wrongType(const Json& v, const std::string& path, const char* want) {
  throw ConfigError(strCat(path, ": expected ", want, ", got ", v.type_name()));
}
}  // namespace

const Json& objectValue(const Json& v, const std::string& path) {
  if (!v.is_object()) wrongType(v, path, "an object");
  return v;
}

const Json& arrayValue(const Json& v, const std::string& path) {
  if (!v.is_array()) wrongType(v, path, "an array");
  return v;
}

const Json& member(const Json& object, const std::string& key, const std::string& path) {
  const Json& o = objectValue(object, path);
  auto it = o.find(key);
  if (it == o.end()) throw ConfigError(strCat(path, ": missing field \"", key, "\""));
  return *it;
}

bool hasMember(const Json& object, const std::string& key) {
  return object.is_object() && object.contains(key);
}

const std::string& stringValue(const Json& v, const std::string& path) {
  if (!v.is_string()) wrongType(v, path, "a string");
  return v.get_ref<const std::string&>();
}

double finiteNumber(const Json& v, const std::string& path) {
  if (!v.is_number()) wrongType(v, path, "a number");
  const double d = v.get<double>();
  if (!std::isfinite(d)) throw ConfigError(strCat(path, ": ", d, " is not a finite number"));
  return d;
}

int64_t integerIn(const Json& v, const std::string& path, int64_t lo, int64_t hi) {
  if (v.is_number_integer()) {
    // Unsigned values above INT64_MAX are out of every range this is asked for.
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      throw ConfigError(
          strCat(path, ": ", v.get<uint64_t>(), " out of range [", lo, ", ", hi, "]"));
    }
    const int64_t i = v.get<int64_t>();
    if (i < lo || i > hi)
      throw ConfigError(strCat(path, ": ", i, " out of range [", lo, ", ", hi, "]"));
    return i;
  }
  const double d = finiteNumber(v, path);
  if (d != std::floor(d)) throw ConfigError(strCat(path, ": ", d, " is not an integer"));
  if (d < static_cast<double>(lo) || d > static_cast<double>(hi)) {
    throw ConfigError(strCat(path, ": ", d, " out of range [", lo, ", ", hi, "]"));
  }
  return static_cast<int64_t>(d);
}

uint64_t unsignedUpTo(const Json& v, const std::string& path, uint64_t hi) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > hi) throw ConfigError(strCat(path, ": ", u, " out of range [0, ", hi, "]"));
    return u;
  }
  if (v.is_number_integer()) {  // signed, so negative
    throw ConfigError(strCat(path, ": ", v.get<int64_t>(), " out of range [0, ", hi, "]"));
  }
  const double d = finiteNumber(v, path);
  if (d != std::floor(d)) throw ConfigError(strCat(path, ": ", d, " is not an integer"));
  if (d < 0 || d > static_cast<double>(hi)) {
    throw ConfigError(strCat(path, ": ", d, " out of range [0, ", hi, "]"));
  }
  return static_cast<uint64_t>(d);
}

}  // namespace nezha
