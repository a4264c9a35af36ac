// geoccl: one binary, several subcommands (run, bench, store, and the WAN test bed's wanem).
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cstdio>
#include <iostream>
#include <thread>

#include "bench_cmd.h"
#include "geoccl/geoccl.h"
#include "launcher.h"

namespace {

std::atomic<bool> g_stop{false};

int store_main(uint16_t port, const std::string& bind) {
  geoccl::StoreServer server(bind, port);
  std::printf("geoccl store listening on %s:%u\n", bind.c_str(), server.port());
  std::fflush(stdout);
  struct sigaction sa{};
  sa.sa_handler = [](int) { g_stop.store(true); };
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  while (!g_stop.load()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"geoccl: collective communication across regions"};
  app.require_subcommand(1);

  geoccl::tools::LaunchSpec launch;
  auto* run = app.add_subcommand("run", "launch N local ranks with RANK/WORLD_SIZE/MASTER_* set");
  run->add_option("-n,--nranks", launch.nranks, "number of ranks")->required()->check(CLI::Range(1, 4096));
  run->add_option("--timeout", launch.timeout_s, "kill all ranks after this many seconds (exit 124)");
  run->add_option("--master-port", launch.master_port, "rendezvous port (default: a free one)");
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

  uint16_t store_port = 29500;
  std::string store_bind = "0.0.0.0";
  auto* st = app.add_subcommand("store", "run a standalone rendezvous store");
  st->add_option("--port,-p", store_port);
  st->add_option("--bind", store_bind);

  CLI11_PARSE(app, argc, argv);
  try {
    if (*run) {
      if (!launch.command.empty() && launch.command.front() == "--") launch.command.erase(launch.command.begin());
      return geoccl::tools::launch(launch);
    }
    if (*b) {
      bench.sizes = geoccl::tools::parse_sizes(sizes);
      return geoccl::tools::run_bench(bench);
    }
    if (*st) return store_main(store_port, store_bind);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "geoccl: %s\n", e.what());
    return 1;
  }
  return 0;
}
