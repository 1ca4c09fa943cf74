#include "util/json.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/error.h"

namespace nezha {

static const char* typeName(Json::Type t) {
  switch (t) {
    case Json::Type::kNull:
      return "null";
    case Json::Type::kBool:
      return "a boolean";
    case Json::Type::kNumber:
      return "a number";
    case Json::Type::kString:
      return "a string";
    case Json::Type::kArray:
      return "an array";
    case Json::Type::kObject:
      return "an object";
  }
  return "?";
}

#define NEZHA_JSON_EXPECT(want, ctx)                                                          \
  if (type_ != (want)) {                                                                      \
    throw ConfigError(strCat(ctx, ": expected ", typeName(want), ", got ", typeName(type_))); \
  }

double Json::number(const std::string& c) const {
  NEZHA_JSON_EXPECT(Type::kNumber, c);
  return num_;
}
const std::string& Json::string(const std::string& c) const {
  NEZHA_JSON_EXPECT(Type::kString, c);
  return str_;
}
bool Json::boolean(const std::string& c) const {
  NEZHA_JSON_EXPECT(Type::kBool, c);
  return bool_;
}
const std::vector<Json>& Json::items(const std::string& c) const {
  NEZHA_JSON_EXPECT(Type::kArray, c);
  return arr_;
}
const std::map<std::string, Json>& Json::fields(const std::string& c) const {
  NEZHA_JSON_EXPECT(Type::kObject, c);
  return obj_;
}
const Json& Json::at(const std::string& key, const std::string& c) const {
  const auto& f = fields(c);
  auto it = f.find(key);
  if (it == f.end()) throw ConfigError(strCat(c, ": missing field \"", key, "\""));
  return it->second;
}
bool Json::has(const std::string& key) const {
  return type_ == Type::kObject && obj_.count(key) > 0;
}

Json& Json::push(Json v) {
  NEZHA_ENFORCE(type_ == Type::kArray, "push on non-array");
  arr_.push_back(std::move(v));
  return *this;
}
Json& Json::set(const std::string& key, Json v) {
  NEZHA_ENFORCE(type_ == Type::kObject, "set on non-object");
  if (!obj_.count(key)) order_.push_back(key);
  obj_[key] = std::move(v);
  return *this;
}

static void dumpString(std::string& out, const std::string& s) {
  out += '"';
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

void Json::dumpTo(std::string& out, int indent, int depth) const {
  auto newline = [&](int d) {
    if (indent <= 0) return;
    out += '\n';
    out.append(static_cast<size_t>(indent * d), ' ');
  };
  switch (type_) {
    case Type::kNull:
      out += "null";
      break;
    case Type::kBool:
      out += bool_ ? "true" : "false";
      break;
    case Type::kNumber: {
      if (!std::isfinite(num_)) {
        out += "null";
      } else if (num_ == std::floor(num_) && std::fabs(num_) < 9e15) {
        out += std::to_string(static_cast<long long>(num_));
      } else {
        char buf[32];
        std::snprintf(buf, sizeof(buf), "%.17g", num_);
        out += buf;
      }
      break;
    }
    case Type::kString:
      dumpString(out, str_);
      break;
    case Type::kArray:
      out += '[';
      for (size_t i = 0; i < arr_.size(); ++i) {
        if (i) out += ',';
        newline(depth + 1);
        arr_[i].dumpTo(out, indent, depth + 1);
      }
      if (!arr_.empty()) newline(depth);
      out += ']';
      break;
    case Type::kObject:
      out += '{';
      for (size_t i = 0; i < order_.size(); ++i) {
        if (i) out += ',';
        newline(depth + 1);
        dumpString(out, order_[i]);
        out += indent > 0 ? ": " : ":";
        obj_.at(order_[i]).dumpTo(out, indent, depth + 1);
      }
      if (!order_.empty()) newline(depth);
      out += '}';
      break;
  }
}

std::string Json::dump(int indent) const {
  std::string out;
  dumpTo(out, indent, 0);
  return out;
}

namespace {
class Parser {
 public:
  Parser(const std::string& t, const std::string& what) : t_(t), what_(what) {}
  Json parseAll() {
    Json v = value(0);
    ws();
    if (i_ != t_.size()) fail("trailing characters");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& why) {
    throw ConfigError(strCat(what_, ": invalid JSON at offset ", i_, ": ", why));
  }
  void ws() {
    while (i_ < t_.size() && (t_[i_] == ' ' || t_[i_] == '\n' || t_[i_] == '\t' || t_[i_] == '\r'))
      ++i_;
  }
  bool eat(char c) {
    ws();
    if (i_ < t_.size() && t_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!eat(c)) fail(strCat("expected '", c, "'"));
  }
  std::string str() {
    expect('"');
    std::string s;
    while (true) {
      if (i_ >= t_.size()) fail("unterminated string");
      char c = t_[i_++];
      if (c == '"') return s;
      if (c != '\\') {
        s += c;
        continue;
      }
      if (i_ >= t_.size()) fail("unterminated escape");
      char e = t_[i_++];
      switch (e) {
        case '"':
          s += '"';
          break;
        case '\\':
          s += '\\';
          break;
        case '/':
          s += '/';
          break;
        case 'n':
          s += '\n';
          break;
        case 't':
          s += '\t';
          break;
        case 'r':
          s += '\r';
          break;
        case 'b':
          s += '\b';
          break;
        case 'f':
          s += '\f';
          break;
        case 'u': {
          if (i_ + 4 > t_.size()) fail("short \\u escape");
          unsigned cp = static_cast<unsigned>(std::strtoul(t_.substr(i_, 4).c_str(), nullptr, 16));
          i_ += 4;
          if (cp < 0x80) {
            s += static_cast<char>(cp);
          } else if (cp < 0x800) {
            s += static_cast<char>(0xc0 | (cp >> 6));
            s += static_cast<char>(0x80 | (cp & 0x3f));
          } else {
            s += static_cast<char>(0xe0 | (cp >> 12));
            s += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
            s += static_cast<char>(0x80 | (cp & 0x3f));
          }
          break;
        }
        default:
          fail("bad escape");
      }
    }
  }
  Json value(int depth) {
    if (depth > 64) fail("nested too deeply");
    ws();
    if (i_ >= t_.size()) fail("unexpected end");
    char c = t_[i_];
    if (c == '{') {
      ++i_;
      Json o = Json::object();
      if (eat('}')) return o;
      do {
        ws();
        std::string k = str();
        expect(':');
        o.set(k, value(depth + 1));
      } while (eat(','));
      expect('}');
      return o;
    }
    if (c == '[') {
      ++i_;
      Json a = Json::array();
      if (eat(']')) return a;
      do {
        a.push(value(depth + 1));
      } while (eat(','));
      expect(']');
      return a;
    }
    if (c == '"') return Json(str());
    if (t_.compare(i_, 4, "true") == 0) {
      i_ += 4;
      return Json(true);
    }
    if (t_.compare(i_, 5, "false") == 0) {
      i_ += 5;
      return Json(false);
    }
    if (t_.compare(i_, 4, "null") == 0) {
      i_ += 4;
      return Json();
    }
    const char* begin = t_.c_str() + i_;
    char* end = nullptr;
    double d = std::strtod(begin, &end);
    if (end == begin) fail(strCat("unexpected character '", c, "'"));
    i_ += static_cast<size_t>(end - begin);
    return Json(d);
  }
  const std::string& t_;
  std::string what_;
  size_t i_ = 0;
};
}  // namespace

Json Json::parse(const std::string& text, const std::string& what) {
  return Parser(text, what).parseAll();
}

}  // namespace nezha
