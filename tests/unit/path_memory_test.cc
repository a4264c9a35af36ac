// The path memory driven by hand: topologies, figures and timestamps in, figures out.
#include "api/startup/path_memory.h"

#include <gtest/gtest.h>

using namespace geoccl;
using namespace std::chrono_literals;
using api::startup::PathMemory;

namespace {

topology::Topology named(std::vector<std::string> names) {
  topology::Topology t;
  t.names = std::move(names);
  const int k = static_cast<int>(t.names.size());
  for (int d = 0; d < k; ++d) {
    t.domain_of.push_back(d);
    t.members.push_back({d});
    t.ring_order.push_back(d);
  }
  return t;
}

// Figures where the pair (a, b) has one-way delay 10a + b and rate 100a + b.
collectives::WanPaths figures(int k) {
  collectives::WanPaths p;
  p.k = k;
  for (int a = 0; a < k; ++a)
    for (int b = 0; b < k; ++b) {
      p.one_way_ms.push_back(a == b ? 0 : 10 * a + b);
      p.rate_mbps.push_back(a == b ? 0 : 100 * a + b);
    }
  return p;
}

}  // namespace

// Domains are matched by name, whatever their order in the next epoch's topology; a subset of
// the domains is recalled too.
TEST(PathMemory, RecallsByDomainNameInTheNewOrder) {
  PathMemory m;
  const auto t0 = PathMemory::Clock::now();
  m.record(named({"a", "b", "c"}), figures(3), t0);
  const auto same = m.recall(named({"a", "b", "c"}), t0 + 1s);
  ASSERT_TRUE(same);
  EXPECT_EQ(same->one_way_ms, figures(3).one_way_ms);
  EXPECT_EQ(same->rate_mbps, figures(3).rate_mbps);
  const auto moved = m.recall(named({"c", "a"}), t0 + 1s);  // b left, c is domain 0 now
  ASSERT_TRUE(moved);
  EXPECT_EQ(moved->k, 2);
  EXPECT_EQ(moved->delay(0, 1), 20);  // c -> a
  EXPECT_EQ(moved->delay(1, 0), 2);   // a -> c
  EXPECT_EQ(moved->rate(0, 1), 200);
  EXPECT_EQ(moved->rate(1, 0), 2);
}

// Nothing is recalled for a domain never measured, an unnamed domain, one domain, or figures
// older than the memory keeps; pairs that were not measured (0) are not remembered.
TEST(PathMemory, RecallsOnlyEveryPairRecentlyMeasured) {
  PathMemory m;
  const auto t0 = PathMemory::Clock::now();
  auto f = figures(3);
  f.rate_mbps[1 * 3 + 2] = 0;  // b -> c not measured
  m.record(named({"a", "b", "c"}), f, t0);
  EXPECT_TRUE(m.recall(named({"a", "b"}), t0));
  EXPECT_FALSE(m.recall(named({"a", "b", "c"}), t0));
  EXPECT_FALSE(m.recall(named({"a", "d"}), t0));
  EXPECT_FALSE(m.recall(named({"a", ""}), t0));
  EXPECT_FALSE(m.recall(named({"a"}), t0));
  EXPECT_FALSE(m.recall(named({"a", "b"}), t0 + PathMemory::kMaxAge + 1s));
  // Unnamed domains (found from RTTs) are not recorded at all.
  PathMemory unnamed;
  unnamed.record(named({"", ""}), figures(2), t0);
  EXPECT_FALSE(unnamed.recall(named({"", ""}), t0));
  // A later record replaces the figures of its pairs and refreshes them.
  m.record(named({"b", "a"}), figures(2), t0 + PathMemory::kMaxAge);
  const auto fresh = m.recall(named({"a", "b"}), t0 + PathMemory::kMaxAge + 1s);
  ASSERT_TRUE(fresh);
  EXPECT_EQ(fresh->delay(0, 1), 10);  // a -> b is now what was recorded as domain 1 -> 0
  EXPECT_EQ(fresh->delay(1, 0), 1);
}
