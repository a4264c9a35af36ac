#include "compression/sparse_piece.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>

#include "compression/affine.h"
#include "compression/format.h"
#include "geoccl/error.h"

namespace geoccl::compression {
namespace {

[[noreturn]] void malformed(const std::string& what) {
  throw Error(ErrorCode::kProtocol, "sparse piece: " + what);
}

// Bytes of m values of `bits` bits (blocks of kSparseBlock for the quantized widths).
uint64_t value_bytes(uint32_t bits, uint64_t m) {
  if (bits == 32) return 4 * m;
  const uint64_t full = m / kSparseBlock, rest = m % kSparseBlock;
  return full * (affine::kSignedFitBytes + affine::packed_bytes(bits, kSparseBlock)) +
         (rest ? affine::kSignedFitBytes + affine::packed_bytes(bits, rest) : 0);
}

void put_u64(uint8_t* p, uint64_t v) { std::memcpy(p, &v, 8); }
uint64_t get_u64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

void put_varint(std::vector<uint8_t>& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<uint8_t>(v | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<uint8_t>(v));
}

// Reads the index stream [p, end) into idx (m ascending indices below n); throws on any flaw.
void read_indices(const uint8_t* p, const uint8_t* end, uint64_t n, std::vector<uint64_t>& idx) {
  uint64_t next = 0;  // the smallest index the next one may be
  for (auto& out : idx) {
    uint64_t v = 0;
    for (int shift = 0;; shift += 7) {
      if (p == end) malformed("index stream ends inside a varint");
      const uint8_t b = *p++;
      if (shift == 63 && b > 1) malformed("varint beyond 64 bits");
      v |= uint64_t{b & 0x7fu} << shift;
      if (!(b & 0x80)) {
        if (b == 0 && shift > 0) malformed("overlong varint");
        break;
      }
      if (shift == 63) malformed("varint beyond 64 bits");
    }
    if (v >= n || next > n - 1 - v) malformed("index beyond the dense length");
    out = next + v;
    next = out + 1;
  }
  if (p != end) malformed("index stream longer than its indices");
}

}  // namespace

bool sparse_bits_valid(uint32_t bits) { return bits == 32 || bits == 8 || bits == 4 || bits == 2; }

std::vector<uint8_t> sparse_encode(uint32_t bits, uint64_t n, std::span<const int64_t> indices,
                                   std::span<const float> values, std::span<float> decoded) {
  auto invalid = [](const std::string& what) {
    throw Error(ErrorCode::kInvalidArgument, "sparse piece: " + what);
  };
  if (!sparse_bits_valid(bits))
    invalid("value width must be 32, 8, 4 or 2 bits, got " + std::to_string(bits));
  if (n > kMaxElements) invalid("dense length above 2^48");
  const size_t m = indices.size();
  if (values.size() != m || decoded.size() != m)
    invalid(std::to_string(m) + " indices but " + std::to_string(values.size()) + " values");
  std::vector<size_t> order(m);
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return indices[a] < indices[b]; });
  for (size_t j = 0; j < m; ++j) {
    const int64_t i = indices[order[j]];
    if (i < 0 || static_cast<uint64_t>(i) >= n)
      invalid("index " + std::to_string(i) + " outside [0, " + std::to_string(n) + ")");
    if (j > 0 && indices[order[j - 1]] == i) invalid("index " + std::to_string(i) + " given twice");
  }
  std::vector<uint8_t> out(kSparseHeaderSize);
  uint64_t prev_next = 0;
  for (size_t j = 0; j < m; ++j) {
    const auto i = static_cast<uint64_t>(indices[order[j]]);
    put_varint(out, i - prev_next);
    prev_next = i + 1;
  }
  const uint64_t index_bytes = out.size() - kSparseHeaderSize;
  out[0] = static_cast<uint8_t>(kSparseMagic & 0xff);
  out[1] = static_cast<uint8_t>(kSparseMagic >> 8);
  out[2] = static_cast<uint8_t>(bits);
  out[3] = kSparseVersion;
  put_u64(out.data() + 4, n);
  put_u64(out.data() + 12, m);
  put_u64(out.data() + 20, index_bytes);
  std::vector<float> vals(m);
  for (size_t j = 0; j < m; ++j) vals[j] = values[order[j]];
  const size_t vbase = out.size();
  out.resize(vbase + value_bytes(bits, m));
  uint8_t* p = out.data() + vbase;
  if (bits == 32) {
    if (m) std::memcpy(p, vals.data(), 4 * m);
  } else {
    // Each block is decoded again with the decoder's own kernel, so `decoded` holds the bits
    // every receiver computes.
    std::vector<uint8_t> codes(std::min(m, kSparseBlock)), mag_codes(codes.size());
    for (size_t b = 0; b < m; b += kSparseBlock) {
      const size_t len = std::min(kSparseBlock, m - b);
      affine::store_signed(bits, vals.data() + b, len, codes.data(), mag_codes.data(), p);
      affine::load_signed(bits, p, len, codes.data(), vals.data() + b);
      p += affine::kSignedFitBytes + affine::packed_bytes(bits, len);
    }
  }
  for (size_t j = 0; j < m; ++j) decoded[order[j]] = vals[j];
  return out;
}

