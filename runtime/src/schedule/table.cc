#include "schedule/table.h"

#include <cmath>

#include "base/error.h"

namespace nezha {

int sizeBucket(size_t bytes) {
  int b = 0;
  while (bytes > 1) {
    bytes >>= 1;
    ++b;
  }
  return b;
}

TableEntry& Table::entry(const TableKey& key, const std::vector<double>& initial) {
  auto it = entries_.find(key);
  if (it != entries_.end()) return it->second;
  NEZHA_ENFORCE(initial.size() == rails_.size(), "initial ratios for ", initial.size(), " rails");
  TableEntry e;
  e.ratios = initial;
  e.pendingSeconds.assign(rails_.size(), 0);
  e.pendingBytes.assign(rails_.size(), 0);
  e.starvedUpdates.assign(rails_.size(), 0);
  e.probeWait.assign(rails_.size(), kFirstProbeWait);
  e.probed.assign(rails_.size(), false);
  e.lastRate.assign(rails_.size(), 0);
  return entries_.emplace(key, std::move(e)).first->second;
}

const TableEntry* Table::find(const TableKey& key) const {
  auto it = entries_.find(key);
  return it == entries_.end() ? nullptr : &it->second;
}

Json Table::toJson() const {
  Json root = Json::object();
  root["format"] = "nezha-table/v1";
  Json rails = Json::array();
  for (const auto& r : rails_) rails.push_back(r);
  root["rails"] = rails;
  root["cold_threshold"] = coldThreshold ? Json(static_cast<uint64_t>(*coldThreshold)) : Json();
  Json list = Json::array();
  for (const auto& [key, e] : entries_) {
    Json j = Json::object();
    j["op"] = toString(key.op);
    j["world_size"] = key.worldSize;
    j["bucket_bytes"] = uint64_t(1) << key.bucket;
    Json ratios = Json::object();
    for (size_t i = 0; i < rails_.size(); ++i) ratios[rails_[i]] = e.ratios[i];
    j["ratios"] = ratios;
    j["ops"] = e.ops;
    j["updates"] = e.updates;
    list.push_back(j);
  }
  root["entries"] = list;
  return root;
}

Table Table::fromJson(const std::string& text, const std::vector<std::string>& rails,
                      const std::string& what) {
  const Json root = parseJson(text, what);
  objectValue(root, what);
  const std::string& format = stringValue(member(root, "format", what), what + " format");
  if (format != "nezha-table/v1") {
    throw ConfigError(strCat(what, " format: \"", format, "\" is not nezha-table/v1"));
  }
  std::vector<std::string> names;
  const Json& railList = arrayValue(member(root, "rails", what), what + " rails");
  for (size_t i = 0; i < railList.size(); ++i) {
    names.push_back(stringValue(railList[i], strCat(what, " rails[", i, "]")));
  }
  if (names != rails) {
    std::string want, got;
    for (const auto& r : rails) want += (want.empty() ? "" : ",") + r;
    for (const auto& r : names) got += (got.empty() ? "" : ",") + r;
    throw ConfigError(
        strCat(what, ": table is for rails [", got, "] but this job has [", want, "]"));
  }
  Table t(rails);
  const Json& cold = member(root, "cold_threshold", what);
  if (!cold.is_null()) {
    // 2^50 bytes is the largest size anywhere in Nezha; nezha-tune writes it for "never split".
    t.coldThreshold = unsignedUpTo(cold, what + " cold_threshold", kNeverSplitBytes);
  }
  const Json& list = arrayValue(member(root, "entries", what), what + " entries");
  for (size_t i = 0; i < list.size(); ++i) {
    readEntry(t, list[i], strCat(what, " entries[", i, "]"));
  }
  return t;
}

void Table::readEntry(Table& t, const Json& j, const std::string& ctx) {
  TableKey key;
  key.op = parseOpKind(stringValue(member(j, "op", ctx), ctx + ".op"));
  key.worldSize =
      static_cast<int>(integerIn(member(j, "world_size", ctx), ctx + ".world_size", 1, 1000000));
  const uint64_t bucketBytes =
      unsignedUpTo(member(j, "bucket_bytes", ctx), ctx + ".bucket_bytes", uint64_t(1) << 60);
  if (bucketBytes == 0 || (bucketBytes & (bucketBytes - 1)) != 0) {
    throw ConfigError(strCat(ctx, ".bucket_bytes: ", bucketBytes, " is not a power of two"));
  }
  key.bucket = 0;
  while ((uint64_t(1) << key.bucket) < bucketBytes) ++key.bucket;
  const Json& rj = objectValue(member(j, "ratios", ctx), ctx + ".ratios");
  std::vector<double> ratios;
  double sum = 0;
  for (const auto& r : t.rails_) {
    const std::string path = strCat(ctx, ".ratios.", r);
    const double v = finiteNumber(member(rj, r, ctx + ".ratios"), path);
    if (!(v >= 0 && v <= 1)) throw ConfigError(strCat(path, ": ", v, " not in [0, 1]"));
    ratios.push_back(v);
    sum += v;
  }
  if (rj.size() != t.rails_.size()) {
    throw ConfigError(strCat(ctx, ".ratios names a rail this job does not have"));
  }
  if (!(sum > 0)) throw ConfigError(strCat(ctx, ".ratios are all zero"));
  for (double& v : ratios) v /= sum;
  if (t.find(key)) throw ConfigError(strCat(ctx, " duplicates an earlier entry"));
  TableEntry& e = t.entry(key, ratios);
  if (hasMember(j, "ops")) e.ops = unsignedUpTo(member(j, "ops", ctx), ctx + ".ops", UINT64_MAX);
  if (hasMember(j, "updates"))
    e.updates = unsignedUpTo(member(j, "updates", ctx), ctx + ".updates", UINT64_MAX);
}

}  // namespace nezha
