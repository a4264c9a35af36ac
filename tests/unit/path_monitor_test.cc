// PathMonitor (collectives/path_monitor.h): a change of a path's rate or delay becomes the plan's
// figure only after it showed in `persist` checks in a row; noise below the thresholds, a single
// odd check and windows without samples change nothing; a change applies once.
#include <gtest/gtest.h>

#include <optional>

#include "collectives/path_monitor.h"

using geoccl::collectives::PathMonitor;
using geoccl::collectives::PathMonitorOptions;
using geoccl::collectives::WanPaths;

namespace {

// Three domains, 10 ms one way and 1000 Mbit/s on every path.
WanPaths three() {
  WanPaths p;
  p.k = 3;
  p.one_way_ms.assign(9, 10);
  p.rate_mbps.assign(9, 1000);
  for (int d = 0; d < 3; ++d) p.one_way_ms[static_cast<size_t>(d * 4)] = p.rate_mbps[static_cast<size_t>(d * 4)] = 0;
  return p;
}

struct Window {
  std::vector<double> delay = std::vector<double>(9, 0), rate = std::vector<double>(9, 0);
  Window& path(int from, int to, double d, double r) {
    delay[static_cast<size_t>(from * 3 + to)] = d;
    rate[static_cast<size_t>(from * 3 + to)] = r;
    return *this;
  }
};

// The same window at two checks in a row: no change at the first, the plan's at the second.
std::optional<WanPaths> twice(PathMonitor& m, const Window& w) {
  EXPECT_FALSE(m.on_check(w.delay, w.rate));
  return m.on_check(w.delay, w.rate);
}

}  // namespace

TEST(PathMonitor, ARateDropBecomesThePlanAfterItPersists) {
  PathMonitor m(three(), PathMonitorOptions{});
  Window w;
  w.path(0, 1, 11, 48).path(1, 2, 10, 990);
  EXPECT_FALSE(m.on_check(w.delay, w.rate));  // once: not yet
  w.path(0, 1, 12, 45);
  const auto next = m.on_check(w.delay, w.rate);
  ASSERT_TRUE(next);
  EXPECT_DOUBLE_EQ(next->rate(0, 1), 45);  // the latest figure of the run
  EXPECT_DOUBLE_EQ(next->rate(1, 0), 1000);  // the other direction was not seen changed
  EXPECT_DOUBLE_EQ(next->rate(1, 2), 1000);
  EXPECT_DOUBLE_EQ(next->delay(0, 1), 10);  // within the delay thresholds
  EXPECT_NE(m.last_change().find("0->1 rate 1000 -> 45 Mbit/s"), std::string::npos) << m.last_change();
  EXPECT_EQ(m.changes(), 1);
  // The new figures now are the plan: the same observations are no change.
  EXPECT_FALSE(m.on_check(w.delay, w.rate));
  EXPECT_FALSE(m.on_check(w.delay, w.rate));
  EXPECT_EQ(m.changes(), 1);
}

TEST(PathMonitor, ASingleOddCheckAndNoiseChangeNothing) {
  PathMonitor m(three(), PathMonitorOptions{});
  for (int i = 0; i < 10; ++i) {
    Window w;
    // Every other check a dip; the rest near the plan; delays with up to 20 ms of queueing.
    w.path(0, 1, 10 + 2.0 * i, i % 2 ? 300 : 900).path(2, 0, 30, 1500);
    EXPECT_FALSE(m.on_check(w.delay, w.rate)) << "check " << i;
  }
  EXPECT_EQ(m.changes(), 0);
}

TEST(PathMonitor, WindowsWithoutSamplesNeitherConfirmNorEndAChange) {
  PathMonitor m(three(), PathMonitorOptions{});
  Window changed, idle;
  changed.path(1, 2, 10, 100);
  EXPECT_FALSE(m.on_check(changed.delay, changed.rate));
  EXPECT_FALSE(m.on_check(idle.delay, idle.rate));  // the path was idle: no sample
  EXPECT_TRUE(m.on_check(changed.delay, changed.rate));
  // A sample back at the plan's figure ends a run.
  Window back;
  back.path(0, 2, 10, 100);
  EXPECT_FALSE(m.on_check(back.delay, back.rate));
  back.path(0, 2, 10, 1000);
  EXPECT_FALSE(m.on_check(back.delay, back.rate));
  back.path(0, 2, 10, 100);
  EXPECT_FALSE(m.on_check(back.delay, back.rate));
}

TEST(PathMonitor, ADelayJumpInOneDirectionHoldsForThePair) {
  PathMonitor m(three(), PathMonitorOptions{});
  Window w;
  w.path(2, 1, 75, 0);
  const auto next = twice(m, w);
  ASSERT_TRUE(next);
  EXPECT_DOUBLE_EQ(next->delay(2, 1), 75);
  EXPECT_DOUBLE_EQ(next->delay(1, 2), 75);
  EXPECT_DOUBLE_EQ(next->rate(2, 1), 1000);  // no rate sample: unchanged
}

TEST(PathMonitor, ARiseCountsOnlyOnAPathThatHadDropped) {
  PathMonitor m(three(), PathMonitorOptions{});
  Window high;
  high.path(0, 1, 10, 4000);  // readings overshoot on a healthy path: no change
  EXPECT_FALSE(m.on_check(high.delay, high.rate));
  EXPECT_FALSE(m.on_check(high.delay, high.rate));
  Window low;
  low.path(0, 1, 10, 50);
  EXPECT_FALSE(m.on_check(low.delay, low.rate));
  ASSERT_TRUE(m.on_check(low.delay, low.rate));
  // The path comes back: now a rise counts.
  Window back;
  back.path(0, 1, 10, 900);
  EXPECT_FALSE(m.on_check(back.delay, back.rate));
  const auto next = m.on_check(back.delay, back.rate);
  ASSERT_TRUE(next);
  EXPECT_DOUBLE_EQ(next->rate(0, 1), 900);
}

