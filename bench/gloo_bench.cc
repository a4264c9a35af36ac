// gloo_bench: the Gloo baseline that geoccl's own `geoccl bench` is measured against.
//
// One process per rank, launched like torchrun (`geoccl run -n N -- gloo_bench ...`). Each
// rank reads RANK / WORLD_SIZE / MASTER_PORT (+ optional GEOCCL_RUN_ID, GEOCCL_BIND_ADDR) from
// the environment, rendezvouses through a gloo::rendezvous::FileStore, and times float32 SUM
// allreduces over the Gloo TCP transport.
//
// Algorithm: `gloo::allreduce(AllreduceOptions)` with the algorithm left UNSPECIFIED. In
// Debian's Gloo (0.5.0, git 2022-05-18) UNSPECIFIED dispatches to the ring allreduce
// (reduce-scatter + allgather in segments of at most 1 MiB, two in flight). This is the same
// entry point torch's ProcessGroupGloo uses for dense CPU tensors, so the two baselines differ
// only by the torch layer on top.
//
// The rendezvous (FileStore, generation scheme) is shared with train_step: gloo_rendezvous.h.

#include <gloo/allreduce.h>
#include <gloo/math.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "bench_common.h"
#include "bench_env.h"
#include "cpu_clock.h"
#include "gloo_rendezvous.h"

namespace geoccl_bench {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::string_view kUsage =
    "usage: gloo_bench --op allreduce --sizes 4K,1M,16M,96M [--iters 20] [--warmup 3]\n"
    "                  [--json FILE] [--timeout-s 300]\n"
    "  sizes are bytes per rank; K/M/G suffixes are powers of 1024; each a multiple of 4\n"
    "  env: RANK, WORLD_SIZE, MASTER_PORT (or GEOCCL_RUN_ID) required;\n"
    "       GEOCCL_BIND_ADDR (default 127.0.0.1), GEOCCL_RUN_ID optional\n";

// ---------------------------------------------------------------------------------------------
// Command line and environment

struct Options {
  std::string op = "allreduce";
  std::vector<std::size_t> sizes;
  int iters = 20;
  int warmup = 3;
  std::string json_path;
  int timeout_s = 300;
};

// Parses "4K", "1M", "96M", "4096" into bytes (powers of 1024).
std::size_t ParseSize(std::string_view text) {
  if (text.empty()) throw UsageError("empty size in --sizes");
  std::uint64_t multiplier = 1;
  switch (text.back()) {
    case 'K': case 'k': multiplier = 1ULL << 10; break;
    case 'M': case 'm': multiplier = 1ULL << 20; break;
    case 'G': case 'g': multiplier = 1ULL << 30; break;
    default: break;
  }
  const std::string_view digits = multiplier == 1 ? text : text.substr(0, text.size() - 1);
  std::uint64_t value = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (ec != std::errc() || end != digits.data() + digits.size() || value == 0) {
    throw UsageError("bad size '" + std::string(text) + "' (want e.g. 4096, 4K, 1M, 2G)");
  }
  if (value > UINT64_MAX / multiplier) throw UsageError("size too large: " + std::string(text));
  const std::uint64_t bytes = value * multiplier;
  if (bytes % sizeof(float) != 0) {
    throw UsageError("size " + std::string(text) + " is not a multiple of 4 bytes (float32)");
  }
  return static_cast<std::size_t>(bytes);
}

std::vector<std::size_t> ParseSizes(std::string_view list) {
  std::vector<std::size_t> sizes;
  while (!list.empty()) {
    const auto comma = list.find(',');
    sizes.push_back(ParseSize(list.substr(0, comma)));
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  if (sizes.empty()) throw UsageError("--sizes is empty");
  return sizes;
}

Options ParseArgs(int argc, char** argv) {
  Options opt;
  bool have_sizes = false;
  ArgReader args(argc, argv);
  while (args.Next()) {
    const std::string_view name = args.name();
    if (name == "--op") {
      opt.op = args.Value();
    } else if (name == "--sizes") {
      opt.sizes = ParseSizes(args.Value());
      have_sizes = true;
    } else if (name == "--iters") {
      opt.iters = args.IntValue(1);
    } else if (name == "--warmup") {
      opt.warmup = args.IntValue(0);
    } else if (name == "--json") {
      opt.json_path = args.Value();
    } else if (name == "--timeout-s") {
      opt.timeout_s = args.IntValue(1);
    } else {
      throw args.Unknown();
    }
  }
  if (opt.op != "allreduce") throw UsageError("--op " + opt.op + " not supported (allreduce)");
  if (!have_sizes) throw UsageError("--sizes is required");
  return opt;
}

// ---------------------------------------------------------------------------------------------
// Benchmark

struct Result {
  std::size_t bytes = 0;
  std::size_t count = 0;
  int world_size = 0;
  int iters = 0;
  double median_us = 0;
  double min_us = 0;
  double max_us = 0;
  double algbw_gbps = 0;
  double busbw_gbps = 0;
  double cpu_ns_per_byte = 0;       // every rank's CPU in the timed calls per byte of user data
  double emulator_ns_per_byte = -1;  // the test bed's emulator over the same span; -1 off it
  bool correct = false;
};

// In-place float32 SUM allreduce of `data` through Gloo's default algorithm.
void Allreduce(const std::shared_ptr<gloo::Context>& ctx, float* data, std::size_t count,
               std::chrono::milliseconds timeout) {
  gloo::AllreduceOptions opts(ctx);
  opts.setOutput(data, count);  // no input: Gloo reduces in place, as torch/DDP do
  opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, std::size_t)>(
      &gloo::sum<float>));
  opts.setTimeout(timeout);
  gloo::allreduce(opts);
}

