// Explicit little-endian encoding with bounds-checked reads. No struct casting anywhere on the
// wire: every field is written and read byte by byte at a fixed width.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace geoccl::protocol {

class Writer {
 public:
  explicit Writer(std::vector<uint8_t>* out) : out_(out) {}
  void u8(uint8_t v) { out_->push_back(v); }
  void u16(uint16_t v) { le(v, 2); }
  void u32(uint32_t v) { le(v, 4); }
  void u64(uint64_t v) { le(v, 8); }
  void i64(int64_t v) { le(static_cast<uint64_t>(v), 8); }
  void bytes(std::span<const uint8_t> b) { out_->insert(out_->end(), b.begin(), b.end()); }
  // u32 length, then the bytes.
  void blob(std::span<const uint8_t> b) {
    u32(static_cast<uint32_t>(b.size()));
    bytes(b);
  }
  void str(std::string_view s) {
    blob({reinterpret_cast<const uint8_t*>(s.data()), s.size()});
  }

 private:
  void le(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_->push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  std::vector<uint8_t>* out_;
};

// Every read returns false (and leaves the output untouched) when the input is too short or a
// length exceeds its limit; the reader then stays failed.
class Reader {
 public:
  explicit Reader(std::span<const uint8_t> in) : in_(in) {}
  bool u8(uint8_t* v) { return le(v, 1); }
  bool u16(uint16_t* v) { return le(v, 2); }
  bool u32(uint32_t* v) { return le(v, 4); }
  bool u64(uint64_t* v) { return le(v, 8); }
  bool i64(int64_t* v) {
    uint64_t u;
    if (!le(&u, 8)) return false;
    *v = static_cast<int64_t>(u);
    return true;
  }
  bool blob(std::vector<uint8_t>* v, size_t max_len) {
    uint32_t n;
    if (!u32(&n) || n > max_len || n > remaining()) return fail();
    v->assign(in_.begin() + pos_, in_.begin() + pos_ + n);
    pos_ += n;
    return true;
  }
  bool str(std::string* s, size_t max_len) {
    uint32_t n;
    if (!u32(&n) || n > max_len || n > remaining()) return fail();
    s->assign(reinterpret_cast<const char*>(in_.data()) + pos_, n);
    pos_ += n;
    return true;
  }
  size_t remaining() const { return failed_ ? 0 : in_.size() - pos_; }
  size_t position() const { return pos_; }
  bool ok() const { return !failed_; }

 private:
  bool fail() {
    failed_ = true;
    return false;
  }
  template <class T>
  bool le(T* v, size_t n) {
    if (failed_ || remaining() < n) return fail();
    uint64_t x = 0;
    for (size_t i = 0; i < n; ++i) x |= uint64_t{in_[pos_ + i]} << (8 * i);
    *v = static_cast<T>(x);
    pos_ += n;
    return true;
  }
  std::span<const uint8_t> in_;
  size_t pos_ = 0;
  bool failed_ = false;
};

}  // namespace geoccl::protocol
