// geoccl: one binary, several subcommands (run, bench, store, and the WAN test bed's wanem).
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <map>
#include <cstdio>
#include <iostream>
#include <thread>

#include "bench_cmd.h"
#include "blob_cmd.h"
#include "geoccl/geoccl.h"
#include "launcher.h"
#include "probe_cmd.h"
#include "top_cmd.h"
#include "trace_cmd.h"
#include "testbed/scenario.h"
#include "security/secret.h"
#include "testbed/wan_session.h"
#include "testbed/wanem_cli.h"

namespace {

std::atomic<bool> g_stop{false};

// With GEOCCL_SECRET or GEOCCL_SECRET_FILE, the jobs' own secret: the store then answers only
// requests authenticated with it (docs/security.md), as the store a job's rank 0 hosts does.
int store_main(uint16_t port, const std::string& bind) {
  const auto secret = geoccl::security::load_secret(geoccl::Config::from_env());
  geoccl::StoreServer server(bind, port, {}, secret);
  std::printf("geoccl store listening on %s:%u (%s)\n", bind.c_str(), server.port(),
              secret ? "requests authenticated with the group secret" : "no secret: any client is served");
  std::fflush(stdout);
  struct sigaction sa{};
  sa.sa_handler = [](int) { g_stop.store(true); };
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  while (!g_stop.load()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  return 0;
}

}  // namespace

// `geoccl run --wan`: ranks start inside their region's namespace, behind the link emulator.
int run_on_wan(geoccl::tools::LaunchSpec spec, const std::string& scenario_path,
               const std::string& domains, const std::string& host_cc) {
  const auto scenario = geoccl::testbed::load_scenario(scenario_path);
  geoccl::testbed::WanSession wan(scenario, spec.nranks, domains, host_cc);
  spec.nranks = wan.n_ranks();
  spec.master_addr = wan.master_addr();
  const bool metrics = spec.metrics_base_port > 0;
  spec.rank_env = [&wan, &scenario, metrics](int r) {
    // GLOO_SOCKET_IFNAME: torch's gloo backend binds to the hostname's address unless told; in a
    // region's namespace the reachable interface is the emulator's TUN device.
    std::map<std::string, std::string> env{{"GEOCCL_DOMAIN", wan.domain_of_rank(r)},
                                           {"GEOCCL_BIND_ADDR", wan.addr_of_rank(r)},
                                           {"GLOO_SOCKET_IFNAME", "wan0"},
                                           // the benchmarks report the emulator's CPU per byte
                                           {"GEOCCL_WAN_EMULATOR_PID", std::to_string(wan.emulator_pid())}};
    // The metrics' link capacity is known here: the domain's uplink, else the default link rate.
    if (metrics) {
      const auto* d = scenario.find_domain(wan.domain_of_rank(r));
      const uint64_t bps = d && d->uplink_bps ? d->uplink_bps : scenario.default_link.rate_bps;
      if (bps) env["GEOCCL_METRICS_LINK_BPS"] = std::to_string(bps);
    }
    return env;
  };
  spec.in_child = [&wan](int r) { wan.enter_rank_namespace(r); };
  std::fprintf(stderr, "geoccl run: %d ranks on %s (host congestion control %s):", spec.nranks,
               scenario_path.c_str(), wan.host_cc().c_str());
  for (const auto& d : wan.domains())
    std::fprintf(stderr, " %s=%d@%s", d.name.c_str(), d.ranks, d.addr.c_str());
  std::fprintf(stderr, "\n");
  // `geoccl wanem ctl SOCKET ...` changes the links (or arms the adversary) while the job runs.
  std::fprintf(stderr, "geoccl run: emulator control %s\n", wan.control_socket().c_str());
  if (metrics)
    for (int r = 0; r < spec.nranks; ++r)
      std::fprintf(stderr, "geoccl run: rank %d metrics http://%s:%d/metrics netns %s\n", r,
                   wan.addr_of_rank(r).c_str(), spec.metrics_base_port + r, wan.netns_of_rank(r).c_str());
  const int rc = geoccl::tools::launch(spec);
  std::fprintf(stderr, "geoccl run: link counters\n%s", wan.stats().c_str());
  return rc;
}

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "wanem") return geoccl::testbed::wanem_main(argc - 1, argv + 1);
  CLI::App app{"geoccl: collective communication across regions"};
  app.require_subcommand(1);

  geoccl::tools::LaunchSpec launch;
  auto* run = app.add_subcommand("run", "launch N local ranks with RANK/WORLD_SIZE/MASTER_* set");
  launch.nranks = 0;
  run->add_option("-n,--nranks", launch.nranks, "number of ranks (with --wan: default from the scenario)")
      ->check(CLI::Range(1, 4096));
  run->add_option("--timeout", launch.timeout_s, "kill all ranks after this many seconds (exit 124)");
  run->add_option("--master-port", launch.master_port, "rendezvous port (default: a free one)");
  bool run_metrics = false;
  int metrics_base = 9400;
  run->add_flag("--metrics", run_metrics, "every rank serves /metrics (Prometheus) on BASE + rank");
  run->add_option("--metrics-base-port", metrics_base, "first rank's metrics port (default 9400)")
      ->check(CLI::Range(1, 65535));
  std::string wan_scenario, wan_domains, host_cc;
  run->add_option("--wan", wan_scenario, "run the ranks on the emulated WAN of this scenario file");
  run->add_option("--domains", wan_domains, "rank placement, e.g. a:2,b:2,c:2 (with --wan)");
  run->add_option("--host-cc", host_cc, "default TCP congestion control of emulated hosts (cubic|bbr|reno)");
  bool run_insecure = false;
  run->add_flag("--insecure", run_insecure,
                "no group secret: traffic between ranks is neither authenticated nor encrypted");
  run->add_option("command", launch.command, "command and arguments")->required();
  run->prefix_command();  // everything after the options (or after --) is the rank's command

  geoccl::tools::BenchSpec bench;
  std::string sizes = "4K,1M,16M,96M";
  auto* b = app.add_subcommand("bench", "time a collective over sizes (run it under `geoccl run`)");
  b->add_option("--op", bench.op, "allreduce|broadcast|allgather|reduce_scatter|reduce|gather|scatter|alltoall|barrier");
  b->add_option("--sizes", sizes, "comma-separated sizes with K/M/G suffixes");
  b->add_option("--dtype", bench.dtype, "f32|f64|f16|bf16|i8|u8|i32|i64");
  b->add_option("--iters", bench.iters)->check(CLI::Range(1, 1000000));
  b->add_option("--warmup", bench.warmup)->check(CLI::Range(0, 1000000));
  b->add_option("--algo", bench.algo, "auto|ring|rd|tree");
  b->add_option("--json", bench.json_path, "write results as JSON (rank 0)");
  b->add_flag("--verbose,-v", bench.verbose, "per-connection statistics");
  b->add_flag("--resources", bench.resources,
              "every rank's set-up time, memory, sockets, shared-memory segments and CPU time (max, mean)");
  std::string background;
  b->add_option("--background", background,
                "a bulk-class f32 allreduce of this size (e.g. 256M) runs back to back beside the timed ops");
  b->add_option("--compression", bench.compression,
                "allreduce f32: WAN codec none|fp16|bf16|int8|int4|topk:RATIO[@allgather|@ring]");
  b->add_flag("!--no-error-feedback", bench.error_feedback, "compressed runs: no residual kept");

  std::string probe_bytes = "8M";
  auto* pr = app.add_subcommand("probe", "measure RTTs and rates between ranks, print the domains found");
  pr->add_option("--rate-bytes", probe_bytes, "bytes per pair for the rate estimate (0 = skip)");

  uint16_t store_port = 29500;
  std::string store_bind = "0.0.0.0";
  auto* st = app.add_subcommand("store", "run a standalone rendezvous store");
  st->add_option("--port,-p", store_port);
  st->add_option("--bind", store_bind);

  std::string trace_dir, trace_out = "job.json";
  auto* tr = app.add_subcommand("trace", "work with GEOCCL_TRACE files");
  tr->require_subcommand(1);
  auto* tr_merge = tr->add_subcommand("merge", "merge the ranks' trace files into one timeline (Perfetto)");
  tr_merge->add_option("dir", trace_dir, "the GEOCCL_TRACE directory")->required();
  tr_merge->add_option("-o,--output", trace_out, "merged trace file (default job.json)");

  geoccl::tools::TopSpec top;
  auto* tp = app.add_subcommand("top", "live table of the ranks' /metrics endpoints");
  tp->add_option("endpoints", top.endpoints, "host:port of each rank's /metrics")->required();
  tp->add_option("--interval,-i", top.interval_s, "seconds between refreshes (default 1)");
  tp->add_option("--iterations,-n", top.iterations, "refreshes, then exit (default: until Ctrl-C)");
  tp->add_flag("--plain", top.plain, "no screen clearing (for logs and pipes)");

  geoccl::tools::BlobSpec blob_spec;
  auto* bl = geoccl::tools::add_blob_command(app, blob_spec);

  CLI11_PARSE(app, argc, argv);
  try {
    if (*run) {
      if (!launch.command.empty() && launch.command.front() == "--") launch.command.erase(launch.command.begin());
      if (run_metrics) launch.metrics_base_port = metrics_base;
      launch.secret = !run_insecure;
      if (!wan_scenario.empty()) return run_on_wan(launch, wan_scenario, wan_domains, host_cc);
      if (!wan_domains.empty() || !host_cc.empty())
        throw std::invalid_argument("--domains and --host-cc need --wan SCENARIO");
      if (launch.nranks < 1) throw std::invalid_argument("geoccl run: -n N is required (without --wan)");
      return geoccl::tools::launch(launch);
    }
    if (*b) {
      bench.sizes = geoccl::tools::parse_sizes(sizes);
      if (!background.empty()) bench.background_bytes = geoccl::tools::parse_sizes(background).at(0);
      return geoccl::tools::run_bench(bench);
    }
    if (*bl) return geoccl::tools::run_blob(blob_spec);
    if (*tr_merge) return geoccl::tools::run_trace_merge(trace_dir, trace_out);
    if (*tp) return geoccl::tools::run_top(top);
    if (*st) return store_main(store_port, store_bind);
    if (*pr) return geoccl::tools::run_probe(geoccl::tools::parse_sizes(probe_bytes).front());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "geoccl: %s\n", e.what());
    return 1;
  }
  return 0;
}
