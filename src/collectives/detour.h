// Two-hop paths for bulk data: where the measured direct path between two
// domains is much slower than the path through a third domain that reaches both, the pair's
// bulk frames go through that domain (a relay rank forwards them: transport/tcp/relay.h), while
// small frames stay on the direct path. Pure functions of the agreed path figures
// (collectives/cost_model.h WanPaths): every rank computes the same detours.
//
// The choice, per unordered pair of domains (a, c): the middle domain b whose worse leg (the
// least of rate(a,b), rate(b,c), rate(c,b), rate(b,a)) is the largest; taken when it is at
// least `min_gain` times the pair's worse direct direction (min(rate(a,c), rate(c,a))). A path
// that was not measured (rate 0) is never a leg.
//
// Only a direct rate that the start-up probe could measure counts: its burst (`probe_bytes`, one
// flow) must have lasted at least kMinProbeRtts round trips of the pair at that rate. A shorter
// burst is set by TCP's start-up, not by the path (measured on four-uneven.toml: a 60 ms pair
// behind a 500 Mbit/s uplink read 144 Mbit/s from a 4 MiB burst, 3.9 round trips, beside 362 on a
// 20 ms pair of the same uplink); going round would only add load on the middle domain's uplink.
//
// The cost of a detour is its extra delay: a frame of F bytes takes delay(a,b) + delay(b,c) +
// F/rate_detour there against delay(a,c) + F/rate_direct directly, so frames from
// min_frame_bytes = extra_delay / (1/rate_direct - 1/rate_detour) on gain from it (bulk), and
// smaller ones stay direct.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "collectives/cost_model.h"

namespace geoccl::collectives {

struct Detour {
  int a = -1, c = -1;  // the pair (a < c)
  int via = -1;        // the middle domain
  double direct_mbps = 0, detour_mbps = 0;  // worse direction direct; worse leg through via
  double extra_delay_ms = 0;                // one way, through via, over the direct path
  size_t min_frame_bytes = 0;               // frames from this size on go through via
  std::string describe(const std::vector<std::string>& names) const;
};

constexpr double kMinProbeRtts = 8;

// The detours worth taking (at most one per pair, in pair order). `min_gain` > 1; `probe_bytes`:
// the burst each direction's rate was measured with.
std::vector<Detour> choose_detours(const WanPaths& paths, double min_gain, size_t probe_bytes);

// The figures the planner uses once the detours carry the bulk data: each detoured pair's rate
// (both directions) is the worse leg's; delays stay direct (small frames take the direct path).
WanPaths with_detours(const WanPaths& paths, const std::vector<Detour>& detours);

}  // namespace geoccl::collectives
