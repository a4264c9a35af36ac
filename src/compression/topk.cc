#include "compression/topk.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "compression/affine.h"
#include "compression/half_codec.h"
#include "geoccl/error.h"

#ifdef __SSE2__
#include <emmintrin.h>
#endif

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
// Magnitudes are below 2^31, so signed compares order them too (SSE2 has no unsigned one).
inline uint32_t magnitude(float v) { return std::bit_cast<uint32_t>(v) & 0x7fffffffu; }

void magnitudes(const float* __restrict x, size_t n, uint32_t* __restrict mag) {
  for (size_t i = 0; i < n; ++i) {  // must vectorize
    mag[i] = magnitude(x[i]);
  }
}

size_t count_above(const float* __restrict x, size_t n, uint32_t threshold) {
  size_t c = 0;
  for (size_t i = 0; i < n; ++i) c += magnitude(x[i]) > threshold;  // must vectorize
  return c;
}

// Writes the indices i < n with magnitude(x[i]) >= lo to index[] (n entries), ascending, and
// returns their count. With SSE2, four magnitudes are compared at a time and their matches'
// indices stored at once from a table of the 16 masks (a store of four where fewer match stays
// within n: c <= i), without a branch per element or per match: the passes that keep a few per
// cent of a chunk cost about half a cycle per element (a mispredicted branch costs 15).
size_t indices_at_least(const float* x, size_t n, uint32_t lo, uint32_t* index) {
  if (lo == 0) {  // every magnitude is at least 0
    for (size_t i = 0; i < n; ++i) index[i] = static_cast<uint32_t>(i);
    return n;
  }
  size_t i = 0, c = 0;
#ifdef __SSE2__
  alignas(16) static constexpr std::array<std::array<uint32_t, 4>, 16> kPositions = [] {
    std::array<std::array<uint32_t, 4>, 16> t{};
    for (uint32_t mask = 0; mask < 16; ++mask) {
      uint32_t k = 0;
      for (uint32_t b = 0; b < 4; ++b)
        if (mask >> b & 1) t[mask][k++] = b;
    }
    return t;
  }();
  static constexpr std::array<uint8_t, 16> kCounts = {0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3, 3, 4};
  const __m128i t = _mm_set1_epi32(static_cast<int32_t>(lo - 1));
  const __m128i abs = _mm_set1_epi32(0x7fffffff);
  for (; i + 4 <= n; i += 4) {
    const __m128i v = _mm_and_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i)), abs);
    const int mask = _mm_movemask_ps(_mm_castsi128_ps(_mm_cmpgt_epi32(v, t)));
    const __m128i pos = _mm_load_si128(reinterpret_cast<const __m128i*>(kPositions[static_cast<size_t>(mask)].data()));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(index + c), _mm_add_epi32(pos, _mm_set1_epi32(static_cast<int32_t>(i))));
    c += kCounts[static_cast<size_t>(mask)];  // (popcount is a library call without -mpopcnt)
  }
#endif
  for (; i < n; ++i)
    if (magnitude(x[i]) >= lo) index[c++] = static_cast<uint32_t>(i);
  return c;
}

// The rank-th largest (1-based) of v[0, m), reordering v: a radix select, each round a histogram
// of 256 buckets over the values' range and a pass that keeps the bucket holding the answer,
// until few are left for std::nth_element. For the few thousand values it sees here, several
// times faster than std::nth_element alone.
uint32_t select_desc(uint32_t* v, size_t m, size_t rank) {
  while (m > 64) {
    uint32_t lo = v[0], hi = v[0];
    for (size_t i = 1; i < m; ++i) {
      lo = std::min(lo, v[i]);
      hi = std::max(hi, v[i]);
    }
    if (lo == hi) return lo;
    const int shift = std::max(0, static_cast<int>(std::bit_width(hi - lo)) - 8);
    std::array<uint32_t, 256> hist{};
    for (size_t i = 0; i < m; ++i) ++hist[(v[i] - lo) >> shift];
    size_t above = 0;
    uint32_t bucket = 255;
    while (above + hist[bucket] < rank) above += hist[bucket--];
    size_t kept = 0;
    for (size_t i = 0; i < m; ++i)
      if (((v[i] - lo) >> shift) == bucket) v[kept++] = v[i];
    m = kept;
    rank -= above;
  }
  std::nth_element(v, v + (rank - 1), v + m, std::greater<uint32_t>());
  return v[rank - 1];
}

// The kth largest magnitude, how many magnitudes are above it, and (where the selection found
// them) the ascending indices of every element at or above it among others: `candidates`
// entries of the index array, or none (candidates = SIZE_MAX: look at every element).
struct Kth {
  uint32_t value;
  size_t above;
  size_t candidates = SIZE_MAX;
};

// The kth largest (1-based) magnitude of x[0, n) by a histogram of the top 11 bits (sign 0, the
// exponent and 3 mantissa bits of a magnitude): it finds the bucket that holds the kth largest,
// and only that bucket's elements are selected among. `mag`, `scratch`: n entries each.
Kth kth_largest_by_histogram(const float* x, size_t n, size_t kth, uint32_t* mag, uint32_t* scratch) {
  magnitudes(x, n, mag);
  constexpr int kShift = 20;  // magnitudes are below 2^31: 2^11 buckets
  std::array<uint32_t, (1u << (31 - kShift))> hist{};
  for (size_t i = 0; i < n; ++i) ++hist[mag[i] >> kShift];
  size_t above = 0;  // elements in buckets above the one that holds the kth largest
  uint32_t bucket = static_cast<uint32_t>(hist.size()) - 1;
  while (above + hist[bucket] < kth) above += hist[bucket--];
  size_t m = 0;
  for (size_t i = 0; i < n; ++i)
    if ((mag[i] >> kShift) == bucket) scratch[m++] = mag[i];
  const uint32_t value = select_desc(scratch, m, kth - above);
  return {value, count_above(x, n, value)};
}

