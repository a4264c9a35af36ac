#include "blob/codec_sampler.h"

#include <chrono>

namespace geoccl::blob {
namespace {

using Clock = std::chrono::steady_clock;

// Bytes per second, with a floor of 1 us on the duration so a tiny sample never reads infinite.
double per_second(size_t bytes, Clock::duration d) {
  const double s = std::max(std::chrono::duration<double>(d).count(), 1e-6);
  return static_cast<double>(bytes) / s;
}

}  // namespace

std::span<const CodecChoice> auto_candidates() {
  static const CodecChoice kCandidates[] = {{Codec::kLz4, 0}, {Codec::kZstd, 1}, {Codec::kZstd, 3}};
  return kCandidates;
}

std::vector<CodecSample> sample_codecs(std::span<const uint8_t> sample,
                                       std::span<const CodecChoice> candidates) {
  std::vector<CodecSample> out;
  std::vector<uint8_t> wire, back(sample.size());
  for (const auto& c : candidates) {
    if (c.codec == Codec::kNone) continue;
    CodecSample s;
    s.choice = c;
    wire.resize(compress_bound(c.codec, sample.size()));
    const auto t0 = Clock::now();
    const size_t n = compress(c, sample, wire);
    const auto t1 = Clock::now();
    const bool ok = n > 0 && decompress(c.codec, std::span(wire).first(n), back);
    const auto t2 = Clock::now();
    s.compress_bytes_per_s = per_second(sample.size(), t1 - t0);
    s.decompress_bytes_per_s = per_second(sample.size(), t2 - t1);
    s.ratio = ok ? static_cast<double>(sample.size()) / static_cast<double>(n) : 0;
    out.push_back(s);
  }
  return out;
}

}  // namespace geoccl::blob
