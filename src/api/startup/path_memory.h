// Path memory: the figures of the paths between named domains that this process measured last
// (start-up's measure_paths, or a re-plan), so that the next epoch of an elastic group plans with
// them instead of probing every pair of domains again (about a second per transition on the test
// bed). The network between two regions is the same whoever the members are; what changes while
// the job runs, re-planning measures anew.
//
// PathMemory is I/O-free (time is an input; tests/unit/path_memory_test.cc); process_paths() is
// the one of this process. Only figures between labelled domains are kept: domains found from
// RTTs have no name that stays the same across epochs.
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "collectives/cost_model.h"
#include "topology/topology.h"

namespace geoccl::api::startup {

class PathMemory {
 public:
  using Clock = std::chrono::steady_clock;
  // Figures older than this are not recalled.
  static constexpr std::chrono::minutes kMaxAge{30};

  // Keeps the figures of every pair of named domains of `topo` (paths.k == topo.domains()).
  void record(const topology::Topology& topo, const collectives::WanPaths& paths, Clock::time_point now);
  // The figures of every pair of domains of `topo`, in its domain order; nullopt when a domain
  // has no name, or a pair was not recorded within kMaxAge of `now`.
  std::optional<collectives::WanPaths> recall(const topology::Topology& topo, Clock::time_point now) const;

 private:
  struct Figures {
    double one_way_ms = 0, rate_mbps = 0;
    Clock::time_point when;
  };
  std::map<std::pair<std::string, std::string>, Figures> by_pair_;  // (from, to)
};

// This process's memory, shared by its communicators. Thread-safe.
class ProcessPaths {
 public:
  void record(const topology::Topology& topo, const collectives::WanPaths& paths);
  std::optional<collectives::WanPaths> recall(const topology::Topology& topo) const;

 private:
  mutable std::mutex mu_;
  PathMemory memory_;
};
ProcessPaths& process_paths();

}  // namespace geoccl::api::startup
