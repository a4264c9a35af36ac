// Planner: picks an algorithm per call from the buffer size and the group, unless forced by
// GEOCCL_ALGO or the call's options. The reason is returned for the debug log.
#pragma once

#include <cstddef>
#include <string>

#include "topology/topology.h"

namespace geoccl::collectives {

enum class Algo { kRing, kRecursiveDoubling, kTree, kChain, kHierarchical, kHierarchicalSmall, kHierarchicalDirect,
                  kHierarchicalLeaders, kBruck };

struct Plan {
  Algo algo;
  std::string why;
  double predicted_ms = -1;  // the cost model's estimate (negative: none)
};

struct WanPaths;  // cost_model.h

const char* algo_name(Algo a);

// `forced`: "" or "auto" to choose; "ring", "rd", "tree", "hier" (hier-ring / hier-small /
// hier-direct / hier-leaders pick the variant) to force (an algorithm that does not apply to the operation
// falls back to the automatic choice). `domains`: number of domains (regions) the group spans.
// Across domains, with `paths` (the measured, agreed figures of every pair of domains) the cost
// model (cost_model.h) chooses among the algorithms; without, the size thresholds do
// (hierarchical small up to wan_small_msg_bytes, hierarchical ring above).
Plan plan_allreduce(size_t bytes, int world, int domains, size_t small_msg_bytes,
                    size_t wan_small_msg_bytes, const std::string& forced);
// `compressed`: a WAN codec applies; an automatic choice ("", "auto" or "hier") is then made
// among the forms that compress on every rank (cost_model.h, Forms::kCompressed).
Plan plan_allreduce(size_t bytes, size_t elem_size, const topology::Topology& topo, const WanPaths* paths,
                    size_t chunk_bytes, size_t small_msg_bytes, size_t wan_small_msg_bytes,
                    const std::string& forced, bool compressed = false);
Plan plan_broadcast(size_t bytes, int world, int domains, size_t small_msg_bytes,
                    const std::string& forced);
// Allgather of `bytes` in all (every rank's block): hierarchical across domains; inside one,
// Bruck's ceil(log2 n) steps up to `small_msg_bytes` (forced on one site: "rd"), the ring above
// ("ring").
Plan plan_allgather(size_t bytes, int domains, size_t small_msg_bytes, const std::string& forced);

}  // namespace geoccl::collectives
