// The start-up pipeline after connect (startup.h): the steps in order, each timed.
#include "api/startup/path_memory.h"
#include "api/startup/startup.h"
#include "core/logging.h"
#include "transport/router.h"

namespace geoccl::api::startup {

namespace {

using Clock = std::chrono::steady_clock;

// Runs one step and logs how long it took.
template <class F>
auto timed(const char* step, F&& f) {
  const auto t0 = Clock::now();
  struct Log {
    const char* step;
    Clock::time_point t0;
    ~Log() {
      const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      GEOCCL_LOG(kInfo, "start-up step " << step << ": " << ms << " ms");
    }
  } log{step, t0};
  return f();
}

}  // namespace

std::shared_ptr<const PlanSnapshot> plan(const Context& c) {
  const Config& cfg = c.cfg;
  auto snap = std::make_shared<PlanSnapshot>();
  snap->chunk_bytes = cfg.chunk_bytes;
  snap->small_msg_bytes = cfg.small_msg_bytes;
  snap->wan_small_msg_bytes = cfg.wan_small_msg_bytes;
  snap->wan_codec = Compression::parse(cfg.wan_compression);
  if (cfg.world_size == 1) {
    snap->topo = topology::single_domain(1);
    c.router.set_domains(snap->topo.domain_of, snap->topo.names);
    return snap;
  }
  Domains d = timed("discover_domains", [&] { return discover_domains(c); });
  snap->topo = std::move(d.topo);
  snap->rtt_ms = std::move(d.rtt_ms);
  const auto& topo = snap->topo;
  if (cfg.rank == 0) GEOCCL_LOG(kInfo, "topology: " << topo.describe());
  if (topo.domains() > 1) {
    if (c.router.deciding()) timed("choose_transports", [&] { return choose_transports(c, topo); });
    if (cfg.plan_probe_bytes > 0) {
      std::optional<collectives::WanPaths> carried;
      if (cfg.epoch > 0) carried = timed("carry_paths", [&] { return carry_paths(c, topo); });
      snap->paths_carried = carried.has_value();
      if (carried) {
        snap->paths = std::move(*carried);
      } else {
        snap->paths = timed("measure_paths", [&] { return measure_paths(c, topo); });
        process_paths().record(topo, snap->paths);  // carried figures keep their own age
      }
      if (cfg.two_hop_gain > 0) {
        Detours taken = timed("take_detours", [&] { return take_detours(c, topo, snap->paths); });
        snap->paths = std::move(taken.paths);
        snap->two_hop = std::move(taken.lines);
      }
    }
  }
  return snap;
}

}  // namespace geoccl::api::startup
