#include "schedule/algo_table.h"

#include "base/error.h"

namespace nezha {

namespace {
constexpr char kFormat[] = "nezha-algo/v1";
// The largest rank count and byte size anywhere in Nezha (table.cc, communicator.cc).
constexpr int64_t kMaxRanks = 1000000;
constexpr uint64_t kMaxBytes = uint64_t(1) << 50;

void refuseUnknownKeys(const Json& obj, std::initializer_list<const char*> known,
                       const std::string& path) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    bool ok = false;
    for (const char* k : known) ok = ok || it.key() == k;
    if (ok) continue;
    std::string list;
    for (const char* k : known) list += strCat(list.empty() ? "" : ", ", k);
    throw ConfigError(strCat(path, ".", it.key(), ": unknown key (known: ", list, ")"));
  }
}

// min_ranks/max_ranks of a row: defaults 1 and unlimited, min <= max.
void readRanks(const Json& row, const std::string& path, int& minRanks, int& maxRanks) {
  minRanks = 1;
  maxRanks = INT_MAX;
  if (hasMember(row, "min_ranks")) {
    minRanks = static_cast<int>(
        integerIn(member(row, "min_ranks", path), path + ".min_ranks", 1, kMaxRanks));
  }
  if (hasMember(row, "max_ranks") && !member(row, "max_ranks", path).is_null()) {
    maxRanks = static_cast<int>(
        integerIn(member(row, "max_ranks", path), path + ".max_ranks", 1, kMaxRanks));
  }
  if (maxRanks < minRanks) {
    throw ConfigError(strCat(path, ".max_ranks: ", maxRanks, " is below min_ranks ", minRanks));
  }
}

AlgoRule readRule(const Json& row, OpKind op, const std::string& path) {
  objectValue(row, path);
  refuseUnknownKeys(row, {"min_ranks", "max_ranks", "max_bytes", "algorithm", "transport"}, path);
  AlgoRule r;
  readRanks(row, path, r.minRanks, r.maxRanks);
  if (hasMember(row, "max_bytes") && !member(row, "max_bytes", path).is_null()) {
    r.maxBytes = unsignedUpTo(member(row, "max_bytes", path), path + ".max_bytes", kMaxBytes);
    if (r.maxBytes == 0) throw ConfigError(strCat(path, ".max_bytes: 0 matches no size"));
  }
  const std::string& name = stringValue(member(row, "algorithm", path), path + ".algorithm");
  std::optional<Algorithm> a = parseAlgorithm(name);
  if (!a || !implements(*a, op)) {
    throw ConfigError(strCat(path, ".algorithm: \"", name, "\" is not a ", toString(op),
                             " algorithm (", algorithmsFor(op), ")"));
  }
  r.algorithm = *a;
  if (hasMember(row, "transport")) {
    const std::string& t = stringValue(member(row, "transport", path), path + ".transport");
    if (t == "sharp" && op == OpKind::kAllreduce) {
      r.offload = true;
    } else if (t != "any") {
      throw ConfigError(strCat(path, ".transport: \"", t, "\" is not ",
                               op == OpKind::kAllreduce ? "any or sharp" : "any",
                               op == OpKind::kAllreduce ? "" : " (only allreduce has SHARP)"));
    }
  }
  return r;
}

Json ranksJson(Json row, int minRanks, int maxRanks) {
  row["min_ranks"] = minRanks;
  row["max_ranks"] = maxRanks == INT_MAX ? Json() : Json(maxRanks);
  return row;
}
}  // namespace

const std::vector<std::pair<OpKind, const char*>>& algoTableOps() {
  static const std::vector<std::pair<OpKind, const char*>> ops = {
      {OpKind::kAllreduce, "allreduce"}, {OpKind::kBroadcast, "broadcast"},
      {OpKind::kAllgather, "allgather"}, {OpKind::kReduceScatter, "reduce_scatter"},
      {OpKind::kAlltoall, "alltoall"},
  };
  return ops;
}

