// What updating the metrics costs a small allreduce (docs/metrics.md, "Overhead"). Run under
// `geoccl run -n N`: every rank opens two communicators on the same ranks, one with
// GEOCCL_METRICS_PORT set (metrics recorded on every operation) and one without, and times
// 4 KiB allreduces on them alternately, op by op (AB BA AB ..., so that drift in the machine's
// load falls on both). Rank 0 prints the median per-operation time
// of each and the median of the per-round ratios; the cost of one operation's update alone (in
// ns) is measured too. No scraper runs: this is the cost of updating, not of serving.
//
//   geoccl run -n 6 -- build/bench/metrics_overhead [--rounds 40] [--iters 200] [--bytes 4096]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "geoccl/geoccl.h"
#include "metrics/comm_metrics.h"
#include "metrics/registry.h"
#include "runtime/socket.h"

using Clock = std::chrono::steady_clock;

namespace {

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5)];
}
double median(const std::vector<double>& v) { return quantile(v, 0.5); }
// Mean of the middle 80 %: robust to the scheduler's outliers, still sensitive to a shift.
double trimmed_mean(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t cut = v.size() / 10;
  double s = 0;
  for (size_t i = cut; i + cut < v.size(); ++i) s += v[i];
  return v.size() > 2 * cut ? s / static_cast<double>(v.size() - 2 * cut) : 0;
}

// Mean seconds of one allreduce over `iters`.
double round_time(geoccl::Communicator& c, std::vector<float>& buf, int iters) {
  const auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i)
    c.allreduce(buf.data(), buf.size(), geoccl::DataType::kFloat32, geoccl::ReduceOp::kSum).wait();
  return std::chrono::duration<double>(Clock::now() - t0).count() / iters;
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 40, iters = 200;
  size_t bytes = 4096;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--rounds"))
      rounds = std::max(1, std::atoi(argv[i + 1]));
    else if (!std::strcmp(argv[i], "--iters"))
      iters = std::max(1, std::atoi(argv[i + 1]));
    else if (!std::strcmp(argv[i], "--bytes"))
      bytes = std::max<size_t>(4, std::strtoull(argv[i + 1], nullptr, 10));
  }
  try {
    geoccl::Config base = geoccl::Config::from_env();
    geoccl::Config on = base, off = base;
    // Rank 0 of each group hosts its own store: the second one on the next port.
    off.master_port = static_cast<uint16_t>(base.master_port + 1);
    off.session = base.session + "-metrics-off";
    off.metrics_port = 0;
    on.metrics_port =
        base.metrics_port > 0 ? base.metrics_port : geoccl::runtime::pick_free_port();
    on.metrics_bind = "127.0.0.1";
    geoccl::Communicator with(on);
    geoccl::Communicator without(off);
    std::vector<float> buf(bytes / sizeof(float), 1.0f);
    round_time(with, buf, iters);  // warm-up
    round_time(without, buf, iters);

    // Per operation, alternating communicators op by op (both ranks issue the same sequence),
    // so that the machine's load drifts equally over both; each op timed on its own.
    std::vector<double> t_on, t_off, ratio;
    for (int r = 0; r < rounds; ++r) {
      std::vector<double> a, b;
      for (int i = 0; i < iters; ++i) {
        const bool on_first = (r + i) % 2 == 0;
        for (int k = 0; k < 2; ++k) {
          const bool use_on = (k == 0) == on_first;
          const auto t0 = Clock::now();
          (use_on ? with : without)
              .allreduce(buf.data(), buf.size(), geoccl::DataType::kFloat32, geoccl::ReduceOp::kSum)
              .wait();
          (use_on ? a : b).push_back(std::chrono::duration<double>(Clock::now() - t0).count());
        }
      }
      t_on.insert(t_on.end(), a.begin(), a.end());
      t_off.insert(t_off.end(), b.begin(), b.end());
      ratio.push_back(median(a) / median(b));
    }
    // One operation's update alone: two clock reads, the series lookup, a histogram observation
    // and counter adds.
    geoccl::metrics::Registry reg;
    geoccl::metrics::CommMetrics m(reg, 0, 1, "", 0);
    constexpr int kRecords = 1000000;
    const auto t0 = Clock::now();
    for (int i = 0; i < kRecords; ++i) {
      // What the communicator does per operation: a clock read at its start and at its end.
      const auto started = Clock::now();
      m.record(1, "allreduce", "rd", bytes,
               std::chrono::duration<double>(Clock::now() - started).count());
    }
    const double record_ns =
        std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / kRecords;
    if (with.rank() == 0) {
      const double on_us = median(t_on) * 1e6, off_us = median(t_off) * 1e6;
      std::printf("metrics_overhead: %d ranks, %zu B allreduce, %d rounds x %d ops, alternating\n",
                  with.size(), bytes, rounds, iters);
      std::printf("  metrics on : median %.2f us/op (quartiles %.2f .. %.2f), trimmed mean %.2f\n",
                  on_us, quantile(t_on, 0.25) * 1e6, quantile(t_on, 0.75) * 1e6,
                  trimmed_mean(t_on) * 1e6);
      std::printf("  metrics off: median %.2f us/op (quartiles %.2f .. %.2f), trimmed mean %.2f\n",
                  off_us, quantile(t_off, 0.25) * 1e6, quantile(t_off, 0.75) * 1e6,
                  trimmed_mean(t_off) * 1e6);
      std::printf("  on/off: medians %+.2f %%, trimmed means %+.2f %%\n",
                  (on_us / off_us - 1) * 100, (trimmed_mean(t_on) / trimmed_mean(t_off) - 1) * 100);
      std::printf("  per-round ratio on/off: median %.4f (%+.2f %%), quartiles %.4f .. %.4f\n",
                  median(ratio), (median(ratio) - 1) * 100, quantile(ratio, 0.25),
                  quantile(ratio, 0.75));
      std::printf(
          "  one operation's update (2 clock reads + record()): %.1f ns = %.3f %% of the %.2f us "
          "operation\n",
          record_ns, record_ns / 1e3 / off_us * 100, off_us);
    }
    with.barrier().wait();
    without.barrier().wait();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "metrics_overhead: %s\n", e.what());
    return 1;
  }
  return 0;
}
