// Re-planning while a job runs, I/O-free: decides from the paths' figures the
// group agreed on at each check whether the plan's figures (WanPaths, measured at start-up) no
// longer hold, and what replaces them.
//
// Between checks each domain leader tracks its paths to the other leaders from its transport's
// own statistics (the least smoothed RTT it read, the highest delivery rate of samples that were
// not application-limited; heartbeats keep the RTT of an idle path current, so no probe traffic
// is added). At a check the group max-reduces those windows, so every rank calls on_check() with
// the same figures and takes the same decision: a pair whose delay or rate differs from the plan
// by more than the thresholds, in `persist` checks in a row, gets its latest figures (a rate rise
// counts only on a path planned well below its leader's best, one that had dropped, as readings
// overshoot on healthy paths); a window
// without a sample for a pair (an idle path has no delivery-rate sample) neither confirms nor
// ends a run of changes. The caller applies the new figures at an operation boundary every rank
// shares (api/replanner.h: the check's result, at the next check).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "collectives/cost_model.h"

namespace geoccl::collectives {

struct PathMonitorOptions {
  double rate_factor = 2.0;     // a rate below plan / f or above plan * f is a change
  double delay_factor = 1.5;    // a one-way delay off by more than plan * (f - 1) ...
  double delay_floor_ms = 25;   // ... and by more than this (queueing on a loaded path) is a change
  int persist = 2;              // checks in a row that must show the change
  // A path planned well below its leader's best (one that dropped) carries little or nothing
  // once the plan works around it, so its recovery shows in no reading: its two leaders probe it
  // at `persist` checks in a row out of every `probe_every` (0: never).
  int probe_every = 8;
};

// Each domain's best planned rate to any other: what its leader's uplink carries.
std::vector<double> best_rate_per_domain(const WanPaths& paths);

// One leader's readings of its paths between two checks, folded as on_check() wants them: the
// least one-way delay (half the smoothed RTT) and the highest rate a path showed. Flows to
// several leaders at once share this leader's uplink, while the plan's rate of a path is one
// flow's alone: a path that gets at least half its fair share of what the flows deliver together
// is limited by the uplink, not by itself, and counts as able to carry that total, but only
// while the flows together come near what the uplink carries (half of it, `uplink_mbps` per
// leader: its best planned rate): flows that a slow path holds back (a ring or a tree waits on
// its slowest hop) share nothing, and each path shows its own rate, as does a path well below
// its share.
class PathWindow {
 public:
  explicit PathWindow(std::vector<double> uplink_mbps)
      : k_(static_cast<int>(uplink_mbps.size())),
        uplink_(std::move(uplink_mbps)),
        delay_(uplink_.size() * uplink_.size(), 0.0),
        rate_(delay_.size(), 0.0) {}
  // Readings of leader `from` at one moment, per domain (k each; the entry of `from` and zeros
  // are no reading).
  void add(int from, const std::vector<double>& srtt_ms, const std::vector<double>& delivery_mbps);
  // The window's k*k delays then k*k rates (0 = no reading), and a fresh window.
  std::vector<double> take();

 private:
  int k_;
  std::vector<double> uplink_;
  std::vector<double> delay_, rate_;
};

class PathMonitor {
 public:
  PathMonitor(WanPaths plan, PathMonitorOptions options);

  // One check's agreed figures, k*k each, row-major by (from, to) domain; 0 = no sample. The new
  // plan figures when a change persisted, else nullopt. Every rank gets the same answer for the
  // same inputs.
  std::optional<WanPaths> on_check(const std::vector<double>& one_way_ms, const std::vector<double>& rate_mbps);

  // The pairs of domains (a < b) whose leaders probe their path at check number `check` (0, 1,
  // ...; the same on every rank): those with a direction planned below its leader's best by more
  // than rate_factor, at `persist` checks in a row out of every `probe_every`.
  std::vector<std::pair<int, int>> to_probe(uint64_t check) const;

  const WanPaths& plan() const { return plan_; }
  // What the last change was, for the log: "a->b rate 1000 -> 48 Mbit/s; ...".
  const std::string& last_change() const { return last_change_; }
  int changes() const { return changes_; }

 private:
  WanPaths plan_;
  PathMonitorOptions options_;
  std::vector<int> delay_streak_, rate_streak_;      // per ordered pair
  std::vector<double> delay_seen_, rate_seen_;       // the latest figure of a streak
  std::string last_change_;
  int changes_ = 0;
};

}  // namespace geoccl::collectives