AlgoTable::AlgoTable(size_t ringThreshold, size_t chainThreshold)
    : algo_(AlgoOptions::builtin(ringThreshold, chainThreshold)) {}

std::optional<size_t> AlgoTable::coldThreshold(int ranks) const {
  for (const ColdRule& c : cold_) {
    if (ranks >= c.minRanks && ranks <= c.maxRanks) return c.bytes;
  }
  return std::nullopt;
}

AlgoTable AlgoTable::parse(const std::string& text, const std::string& what, size_t ringThreshold,
                           size_t chainThreshold) {
  const Json root = parseJson(text, what);
  objectValue(root, what);
  std::vector<const char*> known{"format", "cold_threshold"};
  for (const auto& [op, key] : algoTableOps()) known.push_back(key);
  for (auto it = root.begin(); it != root.end(); ++it) {
    bool ok = false;
    for (const char* k : known) ok = ok || it.key() == k;
    if (ok) continue;
    std::string list;
    for (const char* k : known) list += strCat(list.empty() ? "" : ", ", k);
    throw ConfigError(strCat(what, " ", it.key(), ": unknown key (known: ", list, ")"));
  }
  const std::string& format = stringValue(member(root, "format", what), what + " format");
  if (format != kFormat) {
    throw ConfigError(strCat(what, " format: \"", format, "\" is not ", kFormat));
  }
  AlgoTable t(ringThreshold, chainThreshold);
  for (const auto& [op, key] : algoTableOps()) {
    if (!hasMember(root, key)) continue;
    const std::string path = strCat(what, " ", key);
    const Json& rows = arrayValue(member(root, key, what), path);
    std::vector<AlgoRule> rules;
    for (size_t i = 0; i < rows.size(); ++i) {
      rules.push_back(readRule(rows[i], op, strCat(path, "[", i, "]")));
    }
    t.algo_.rules[op] = std::move(rules);
  }
  if (hasMember(root, "cold_threshold")) {
    const std::string path = what + " cold_threshold";
    const Json& rows = arrayValue(member(root, "cold_threshold", what), path);
    for (size_t i = 0; i < rows.size(); ++i) {
      const std::string rp = strCat(path, "[", i, "]");
      objectValue(rows[i], rp);
      refuseUnknownKeys(rows[i], {"min_ranks", "max_ranks", "bytes"}, rp);
      ColdRule c;
      readRanks(rows[i], rp, c.minRanks, c.maxRanks);
      // 2^50 = never split (what nezha-tune writes when splitting never won).
      c.bytes = unsignedUpTo(member(rows[i], "bytes", rp), rp + ".bytes", kMaxBytes);
      t.cold_.push_back(c);
    }
  }
  return t;
}

Json AlgoTable::toJson() const {
  Json root = Json::object();
  root["format"] = kFormat;
  Json cold = Json::array();
  for (const ColdRule& c : cold_) {
    Json row = ranksJson(Json::object(), c.minRanks, c.maxRanks);
    row["bytes"] = static_cast<uint64_t>(c.bytes);
    cold.push_back(row);
  }
  root["cold_threshold"] = cold;
  for (const auto& [op, key] : algoTableOps()) {
    auto it = algo_.rules.find(op);
    if (it == algo_.rules.end()) continue;
    Json rows = Json::array();
    for (const AlgoRule& r : it->second) {
      Json row = ranksJson(Json::object(), r.minRanks, r.maxRanks);
      row["max_bytes"] = r.maxBytes == kAnyBytes ? Json() : Json(static_cast<uint64_t>(r.maxBytes));
      row["algorithm"] = toString(r.algorithm);
      if (op == OpKind::kAllreduce) row["transport"] = r.offload ? "sharp" : "any";
      rows.push_back(row);
    }
    root[key] = rows;
  }
  return root;
}

}  // namespace nezha
