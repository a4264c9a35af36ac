// choose_detours / with_detours (collectives/detour.h): a narrow direct path goes through the
// domain whose worse leg is best, only when that gains at least min_gain; asymmetric links count
// by their worse direction; the bulk threshold is where the faster rate pays for the longer way.
#include <gtest/gtest.h>

#include "collectives/detour.h"

using geoccl::collectives::choose_detours;
using geoccl::collectives::Detour;
using geoccl::collectives::WanPaths;
using geoccl::collectives::with_detours;

namespace {

constexpr size_t kProbe = 4 << 20;  // the start-up burst (GEOCCL_EXPERIMENT=plan_probe=4M)

// k domains, `ms` one way and `mbps` on every path.
WanPaths uniform(int k, double ms, double mbps) {
  WanPaths p;
  p.k = k;
  p.one_way_ms.assign(static_cast<size_t>(k * k), ms);
  p.rate_mbps.assign(static_cast<size_t>(k * k), mbps);
  for (int d = 0; d < k; ++d) p.one_way_ms[static_cast<size_t>(d * (k + 1))] = p.rate_mbps[static_cast<size_t>(d * (k + 1))] = 0;
  return p;
}

void set(WanPaths& p, int a, int b, double ms, double mbps) {
  p.one_way_ms[static_cast<size_t>(a * p.k + b)] = p.one_way_ms[static_cast<size_t>(b * p.k + a)] = ms;
  p.rate_mbps[static_cast<size_t>(a * p.k + b)] = p.rate_mbps[static_cast<size_t>(b * p.k + a)] = mbps;
}

}  // namespace

TEST(Detour, ANarrowPairGoesThroughTheDomainThatReachesBoth) {
  // a-c 50 Mbit/s, 15 ms; a-b and b-c 1 Gbit/s, 10 ms each (the two-hop scenario).
  WanPaths p = uniform(3, 10, 1000);
  set(p, 0, 2, 15, 50);
  const auto d = choose_detours(p, 2.0, kProbe);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].a, 0);
  EXPECT_EQ(d[0].c, 2);
  EXPECT_EQ(d[0].via, 1);
  EXPECT_DOUBLE_EQ(d[0].direct_mbps, 50);
  EXPECT_DOUBLE_EQ(d[0].detour_mbps, 1000);
  EXPECT_DOUBLE_EQ(d[0].extra_delay_ms, 5);
  // 5 ms / (1/(50*125) - 1/(1000*125)) ms per byte = 32,895 bytes.
  EXPECT_NEAR(static_cast<double>(d[0].min_frame_bytes), 32895, 1);
  // The planner sees the detour's rate on the pair, the direct delay.
  const WanPaths q = with_detours(p, d);
  EXPECT_DOUBLE_EQ(q.rate(0, 2), 1000);
  EXPECT_DOUBLE_EQ(q.rate(2, 0), 1000);
  EXPECT_DOUBLE_EQ(q.delay(0, 2), 15);
  EXPECT_DOUBLE_EQ(q.rate(0, 1), 1000);
  EXPECT_NE(d[0].describe({"a", "b", "c"}).find("a-c through b"), std::string::npos);
}

TEST(Detour, NoneWhenTheGainIsBelowTheThreshold) {
  WanPaths p = uniform(3, 10, 1000);
  set(p, 0, 2, 1, 600);  // 1000/600 < 2 (a 2 ms round trip: the burst lasted 28 of them)
  EXPECT_TRUE(choose_detours(p, 2.0, kProbe).empty());
  EXPECT_EQ(choose_detours(p, 1.5, kProbe).size(), 1u);
  EXPECT_TRUE(choose_detours(uniform(3, 10, 1000), 2.0, kProbe).empty());
}

TEST(Detour, TheBestWorseLegWinsAndAsymmetryCountsByTheWorseDirection) {
  // Four domains: 0-3 narrow; through 1 one leg is 500 (1-3: no detour of its own at 800/500),
  // through 2 both legs 800.
  WanPaths p = uniform(4, 10, 800);
  set(p, 0, 3, 10, 40);
  set(p, 1, 3, 10, 500);
  auto d = choose_detours(p, 2.0, kProbe);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].via, 2);
  EXPECT_DOUBLE_EQ(d[0].detour_mbps, 800);
  // An asymmetric uplink: only 0->3 is narrow; the pair still counts as narrow (its worse way).
  p = uniform(4, 10, 800);
  p.rate_mbps[0 * 4 + 3] = 40;
  d = choose_detours(p, 2.0, kProbe);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_DOUBLE_EQ(d[0].direct_mbps, 40);
  // A leg narrow in one direction only spoils that middle domain.
  p.rate_mbps[2 * 4 + 1] = 10;  // 2->1
  p.rate_mbps[1 * 4 + 2] = 10;
  p.rate_mbps[3 * 4 + 1] = 10;  // 3->1 (1 and 2 are both spoilt as middles)
  p.rate_mbps[2 * 4 + 3] = 10;
  // (The spoilt legs are narrow pairs of their own now, with detours of their own; 0-3 has none.)
  for (const Detour& x : choose_detours(p, 2.0, kProbe)) EXPECT_FALSE(x.a == 0 && x.c == 3) << x.describe({});
}

TEST(Detour, UnmeasuredPathsAreNeverLegsNorDetoured) {
  WanPaths p = uniform(3, 10, 1000);
  set(p, 0, 2, 15, 0);  // the pair was not measured: nothing to compare with
  EXPECT_TRUE(choose_detours(p, 2.0, kProbe).empty());
  p = uniform(3, 10, 1000);
  set(p, 0, 2, 15, 50);
  set(p, 1, 2, 10, 0);  // b-c unmeasured: b is no middle
  EXPECT_TRUE(choose_detours(p, 2.0, kProbe).empty());
}

TEST(Detour, ALongerWayRaisesTheBulkThreshold) {
  WanPaths p = uniform(3, 40, 1000);
  set(p, 0, 2, 10, 100);  // through b: +70 ms one way
  const auto d = choose_detours(p, 2.0, kProbe);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_DOUBLE_EQ(d[0].extra_delay_ms, 70);
  // 70 / (1/12500 - 1/125000) = 972,223 bytes (rounded up).
  EXPECT_NEAR(static_cast<double>(d[0].min_frame_bytes), 972223, 1);
}

TEST(Detour, ADirectRateThatTheProbeBurstCouldNotMeasureIsNoReason) {
  // four-uneven.toml, measured: a-c (30 ms one way) read 144 Mbit/s behind a 500 Mbit/s uplink
  // whose 10 ms pair read 362: the 4 MiB burst lasted 3.9 round trips, TCP's start-up set it.
  WanPaths p = uniform(3, 10, 362);
  set(p, 0, 2, 30, 144);
  EXPECT_TRUE(choose_detours(p, 2.0, kProbe).empty());
  // A burst long enough to have measured the path (64 MiB: 62 round trips) makes it a narrow one.
  EXPECT_EQ(choose_detours(p, 2.0, 64 << 20).size(), 1u);
  // Narrow for real: 41 Mbit/s at 15 ms one way (two-hop.toml) took 27 round trips.
  p = uniform(3, 10, 976);
  set(p, 0, 2, 15, 41);
  EXPECT_EQ(choose_detours(p, 2.0, kProbe).size(), 1u);
}
