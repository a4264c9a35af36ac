#include "blob/chooser.h"

#include <algorithm>
#include <cmath>

namespace geoccl::blob {
namespace {

bool usable(const CodecSample& s) {
  auto ok = [](double v) { return std::isfinite(v) && v > 0; };
  return ok(s.compress_bytes_per_s) && ok(s.decompress_bytes_per_s) && ok(s.ratio) &&
         is_valid(s.choice.codec);
}

}  // namespace

double pipeline_rate(const CodecSample& s, double link_bytes_per_s) {
  return std::min({s.compress_bytes_per_s, link_bytes_per_s * s.ratio, s.decompress_bytes_per_s});
}

CodecChoice choose_codec(double link_bytes_per_s, std::span<const CodecSample> samples,
                         double margin) {
  CodecChoice best{Codec::kNone, 0};
  if (!(std::isfinite(link_bytes_per_s) && link_bytes_per_s > 0)) return best;
  double best_rate = link_bytes_per_s * std::max(margin, 1.0);
  for (const auto& s : samples) {
    if (!usable(s) || s.choice.codec == Codec::kNone) continue;
    const double r = pipeline_rate(s, link_bytes_per_s);
    if (r > best_rate) {
      best_rate = r;
      best = s.choice;
    }
  }
  return best;
}

}  // namespace geoccl::blob