// Elementwise MAX (or SUM) over ranks of a small vector of doubles (timings, flags, CPU time).
void AllreduceMax(const std::shared_ptr<gloo::Context>& ctx, std::vector<double>& v,
                  std::chrono::milliseconds timeout, bool sum = false) {
  gloo::AllreduceOptions opts(ctx);
  opts.setOutput(v.data(), v.size());
  using Fn = void (*)(void*, const void*, const void*, std::size_t);
  opts.setReduceFunction(sum ? static_cast<Fn>(&gloo::sum<double>) : static_cast<Fn>(&gloo::max<double>));
  opts.setTimeout(timeout);
  gloo::allreduce(opts);
}

// Returns the number of wrong elements (and logs the first one).
std::size_t CountMismatches(const float* data, std::size_t count, int world_size, int rank) {
  const float n = static_cast<float>(world_size);
  const float base = n * (n + 1) / 2;
  std::size_t bad = 0;
  int phase = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const float expected = base + n * static_cast<float>(phase);
    if (data[i] != expected) {
      if (bad == 0) {
        std::fprintf(stderr, "gloo_bench[rank %d]: element %zu = %g, expected %g\n", rank, i,
                     static_cast<double>(data[i]), static_cast<double>(expected));
      }
      ++bad;
    }
    if (++phase == 7) phase = 0;
  }
  return bad;
}

Result RunSize(const std::shared_ptr<gloo::Context>& ctx, std::size_t bytes, const Options& opt,
               std::chrono::milliseconds timeout) {
  const std::size_t count = bytes / sizeof(float);
  const int n = ctx->size;
  // The pattern is built once; each iteration restores it with a memcpy (outside the timer)
  // because the allreduce is in place.
  std::vector<float> pattern(count);
  FillPattern(pattern, ctx->rank);
  std::vector<float> buf(count);

  std::vector<double> times_us;  // this rank's per-iteration times
  times_us.reserve(static_cast<std::size_t>(opt.iters));
  std::size_t mismatches = 0;
  double cpu_s = 0, emulator_s = -1;
  for (int it = 0; it < opt.warmup + opt.iters; ++it) {
    std::memcpy(buf.data(), pattern.data(), bytes);
    if (it == opt.warmup && ctx->rank == 0) emulator_s = geoccl::tools::emulator_cpu_s();
    // No barrier between iterations: every rank times its own call and we take the max over
    // ranks per iteration, which bounds the collective's completion time without adding a
    // barrier's latency to it.
    const double cpu0 = geoccl::tools::process_cpu_s();
    const auto t0 = Clock::now();
    Allreduce(ctx, buf.data(), count, timeout);
    const auto t1 = Clock::now();
    const double cpu1 = geoccl::tools::process_cpu_s();
    mismatches += CountMismatches(buf.data(), count, n, ctx->rank);
    if (it >= opt.warmup) {
      times_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
      cpu_s += cpu1 - cpu0;
    }
  }
  if (emulator_s >= 0) emulator_s = geoccl::tools::emulator_cpu_s() - emulator_s;
  std::vector<double> cpu{cpu_s};
  AllreduceMax(ctx, cpu, timeout, /*sum=*/true);

  // One small collective after the loop gathers everything: per-iteration max over ranks, plus
  // a trailing "any rank saw a wrong element" flag.
  std::vector<double> gathered = times_us;
  gathered.push_back(mismatches > 0 ? 1.0 : 0.0);
  AllreduceMax(ctx, gathered, timeout);
  const bool correct = gathered.back() == 0.0;
  gathered.pop_back();

  Result r;
  r.bytes = bytes;
  r.count = count;
  r.world_size = n;
  r.iters = opt.iters;
  r.median_us = Median(gathered);
  r.min_us = *std::min_element(gathered.begin(), gathered.end());
  r.max_us = *std::max_element(gathered.begin(), gathered.end());
  // nccl-tests conventions: algbw = bytes / time (GB = 1e9 B); busbw scales by 2(n-1)/n, the
  // share of the buffer each rank must send and receive in an optimal allreduce.
  r.algbw_gbps = static_cast<double>(bytes) / (r.median_us * 1e-6) / 1e9;
  r.busbw_gbps = r.algbw_gbps * 2.0 * (n - 1) / n;
  // As geoccl bench counts it: CPU over the bytes every rank passed, all timed calls.
  const double user_bytes = static_cast<double>(bytes) * n * std::max(opt.iters, 1);
  r.cpu_ns_per_byte = cpu[0] * 1e9 / user_bytes;
  if (emulator_s >= 0) r.emulator_ns_per_byte = emulator_s * 1e9 / user_bytes;
  r.correct = correct;
  return r;
}

