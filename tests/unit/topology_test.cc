#include "topology/topology.h"

#include <gtest/gtest.h>

#include <cmath>

#include "geoccl/error.h"

using namespace geoccl::topology;

TEST(Topology, FromLabelsGroupsAndOrdersByFirstRank) {
  auto t = from_labels({"b", "a", "b", "c", "a", "a"});
  ASSERT_EQ(t.domains(), 3);
  EXPECT_EQ(t.domain_of, (std::vector<int>{0, 1, 0, 2, 1, 1}));
  EXPECT_EQ(t.members[1], (std::vector<int>{1, 4, 5}));
  EXPECT_EQ(t.names[0], "b");
  EXPECT_EQ(t.local_index(5), 2);
  EXPECT_EQ(t.source, "labels");
  EXPECT_EQ(from_labels({"", "", ""}).domains(), 1);
  EXPECT_THROW(from_labels({"a", ""}), geoccl::Error);
}

// Three regions of two ranks: ~0.1 ms inside, 20-40 ms across (as on the emulated WAN).
TEST(Topology, FromRttFindsEmulatedRegions) {
  const int n = 6;
  std::vector<double> m(n * n, 0);
  auto set = [&](int i, int j, double v) { m[i * n + j] = v; };
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j)
      if (i != j) set(i, j, i / 2 == j / 2 ? 0.08 + 0.01 * (i + j) : 20.0 + 10 * ((i / 2 + j / 2) % 3));
  auto t = from_rtt(m, n);
  ASSERT_EQ(t.domains(), 3);
  EXPECT_EQ(t.domain_of, (std::vector<int>{0, 0, 1, 1, 2, 2}));
  EXPECT_EQ(t.source, "rtt");
}

TEST(Topology, FromRttOneSiteStaysOneDomain) {
  const int n = 4;
  std::vector<double> m(n * n, 0);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j)
      if (i != j) m[i * n + j] = 0.03 + 0.05 * ((i * 7 + j) % 5);  // jittery loopback, < 1 ms
  EXPECT_EQ(from_rtt(m, n).domains(), 1);
}

TEST(Topology, FromRttNoisyHostWithOneSlowPairStaysOneDomain) {
  // An oversubscribed host: most pings 0.05-0.5 ms, one pair delayed to 3 ms by scheduling.
  const int n = 4;
  std::vector<double> m(n * n, 0);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j)
      if (i != j) m[i * n + j] = 0.05 + 0.1 * ((i + j) % 4);
  m[1 * n + 2] = 3.0;
  EXPECT_EQ(from_rtt(m, n).domains(), 1);
}

TEST(Topology, FromRttUsesOnlyOneMeasuredTriangle) {
  // Only the lower rank of a pair measures; the other half of the matrix is zero.
  const int n = 4;
  std::vector<double> m(n * n, 0);
  m[0 * n + 1] = 0.1;
  m[2 * n + 3] = 0.1;
  m[0 * n + 2] = m[0 * n + 3] = m[1 * n + 2] = m[1 * n + 3] = 30;
  auto t = from_rtt(m, n);
  EXPECT_EQ(t.domain_of, (std::vector<int>{0, 0, 1, 1}));
}

TEST(Topology, RingOrderAvoidsTheSlowestPaths) {
  // Four single-rank domains on a line: 0-1-2-3 close neighbours (10 ms), far ends 100+ ms.
  const int n = 4;
  const double pos[] = {0, 10, 20, 30};
  std::vector<double> m(n * n, 0);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) m[i * n + j] = i == j ? 0 : 5 * std::abs(pos[i] - pos[j]) * std::abs(pos[i] - pos[j]) / 10;
  // Pairs: |1| -> 50, |2| -> 200, |3| -> 450 ms. The best ring 0-1-3-2 has slowest hop 200 ms;
  // the identity ring 0-1-2-3 would need the 450 ms hop 3->0.
  auto t = from_labels({"a", "b", "c", "d"});
  choose_ring_order(&t, m);
  EXPECT_EQ(t.ring_order, (std::vector<int>{0, 1, 3, 2}));
  EXPECT_EQ(from_labels({"a", "b", "c"}).ring_order, (std::vector<int>{0, 1, 2}));
}
