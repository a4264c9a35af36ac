#include "topology/transport_choice.h"

#include <cstdio>

namespace geoccl::topology {

std::string describe(const PathFigures& f) {
  if (!f.ok) return f.transport + ": not connected";
  char b[160];
  std::snprintf(b, sizeof b, "%s %.1f ms RTT, burst %.1f ms = %.0f Mbit/s, %.2f CPU-s/Gbit", f.transport.c_str(),
                f.rtt_ms, f.burst_ms, f.mbps, f.cpu_s_per_gbit);
  return b;
}

TransportDecision choose_transport(const std::vector<PathFigures>& c, double margin) {
  TransportDecision d;
  int best = -1;
  for (size_t i = 0; i < c.size(); ++i) {
    if (!c[i].ok) continue;
    if (best < 0) {
      best = static_cast<int>(i);
      continue;
    }
    const PathFigures& b = c[static_cast<size_t>(best)];
    const bool faster = c[i].burst_ms < b.burst_ms * (1 - margin);
    const bool close = !faster && c[i].burst_ms <= b.burst_ms * (1 + margin);
    if (faster || (close && c[i].cpu_s_per_gbit < b.cpu_s_per_gbit)) best = static_cast<int>(i);
  }
  d.chosen = best < 0 ? 0 : best;
  std::string figures;
  for (const auto& f : c) figures += (figures.empty() ? "" : "; ") + describe(f);
  if (best < 0) {
    d.why = "nothing measured, " + (c.empty() ? std::string("tcp") : c[0].transport) + " by default (" + figures + ")";
    return d;
  }
  const PathFigures& w = c[static_cast<size_t>(best)];
  std::string reason = "the only one connected";
  for (size_t i = 0; i < c.size(); ++i) {
    if (static_cast<int>(i) == best || !c[i].ok) continue;
    char b[120];
    if (w.burst_ms < c[i].burst_ms * (1 - margin))
      std::snprintf(b, sizeof b, "%.0f %% faster than %s", (c[i].burst_ms / w.burst_ms - 1) * 100, c[i].transport.c_str());
    else if (w.cpu_s_per_gbit < c[i].cpu_s_per_gbit)
      std::snprintf(b, sizeof b, "within %.0f %% of %s, less CPU per Gbit/s", margin * 100, c[i].transport.c_str());
    else
      std::snprintf(b, sizeof b, "within %.0f %% of %s, the first candidate", margin * 100, c[i].transport.c_str());
    reason = b;
  }
  d.why = w.transport + " (" + reason + "): " + figures;
  return d;
}

}  // namespace geoccl::topology
