#include "schedule/table.h"

#include <cmath>

#include "core/error.h"

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
  return entries_.emplace(key, std::move(e)).first->second;
}

const TableEntry* Table::find(const TableKey& key) const {
  auto it = entries_.find(key);
  return it == entries_.end() ? nullptr : &it->second;
}

Json Table::toJson() const {
  Json root = Json::object();
  root.set("format", "nezha-table/v1");
  Json rails = Json::array();
  for (const auto& r : rails_) rails.push(r);
  root.set("rails", rails);
  root.set("cold_threshold", coldThreshold ? Json(static_cast<double>(*coldThreshold)) : Json());
  Json list = Json::array();
  for (const auto& [key, e] : entries_) {
    Json j = Json::object();
    j.set("op", toString(key.op));
    j.set("world_size", key.worldSize);
    j.set("bucket_bytes", std::ldexp(1.0, key.bucket));
    Json ratios = Json::object();
    for (size_t i = 0; i < rails_.size(); ++i) ratios.set(rails_[i], e.ratios[i]);
    j.set("ratios", ratios);
    j.set("ops", static_cast<double>(e.ops));
    j.set("updates", static_cast<double>(e.updates));
    list.push(j);
  }
  root.set("entries", list);
  return root;
}

Table Table::fromJson(const std::string& text, const std::vector<std::string>& rails,
                      const std::string& what) {
  Json root = Json::parse(text, what);
  const std::string& format = root.at("format", what).string(what + " field format");
  if (format != "nezha-table/v1") {
    throw ConfigError(strCat(what, ": format \"", format, "\" is not nezha-table/v1"));
  }
  std::vector<std::string> names;
  for (const Json& r : root.at("rails", what).items(what + " field rails")) {
    names.push_back(r.string(what + " field rails[]"));
  }
  if (names != rails) {
    std::string want, got;
    for (const auto& r : rails) want += (want.empty() ? "" : ",") + r;
    for (const auto& r : names) got += (got.empty() ? "" : ",") + r;
    throw ConfigError(
        strCat(what, ": table is for rails [", got, "] but this job has [", want, "]"));
  }
  Table t(rails);
  const Json& cold = root.at("cold_threshold", what);
  if (!cold.isNull()) {
    double c = cold.number(what + " field cold_threshold");
    // 2^50 bytes is the largest size anywhere in Nezha; nezha-tune writes it for "never split".
    if (c < 0 || c > static_cast<double>(kNeverSplitBytes) ||
        c != static_cast<double>(static_cast<size_t>(c))) {
      throw ConfigError(strCat(what, ": cold_threshold ", c, " out of range (0..2^50 bytes)"));
    }
    t.coldThreshold = static_cast<size_t>(c);
  }
  const auto& list = root.at("entries", what).items(what + " field entries");
  for (size_t i = 0; i < list.size(); ++i) {
    std::string ctx = strCat(what, " entries[", i, "]");
    const Json& j = list[i];
    TableKey key;
    key.op = parseOpKind(j.at("op", ctx).string(ctx + ".op"));
    double ws = j.at("world_size", ctx).number(ctx + ".world_size");
    if (ws < 1 || ws != std::floor(ws) || ws > 1e6) {
      throw ConfigError(strCat(ctx, ".world_size ", ws, " is not a positive integer"));
    }
    key.worldSize = static_cast<int>(ws);
    double bucketBytes = j.at("bucket_bytes", ctx).number(ctx + ".bucket_bytes");
    int exp = 0;
    if (!(bucketBytes >= 1) || std::frexp(bucketBytes, &exp) != 0.5 || exp > 60) {
      throw ConfigError(strCat(ctx, ".bucket_bytes ", bucketBytes, " is not a power of two"));
    }
    key.bucket = exp - 1;
    std::vector<double> ratios;
    double sum = 0;
    const Json& rj = j.at("ratios", ctx);
    for (const auto& r : rails) {
      double v = rj.at(r, ctx + ".ratios").number(strCat(ctx, ".ratios.", r));
      if (!(v >= 0 && v <= 1))
        throw ConfigError(strCat(ctx, ".ratios.", r, " = ", v, " not in [0, 1]"));
      ratios.push_back(v);
      sum += v;
    }
    if (rj.fields(ctx + ".ratios").size() != rails.size()) {
      throw ConfigError(strCat(ctx, ".ratios names a rail this job does not have"));
    }
    if (!(sum > 0)) throw ConfigError(strCat(ctx, ".ratios are all zero"));
    for (double& v : ratios) v /= sum;
    if (t.find(key)) throw ConfigError(strCat(ctx, " duplicates an earlier entry"));
    TableEntry& e = t.entry(key, ratios);
    if (j.has("ops")) e.ops = static_cast<uint64_t>(j.at("ops", ctx).number(ctx + ".ops"));
    if (j.has("updates")) {
      e.updates = static_cast<uint64_t>(j.at("updates", ctx).number(ctx + ".updates"));
    }
  }
  return t;
}

}  // namespace nezha
