#include "topology/topology.h"
#include "topology/hosts.h"

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

TEST(Hosts, RanksWithOneIdentityShareAHostAndUnknownOnesAreAlone) {
  const auto host_of = group_hosts({"a", "b", "a", "", "b", ""});
  EXPECT_EQ(host_of, (std::vector<int>{0, 1, 0, 2, 1, 3}));
  EXPECT_EQ(host_leaders(host_of), (std::vector<int>{0, 1, 3, 5}));
}

TEST(Hosts, LeadersRttsStandForEveryPairOfTheirHostsAndFindTheDomains) {
  // Ranks 0-2 on host x, 3-5 on host y, 6-7 on host z; x-y 30 ms, x-z 80 ms, y-z 60 ms, measured
  // between the leaders 0, 3 and 6 only (upper triangle, as measure_rtt_matrix's lower rank does).
  const std::vector<int> host_of = {0, 0, 0, 1, 1, 1, 2, 2};
  const size_t n = host_of.size();
  std::vector<double> measured(n * n, 0.0);
  measured[0 * n + 3] = 30;
  measured[0 * n + 6] = 80;
  measured[3 * n + 6] = 60;
  const auto rtt = rank_rtts_from_leaders(measured, host_of);
  EXPECT_EQ(rtt[1 * n + 2], 0.0);
  EXPECT_EQ(rtt[2 * n + 4], 30.0);
  EXPECT_EQ(rtt[5 * n + 1], 30.0);
  EXPECT_EQ(rtt[7 * n + 0], 80.0);
  EXPECT_EQ(rtt[4 * n + 7], 60.0);
  const Topology t = from_rtt(rtt, static_cast<int>(n));
  EXPECT_EQ(t.domain_of, (std::vector<int>{0, 0, 0, 1, 1, 1, 2, 2}));
  // One host: nothing measured, one domain.
  const auto one = rank_rtts_from_leaders(std::vector<double>(16, 0.0), {0, 0, 0, 0});
  EXPECT_EQ(from_rtt(one, 4).domains(), 1);
}
