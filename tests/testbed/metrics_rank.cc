// Rank program of the Prometheus test (prometheus_wan_test.py): a known amount of allreduce
// traffic, checked, then it keeps its communicator (and /metrics) up until the test has queried
// Prometheus: until the file argv[1] exists (at most 60 s), then a barrier and exit.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "geoccl/geoccl.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: metrics_rank STOP_FILE LARGE_BYTES LARGE_ITERS\n");
    return 2;
  }
  const size_t large = std::strtoull(argv[2], nullptr, 10) / sizeof(float);
  const int iters = std::atoi(argv[3]);
  try {
    auto comm = geoccl::Communicator::from_env();
    const int n = comm->size();
    // Small ones first, so that the last operation (geoccl_op_limit_ratio) is a large one.
    std::vector<float> small(1024), big(large);
    for (int i = 0; i < 20; ++i) {
      std::fill(small.begin(), small.end(), 1.0f);
      comm->allreduce(small.data(), small.size(), geoccl::DataType::kFloat32,
                      geoccl::ReduceOp::kSum)
          .wait();
      if (small[0] != static_cast<float>(n)) throw std::runtime_error("small allreduce: wrong sum");
    }
    for (int i = 0; i < iters; ++i) {
      std::fill(big.begin(), big.end(), static_cast<float>(comm->rank()));
      comm->allreduce(big.data(), big.size(), geoccl::DataType::kFloat32, geoccl::ReduceOp::kSum)
          .wait();
      if (big[large / 2] != static_cast<float>(n * (n - 1) / 2))
        throw std::runtime_error("large allreduce: wrong sum");
    }
    comm->barrier().wait();
    std::printf("METRICS_RANK_DONE %d\n", comm->rank());
    std::fflush(stdout);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (access(argv[1], F_OK) != 0 && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    comm->barrier().wait();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "metrics_rank: %s\n", e.what());
    return 1;
  }
  return 0;
}
