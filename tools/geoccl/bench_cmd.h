// `geoccl bench`: nccl-tests style timing of one collective over a list of sizes, with results
// verified against a known pattern on every rank.
#pragma once

#include <string>
#include <vector>

namespace geoccl::tools {

struct BenchSpec {
  std::string op = "allreduce";
  std::vector<size_t> sizes;
  std::string dtype = "f32";
  int iters = 20;
  int warmup = 3;
  std::string algo = "auto";
  std::string json_path;
  bool verbose = false;
  // allreduce f32 only: the WAN codec (Compression::parse spelling; "" = the config's), and
  // whether each size keeps an error-feedback residual across its iterations (as DDP would).
  // Compressed results are checked for bit-identity across ranks and, without feedback, for a
  // relative RMS error within the codec's bound; inputs are then gaussian, not the integer pattern.
  std::string compression;
  bool error_feedback = true;
  // Bytes of a float32 allreduce on the bulk class (Priority::kBulk) that runs back to back
  // beside the timed operations, from before the first warm-up until the last iteration
  // (0 = none): the latency of small operations while a large transfer shares the path.
  size_t background_bytes = 0;
  // After the sizes: every rank's set-up time, memory, open sockets and shared-memory segments,
  // threads and CPU time (tools/geoccl/resources.h), printed by rank 0 as the largest, the mean
  // and rank 0's own, on lines starting with "# resources".
  bool resources = false;
};

// Runs inside a rank (environment from `geoccl run`). Returns 0 when every size verified.
int run_bench(const BenchSpec& spec);

// "4K,1M,96M" -> bytes (powers of 1024). Throws std::invalid_argument.
std::vector<size_t> parse_sizes(const std::string& s);

}  // namespace geoccl::tools