void PrintHeader(int world_size) {
  std::printf("# gloo_bench: gloo::allreduce (ring), float32 sum, TCP, world_size %d\n",
              world_size);
  std::printf("# %12s %12s %12s %12s %12s %12s %12s %9s %8s\n", "size(B)", "count", "time(us)",
              "min(us)", "max(us)", "algbw(GB/s)", "busbw(GB/s)", "cpu_ns/B", "correct");
}

void PrintRow(const Result& r) {
  std::printf("  %12zu %12zu %12.1f %12.1f %12.1f %12.3f %12.3f %9.3f %8s", r.bytes, r.count,
              r.median_us, r.min_us, r.max_us, r.algbw_gbps, r.busbw_gbps, r.cpu_ns_per_byte,
              r.correct ? "yes" : "NO");
  if (r.emulator_ns_per_byte >= 0) std::printf("  emulator_cpu_ns/B %.3f", r.emulator_ns_per_byte);
  std::printf("\n");
  std::fflush(stdout);
}

void WriteJson(const std::string& path, const std::vector<Result>& results) {
  std::ostringstream os;
  os << "[\n";
  for (std::size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    os << "  {\"backend\": \"gloo\", \"op\": \"allreduce\", \"dtype\": \"f32\""
       << ", \"bytes\": " << r.bytes << ", \"count\": " << r.count
       << ", \"world_size\": " << r.world_size << ", \"iters\": " << r.iters
       << ", \"time_us_median\": " << JsonNumber(r.median_us)
       << ", \"time_us_min\": " << JsonNumber(r.min_us)
       << ", \"time_us_max\": " << JsonNumber(r.max_us)
       << ", \"algbw_gbps\": " << JsonNumber(r.algbw_gbps)
       << ", \"busbw_gbps\": " << JsonNumber(r.busbw_gbps)
       << ", \"cpu_ns_per_byte\": " << JsonNumber(r.cpu_ns_per_byte)
       << (r.emulator_ns_per_byte >= 0
               ? ", \"emulator_cpu_ns_per_byte\": " + JsonNumber(r.emulator_ns_per_byte)
               : std::string())
       << ", \"correct\": " << (r.correct ? "true" : "false") << "}"
       << (i + 1 < results.size() ? ",\n" : "\n");
  }
  os << "]\n";
  WriteFileAtomic(path, os.str());
}

int Run(int argc, char** argv) {
  const Options opt = ParseArgs(argc, argv);
  const GlooEnv env = ReadGlooEnv();
  const std::chrono::milliseconds timeout = std::chrono::seconds(opt.timeout_s);
  const GlooSession session(env, "geoccl-gloo-bench", timeout);
  const std::shared_ptr<gloo::Context>& ctx = session.context();

  if (env.rank == 0) PrintHeader(env.world_size);
  std::vector<Result> results;
  bool all_correct = true;
  for (const std::size_t bytes : opt.sizes) {
    results.push_back(RunSize(ctx, bytes, opt, timeout));
    all_correct = all_correct && results.back().correct;
    if (env.rank == 0) PrintRow(results.back());
  }
  if (env.rank == 0 && !opt.json_path.empty()) WriteJson(opt.json_path, results);
  return CheckedExit(all_correct, "gloo_bench", env.rank,
                                   "allreduce produced wrong results");
}

}  // namespace
}  // namespace geoccl_bench

int main(int argc, char** argv) {
  using geoccl_bench::kUsage, geoccl_bench::Run;
  return geoccl_bench::RunMain("gloo_bench", kUsage, [&] { return Run(argc, argv); });
}
