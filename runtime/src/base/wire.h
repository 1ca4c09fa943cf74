// Little-endian binary encoding for setup messages (rendezvous, handshakes). Readers check
// every length against what is left and throw Error("malformed <what>: ...") instead of
// reading past the end.
#pragma once

#include <cstdint>
#include <string>

namespace nezha {

class WireWriter {
 public:
  WireWriter& u8(uint8_t v);
  WireWriter& u32(uint32_t v);
  WireWriter& u64(uint64_t v);
  WireWriter& f64(double v);
  WireWriter& str(const std::string& s);
  WireWriter& bytes(const void* p, size_t n);
  const std::string& data() const { return buf_; }

 private:
  std::string buf_;
};

class WireReader {
 public:
  WireReader(const std::string& data, std::string what) : data_(data), what_(std::move(what)) {}
  uint8_t u8();
  uint32_t u32();
  uint64_t u64();
  double f64();
  std::string str(size_t maxLen = 4096);
  void bytes(void* out, size_t n);
  // Throws unless everything was consumed.
  void finish() const;

 private:
  const char* take(size_t n);
  const std::string& data_;
  std::string what_;
  size_t pos_ = 0;
};

}  // namespace nezha
