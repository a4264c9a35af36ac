// Cost model of the allreduce algorithms across domains: a latency-bandwidth (alpha-beta)
// estimate of each algorithm's time from the measured one-way delay and delivery rate of every
// pair of domains, as NCCL's tuner does per algorithm and protocol. Pure functions: every rank
// feeds them the same agreed figures (measured once at start-up, then shared by one collective)
// and so picks the same algorithm.
//
// The WAN terms. A set of transfers that start together, bytes[i][j] from domain i to domain j,
// takes  max over pairs with bytes of delay(i, j)  +  max over i of the time domain i needs to
// push its bytes out: a single flow to j reaches at most rate(i, j) (measured), and all of i's
// flows share its egress, whose capacity is taken as the best rate any one flow of i reached
// (the uplink when one flow fills it). Inside a domain: a LAN step costs kLanAlphaMs and
// kLanGbitPerS (on the test bed the ranks of a domain share a namespace and shared memory; the
// reduction's CPU time is what these stand for).
#pragma once

#include <cstddef>
#include <vector>

#include "collectives/planner.h"
#include "topology/topology.h"

namespace geoccl::collectives {

struct WanPaths {
  int k = 0;                         // domains
  std::vector<double> one_way_ms;    // k*k, row-major: one-way delay between two domains' leaders
  std::vector<double> rate_mbps;     // k*k: delivery rate of one flow from i to j (Mbit/s)
  bool empty() const { return k == 0; }
  double delay(int a, int b) const { return one_way_ms[static_cast<size_t>(a * k + b)]; }
  double rate(int a, int b) const { return rate_mbps[static_cast<size_t>(a * k + b)]; }
  double largest_delay() const;
};

constexpr double kLanAlphaMs = 0.05;
constexpr double kLanGbitPerS = 16.0;

struct Estimate {
  Algo algo;
  double ms;
};

// Predicted time of every algorithm the model covers for an allreduce of `bytes` (elements of
// `elem_size` bytes) over `topo` (k >= 2 domains, k == paths.k): the leaders' direct exchange of
// the whole buffer (hier-small), the leaders' direct reduce-scatter/allgather (hier-leaders), the
// owners' one (hier-direct), the hierarchical ring and the flat ring. `chunk_bytes` decides the
// hierarchical algorithms' blocks, as they do.
std::vector<Estimate> estimate_allreduce(const topology::Topology& topo, const WanPaths& paths, size_t bytes,
                                         size_t elem_size, size_t chunk_bytes);

// The forms plan_by_cost chooses among (never hier-direct, see cost_model.cc):
//   kAny           every other one;
//   kHierarchical  not the flat ring (GEOCCL_ALGO=hier);
//   kCompressed    a call with a WAN codec: hier-small's direct exchange (latency-bound sizes) or
//                  the hierarchical ring. The ring form gives every rank of a domain its share of
//                  the encoding and decoding and its own connections across; the leaders' form
//                  puts all of a domain's codec work and traffic on one rank, which the model's
//                  per-flow terms do not see (96 MiB, 3 x 2 ranks: lossy.toml int8 4.3 s against
//                  6.4 s, int2 1.2 s against 2.5 s; seed.toml int8 0.64 s against 0.79 s).
enum class Forms { kAny, kHierarchical, kCompressed };

// The fastest of the `forms` (ties: the earlier in estimate_allreduce's order), with a reason
// that lists every estimate.
Plan plan_by_cost(const topology::Topology& topo, const WanPaths& paths, size_t bytes, size_t elem_size,
                  size_t chunk_bytes, Forms forms = Forms::kAny);

// The estimate for one algorithm (negative if the model does not cover it).
double predicted_ms(const topology::Topology& topo, const WanPaths& paths, Algo algo, size_t bytes,
                    size_t elem_size, size_t chunk_bytes);

// Blocks the hierarchical allreduce cuts a buffer into (hierarchical_allreduce.cc uses it too).
int hierarchical_blocks(size_t bytes, size_t chunk_bytes);

}  // namespace geoccl::collectives
