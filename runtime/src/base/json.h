// JSON for data-length tables, /status and nezha-bench output: nlohmann/json (Debian
// nlohmann-json3-dev, header-only, so libnezha gains no run-time dependency), plus strict typed
// reads that name the field in every error ("NEZHA_TABLE=t.json entries[3].ratios.r1: ...").
// The parser refuses NaN/Infinity literals and numbers that overflow a double; the reads
// below refuse wrong types, non-finite values, fractions where an integer is wanted and values
// outside the target type's range.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace nezha {

// Keeps keys in insertion order, so written files read in a stable, human order.
using Json = nlohmann::ordered_json;

// Parses `text` (all of it); throws ConfigError("<what>: <position and reason>").
Json parseJson(const std::string& text, const std::string& what);
// Serializes; never throws (bytes that are not UTF-8 are replaced).
std::string dumpJson(const Json& j, int indent = -1);

// Typed reads. `path` names the value for errors.
const Json& member(const Json& object, const std::string& key, const std::string& path);
bool hasMember(const Json& object, const std::string& key);
const Json& arrayValue(const Json& v, const std::string& path);
const Json& objectValue(const Json& v, const std::string& path);
const std::string& stringValue(const Json& v, const std::string& path);
double finiteNumber(const Json& v, const std::string& path);
// An integral number in [lo, hi] (1e3 counts; 1.5 does not).
int64_t integerIn(const Json& v, const std::string& path, int64_t lo, int64_t hi);
uint64_t unsignedUpTo(const Json& v, const std::string& path, uint64_t hi);

}  // namespace nezha
