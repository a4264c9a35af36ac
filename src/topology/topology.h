// Topology: which domain (region, data center) each rank belongs to. Built from labels
// (GEOCCL_DOMAIN) or, without labels, from measured round-trip times. Pure data and functions;
// no I/O.
#pragma once

#include <string>
#include <vector>

namespace geoccl::topology {

struct Topology {
  std::vector<int> domain_of;              // rank -> domain index (0..k-1, in order of first rank)
  std::vector<std::vector<int>> members;   // domain -> its ranks, ascending
  std::vector<std::string> names;          // domain -> label ("" when discovered)
  std::string source = "single";           // "labels", "rtt" or "single"
  // Order of domains around the inter-domain ring (a permutation of 0..k-1).
  std::vector<int> ring_order;

  int domains() const { return static_cast<int>(members.size()); }
  int local_index(int rank) const;  // position of `rank` in its domain's member list
  // A one-line description, e.g. "3 domains (labels): a=[0,1] b=[2,3] c=[4,5]".
  std::string describe() const;
};

// Every rank in one domain.
Topology single_domain(int world);

// Ranks with equal labels share a domain. Throws Error(kInvalidArgument) if some ranks have a
// label and others do not.
Topology from_labels(const std::vector<std::string>& labels);

// Chooses the inter-domain ring order from a measured RTT matrix (n*n, ms): of all rings, the one
// whose slowest hop (mean RTT between the two domains' ranks) is fastest, then the shortest total.
// With 3 or fewer domains every ring uses the same hops; from 4 on this keeps the slowest paths
// out of the ring. Exhaustive for up to 9 domains, identity beyond.
void choose_ring_order(Topology* t, const std::vector<double>& rtt_ms);
// The same search over a cost per ordered pair of domains (k*k, row-major; a hop costs the larger
// of its two directions), as re-planning derives it from measured delays and rates.
void choose_ring_order_by_cost(Topology* t, const std::vector<double>& domain_cost);

// Ranks whose mutual RTT is far below the rest share a domain. The pairwise RTTs are sorted and
// split at their largest ratio between neighbours, if that ratio is at least `gap_factor` and the
// upper side is at least `floor_ms` (so scheduling noise on one host, a few ms at worst, never
// splits it); the domains are the connected components of the pairs below the split.
// `rtt_ms` is n*n, row-major; the diagonal is ignored; the matrix is symmetrized with max().
Topology from_rtt(const std::vector<double>& rtt_ms, int n, double floor_ms = 5.0,
                  double gap_factor = 4.0);

}  // namespace geoccl::topology
