// Minimal JSON value, parser and writer: enough for data-length tables and nezha-bench output
// without a dependency. Parse errors name the position.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace nezha {

class Json {
 public:
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
  Json() = default;
  Json(bool b) : type_(Type::kBool), bool_(b) {}                                 // NOLINT
  Json(double d) : type_(Type::kNumber), num_(d) {}                              // NOLINT
  Json(int i) : type_(Type::kNumber), num_(i) {}                                 // NOLINT
  Json(long long i) : type_(Type::kNumber), num_(static_cast<double>(i)) {}      // NOLINT
  Json(unsigned long i) : type_(Type::kNumber), num_(static_cast<double>(i)) {}  // NOLINT
  Json(const char* s) : type_(Type::kString), str_(s) {}                         // NOLINT
  Json(std::string s) : type_(Type::kString), str_(std::move(s)) {}              // NOLINT
  static Json array() {
    Json j;
    j.type_ = Type::kArray;
    return j;
  }
  static Json object() {
    Json j;
    j.type_ = Type::kObject;
    return j;
  }

  Type type() const { return type_; }
  bool isNull() const { return type_ == Type::kNull; }
  // Typed accessors throw ConfigError("<context>: expected ...") on mismatch.
  double number(const std::string& context) const;
  const std::string& string(const std::string& context) const;
  bool boolean(const std::string& context) const;
  const std::vector<Json>& items(const std::string& context) const;
  const std::map<std::string, Json>& fields(const std::string& context) const;
  // Object member; throws ConfigError naming the missing key.
  const Json& at(const std::string& key, const std::string& context) const;
  bool has(const std::string& key) const;

  Json& push(Json v);                         // array append
  Json& set(const std::string& key, Json v);  // object insert (keeps insertion order)

  std::string dump(int indent = 2) const;
  static Json parse(const std::string& text, const std::string& what);

 private:
  void dumpTo(std::string& out, int indent, int depth) const;
  Type type_ = Type::kNull;
  bool bool_ = false;
  double num_ = 0;
  std::string str_;
  std::vector<Json> arr_;
  std::map<std::string, Json> obj_;
  std::vector<std::string> order_;  // object keys in insertion order, for stable output
};

}  // namespace nezha
