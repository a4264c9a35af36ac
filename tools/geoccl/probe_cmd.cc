#include "probe_cmd.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "geoccl/geoccl.h"

namespace geoccl::tools {

int run_probe(size_t rate_bytes) {
  Config cfg = Config::from_env();
  // Domains as the job finds them: its labels (GEOCCL_DOMAIN) when given, so that relays, two-hop
  // paths and plans are the job's; else from the measured RTT matrix.
  if (cfg.domain.empty()) cfg.topology = "probe";
  Communicator comm(cfg);
  const int n = comm.size(), me = comm.rank();
  const auto topo = comm.topology();
  // Rates: the same round-robin tournament as the RTT probe; the lower rank of each pair sends
  // `rate_bytes`, the higher rank answers with one byte once everything has arrived.
  std::vector<double> rate(static_cast<size_t>(n * n), 0.0);
  if (rate_bytes > 0 && n > 1) {
    std::vector<uint8_t> payload(rate_bytes, 0x5a);
    uint8_t ack = 0;
    const int players = n % 2 == 0 ? n : n + 1, m = players - 1;
    for (int round = 0; round < m; ++round) {
      int peer = me == players - 1 ? round : me == round ? players - 1 : ((2 * round - me) % m + m) % m;
      if (peer >= n || peer == me) continue;
      if (me < peer) {
        const auto t0 = std::chrono::steady_clock::now();
        comm.send(payload.data(), payload.size(), DataType::kUInt8, peer, 77).wait();
        comm.recv(&ack, 1, DataType::kUInt8, peer, 78).wait();
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const double rtt = topo.rtt_ms.empty() ? 0 : topo.rtt_ms[static_cast<size_t>(me * n + peer)] / 1e3;
        rate[static_cast<size_t>(me * n + peer)] = static_cast<double>(rate_bytes) * 8 / std::max(s - rtt, 1e-6) / 1e6;
      } else {
        comm.recv(payload.data(), payload.size(), DataType::kUInt8, peer, 77).wait();
        comm.send(&ack, 1, DataType::kUInt8, peer, 78).wait();
      }
    }
    comm.allreduce(rate.data(), rate.size(), DataType::kFloat64, ReduceOp::kMax).wait();
  }
  // Pairs that a relay carries (no direct path between them): each rank knows its own.
  // [0, n*n): relaying rank + 1; [n*n, 2n*n): the two-hop path's relay + 1 (bulk data only).
  std::vector<int32_t> relay(static_cast<size_t>(2 * n * n), 0);
  for (const auto& ps : comm.peer_stats()) {
    if (ps.relay >= 0) relay[static_cast<size_t>(me * n + ps.peer)] = ps.relay + 1;
    if (ps.two_hop >= 0) relay[static_cast<size_t>(n * n + me * n + ps.peer)] = ps.two_hop + 1;
  }
  comm.allreduce(relay.data(), relay.size(), DataType::kInt32, ReduceOp::kMax).wait();
  if (me == 0) {
    if (topo.rtt_ms.empty())
      std::printf("# RTT matrix: not measured (domains from labels; GEOCCL_TOPOLOGY=probe measures it)\n");
    std::printf("# RTT matrix (ms), measured at start-up between one rank per host (0: the same host)\n%6s", "");
    for (int j = 0; j < n; ++j) std::printf(" %8d", j);
    std::printf("\n");
    for (int i = 0; i < n; ++i) {
      std::printf("%6d", i);
      for (int j = 0; j < n; ++j)
        std::printf(" %8.3f", topo.rtt_ms.empty() ? 0.0 : topo.rtt_ms[static_cast<size_t>(i * n + j)]);
      std::printf("\n");
    }
    if (rate_bytes > 0) {
      std::printf("# one-way rate estimates (Mbit/s, %zu bytes from the lower rank)\n", rate_bytes);
      for (int i = 0; i < n; ++i)
        for (int j = i + 1; j < n; ++j)
          std::printf("%d -> %d: %.1f\n", i, j, rate[static_cast<size_t>(i * n + j)]);
    }
    std::printf("# domains: %s\n", topo.describe.c_str());
    int relayed = 0;
    for (int i = 0; i < n; ++i)
      for (int j = i + 1; j < n; ++j) relayed += relay[static_cast<size_t>(i * n + j)] > 0;
    std::printf("# paths without a direct connection: %d\n", relayed);
    for (int i = 0; i < n; ++i)
      for (int j = i + 1; j < n; ++j)
        if (const int r = std::max(relay[static_cast<size_t>(i * n + j)], relay[static_cast<size_t>(j * n + i)]); r > 0)
          std::printf("%d <-> %d: relayed by rank %d\n", i, j, r - 1);
    std::printf("# two-hop paths for bulk data: %zu between domains\n", topo.two_hop.size());
    for (const auto& line : topo.two_hop) std::printf("%s\n", line.c_str());
    for (int i = 0; i < n; ++i)
      for (int j = i + 1; j < n; ++j)
        if (const int r = std::max(relay[static_cast<size_t>(n * n + i * n + j)], relay[static_cast<size_t>(n * n + j * n + i)]); r > 0)
          std::printf("%d <-> %d: bulk data through rank %d\n", i, j, r - 1);
    const size_t k = topo.names.size();
    if (!topo.wan_one_way_ms.empty() && k * k == topo.wan_one_way_ms.size()) {
      std::printf("# paths between domains (leaders, measured at start-up; two-hop pairs: the two-hop rate): one-way ms / Mbit/s of one flow\n");
      for (size_t a = 0; a < k; ++a)
        for (size_t b = 0; b < k; ++b)
          if (a != b)
            std::printf("%s -> %s: %.1f ms, %.1f Mbit/s\n", topo.names[a].empty() ? std::to_string(a).c_str() : topo.names[a].c_str(),
                        topo.names[b].empty() ? std::to_string(b).c_str() : topo.names[b].c_str(),
                        topo.wan_one_way_ms[a * k + b], topo.wan_rate_mbps[a * k + b]);
    }
    std::printf("# allreduce plan (float32): size, algorithm, predicted ms, why\n");
    for (size_t bytes : {size_t{4} << 10, size_t{1} << 20, size_t{16} << 20, size_t{96} << 20}) {
      const auto plan = comm.plan_allreduce(bytes / 4, DataType::kFloat32);
      std::printf("%zu B: %s, predicted %.1f ms (%s)\n", bytes, plan.algo.c_str(), plan.predicted_ms, plan.why.c_str());
    }
    std::fflush(stdout);
  }
  comm.barrier().wait();
  return 0;
}

}  // namespace geoccl::tools
