// The plan: what every operation is planned with, as one immutable snapshot with one owner.
//
// Start-up (api/startup/) builds the first snapshot; re-planning (api/replanner.h) publishes a
// new one. An operation takes the snapshot current when it is issued and keeps it until it
// completes, so a re-plan never changes the inputs of an operation in flight, and every rank
// switches at the same operation (re-planning applies at a point every rank shares).
// TopologyInfo, the public view, is derived from a snapshot and handed out by value.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "collectives/cost_model.h"
#include "collectives/planner.h"
#include "geoccl/communicator.h"
#include "geoccl/compression.h"
#include "topology/topology.h"

namespace geoccl::api {

struct PlanSnapshot {
  topology::Topology topo;         // domains and the ring order across them
  collectives::WanPaths paths;     // measured figures of every pair of domains (empty: one domain)
  bool paths_carried = false;      // from the previous epoch (startup::carry_paths), not probed
  std::vector<double> rtt_ms;      // rank x rank RTTs when they were measured, else empty
  std::vector<std::string> two_hop;  // the detours taken, one line each
  // Algorithm thresholds (used where the paths were not measured) and the pipelining unit.
  size_t chunk_bytes = 1 << 20;
  size_t small_msg_bytes = 64 << 10;
  size_t wan_small_msg_bytes = 1 << 20;
  Compression wan_codec;  // the codec of the WAN hops of calls that do not name one
  // Re-planning: how many snapshots replaced the start-up one, after which collective, and why.
  int replans = 0;
  uint64_t replanned_after_op = 0;
  std::string replan_change;

  // The planner's choice for an allreduce of `bytes` of `elem_size`-byte elements, with the
  // algorithm `algo` asks for ("" or "auto": the planner's). `compressed`: a WAN codec applies;
  // only the hierarchical plans have WAN hops of their own to compress, and an automatic choice
  // is made among those that compress on every rank (collectives::Forms::kCompressed).
  collectives::Plan allreduce(size_t bytes, size_t elem_size, const std::string& algo, bool compressed) const;
  // The public view of this snapshot.
  TopologyInfo info() const;
};

// The one owner of the current snapshot. Thread-safe.
class PlanOwner {
 public:
  std::shared_ptr<const PlanSnapshot> current() const {
    std::lock_guard lk(mu_);
    return current_;
  }
  void publish(std::shared_ptr<const PlanSnapshot> next) {
    std::lock_guard lk(mu_);
    current_ = std::move(next);
  }

 private:
  mutable std::mutex mu_;
  std::shared_ptr<const PlanSnapshot> current_;
};

}  // namespace geoccl::api
