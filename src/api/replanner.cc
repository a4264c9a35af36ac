#include "api/replanner.h"

#include <algorithm>

#include "api/startup/leader_pairs.h"
#include "api/startup/path_memory.h"

#include "collectives/collectives.h"
#include "core/logging.h"
#include "transport/router.h"

namespace geoccl::api {

namespace {

collectives::PathMonitorOptions monitor_options(int persist) {
  collectives::PathMonitorOptions o;
  o.persist = persist;
  return o;
}

}  // namespace

Replanner::Replanner(PlanOwner& plans, transport::Router& router, Submit submit, int rank, int replan_ops,
                     int replan_persist)
    : plans_(plans),
      router_(router),
      submit_(std::move(submit)),
      rank_(rank),
      every_(static_cast<uint64_t>(replan_ops)),
      monitor_(plans.current()->paths, monitor_options(replan_persist)),
      window_(collectives::best_rate_per_domain(monitor_.plan())) {
  const auto plan = plans_.current();
  const auto& topo = plan->topo;
  const int dm = topo.domain_of[static_cast<size_t>(rank_)];
  if (topo.members[static_cast<size_t>(dm)][0] == rank_) sampler_ = std::thread([this] { sample_paths(); });
}

Replanner::~Replanner() {
  {
    std::lock_guard lk(sampler_mu_);
    sampler_stop_ = true;
  }
  sampler_cv_.notify_all();
  if (sampler_.joinable()) sampler_.join();
  std::lock_guard lk(mu_);
  if (check_) {
    try {
      check_->work.wait();
    } catch (const Error&) {
    }
    check_.reset();
  }
}

void Replanner::sample_paths() {
  const auto plan = plans_.current();
  const auto& topo = plan->topo;
  const int k = topo.domains(), dm = topo.domain_of[static_cast<size_t>(rank_)];
  std::unique_lock lk(sampler_mu_);
  while (!sampler_cv_.wait_for(lk, std::chrono::milliseconds(100), [&] { return sampler_stop_; })) {
    lk.unlock();
    std::vector<double> srtt(static_cast<size_t>(k), 0.0), rate(static_cast<size_t>(k), 0.0);
    for (int d = 0; d < k; ++d) {
      if (d == dm) continue;
      const auto r = router_.path_reading(topo.members[static_cast<size_t>(d)][0]);
      srtt[static_cast<size_t>(d)] = r.srtt_ms;
      rate[static_cast<size_t>(d)] = r.delivery_mbps;
    }
    {
      std::lock_guard wl(window_mu_);
      window_.add(dm, srtt, rate);
    }
    lk.lock();
  }
}

void Replanner::after_collective() {
  std::lock_guard lk(mu_);
  if (++issued_ % every_ != 0) return;
  const auto kk = static_cast<size_t>(monitor_.plan().k) * static_cast<size_t>(monitor_.plan().k);
  if (check_) {
    std::optional<collectives::WanPaths> next;
    try {
      check_->work.wait();
      const auto& f = *check_->figures;
      next = monitor_.on_check(std::vector<double>(f.begin(), f.begin() + static_cast<std::ptrdiff_t>(kk)),
                               std::vector<double>(f.begin() + static_cast<std::ptrdiff_t>(kk), f.end()));
    } catch (const Error&) {
      // The group failed: the operations around the check report it.
    }
    check_.reset();
    if (next) apply(*next);
  }
  std::shared_ptr<std::vector<double>> figures;
  {
    std::lock_guard wl(window_mu_);
    figures = std::make_shared<std::vector<double>>(window_.take());
  }
  // The paths that dropped are probed by their leaders before the figures are agreed on (their
  // readings join this rank's): the same pairs on every rank, from the same monitor state.
  std::vector<Probe> probes;
  const auto plan = plans_.current();
  for (const auto& [a, b] : monitor_.to_probe(checks_++))
    probes.push_back({a, b, plan->topo.members[static_cast<size_t>(a)][0], plan->topo.members[static_cast<size_t>(b)][0],
                      2 * plan->paths.delay(a, b)});
  const int k = monitor_.plan().k;
  Work w = submit_(startup::figures_header(0x52504c4e /* "RPLN" */), [figures, probes, k](collectives::OpContext& c) {
    for (const Probe& p : probes) {
      if (c.rank() != p.leader_a && c.rank() != p.leader_b) continue;
      const bool is_a = c.rank() == p.leader_a;
      const auto r = collectives::probe_rates(c, is_a ? p.leader_b : p.leader_a, kProbeBytes, p.rtt_ms);
      const int from = is_a ? p.a : p.b, to = is_a ? p.b : p.a;
      double* rate = figures->data() + static_cast<size_t>(k * k);
      double& out = rate[from * k + to];
      double& in = rate[to * k + from];
      out = std::max(out, r.out_mbps);
      in = std::max(in, r.in_mbps);
      GEOCCL_LOG(kDebug, "re-planning probe " << from << "->" << to << ": " << r.out_mbps << " Mbit/s, back "
                                              << r.in_mbps << " Mbit/s");
    }
    collectives::ring_allreduce(c, figures->data(), figures->size(), DataType::kFloat64, ReduceOp::kMax);
  });
  check_ = Check{std::move(w), std::move(figures)};
}

void Replanner::apply(const collectives::WanPaths& next) {
  auto plan = std::make_shared<PlanSnapshot>(*plans_.current());
  plan->paths = next;
  startup::process_paths().record(plan->topo, next);  // the next epoch starts from these
  // The ring order: a hop costs its one-way delay and one chunk's time at its rate.
  std::vector<double> cost(next.one_way_ms.size(), 0.0);
  for (size_t x = 0; x < cost.size(); ++x)
    cost[x] = next.one_way_ms[x] +
              (next.rate_mbps[x] > 0 ? 8.0 * static_cast<double>(plan->chunk_bytes) / (next.rate_mbps[x] * 1e3) : 0);
  topology::choose_ring_order_by_cost(&plan->topo, cost);
  ++plan->replans;
  plan->replanned_after_op = issued_;
  plan->replan_change = monitor_.last_change();
  std::string order;
  for (int d : plan->topo.ring_order) {
    const auto& name = plan->topo.names[static_cast<size_t>(d)];
    order += (order.empty() ? "" : ",") + (name.empty() ? std::to_string(d) : name);
  }
  GEOCCL_LOG(kInfo, "re-planned after collective #" << issued_ << ": " << monitor_.last_change() << "; ring order "
                                                    << order);
  plans_.publish(std::move(plan));
}

}  // namespace geoccl::api
