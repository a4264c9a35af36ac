// Planner: picks an algorithm per call from the buffer size and the group, unless forced by
// GEOCCL_ALGO or the call's options. The reason is returned for the debug log.
#pragma once

#include <cstddef>
#include <string>

namespace geoccl::collectives {

enum class Algo { kRing, kRecursiveDoubling, kTree, kChain, kHierarchical, kHierarchicalSmall };

struct Plan {
  Algo algo;
  std::string why;
};

const char* algo_name(Algo a);

// `forced`: "" or "auto" to choose; "ring", "rd", "tree", "hier" (hier-ring / hier-small pick the
// variant) to force (an algorithm that
// does not apply to the operation falls back to the automatic choice). `domains`: number of
// domains (regions) the group spans.
Plan plan_allreduce(size_t bytes, int world, int domains, size_t small_msg_bytes,
                    size_t wan_small_msg_bytes, const std::string& forced);
Plan plan_broadcast(size_t bytes, int world, int domains, size_t small_msg_bytes,
                    const std::string& forced);
// Allgather: ring inside one domain, hierarchical across several.
Plan plan_allgather(int domains, const std::string& forced);

}  // namespace geoccl::collectives
