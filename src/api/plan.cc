#include "api/plan.h"

namespace geoccl::api {

collectives::Plan PlanSnapshot::allreduce(size_t bytes, size_t elem_size, const std::string& algo,
                                          bool compressed) const {
  return collectives::plan_allreduce(bytes, elem_size, topo, paths.empty() ? nullptr : &paths, chunk_bytes,
                                     small_msg_bytes, wan_small_msg_bytes, algo, compressed);
}

TopologyInfo PlanSnapshot::info() const {
  TopologyInfo t;
  t.domain_of = topo.domain_of;
  t.names = topo.names;
  t.source = topo.source;
  t.rtt_ms = rtt_ms;
  t.describe = topo.describe();
  t.wan_one_way_ms = paths.one_way_ms;
  t.wan_rate_mbps = paths.rate_mbps;
  t.paths_source = paths.empty() ? "" : paths_carried ? "carried" : "measured";
  t.replans = replans;
  t.replanned_after_op = replanned_after_op;
  t.replan_change = replan_change;
  t.ring_order = topo.ring_order;
  t.two_hop = two_hop;
  return t;
}

}  // namespace geoccl::api
