#include "base/wire.h"

#include <cstring>

#include "base/error.h"

namespace nezha {

WireWriter& WireWriter::u8(uint8_t v) {
  buf_.push_back(static_cast<char>(v));
  return *this;
}
WireWriter& WireWriter::u32(uint32_t v) {
  for (int i = 0; i < 4; ++i) buf_.push_back(static_cast<char>(v >> (8 * i)));
  return *this;
}
WireWriter& WireWriter::u64(uint64_t v) {
  for (int i = 0; i < 8; ++i) buf_.push_back(static_cast<char>(v >> (8 * i)));
  return *this;
}
WireWriter& WireWriter::f64(double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, 8);
  return u64(bits);
}
WireWriter& WireWriter::str(const std::string& s) {
  u32(static_cast<uint32_t>(s.size()));
  buf_ += s;
  return *this;
}
WireWriter& WireWriter::bytes(const void* p, size_t n) {
  buf_.append(static_cast<const char*>(p), n);
  return *this;
}

const char* WireReader::take(size_t n) {
  if (n > data_.size() - pos_) {
    throw Error(strCat("malformed ", what_, ": truncated at byte ", pos_, " (need ", n,
                       " more, have ", data_.size() - pos_, ")"));
  }
  const char* p = data_.data() + pos_;
  pos_ += n;
  return p;
}
uint8_t WireReader::u8() { return static_cast<uint8_t>(*take(1)); }
uint32_t WireReader::u32() {
  const char* p = take(4);
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t(uint8_t(p[i])) << (8 * i);
  return v;
}
uint64_t WireReader::u64() {
  const char* p = take(8);
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t(uint8_t(p[i])) << (8 * i);
  return v;
}
double WireReader::f64() {
  uint64_t bits = u64();
  double v;
  std::memcpy(&v, &bits, 8);
  return v;
}
std::string WireReader::str(size_t maxLen) {
  uint32_t n = u32();
  if (n > maxLen) throw Error(strCat("malformed ", what_, ": string of ", n, " bytes"));
  return std::string(take(n), n);
}
void WireReader::bytes(void* out, size_t n) { std::memcpy(out, take(n), n); }
void WireReader::finish() const {
  if (pos_ != data_.size()) {
    throw Error(strCat("malformed ", what_, ": ", data_.size() - pos_, " trailing bytes"));
  }
}

}  // namespace nezha
