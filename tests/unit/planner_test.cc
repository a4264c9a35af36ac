#include "collectives/planner.h"

#include <gtest/gtest.h>

using namespace geoccl::collectives;

TEST(Planner, AllreduceBySizeAndDomains) {
  EXPECT_EQ(plan_allreduce(4096, 8, 1, 65536, 1 << 20, "auto").algo, Algo::kRecursiveDoubling);
  EXPECT_EQ(plan_allreduce(1 << 20, 8, 1, 65536, 1 << 20, "auto").algo, Algo::kRing);
  EXPECT_EQ(plan_allreduce(4096, 6, 3, 65536, 1 << 20, "auto").algo, Algo::kHierarchicalSmall);
  EXPECT_EQ(plan_allreduce(96 << 20, 6, 3, 65536, 1 << 20, "auto").algo, Algo::kHierarchical);
  // On a WAN, up to about a bandwidth-delay product the leaders' direct exchange wins.
  EXPECT_EQ(plan_allreduce(512 << 10, 6, 3, 65536, 1 << 20, "auto").algo, Algo::kHierarchicalSmall);
  EXPECT_EQ(plan_allreduce(512 << 10, 6, 1, 65536, 1 << 20, "auto").algo, Algo::kRing);
  // Forcing wins, in both directions.
  EXPECT_EQ(plan_allreduce(96 << 20, 6, 3, 65536, 1 << 20, "ring").algo, Algo::kRing);
  EXPECT_EQ(plan_allreduce(96 << 20, 6, 3, 65536, 1 << 20, "flat").algo, Algo::kRing);
  EXPECT_EQ(plan_allreduce(96 << 20, 4, 1, 65536, 1 << 20, "hier").algo, Algo::kHierarchical);
  EXPECT_EQ(plan_allreduce(96 << 20, 4, 1, 65536, 1 << 20, "rd").algo, Algo::kRecursiveDoubling);
  EXPECT_FALSE(plan_allreduce(1, 2, 1, 65536, 1 << 20, "auto").why.empty());
}

TEST(Planner, BroadcastAndAllgather) {
  EXPECT_EQ(plan_broadcast(100, 4, 1, 65536, "auto").algo, Algo::kTree);
  EXPECT_EQ(plan_broadcast(10 << 20, 4, 1, 65536, "auto").algo, Algo::kChain);
  EXPECT_EQ(plan_broadcast(10 << 20, 4, 2, 65536, "auto").algo, Algo::kHierarchical);
  EXPECT_EQ(plan_broadcast(10 << 20, 4, 2, 65536, "flat").algo, Algo::kChain);
  EXPECT_EQ(plan_allgather(64 << 10, 2, 64 << 10, "auto").algo, Algo::kHierarchical);
  EXPECT_EQ(plan_allgather(1 << 20, 1, 64 << 10, "auto").algo, Algo::kRing);
  EXPECT_EQ(plan_allgather(64 << 10, 1, 64 << 10, "auto").algo, Algo::kBruck);
  EXPECT_EQ(plan_allgather(4096, 3, 64 << 10, "ring").algo, Algo::kRing);
  EXPECT_EQ(plan_allgather(1 << 20, 1, 64 << 10, "rd").algo, Algo::kBruck);
  EXPECT_EQ(plan_allgather(4096, 3, 64 << 10, "rd").algo, Algo::kHierarchical);
  EXPECT_EQ(plan_allgather(4096, 3, 64 << 10, "flat").algo, Algo::kBruck);
}