TEST(PathMonitor, PersistAndThresholdsAreTheOptions) {
  PathMonitorOptions o;
  o.persist = 3;
  o.rate_factor = 1.2;
  PathMonitor m(three(), o);
  Window w;
  w.path(0, 1, 10, 800);
  EXPECT_FALSE(m.on_check(w.delay, w.rate));
  EXPECT_FALSE(m.on_check(w.delay, w.rate));
  EXPECT_TRUE(m.on_check(w.delay, w.rate));
  // Wrong sizes: no decision.
  EXPECT_FALSE(m.on_check({1, 2}, {3}));
}

// A path that dropped is probed by its leaders at `persist` checks in a row out of every
// `probe_every`, whichever direction dropped; a healthy plan probes nothing; probe_every 0 never.
TEST(PathMonitor, APathThatDroppedIsProbedNowAndThen) {
  PathMonitor healthy(three(), PathMonitorOptions{});
  for (uint64_t c = 0; c < 20; ++c) EXPECT_TRUE(healthy.to_probe(c).empty()) << c;
  WanPaths dropped = three();
  dropped.rate_mbps[1 * 3 + 2] = 40;  // 1->2 at 40 of 1000
  PathMonitor m(dropped, PathMonitorOptions{});
  const std::vector<std::pair<int, int>> pair12 = {{1, 2}};
  for (uint64_t c = 0; c < 24; ++c) {
    const bool probing = c % 8 < 2;
    const std::vector<std::pair<int, int>> none;
    EXPECT_EQ(m.to_probe(c), probing ? pair12 : none) << c;
  }
  // A reading of the recovery at two probing checks in a row becomes the plan; then nothing is
  // probed.
  Window w;
  w.path(1, 2, 10, 900);
  const auto next = twice(m, w);
  ASSERT_TRUE(next);
  EXPECT_DOUBLE_EQ(next->rate(1, 2), 900);
  EXPECT_TRUE(m.to_probe(8).empty());
  PathMonitorOptions never;
  never.probe_every = 0;
  EXPECT_TRUE(PathMonitor(dropped, never).to_probe(0).empty());
  // Just under rate_factor below the best is no drop.
  WanPaths slow = three();
  slow.rate_mbps[2 * 3 + 0] = 501;
  EXPECT_TRUE(PathMonitor(slow, PathMonitorOptions{}).to_probe(0).empty());
}

TEST(PathWindow, AnUplinkSharedByFlowsIsNotAPathDropAndTakeStartsAfresh) {
  geoccl::collectives::PathWindow w({200, 200, 200, 200});
  // Leader 0 sends to 1, 2, 3 at once: each gets a third of a 200 Mbit/s uplink.
  w.add(0, {0, 40, 44, 50}, {0, 67, 66, 67});
  // Later path 1 alone is slow while the others share the rest.
  w.add(0, {0, 42, 30, 60}, {0, 10, 95, 95});
  const auto f = w.take();
  ASSERT_EQ(f.size(), 32u);
  EXPECT_DOUBLE_EQ(f[1], 20);   // the least half-RTT seen: 40 / 2
  EXPECT_DOUBLE_EQ(f[2], 15);
  EXPECT_DOUBLE_EQ(f[16 + 1], 200);  // could carry the total in the first reading
  EXPECT_DOUBLE_EQ(f[16 + 2], 200);  // 95 + 95 + 10 in the second
  EXPECT_DOUBLE_EQ(f[16 + 3], 200);
  EXPECT_DOUBLE_EQ(f[16 + 4], 0);    // leader 1's row: no reading
  // Only the slow path's own reading shows alone: a fresh window after take().
  w.add(0, {0, 42, 30, 60}, {0, 10, 95, 95});
  const auto g = w.take();
  EXPECT_DOUBLE_EQ(g[16 + 1], 10);
  EXPECT_DOUBLE_EQ(g[16 + 2], 200);
  EXPECT_DOUBLE_EQ(w.take()[16 + 2], 0);
}

TEST(PathWindow, FlowsHeldBackBySlowPathShareNoUplink) {
  // Leader 1's uplink carries 180 Mbit/s; its path to 0 dropped to 10 and a ring paces the flows
  // to 2 and 3 at the same 10: together they are far from the uplink, so each shows its own rate
  // (counting the 30 of all three as path 0's would hide the drop).
  geoccl::collectives::PathWindow w({200, 180, 200, 200});
  w.add(1, {40, 0, 40, 40}, {10, 0, 10, 9.8});
  auto f = w.take();
  EXPECT_DOUBLE_EQ(f[16 + 4 + 0], 10);
  EXPECT_DOUBLE_EQ(f[16 + 4 + 2], 10);
  EXPECT_DOUBLE_EQ(f[16 + 4 + 3], 9.8);
  // At half the uplink or more, the flows share it.
  w.add(1, {40, 0, 40, 40}, {30, 0, 30, 30});
  f = w.take();
  EXPECT_DOUBLE_EQ(f[16 + 4 + 0], 90);
  // The monitor's uplink figures: each domain's best planned rate to another.
  geoccl::collectives::WanPaths p;
  p.k = 3;
  p.one_way_ms.assign(9, 10);
  p.rate_mbps = {999, 100, 50, 70, 999, 80, 5, 6, 999};
  EXPECT_EQ(geoccl::collectives::best_rate_per_domain(p), (std::vector<double>{100, 80, 6}));
}
