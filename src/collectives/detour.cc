#include "collectives/detour.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace geoccl::collectives {

namespace {

std::string name_of(const std::vector<std::string>& names, int d) {
  return static_cast<size_t>(d) < names.size() && !names[static_cast<size_t>(d)].empty() ? names[static_cast<size_t>(d)]
                                                                                          : std::to_string(d);
}

// Milliseconds `bytes` take at `mbps`.
double transfer_ms(double bytes, double mbps) { return bytes * 8.0 / (mbps * 1e3); }

}  // namespace

std::string Detour::describe(const std::vector<std::string>& names) const {
  std::ostringstream o;
  o.precision(4);
  o << name_of(names, a) << "-" << name_of(names, c) << " through " << name_of(names, via) << ": " << detour_mbps
    << " Mbit/s against " << direct_mbps << " direct, +" << extra_delay_ms << " ms one way; frames from "
    << min_frame_bytes << " bytes";
  return o.str();
}

std::vector<Detour> choose_detours(const WanPaths& paths, double min_gain, size_t probe_bytes) {
  std::vector<Detour> out;
  const int k = paths.k;
  for (int a = 0; a < k; ++a)
    for (int c = a + 1; c < k; ++c) {
      const double direct = std::min(paths.rate(a, c), paths.rate(c, a));
      if (direct <= 0) continue;  // not measured: nothing to compare with
      // The burst's time at the measured rate, in the pair's round trips (ms / ms).
      const double burst_ms = transfer_ms(static_cast<double>(probe_bytes), direct);
      const double rtt_ms = 2 * std::max(paths.delay(a, c), paths.delay(c, a));
      if (burst_ms < kMinProbeRtts * rtt_ms) continue;  // set by TCP's start-up: no figure
      Detour best;
      for (int b = 0; b < k; ++b) {
        if (b == a || b == c) continue;
        const double leg = std::min({paths.rate(a, b), paths.rate(b, c), paths.rate(c, b), paths.rate(b, a)});
        if (leg > best.detour_mbps) {
          best.via = b;
          best.detour_mbps = leg;
        }
      }
      if (best.via < 0 || best.detour_mbps < min_gain * direct) continue;
      best.a = a;
      best.c = c;
      best.direct_mbps = direct;
      best.extra_delay_ms = std::max(0.0, paths.delay(a, best.via) + paths.delay(best.via, c) - paths.delay(a, c));
      // Bytes at which the faster rate makes up for the longer way: extra / (1/direct - 1/detour),
      // with rates in bytes per ms (Mbit/s * 1e6 / 8 / 1e3 = Mbit/s * 125).
      const double per_byte_gain_ms = 1.0 / (direct * 125.0) - 1.0 / (best.detour_mbps * 125.0);
      best.min_frame_bytes = static_cast<size_t>(std::ceil(best.extra_delay_ms / per_byte_gain_ms));
      out.push_back(best);
    }
  return out;
}

WanPaths with_detours(const WanPaths& paths, const std::vector<Detour>& detours) {
  WanPaths p = paths;
  for (const Detour& d : detours) {
    p.rate_mbps[static_cast<size_t>(d.a * p.k + d.c)] = d.detour_mbps;
    p.rate_mbps[static_cast<size_t>(d.c * p.k + d.a)] = d.detour_mbps;
  }
  return p;
}

}  // namespace geoccl::collectives
