// Re-planning while the job runs (collectives/path_monitor.h holds the decision): a domain
// leader's sampler thread reads its transport's view of the paths to the other leaders every
// 100 ms; every `replan_ops` collectives of the default class the group agrees on those readings
// in one small allreduce, and the previous check's agreed figures are judged; before it, the
// leaders of a pair of domains whose path dropped probe it (a burst each way, now and then:
// collectives/path_monitor.h, to_probe), as a path the plan works around shows no readings. A change that
// persisted becomes a new plan snapshot, published from the next collective on, on every rank
// alike (the checks are collectives: every rank issues them at the same point).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "api/plan.h"
#include "collectives/op_context.h"
#include "collectives/path_monitor.h"
#include "geoccl/work.h"
#include "protocol/frame.h"

namespace geoccl::transport {
class Router;
}

namespace geoccl::api {

class Replanner {
 public:
  // Issues one set-up collective (not counted in the metrics) of the default class.
  using Submit = std::function<Work(protocol::FrameHeader, std::function<void(collectives::OpContext&)>)>;
  // `plans` holds the start-up snapshot, whose paths are measured (not empty). This rank samples
  // its paths when it leads its domain.
  Replanner(PlanOwner& plans, transport::Router& router, Submit submit, int rank, int replan_ops,
            int replan_persist);
  // Stops the sampler and waits for the check in flight (every rank issued it: it completes
  // everywhere, or fails with the group).
  ~Replanner();

  // After each collective of the default class is issued (any issuing thread).
  void after_collective();

 private:
  void sample_paths();
  void apply(const collectives::WanPaths& next);

  PlanOwner& plans_;
  transport::Router& router_;
  Submit submit_;
  const int rank_;
  const uint64_t every_;
  std::mutex mu_;  // guards what the issuing threads touch below
  collectives::PathMonitor monitor_;
  uint64_t issued_ = 0;
  uint64_t checks_ = 0;  // checks submitted (PathMonitor::to_probe)
  // A probe of the path between domains a and b by their leaders (PathMonitor::to_probe), a burst
  // of kProbeBytes each way at once (collectives::probe_rates), in the check's collective.
  struct Probe {
    int a, b, leader_a, leader_b;
    double rtt_ms;
  };
  static constexpr size_t kProbeBytes = 256 << 10;
  struct Check {
    Work work;
    std::shared_ptr<std::vector<double>> figures;  // k*k one-way delays, then k*k rates
  };
  std::optional<Check> check_;
  // This leader's window of path readings (guarded by window_mu_) and its sampler.
  std::mutex window_mu_;
  collectives::PathWindow window_;
  std::mutex sampler_mu_;
  std::condition_variable sampler_cv_;
  bool sampler_stop_ = false;
  std::thread sampler_;
};

}  // namespace geoccl::api
