#include "compression/topk.h"

#include <algorithm>
#include <array>
#include <bit>
#include <functional>
#include <string>
#include <vector>

#include "core/half.h"
#include "geoccl/error.h"

namespace geoccl::compression {
namespace {

void check_k(uint32_t k) {
  if (k < 1 || k > kTopKChunk)
    throw Error(ErrorCode::kInvalidArgument,
                "top-k: k must be in [1, " + std::to_string(kTopKChunk) + "]");
}

// Bytes of one chunk of n elements: kept = min(k, n) indices and as many fp16 values.
size_t chunk_bytes(size_t n, uint32_t k) { return 4 * std::min<size_t>(k, n); }

// Magnitude as an integer: |x|'s bit pattern orders like |x| and puts NaNs above Inf, so the
// selection is a total order on integers (std::nth_element needs one; NaN floats are not).
void magnitudes(const float* __restrict x, size_t n, uint32_t* __restrict mag) {
  for (size_t i = 0; i < n; ++i) {  // must vectorize
    mag[i] = std::bit_cast<uint32_t>(x[i]) & 0x7fffffffu;
  }
}

size_t count_above(const uint32_t* __restrict mag, size_t n, uint32_t threshold) {
  size_t c = 0;
  for (size_t i = 0; i < n; ++i) c += mag[i] > threshold;  // must vectorize
  return c;
}

// The kth largest (1-based) of mag[0, n), exactly what a full std::nth_element gives, at a
// fraction of its cost: a histogram of the top 11 bits (sign 0, the exponent and 3 mantissa
// bits of a magnitude) finds the bucket that holds it, and only that bucket's elements (a few
// percent of a chunk for gradient-like data) are selected among. `scratch`: n entries.
uint32_t kth_largest(const uint32_t* mag, size_t n, size_t kth, uint32_t* scratch) {
  constexpr int kShift = 20;  // magnitudes are below 2^31: 2^11 buckets
  std::array<uint32_t, (1u << (31 - kShift))> hist{};
  for (size_t i = 0; i < n; ++i) ++hist[mag[i] >> kShift];
  size_t above = 0;  // elements in buckets above the one that holds the kth largest
  uint32_t bucket = static_cast<uint32_t>(hist.size()) - 1;
  while (above + hist[bucket] < kth) above += hist[bucket--];
  size_t m = 0;
  for (size_t i = 0; i < n; ++i)
    if ((mag[i] >> kShift) == bucket) scratch[m++] = mag[i];
  const size_t rank = kth - above;  // 1-based, within the bucket
  std::nth_element(scratch, scratch + (rank - 1), scratch + m, std::greater<uint32_t>());
  return scratch[rank - 1];
}

// Keeps the `kept` largest magnitudes of x[0, n), ties to the lower index, writing ascending
// indices then fp16 values. `mag`, `scratch`: n entries of working space.
void encode_chunk(const float* x, size_t n, size_t kept, uint32_t* mag, uint32_t* scratch,
                  uint8_t* out) {
  magnitudes(x, n, mag);
  // The kept set is every magnitude above the kept-th largest (threshold), plus the first
  // elements equal to it, in index order, until there are `kept`.
  uint32_t threshold = 0;
  size_t equal_left = n;
  if (kept < n) {
    threshold = kth_largest(mag, n, kept, scratch);
    equal_left = kept - count_above(mag, n, threshold);
  }
  uint8_t* idx_out = out;
  uint8_t* val_out = out + 2 * kept;
  size_t j = 0;
  for (size_t i = 0; i < n && j < kept; ++i) {
    const bool take = mag[i] > threshold || (mag[i] == threshold && equal_left > 0);
    if (!take) continue;
    if (mag[i] == threshold && kept < n) --equal_left;
    store_u16(idx_out + 2 * j, static_cast<uint16_t>(i));
    store_u16(val_out + 2 * j, core::float_to_half(x[i]));
    ++j;
  }
}

template <bool kAdd>
void decode(std::span<const uint8_t> in, std::span<float> dst) {
  const Header h = read_header(in);
  if (h.codec == CodecId::kTopK && (h.block != kTopKChunk || h.k < 1 || h.k > kTopKChunk))
    throw Error(ErrorCode::kProtocol, "top-k: chunk size must be " + std::to_string(kTopKChunk) +
                                          " and k in [1, chunk size]");
  check_payload(h, CodecId::kTopK, in.size(),
                h.codec == CodecId::kTopK ? topk_encoded_size(h.count, h.k) : 0);
  check_destination(h, dst.size());
  // Every index is checked before dst is touched, so a rejected buffer leaves an accumulator
  // (decode_add) as it was.
  const uint8_t* p = in.data() + kHeaderSize;
  for (size_t off = 0; off < dst.size(); off += kTopKChunk) {
    const size_t n = std::min<size_t>(kTopKChunk, dst.size() - off);
    long prev = -1;
    for (size_t j = 0; j < std::min<size_t>(h.k, n); ++j) {
      const uint16_t i = load_u16(p + 2 * j);
      if (i >= n || long{i} <= prev)
        throw Error(ErrorCode::kProtocol,
                    "top-k: index " + std::to_string(i) + " out of its chunk or not ascending");
      prev = i;
    }
    p += chunk_bytes(n, h.k);
  }
  if (!kAdd) std::fill(dst.begin(), dst.end(), 0.0f);
  p = in.data() + kHeaderSize;
  for (size_t off = 0; off < dst.size(); off += kTopKChunk) {
    const size_t n = std::min<size_t>(kTopKChunk, dst.size() - off);
    const size_t kept = std::min<size_t>(h.k, n);
    float* chunk = dst.data() + off;
    const uint8_t* vals = p + 2 * kept;
    for (size_t j = 0; j < kept; ++j) {
      const uint16_t i = load_u16(p + 2 * j);
      const float v = core::half_to_float(load_u16(vals + 2 * j));
      chunk[i] = kAdd ? chunk[i] + v : v;
    }
    p += chunk_bytes(n, h.k);
  }
}

}  // namespace

size_t topk_encoded_size(size_t count, uint32_t k) {
  check_k(k);
  const size_t full = count / kTopKChunk, rest = count % kTopKChunk;
  return kHeaderSize + full * chunk_bytes(kTopKChunk, k) + chunk_bytes(rest, k);
}

void topk_encode(std::span<const float> src, uint32_t k, std::span<uint8_t> out) {
  check_output(out, topk_encoded_size(src.size(), k));
  write_header({CodecId::kTopK, src.size(), kTopKChunk, k}, out);
  const size_t work = std::min<size_t>(kTopKChunk, src.size());
  std::vector<uint32_t> mag(work), scratch(work);
  uint8_t* p = out.data() + kHeaderSize;
  for (size_t off = 0; off < src.size(); off += kTopKChunk) {
    const size_t n = std::min<size_t>(kTopKChunk, src.size() - off);
    encode_chunk(src.data() + off, n, std::min<size_t>(k, n), mag.data(), scratch.data(), p);
    p += chunk_bytes(n, k);
  }
}

void topk_decode(std::span<const uint8_t> in, std::span<float> dst) { decode<false>(in, dst); }
void topk_decode_add(std::span<const uint8_t> in, std::span<float> dst) { decode<true>(in, dst); }

}  // namespace geoccl::compression
