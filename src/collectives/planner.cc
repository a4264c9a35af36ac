#include "collectives/planner.h"

#include <algorithm>

#include "collectives/cost_model.h"

namespace geoccl::collectives {

const char* algo_name(Algo a) {
  switch (a) {
    case Algo::kRing: return "ring";
    case Algo::kRecursiveDoubling: return "rd";
    case Algo::kTree: return "tree";
    case Algo::kChain: return "chain";
    case Algo::kHierarchical: return "hier";
    case Algo::kHierarchicalSmall: return "hier-small";
    case Algo::kHierarchicalDirect: return "hier-direct";
    case Algo::kHierarchicalLeaders: return "hier-leaders";
    case Algo::kBruck: return "bruck";
  }
  return "?";
}

Plan plan_allreduce(size_t bytes, int world, int domains, size_t small_msg_bytes,
                    size_t wan_small_msg_bytes, const std::string& forced) {
  if (forced == "ring") return {Algo::kRing, "forced"};
  if (forced == "rd" || forced == "tree") return {Algo::kRecursiveDoubling, "forced"};
  if (forced == "hier-ring") return {Algo::kHierarchical, "forced"};
  if (forced == "hier-small") return {Algo::kHierarchicalSmall, "forced"};
  if (forced == "hier-direct") return {Algo::kHierarchicalDirect, "forced"};
  if (forced == "hier-leaders") return {Algo::kHierarchicalLeaders, "forced"};
  if (forced == "hier" || (forced != "flat" && domains > 1)) {
    const bool small = bytes <= std::max(small_msg_bytes, wan_small_msg_bytes);
    // Across domains the WAN is the bottleneck: cross it once per piece (large) or with one
    // direct exchange between domain leaders (small).
    const std::string why = std::to_string(domains) + " domains, " + std::to_string(bytes) + " B";
    return small ? Plan{Algo::kHierarchicalSmall, why + ": leaders exchange directly"}
                 : Plan{Algo::kHierarchical, why + ": WAN carries 2(k-1)/k of the buffer per domain"};
  }
  // The ring moves 2(n-1)/n of the buffer per rank (bandwidth-optimal) but takes 2(n-1) latency
  // steps; recursive doubling takes log2(n) steps but moves the whole buffer each time.
  if (bytes <= small_msg_bytes || bytes < static_cast<size_t>(world) * 64)
    return {Algo::kRecursiveDoubling,
            std::to_string(bytes) + " B <= small-message threshold: latency-bound"};
  return {Algo::kRing, std::to_string(bytes) + " B > small-message threshold: bandwidth-bound"};
}

Plan plan_allreduce(size_t bytes, size_t elem_size, const topology::Topology& topo, const WanPaths* paths,
                    size_t chunk_bytes, size_t small_msg_bytes, size_t wan_small_msg_bytes,
                    const std::string& forced, bool compressed) {
  const int domains = topo.domains(), world = static_cast<int>(topo.domain_of.size());
  Plan p = plan_allreduce(bytes, world, domains, small_msg_bytes, wan_small_msg_bytes, forced);
  if (domains < 2 || !paths || paths->empty()) return p;
  if (forced.empty() || forced == "auto" || forced == "hier")
    return plan_by_cost(topo, *paths, bytes, elem_size, chunk_bytes,
                        compressed           ? Forms::kCompressed
                        : forced == "hier"   ? Forms::kHierarchical
                                             : Forms::kAny);
  p.predicted_ms = predicted_ms(topo, *paths, p.algo, bytes, elem_size, chunk_bytes);
  return p;
}

Plan plan_allgather(size_t bytes, int domains, size_t small_msg_bytes, const std::string& forced) {
  if (forced == "hier" || (forced != "flat" && forced != "ring" && domains > 1))
    return {Algo::kHierarchical, "domain leaders exchange blocks once per WAN path"};
  if (forced == "ring") return {Algo::kRing, "forced"};
  if (forced == "rd") return {Algo::kBruck, "forced"};
  if (bytes <= small_msg_bytes) return {Algo::kBruck, "small: ceil(log2 n) steps"};
  return {Algo::kRing, "large: ring"};
}

Plan plan_broadcast(size_t bytes, int world, int domains, size_t small_msg_bytes,
                    const std::string& forced) {
  (void)world;
  const bool flat = forced == "flat" || forced == "ring" || forced == "tree" || forced == "rd";
  if (forced == "hier" || (!flat && domains > 1))
    return {Algo::kHierarchical, "root sends once to each domain, then inside each domain"};
  if (forced == "tree" || forced == "rd") return {Algo::kTree, "forced"};
  if (forced == "ring") return {Algo::kChain, "forced"};
  if (bytes <= small_msg_bytes) return {Algo::kTree, "small: log2(n) hops"};
  return {Algo::kChain, "large: pipelined chain"};
}

}  // namespace geoccl::collectives