// The kth largest (1-based) magnitude of x[0, n), exactly what a full std::nth_element gives. A
// sample (one element of every 64, at a pseudo-random place among the first 16 of its run so
// that a period in the data does not line up with it) says where it should lie: a band of magnitudes [lo, hi]
// around the sample's own kth/64-th largest, three standard deviations of that rank wide on
// either side. One vectorized pass counts the elements above the band, a second visits those at
// or above its low end; when the kth largest is in the band, only the band's elements (a few
// times the sample's share of the kept count) are selected among. Otherwise (a sample that
// misled) the histogram finds it. Either way the answer is exact: the choice affects time, not
// bytes. `mag`, `scratch`, `index`: n entries each.
Kth kth_largest(const float* x, size_t n, size_t kth, uint32_t* mag, uint32_t* scratch,
                uint32_t* index) {
  constexpr size_t kStride = 64;
  if (n < 32 * kStride) return kth_largest_by_histogram(x, n, kth, mag, scratch);
  const size_t samples = n / kStride;
  for (size_t j = 0; j < samples; ++j) {
    // Within the first cache line of the run, so the lines read keep a stride the prefetcher
    // follows; fixed, so the same on every rank.
    const size_t jitter = (j * 0x9e3779b1u >> 7) % 16;
    scratch[j] = magnitude(x[j * kStride + jitter]);
  }
  const double expect = static_cast<double>(kth) / kStride;  // its rank among the samples
  const size_t margin = static_cast<size_t>(3 * std::sqrt(expect)) + 3;
  const size_t centre = static_cast<size_t>(expect);
  // Ranks (1-based, largest first) of the band's ends among the samples; rank 0 = no upper end.
  const size_t r_hi = centre > margin ? centre - margin : 0;
  const size_t r_lo = std::min(samples, centre + margin + 1);
  uint32_t hi = 0x7fffffff, lo = 0;
  if (r_hi > 0) {
    // select_desc reorders the samples: the second end comes from a fresh copy.
    std::copy(scratch, scratch + samples, scratch + samples);
    hi = select_desc(scratch + samples, samples, r_hi);
  }
  if (r_lo < samples) lo = select_desc(scratch, samples, r_lo);
  const size_t above = r_hi > 0 ? count_above(x, n, hi) : 0;
  if (above >= kth) return kth_largest_by_histogram(x, n, kth, mag, scratch);
  // The band's elements, a few per cent of the chunk; the indices of those and of the ones
  // above it are the candidates the kept set is chosen from.
  const size_t c = indices_at_least(x, n, lo, index);
  size_t m = 0;
  for (size_t j = 0; j < c; ++j) {
    const uint32_t v = magnitude(x[index[j]]);
    if (v <= hi) scratch[m++] = v;
  }
  if (above + m < kth) return kth_largest_by_histogram(x, n, kth, mag, scratch);
  const uint32_t value = select_desc(scratch, m, kth - above);
  // Above the kth largest: candidates all (the band's low end is at or below it).
  size_t over = 0;
  for (size_t j = 0; j < c; ++j) over += magnitude(x[index[j]]) > value;
  return {value, over, c};
}

// Working space of an encoder: n entries each for the largest chunk it sees. One per thread,
// kept between calls: fresh buffers of this size come from mmap, and their page faults and
// zeroing cost a tenth of an encode.
struct Work {
  std::vector<uint32_t> mag, scratch, index;
  std::vector<float> vals;  // the kept values, in index order
  std::vector<uint8_t> codes, mag_codes;
  static Work& of_thread(size_t n) {
    thread_local Work w;
    if (w.mag.size() < n) {
      w.mag.resize(n);
      w.scratch.resize(n);
      w.index.resize(n);
      w.vals.resize(n);
      w.codes.resize(n);
      w.mag_codes.resize(n);
    }
    return w;
  }
};

// Keeps the `kept` largest magnitudes of x[0, n), ties to the lower index, writing ascending
// indices then the values in the codec's form (`bits`: value_bits()).
void encode_chunk(uint32_t bits, const float* x, size_t n, size_t kept, Work* w, uint8_t* out) {
  // The kept set is every magnitude above the kept-th largest (threshold), plus the first
  // elements equal to it, in index order, until there are `kept`.
  uint32_t threshold = 0;
  size_t equal_left = n, candidates = SIZE_MAX;
  if (kept < n) {
    const Kth t = kth_largest(x, n, kept, w->mag.data(), w->scratch.data(), w->index.data());
    threshold = t.value;
    equal_left = kept - t.above;
    candidates = t.candidates;
  }
  // Every magnitude above the threshold is kept (fewer than `kept` of them), and those equal to
  // it while equal_left lasts, so the kept count is exactly `kept`.
  size_t j = 0;
  auto consider = [&](size_t i) {
    const uint32_t v = magnitude(x[i]);
    if (v < threshold) return;
    if (v == threshold && kept < n) {
      if (equal_left == 0) return;
      --equal_left;
    }
    store_u16(out + 2 * j, static_cast<uint16_t>(i));
    w->vals[j++] = x[i];
  };
  if (candidates == SIZE_MAX) candidates = indices_at_least(x, n, threshold, w->index.data());
  for (size_t c = 0; c < candidates; ++c) consider(w->index[c]);
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
  Work& work = Work::of_thread(std::min<size_t>(kTopKChunk, src.size()));
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
