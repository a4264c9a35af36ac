// The plan snapshot (api/plan.h): its public view, and that publishing a new snapshot leaves the
// one an operation holds as it was.
#include "api/plan.h"

#include <gtest/gtest.h>

namespace geoccl::api {
namespace {

std::shared_ptr<PlanSnapshot> three_domains() {
  auto p = std::make_shared<PlanSnapshot>();
  p->topo = topology::from_labels({"a", "a", "b", "c"});
  p->paths.k = 3;
  p->paths.one_way_ms = {0, 10, 20, 10, 0, 30, 20, 30, 0};
  p->paths.rate_mbps = {0, 1000, 500, 1000, 0, 250, 500, 250, 0};
  p->two_hop = {"a-c via b"};
  return p;
}

TEST(PlanSnapshot, InfoIsDerivedFromTheSnapshot) {
  const auto p = three_domains();
  const TopologyInfo t = p->info();
  EXPECT_EQ(t.domain_of, (std::vector<int>{0, 0, 1, 2}));
  EXPECT_EQ(t.names, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(t.source, "labels");
  EXPECT_EQ(t.ring_order, p->topo.ring_order);
  EXPECT_EQ(t.wan_one_way_ms, p->paths.one_way_ms);
  EXPECT_EQ(t.wan_rate_mbps, p->paths.rate_mbps);
  EXPECT_EQ(t.two_hop, p->two_hop);
  EXPECT_EQ(t.replans, 0);
}

TEST(PlanSnapshot, MeasuredPathsChooseByCostAndThresholdsOtherwise) {
  auto p = three_domains();
  const auto measured = p->allreduce(4096, 4, "", false);
  EXPECT_GE(measured.predicted_ms, 0);  // the cost model chose
  p->paths = {};
  const auto thresholds = p->allreduce(4096, 4, "", false);
  EXPECT_LT(thresholds.predicted_ms, 0);  // no model without paths
  // A codec on the WAN hops keeps the automatic choice among the hierarchical plans.
  p = three_domains();
  EXPECT_NE(p->allreduce(256 << 20, 4, "", true).algo, collectives::Algo::kRing);
}

TEST(PlanOwner, AnOperationKeepsTheSnapshotItTookAcrossAReplan) {
  PlanOwner owner;
  owner.publish(three_domains());
  const auto held = owner.current();  // an operation issued now
  auto next = std::make_shared<PlanSnapshot>(*held);
  next->paths.rate_mbps[1] = 50;
  next->replans = 1;
  owner.publish(next);
  EXPECT_EQ(held->paths.rate_mbps[1], 1000);
  EXPECT_EQ(held->info().replans, 0);
  EXPECT_EQ(owner.current()->paths.rate_mbps[1], 50);
  EXPECT_EQ(owner.current()->info().replans, 1);
}

}  // namespace
}  // namespace geoccl::api
