// Test pattern, statistics and JSON output shared by the bench programs (gloo_bench,
// train_step). Header-only; no dependency on geoccl or Gloo.

#pragma once

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

namespace geoccl_bench {

// Rank r contributes (r+1) + (i % 7) at element i, so the sum is n(n+1)/2 + n*(i % 7): small
// integers, exact in float32 whatever order the ranks are summed in.
inline void FillPattern(std::vector<float>& v, int rank) {
  int phase = 0;
  const float base = static_cast<float>(rank + 1);
  for (float& x : v) {
    x = base + static_cast<float>(phase);
    if (++phase == 7) phase = 0;
  }
}

inline double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 == 1 ? v[m] : (v[m - 1] + v[m]) / 2;
}

// JSON numbers must be finite; timings always are, but be explicit rather than emit "inf".
inline std::string JsonNumber(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[32];  // shortest text that round-trips
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc() ? std::string(buf, end) : "null";
}

// Writes `text` to `path + ".tmp"`, then renames it over `path`, so that a reader
// (bench/compare.py) never sees a truncated file.
inline void WriteFileAtomic(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    if (!out.flush()) throw std::runtime_error("cannot write " + tmp + ": " + std::strerror(errno));
  }
  std::filesystem::rename(tmp, path);
}

}  // namespace geoccl_bench
