#include "geoccl/auto_codec.h"

#include <algorithm>

namespace geoccl {

const std::vector<Compression>& auto_codec_ladder() {
  static const std::vector<Compression> ladder = [] {
    std::vector<Compression> l;
    for (const char* name : {"none", "fp16", "int8", "int4", "int2", "topk-int8:0.01"})
      l.push_back(Compression::parse(name));
    return l;
  }();
  return ladder;
}

namespace {

// When the buckets from `first` on end, started no earlier than `free_at`, each at level(i).
template <class Level>
double end_of(std::span<const BucketTiming> b, size_t first, double free_at, Level level) {
  for (size_t i = first; i < b.size(); ++i)
    free_at = std::max(free_at, b[i].ready_ms) + b[i].predicted_ms[level(i)];
  return free_at;
}

}  // namespace

std::vector<size_t> choose_bucket_codecs(std::span<const BucketTiming> buckets, double deadline_ms) {
  std::vector<size_t> out(buckets.size(), 0);
  if (buckets.empty()) return out;
  size_t levels = buckets[0].predicted_ms.size();
  for (const auto& b : buckets) levels = std::min(levels, b.predicted_ms.size());
  if (levels == 0) return out;
  // 1. One level for all.
  size_t uniform = levels - 1;
  for (size_t l = 0; l < levels; ++l)
    if (end_of(buckets, 0, 0, [&](size_t) { return l; }) <= deadline_ms) {
      uniform = l;
      break;
    }
  // 2. Lighter where the rest at the uniform level still fits.
  double free_at = 0;
  for (size_t i = 0; i < buckets.size(); ++i) {
    size_t pick = uniform;
    for (size_t l = 0; l < uniform; ++l) {
      const double end_i = std::max(free_at, buckets[i].ready_ms) + buckets[i].predicted_ms[l];
      if (end_of(buckets, i + 1, end_i, [&](size_t) { return uniform; }) <= deadline_ms) {
        pick = l;
        break;
      }
    }
    out[i] = pick;
    free_at = std::max(free_at, buckets[i].ready_ms) + buckets[i].predicted_ms[pick];
  }
  return out;
}

}  // namespace geoccl
