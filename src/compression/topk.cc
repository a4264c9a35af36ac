#include "compression/topk.h"

#include <algorithm>
#include <array>
#include <bit>
#include <functional>
#include <string>
#include <vector>

#include "compression/affine.h"
#include "compression/half_codec.h"
#include "geoccl/error.h"

namespace geoccl::compression {
namespace {

void check_k(uint32_t k) {
  if (k < 1 || k > kTopKChunk)
    throw Error(ErrorCode::kInvalidArgument,
                "top-k: k must be in [1, " + std::to_string(kTopKChunk) + "]");
}

// Bits per quantized value code (sign included), or 0 for fp16 values.
uint32_t value_bits(CodecId codec) {
  switch (codec) {
    case CodecId::kTopK:
      return 0;
    case CodecId::kTopKInt8:
      return 8;
    case CodecId::kTopKInt4:
      return 4;
    case CodecId::kTopKInt2:
      return 2;
    default:
      break;
  }
  throw Error(ErrorCode::kInvalidArgument, "top-k: not a top-k codec");
}

constexpr size_t kFitBytes = affine::kSignedFitBytes;

// Bytes of one chunk of n elements: kept u16 indices, then the values.
size_t chunk_bytes(uint32_t bits, size_t n, uint32_t k) {
  const size_t kept = topk_kept(n, k);
  if (kept == 0) return 0;
  return 2 * kept + (bits == 0 ? 2 * kept : kFitBytes + affine::packed_bytes(bits, kept));
}

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

// Working space of an encoder: n entries each for the largest chunk it sees.
struct Work {
  std::vector<uint32_t> mag, scratch;
  std::vector<float> vals;  // the kept values, in index order
  std::vector<uint8_t> codes, mag_codes;
  explicit Work(size_t n) : mag(n), scratch(n), vals(n), codes(n), mag_codes(n) {}
};

// Keeps the `kept` largest magnitudes of x[0, n), ties to the lower index, writing ascending
// indices then the values in the codec's form (`bits`: value_bits()).
void encode_chunk(uint32_t bits, const float* x, size_t n, size_t kept, Work* w, uint8_t* out) {
  uint32_t* mag = w->mag.data();
  magnitudes(x, n, mag);
  // The kept set is every magnitude above the kept-th largest (threshold), plus the first
  // elements equal to it, in index order, until there are `kept`.
  uint32_t threshold = 0;
  size_t equal_left = n;
  if (kept < n) {
    threshold = kth_largest(mag, n, kept, w->scratch.data());
    equal_left = kept - count_above(mag, n, threshold);
  }
  size_t j = 0;
  for (size_t i = 0; i < n && j < kept; ++i) {
    const bool take = mag[i] > threshold || (mag[i] == threshold && equal_left > 0);
    if (!take) continue;
    if (mag[i] == threshold && kept < n) --equal_left;
    store_u16(out + 2 * j, static_cast<uint16_t>(i));
    w->vals[j++] = x[i];
  }
  if (bits == 0)
    fp16_store(w->vals.data(), kept, out + 2 * kept);
  else
    affine::store_signed(bits, w->vals.data(), kept, w->codes.data(), w->mag_codes.data(), out + 2 * kept);
}

// The m values of a chunk, decoded into v.
void load_values(uint32_t bits, const uint8_t* in, size_t m, uint8_t* codes, float* v) {
  if (bits == 0) return fp16_load(in, m, v);
  affine::load_signed(bits, in, m, codes, v);
}

template <bool kAdd>
void decode(CodecId codec, std::span<const uint8_t> in, std::span<float> dst) {
  const uint32_t bits = value_bits(codec);
  const Header h = read_header(in);
  const bool same = h.codec == codec;
  if (same && (h.block != kTopKChunk || h.k < 1 || h.k > kTopKChunk))
    throw Error(ErrorCode::kProtocol, "top-k: chunk size must be " + std::to_string(kTopKChunk) +
                                          " and k in [1, chunk size]");
  check_payload(h, codec, in.size(), same ? topk_encoded_size(codec, h.count, h.k) : 0);
  check_destination(h, dst.size());
  // Every index (and padding) is checked before dst is touched, so a rejected buffer leaves an
  // accumulator (decode_add) as it was.
  const uint8_t* p = in.data() + kHeaderSize;
  for (size_t off = 0; off < dst.size(); off += kTopKChunk) {
    const size_t n = std::min<size_t>(kTopKChunk, dst.size() - off);
    const size_t kept = topk_kept(n, h.k);
    long prev = -1;
    for (size_t j = 0; j < kept; ++j) {
      const uint16_t i = load_u16(p + 2 * j);
      if (i >= n || long{i} <= prev)
        throw Error(ErrorCode::kProtocol,
                    "top-k: index " + std::to_string(i) + " out of its chunk or not ascending");
      prev = i;
    }
    if (bits != 0 && !affine::padding_is_zero(bits, p + 2 * kept + kFitBytes, kept))
      throw Error(ErrorCode::kProtocol, "top-k: non-zero padding bits");
    p += chunk_bytes(bits, n, h.k);
  }
  if (!kAdd) std::fill(dst.begin(), dst.end(), 0.0f);
  const size_t most = topk_kept(std::min<size_t>(kTopKChunk, dst.size()), h.k);
  std::vector<float> vals(most);
  std::vector<uint8_t> codes(most);
  p = in.data() + kHeaderSize;
  for (size_t off = 0; off < dst.size(); off += kTopKChunk) {
    const size_t n = std::min<size_t>(kTopKChunk, dst.size() - off);
    const size_t kept = topk_kept(n, h.k);
    float* chunk = dst.data() + off;
    load_values(bits, p + 2 * kept, kept, codes.data(), vals.data());
    for (size_t j = 0; j < kept; ++j) {
      const uint16_t i = load_u16(p + 2 * j);
      chunk[i] = kAdd ? chunk[i] + vals[j] : vals[j];
    }
    p += chunk_bytes(bits, n, h.k);
  }
}

}  // namespace

bool is_topk(CodecId codec) {
  return codec == CodecId::kTopK || codec == CodecId::kTopKInt8 || codec == CodecId::kTopKInt4 ||
         codec == CodecId::kTopKInt2;
}

size_t topk_kept(size_t n, uint32_t k) {
  if (n == 0) return 0;
  const uint64_t share = (uint64_t{k} * n + kTopKChunk / 2) / kTopKChunk;
  return std::clamp<size_t>(share, 1, n);
}

size_t topk_encoded_size(CodecId codec, size_t count, uint32_t k) {
  const uint32_t bits = value_bits(codec);
  check_k(k);
  const size_t full = count / kTopKChunk, rest = count % kTopKChunk;
  return kHeaderSize + full * chunk_bytes(bits, kTopKChunk, k) + chunk_bytes(bits, rest, k);
}

void topk_encode(CodecId codec, std::span<const float> src, uint32_t k, std::span<uint8_t> out) {
  const uint32_t bits = value_bits(codec);
  check_output(out, topk_encoded_size(codec, src.size(), k));
  write_header({codec, src.size(), kTopKChunk, k}, out);
  Work work(std::min<size_t>(kTopKChunk, src.size()));
  uint8_t* p = out.data() + kHeaderSize;
  for (size_t off = 0; off < src.size(); off += kTopKChunk) {
    const size_t n = std::min<size_t>(kTopKChunk, src.size() - off);
    encode_chunk(bits, src.data() + off, n, topk_kept(n, k), &work, p);
    p += chunk_bytes(bits, n, k);
  }
}

void topk_decode(CodecId codec, std::span<const uint8_t> in, std::span<float> dst) {
  decode<false>(codec, in, dst);
}
void topk_decode_add(CodecId codec, std::span<const uint8_t> in, std::span<float> dst) {
  decode<true>(codec, in, dst);
}

}  // namespace geoccl::compression