SparseInfo sparse_info(std::span<const uint8_t> in, uint64_t n) {
  if (in.size() < kSparseHeaderSize)
    malformed(std::to_string(in.size()) + " bytes, shorter than its header");
  if ((in[0] | in[1] << 8) != kSparseMagic) malformed("bad magic");
  if (in[3] != kSparseVersion)
    malformed("version " + std::to_string(in[3]) + ", this build reads " +
              std::to_string(kSparseVersion));
  SparseInfo s;
  s.bits = in[2];
  s.n = get_u64(in.data() + 4);
  s.m = get_u64(in.data() + 12);
  s.index_bytes = get_u64(in.data() + 20);
  if (!sparse_bits_valid(s.bits)) malformed("value width " + std::to_string(s.bits));
  if (s.n > kMaxElements || s.m > s.n)
    malformed("more pairs than elements, or a dense length above 2^48");
  // A varint is 1 to 10 bytes: bounds that keep the sum below from overflowing.
  if (s.index_bytes < s.m || s.index_bytes > in.size())
    malformed("index stream length out of range");
  if (in.size() != kSparseHeaderSize + s.index_bytes + value_bytes(s.bits, s.m))
    malformed(std::to_string(in.size()) + " bytes, not what its header says");
  if (s.n != n)
    throw Error(ErrorCode::kMismatch, "sparse piece of " + std::to_string(s.n) +
                                          " elements, expected " + std::to_string(n));
  return s;
}

void sparse_add(std::span<const uint8_t> in, std::span<float> dst) {
  const SparseInfo s = sparse_info(in, dst.size());
  const uint8_t* p = in.data() + kSparseHeaderSize;
  std::vector<uint64_t> idx(s.m);
  read_indices(p, p + s.index_bytes, s.n, idx);
  p += s.index_bytes;
  std::vector<float> vals(s.m);
  if (s.bits == 32) {
    if (s.m) std::memcpy(vals.data(), p, 4 * s.m);
  } else {
    std::vector<uint8_t> codes(std::min<uint64_t>(s.m, kSparseBlock));
    const uint8_t* q = p;
    for (uint64_t off = 0; off < s.m; off += kSparseBlock) {
      const size_t len = std::min<uint64_t>(kSparseBlock, s.m - off);
      if (!affine::padding_is_zero(s.bits, q + affine::kSignedFitBytes, len))
        malformed("non-zero padding bits");
      affine::load_signed(s.bits, q, len, codes.data(), vals.data() + off);
      q += affine::kSignedFitBytes + affine::packed_bytes(s.bits, len);
    }
  }
  // Every check is done: only now is dst touched.
  for (uint64_t j = 0; j < s.m; ++j) dst[idx[j]] += vals[j];
}

void sparse_densify(std::span<const std::span<const uint8_t>> pieces, std::span<float> dst) {
  std::fill(dst.begin(), dst.end(), 0.0f);
  for (const auto& piece : pieces) sparse_add(piece, dst);
}

}  // namespace geoccl::compression
