// train_step: replays one data-parallel training step of ResNet-50 (gradient communication
// only) on geoccl or Gloo, and reports the step time and the share of communication that the
// emulated backward compute does not hide.
//
// Model. The 161 parameter tensors of torchvision's resnet50 (25,557,032 fp32 parameters,
// 97.5 MiB of gradients), in backward order (the reverse of registration order, which is the
// order autograd makes gradients ready in, layer by layer from fc down to conv1). Each row
// carries the forward multiply-accumulates of the module that owns the tensor at 224x224,
// batch 1 (conv: Cout*Cin*k*k*Hout*Wout; fc: 2048*1000; BatchNorm and biases: 0).
//
// Compute. Backward is emulated by sleeping before each tensor's gradient is released; the
// sleep is --compute-ms (default 200 ms per step) split in proportion to the module's MACs, so
// conv layers near the input (large activations) take longest, as on a GPU. 200 ms is a
// typical ResNet-50 backward on one GPU at a per-GPU batch of ~64-128 (a V100 does a whole
// fwd+bwd step of batch 64 in roughly 200 ms); scale it with --compute-ms.
//
// Buckets. As torch DDP: gradients are packed in backward order into buckets; a bucket is closed
// once it reaches its cap (the first bucket 1 MiB, DDP's _DEFAULT_FIRST_BUCKET_BYTES; the others
// --bucket-mb, default 25 MiB), so a bucket may exceed the cap by its last tensor. A bucket is
// allreduced (fp32 sum, in place) as soon as its last gradient is released, asynchronously:
// geoccl issues Communicator::allreduce and keeps the Work; Gloo hands the bucket to one comm
// thread that runs gloo::allreduce on the buckets in order, one at a time. (torch's
// ProcessGroupGloo has two worker threads by default, so bench/train_step_torch.py can have two
// buckets in flight at once.)
//
// Timing per step, after a barrier: t0 = start of backward; compute = until the last gradient is
// released; step = until every bucket is reduced. Both are taken as the max over ranks.
// exposed = (step - compute) / step is the communication that compute did not hide. Results are
// checked (rank r contributes (r+1) + (i % 7)); a wrong sum gives a nonzero exit.
//
// Usage (one process per rank, under `geoccl run` or torchrun):
//   train_step --backend geoccl|gloo [--steps 5] [--warmup 1] [--compute-ms 200]
//              [--bucket-mb 25] [--first-bucket-mb 1] [--algo auto|ring|rd] [--json FILE]
//   train_step --print-layers      # the tensor table as JSON (bench/train_step_torch.py uses it)

#include <geoccl/geoccl.h>

#ifdef GEOCCL_HAVE_GLOO
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/math.h>
#endif

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <numeric>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "bench_common.h"
#include "bench_env.h"
#ifdef GEOCCL_HAVE_GLOO
#include "gloo_rendezvous.h"
#endif

namespace geoccl_bench {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::string_view kUsage =
    "usage: train_step --backend geoccl|gloo [--model resnet50] [--steps 5] [--warmup 1]\n"
    "                  [--compute-ms 200] [--bucket-mb 25] [--first-bucket-mb 1]\n"
    "                  [--algo auto|ring|rd] [--json FILE] [--timeout-s 600]\n"
    "                  [--compression CODEC [--no-error-feedback]]  (geoccl only)\n"
    "                  [--background-mb 1024 --background-class bulk|gradient\n"
    "                   --background-root 0 --uplink-gbps 1 [--background-alone]\n"
    "                   [--background-api blob|broadcast]]  (geoccl only)\n"
    "       train_step --print-layers\n"
    "  env: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (GEOCCL_RUN_ID, GEOCCL_BIND_ADDR)\n";

// ---------------------------------------------------------------------------------------------
// ResNet-50 (torchvision, v1.5: stride on the 3x3 conv), parameter tensors in BACKWARD order.

struct Tensor {
  const char* name;
  std::vector<std::int64_t> shape;
  std::int64_t macs;  // forward MACs of the owning module at 224x224, batch 1 (0: BN, bias)
};

// clang-format off
const std::vector<Tensor>& ResNet50() {
  static const std::vector<Tensor> kTensors = {
    {"fc.bias", {1000}, 0},
    {"fc.weight", {1000, 2048}, 2048000},
    {"layer4.2.bn3.bias", {2048}, 0},
    {"layer4.2.bn3.weight", {2048}, 0},
    {"layer4.2.conv3.weight", {2048, 512, 1, 1}, 51380224},
    {"layer4.2.bn2.bias", {512}, 0},
    {"layer4.2.bn2.weight", {512}, 0},
    {"layer4.2.conv2.weight", {512, 512, 3, 3}, 115605504},
    {"layer4.2.bn1.bias", {512}, 0},
    {"layer4.2.bn1.weight", {512}, 0},
    {"layer4.2.conv1.weight", {512, 2048, 1, 1}, 51380224},
    {"layer4.1.bn3.bias", {2048}, 0},
    {"layer4.1.bn3.weight", {2048}, 0},
    {"layer4.1.conv3.weight", {2048, 512, 1, 1}, 51380224},
    {"layer4.1.bn2.bias", {512}, 0},
    {"layer4.1.bn2.weight", {512}, 0},
    {"layer4.1.conv2.weight", {512, 512, 3, 3}, 115605504},
    {"layer4.1.bn1.bias", {512}, 0},
    {"layer4.1.bn1.weight", {512}, 0},
    {"layer4.1.conv1.weight", {512, 2048, 1, 1}, 51380224},
    {"layer4.0.downsample.1.bias", {2048}, 0},
    {"layer4.0.downsample.1.weight", {2048}, 0},
    {"layer4.0.downsample.0.weight", {2048, 1024, 1, 1}, 102760448},
    {"layer4.0.bn3.bias", {2048}, 0},
    {"layer4.0.bn3.weight", {2048}, 0},
    {"layer4.0.conv3.weight", {2048, 512, 1, 1}, 51380224},
    {"layer4.0.bn2.bias", {512}, 0},
    {"layer4.0.bn2.weight", {512}, 0},
    {"layer4.0.conv2.weight", {512, 512, 3, 3}, 115605504},
    {"layer4.0.bn1.bias", {512}, 0},
    {"layer4.0.bn1.weight", {512}, 0},
    {"layer4.0.conv1.weight", {512, 1024, 1, 1}, 102760448},
    {"layer3.5.bn3.bias", {1024}, 0},
    {"layer3.5.bn3.weight", {1024}, 0},
    {"layer3.5.conv3.weight", {1024, 256, 1, 1}, 51380224},
    {"layer3.5.bn2.bias", {256}, 0},
    {"layer3.5.bn2.weight", {256}, 0},
    {"layer3.5.conv2.weight", {256, 256, 3, 3}, 115605504},
    {"layer3.5.bn1.bias", {256}, 0},
    {"layer3.5.bn1.weight", {256}, 0},
    {"layer3.5.conv1.weight", {256, 1024, 1, 1}, 51380224},
    {"layer3.4.bn3.bias", {1024}, 0},
    {"layer3.4.bn3.weight", {1024}, 0},
    {"layer3.4.conv3.weight", {1024, 256, 1, 1}, 51380224},
    {"layer3.4.bn2.bias", {256}, 0},
    {"layer3.4.bn2.weight", {256}, 0},
    {"layer3.4.conv2.weight", {256, 256, 3, 3}, 115605504},
    {"layer3.4.bn1.bias", {256}, 0},
    {"layer3.4.bn1.weight", {256}, 0},
    {"layer3.4.conv1.weight", {256, 1024, 1, 1}, 51380224},
    {"layer3.3.bn3.bias", {1024}, 0},
    {"layer3.3.bn3.weight", {1024}, 0},
    {"layer3.3.conv3.weight", {1024, 256, 1, 1}, 51380224},
    {"layer3.3.bn2.bias", {256}, 0},
    {"layer3.3.bn2.weight", {256}, 0},
    {"layer3.3.conv2.weight", {256, 256, 3, 3}, 115605504},
    {"layer3.3.bn1.bias", {256}, 0},
    {"layer3.3.bn1.weight", {256}, 0},
    {"layer3.3.conv1.weight", {256, 1024, 1, 1}, 51380224},
    {"layer3.2.bn3.bias", {1024}, 0},
    {"layer3.2.bn3.weight", {1024}, 0},
    {"layer3.2.conv3.weight", {1024, 256, 1, 1}, 51380224},
    {"layer3.2.bn2.bias", {256}, 0},
    {"layer3.2.bn2.weight", {256}, 0},
    {"layer3.2.conv2.weight", {256, 256, 3, 3}, 115605504},
    {"layer3.2.bn1.bias", {256}, 0},
    {"layer3.2.bn1.weight", {256}, 0},
    {"layer3.2.conv1.weight", {256, 1024, 1, 1}, 51380224},
    {"layer3.1.bn3.bias", {1024}, 0},
    {"layer3.1.bn3.weight", {1024}, 0},
    {"layer3.1.conv3.weight", {1024, 256, 1, 1}, 51380224},
    {"layer3.1.bn2.bias", {256}, 0},
    {"layer3.1.bn2.weight", {256}, 0},
    {"layer3.1.conv2.weight", {256, 256, 3, 3}, 115605504},
    {"layer3.1.bn1.bias", {256}, 0},
    {"layer3.1.bn1.weight", {256}, 0},
    {"layer3.1.conv1.weight", {256, 1024, 1, 1}, 51380224},
    {"layer3.0.downsample.1.bias", {1024}, 0},
    {"layer3.0.downsample.1.weight", {1024}, 0},
    {"layer3.0.downsample.0.weight", {1024, 512, 1, 1}, 102760448},
    {"layer3.0.bn3.bias", {1024}, 0},
    {"layer3.0.bn3.weight", {1024}, 0},
    {"layer3.0.conv3.weight", {1024, 256, 1, 1}, 51380224},
    {"layer3.0.bn2.bias", {256}, 0},
    {"layer3.0.bn2.weight", {256}, 0},
    {"layer3.0.conv2.weight", {256, 256, 3, 3}, 115605504},
    {"layer3.0.bn1.bias", {256}, 0},
    {"layer3.0.bn1.weight", {256}, 0},
    {"layer3.0.conv1.weight", {256, 512, 1, 1}, 102760448},
    {"layer2.3.bn3.bias", {512}, 0},
    {"layer2.3.bn3.weight", {512}, 0},
    {"layer2.3.conv3.weight", {512, 128, 1, 1}, 51380224},
    {"layer2.3.bn2.bias", {128}, 0},
    {"layer2.3.bn2.weight", {128}, 0},
    {"layer2.3.conv2.weight", {128, 128, 3, 3}, 115605504},
    {"layer2.3.bn1.bias", {128}, 0},
    {"layer2.3.bn1.weight", {128}, 0},
    {"layer2.3.conv1.weight", {128, 512, 1, 1}, 51380224},
    {"layer2.2.bn3.bias", {512}, 0},
    {"layer2.2.bn3.weight", {512}, 0},
    {"layer2.2.conv3.weight", {512, 128, 1, 1}, 51380224},
    {"layer2.2.bn2.bias", {128}, 0},
    {"layer2.2.bn2.weight", {128}, 0},
    {"layer2.2.conv2.weight", {128, 128, 3, 3}, 115605504},
    {"layer2.2.bn1.bias", {128}, 0},
    {"layer2.2.bn1.weight", {128}, 0},
    {"layer2.2.conv1.weight", {128, 512, 1, 1}, 51380224},
    {"layer2.1.bn3.bias", {512}, 0},
    {"layer2.1.bn3.weight", {512}, 0},
    {"layer2.1.conv3.weight", {512, 128, 1, 1}, 51380224},
    {"layer2.1.bn2.bias", {128}, 0},
    {"layer2.1.bn2.weight", {128}, 0},
    {"layer2.1.conv2.weight", {128, 128, 3, 3}, 115605504},
    {"layer2.1.bn1.bias", {128}, 0},
    {"layer2.1.bn1.weight", {128}, 0},
    {"layer2.1.conv1.weight", {128, 512, 1, 1}, 51380224},
    {"layer2.0.downsample.1.bias", {512}, 0},
    {"layer2.0.downsample.1.weight", {512}, 0},
    {"layer2.0.downsample.0.weight", {512, 256, 1, 1}, 102760448},
    {"layer2.0.bn3.bias", {512}, 0},
    {"layer2.0.bn3.weight", {512}, 0},
    {"layer2.0.conv3.weight", {512, 128, 1, 1}, 51380224},
    {"layer2.0.bn2.bias", {128}, 0},
    {"layer2.0.bn2.weight", {128}, 0},
    {"layer2.0.conv2.weight", {128, 128, 3, 3}, 115605504},
    {"layer2.0.bn1.bias", {128}, 0},
    {"layer2.0.bn1.weight", {128}, 0},
    {"layer2.0.conv1.weight", {128, 256, 1, 1}, 102760448},
    {"layer1.2.bn3.bias", {256}, 0},
    {"layer1.2.bn3.weight", {256}, 0},
    {"layer1.2.conv3.weight", {256, 64, 1, 1}, 51380224},
    {"layer1.2.bn2.bias", {64}, 0},
    {"layer1.2.bn2.weight", {64}, 0},
    {"layer1.2.conv2.weight", {64, 64, 3, 3}, 115605504},
    {"layer1.2.bn1.bias", {64}, 0},
    {"layer1.2.bn1.weight", {64}, 0},
    {"layer1.2.conv1.weight", {64, 256, 1, 1}, 51380224},
    {"layer1.1.bn3.bias", {256}, 0},
    {"layer1.1.bn3.weight", {256}, 0},
    {"layer1.1.conv3.weight", {256, 64, 1, 1}, 51380224},
    {"layer1.1.bn2.bias", {64}, 0},
    {"layer1.1.bn2.weight", {64}, 0},
    {"layer1.1.conv2.weight", {64, 64, 3, 3}, 115605504},
    {"layer1.1.bn1.bias", {64}, 0},
    {"layer1.1.bn1.weight", {64}, 0},
    {"layer1.1.conv1.weight", {64, 256, 1, 1}, 51380224},
    {"layer1.0.downsample.1.bias", {256}, 0},
    {"layer1.0.downsample.1.weight", {256}, 0},
    {"layer1.0.downsample.0.weight", {256, 64, 1, 1}, 51380224},
    {"layer1.0.bn3.bias", {256}, 0},
    {"layer1.0.bn3.weight", {256}, 0},
    {"layer1.0.conv3.weight", {256, 64, 1, 1}, 51380224},
    {"layer1.0.bn2.bias", {64}, 0},
    {"layer1.0.bn2.weight", {64}, 0},
    {"layer1.0.conv2.weight", {64, 64, 3, 3}, 115605504},
    {"layer1.0.bn1.bias", {64}, 0},
    {"layer1.0.bn1.weight", {64}, 0},
    {"layer1.0.conv1.weight", {64, 64, 1, 1}, 12845056},
    {"bn1.bias", {64}, 0},
    {"bn1.weight", {64}, 0},
    {"conv1.weight", {64, 3, 7, 7}, 118013952},
  };
  return kTensors;
}
// clang-format on

std::int64_t Numel(const Tensor& t) {
  return std::accumulate(t.shape.begin(), t.shape.end(), std::int64_t{1},
                         std::multiplies<std::int64_t>());
}

// ---------------------------------------------------------------------------------------------
// Command line

struct Options {
  std::string backend;
  std::string model = "resnet50";
  int steps = 5;
  int warmup = 1;
  double compute_ms = 200;
  double bucket_mb = 25;
  double first_bucket_mb = 1;
  std::string algo = "auto";
  // geoccl only: the WAN codec of the buckets' allreduces (Compression::parse spelling), with
  // error feedback per bucket unless --no-error-feedback.
  std::string compression;
  bool error_feedback = true;
  std::string json_path;
  int timeout_s = 600;
  bool print_layers = false;
  // A checkpoint broadcast in the background (geoccl only): after the --steps steps alone, the
  // same steps again while `background_mb` MiB are broadcast from `background_root` on
  // `background_class`, until both are done. `uplink_gbps`: each domain's uplink rate, for the
  // time the bandwidth left over by training allows.
  double background_mb = 0;
  std::string background_class = "bulk";
  int background_root = 0;
  double uplink_gbps = 1;
  bool background_alone = false;  // phase B runs no steps: the broadcast alone, for reference
  // blob: geoccl::broadcast_blob (chunked, hashed, codec chosen on the link) on its own thread;
  // broadcast: plain 64 MiB broadcasts issued at once. The gradient class takes broadcast only
  // (its operations must be issued in the same order as the training's on every rank).
  std::string background_api = "blob";
};

double ParseDouble(std::string_view name, std::string_view text, double min_value) {
  double v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || !(v >= min_value)) {
    throw UsageError(std::string(name) + ": expected a number >= " + std::to_string(min_value) +
                     ", got '" + std::string(text) + "'");
  }
  return v;
}

Options ParseArgs(int argc, char** argv) {
  Options o;
  ArgReader args(argc, argv);
  while (args.Next()) {
    const std::string_view name = args.name();
    if (name == "--backend") o.backend = args.Value();
    else if (name == "--model") o.model = args.Value();
    else if (name == "--steps") o.steps = args.IntValue(1);
    else if (name == "--warmup") o.warmup = args.IntValue(0);
    else if (name == "--compute-ms") o.compute_ms = ParseDouble(name, args.Value(), 0);
    else if (name == "--bucket-mb") o.bucket_mb = ParseDouble(name, args.Value(), 0.001);
    else if (name == "--first-bucket-mb") o.first_bucket_mb = ParseDouble(name, args.Value(), 0.001);
    else if (name == "--algo") o.algo = args.Value();
    else if (name == "--compression") o.compression = args.Value();
    else if (name == "--no-error-feedback") o.error_feedback = false;
    else if (name == "--json") o.json_path = args.Value();
    else if (name == "--timeout-s") o.timeout_s = args.IntValue(1);
    else if (name == "--print-layers") o.print_layers = true;
    else if (name == "--background-mb") o.background_mb = ParseDouble(name, args.Value(), 0);
    else if (name == "--background-class") o.background_class = args.Value();
    else if (name == "--background-root") o.background_root = args.IntValue(0);
    else if (name == "--background-alone") o.background_alone = true;
    else if (name == "--background-api") o.background_api = args.Value();
    else if (name == "--uplink-gbps") o.uplink_gbps = ParseDouble(name, args.Value(), 0.001);
    else throw args.Unknown();
  }
  if (o.model != "resnet50") throw UsageError("--model " + o.model + ": only resnet50");
  if (!o.print_layers && o.backend != "geoccl" && o.backend != "gloo") {
    throw UsageError("--backend must be geoccl or gloo");
  }
  if (o.background_mb > 0 && o.backend != "geoccl") throw UsageError("--background-mb: geoccl only");
  if (!o.compression.empty() && o.backend != "geoccl") throw UsageError("--compression: geoccl only");
  if (o.background_class != "bulk" && o.background_class != "gradient")
    throw UsageError("--background-class must be bulk or gradient");
  if (o.background_api != "blob" && o.background_api != "broadcast")
    throw UsageError("--background-api must be blob or broadcast");
  if (o.background_class == "gradient" && o.background_api == "blob")
    throw UsageError("--background-class gradient needs --background-api broadcast");
#ifndef GEOCCL_HAVE_GLOO
  if (o.backend == "gloo") throw UsageError("built without Gloo (apt-get install libgloo-dev)");
#endif
  return o;
}

void PrintLayers() {
  std::printf("{\"model\": \"resnet50\", \"order\": \"backward\", \"tensors\": [\n");
  const auto& ts = ResNet50();
  for (std::size_t i = 0; i < ts.size(); ++i) {
    std::printf("  {\"name\": \"%s\", \"shape\": [", ts[i].name);
    for (std::size_t d = 0; d < ts[i].shape.size(); ++d) {
      std::printf("%s%" PRId64, d ? ", " : "", ts[i].shape[d]);
    }
    std::printf("], \"macs\": %" PRId64 "}%s\n", ts[i].macs, i + 1 < ts.size() ? "," : "");
  }
  std::printf("]}\n");
}

// ---------------------------------------------------------------------------------------------
// Buckets and the emulated backward pass

struct Bucket {
  std::size_t first = 0, last = 0;  // tensor index range [first, last)
  std::size_t count = 0;            // fp32 elements
  std::vector<float> data;
};

struct Plan {
  std::vector<Bucket> buckets;
  std::vector<std::size_t> bucket_of;   // tensor -> bucket
  std::vector<double> sleep_us;         // tensor -> compute before its gradient is ready
  std::size_t total_params = 0;
};

Plan MakePlan(const Options& o) {
  const auto& ts = ResNet50();
  Plan p;
  p.bucket_of.resize(ts.size());
  double total_macs = 0;
  for (const auto& t : ts) total_macs += static_cast<double>(t.macs);
  Bucket cur;
  for (std::size_t i = 0; i < ts.size(); ++i) {
    const double cap_mb = p.buckets.empty() ? o.first_bucket_mb : o.bucket_mb;
    const auto n = static_cast<std::size_t>(Numel(ts[i]));
    p.total_params += n;
    cur.count += n;
    cur.last = i + 1;
    p.bucket_of[i] = p.buckets.size();
    p.sleep_us.push_back(o.compute_ms * 1000.0 * static_cast<double>(ts[i].macs) / total_macs);
    if (static_cast<double>(cur.count) * 4 >= cap_mb * 1024 * 1024 || i + 1 == ts.size()) {
      p.buckets.push_back(std::move(cur));
      cur = Bucket{};
      cur.first = i + 1;
    }
  }
  for (auto& b : p.buckets) b.data.resize(b.count);
  return p;
}

// Compressed runs: the sum is no longer exact. Returns the largest error relative to the exact
// sum's largest value, and a digest of the bytes (equal on every rank when the results are
// bit-identical).
double RelativeError(const std::vector<float>& v, int n, std::uint64_t* digest) {
  const float fn = static_cast<float>(n);
  const double base = fn * (fn + 1) / 2, top = base + 6.0 * fn;
  double worst = 0;
  int phase = 0;
  for (const float x : v) {
    const double d = std::abs(static_cast<double>(x) - (base + fn * phase));
    worst = std::isfinite(x) ? std::max(worst, d / top) : 1e300;
    if (++phase == 7) phase = 0;
    std::uint32_t bits;
    std::memcpy(&bits, &x, 4);
    *digest = (*digest ^ bits) * 1099511628211ull;
  }
  return worst;
}

std::size_t CountMismatches(const std::vector<float>& v, int n) {
  const float fn = static_cast<float>(n);
  const float base = fn * (fn + 1) / 2;
  std::size_t bad = 0;
  int phase = 0;
  for (const float x : v) {
    if (x != base + fn * static_cast<float>(phase)) ++bad;
    if (++phase == 7) phase = 0;
  }
  return bad;
}

// Sleeps until an absolute deadline: the per-layer slices are scheduled from t0, so the timer
// slack of one sleep does not accumulate over the 161 layers and no CPU is spent spinning.
void SleepUntil(Clock::time_point until) { std::this_thread::sleep_until(until); }

// The backend interface the step driver uses.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual void barrier() = 0;
  // Starts an in-place fp32 sum allreduce of bucket `b`; completion in issue order.
  virtual void start(Bucket& b) = 0;
  // Waits for every started allreduce.
  virtual void wait_all() = 0;
  // Elementwise max over ranks, synchronous (no allreduce may be in flight).
  virtual void max(std::vector<double>& v) = 0;
};

class GeocclBackend final : public Backend {
 public:
  GeocclBackend(const Options& o)
      : comm_(geoccl::Communicator::from_env()), feedback_(o.error_feedback) {
    if (o.algo != "auto") opts_.algo = o.algo;
    opts_.timeout = std::chrono::seconds(o.timeout_s);
    if (!o.compression.empty()) opts_.compression = geoccl::Compression::parse(o.compression);
  }
  int rank() const override { return comm_->rank(); }
  int size() const override { return comm_->size(); }
  void barrier() override { comm_->barrier().wait(); }
  void start(Bucket& b) override {
    geoccl::OpOptions o = opts_;
    // One residual per bucket, keyed by its first tensor (stable from step to step).
    if (o.compression && feedback_) o.feedback_key = "bucket/" + std::to_string(b.first);
    works_.push_back(comm_->allreduce(b.data.data(), b.count, geoccl::DataType::kFloat32,
                                      geoccl::ReduceOp::kSum, o));
  }
  void wait_all() override {
    for (auto& w : works_) w.wait();
    works_.clear();
  }
  void max(std::vector<double>& v) override {
    comm_->allreduce(v.data(), v.size(), geoccl::DataType::kFloat64, geoccl::ReduceOp::kMax)
        .wait();
  }
  geoccl::Communicator& comm() { return *comm_; }

 private:
  std::unique_ptr<geoccl::Communicator> comm_;
  geoccl::OpOptions opts_;
  bool feedback_;
  std::vector<geoccl::Work> works_;
};

#ifdef GEOCCL_HAVE_GLOO
// One comm thread runs the queued allreduces in order, one at a time.
class GlooBackend final : public Backend {
 public:
  explicit GlooBackend(const Options& o)
      : timeout_(std::chrono::seconds(o.timeout_s)),
        session_(ReadEnv(), "geoccl-train-step", timeout_),
        ctx_(session_.context()) {
    thread_ = std::thread([this] { Loop(); });
  }
  ~GlooBackend() override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  int rank() const override { return ctx_->rank; }
  int size() const override { return ctx_->size; }
  void barrier() override {
    gloo::BarrierOptions opts(ctx_);
    opts.setTimeout(timeout_);
    gloo::barrier(opts);
  }
  void start(Bucket& b) override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      queue_.push_back(&b);
      ++pending_;
    }
    cv_.notify_all();
  }
  void wait_all() override {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return pending_ == 0 || error_; });
    if (error_) std::rethrow_exception(error_);
  }
  void max(std::vector<double>& v) override {
    gloo::AllreduceOptions opts(ctx_);
    opts.setOutput(v.data(), v.size());
    opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, std::size_t)>(
        &gloo::max<double>));
    opts.setTimeout(timeout_);
    gloo::allreduce(opts);
  }

 private:
  void Loop() {
    while (true) {
      Bucket* b = nullptr;
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        b = queue_.front();
        queue_.pop_front();
      }
      try {
        gloo::AllreduceOptions opts(ctx_);
        opts.setOutput(b->data.data(), b->count);
        opts.setReduceFunction(
            static_cast<void (*)(void*, const void*, const void*, std::size_t)>(
                &gloo::sum<float>));
        opts.setTimeout(timeout_);
        gloo::allreduce(opts);
      } catch (...) {
        std::lock_guard<std::mutex> lk(mu_);
        if (!error_) error_ = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> lk(mu_);
        --pending_;
      }
      cv_.notify_all();
    }
  }

  // RANK / WORLD_SIZE default to 0 / 1 here; the rest as in ReadGlooEnv.
  static GlooEnv ReadEnv() {
    const int rank = std::stoi(GetEnv("RANK").value_or("0"));
    const int world = std::stoi(GetEnv("WORLD_SIZE").value_or("1"));
    return ReadGlooEnv(rank, world);
  }

  std::chrono::milliseconds timeout_;
  GlooSession session_;  // rendezvous directory + connected context
  std::shared_ptr<gloo::Context> ctx_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Bucket*> queue_;
  int pending_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
};
#endif  // GEOCCL_HAVE_GLOO

// ---------------------------------------------------------------------------------------------

std::string JsonList(const std::vector<double>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + JsonNumber(v[i]);
  return s + "]";
}

// The background checkpoint's bytes at offset `off`: pseudo-random (splitmix64 of the 8-byte word
// index), as incompressible as trained fp32 weights nearly are (a lossless codec wins nothing).
void FillCheckpoint(std::vector<std::uint8_t>& p, std::size_t off) {
  for (std::size_t i = 0; i < p.size(); i += 8) {
    std::uint64_t z = (off + i) / 8 + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    std::memcpy(p.data() + i, &z, std::min<std::size_t>(8, p.size() - i));
  }
}

// Bytes each domain's ranks sent to ranks of other domains (its uplink), both classes: index d.
std::vector<double> UplinkBytes(geoccl::Communicator& c) {
  const auto dom = c.topology().domain_of;
  const int domains = dom.empty() ? 1 : *std::max_element(dom.begin(), dom.end()) + 1;
  std::vector<double> v(static_cast<std::size_t>(domains), 0.0);
  const int mine = dom.empty() ? 0 : dom[static_cast<std::size_t>(c.rank())];
  for (const auto& ps : c.peer_stats())
    if (dom.empty() || dom[static_cast<std::size_t>(ps.peer)] != mine)
      v[static_cast<std::size_t>(mine)] += static_cast<double>(ps.bytes_sent + ps.bulk_bytes_sent);
  c.allreduce(v.data(), v.size(), geoccl::DataType::kFloat64, geoccl::ReduceOp::kSum).wait();
  return v;
}

// Phase A (the steps alone) has run; step_us holds its steps. Phase B: the same steps while a
// checkpoint of opt.background_mb MiB is broadcast from opt.background_root in 64 MiB
// operations on opt.background_class, issued at once before the first step of the phase (as a
// checkpoint save would be). Reports the slowdown of the step and the background's time
// against the time the uplink bandwidth left over by training allows.
template <class RunStep>
int RunWithBackground(const Options& opt, GeocclBackend& be, RunStep& run_step,
                      std::vector<double>& step_us, std::size_t& mismatches) {
  auto& c = be.comm();
  const int rank = c.rank(), n = c.size();
  // Phase A's traffic, measured over the same number of steps again (the first pass above
  // included the warm-up).
  const std::vector<double> before_a = UplinkBytes(c);
  const auto ta0 = Clock::now();
  step_us.clear();
  for (int s = 0; s < opt.steps; ++s) run_step(true);
  const double ta = std::chrono::duration<double>(Clock::now() - ta0).count();
  const std::vector<double> after_a = UplinkBytes(c);
  const std::vector<double> phase_a = step_us;

  const std::size_t chunk = std::size_t{64} << 20;
  const auto total = static_cast<std::size_t>(opt.background_mb * (1 << 20));
  std::vector<std::vector<std::uint8_t>> parts;
  for (std::size_t off = 0; off < total; off += chunk) {
    parts.emplace_back(std::min(chunk, total - off));
    auto& p = parts.back();
    if (rank == opt.background_root) FillCheckpoint(p, off);
  }
  geoccl::OpOptions bo;
  bo.priority = opt.background_class == "bulk" ? geoccl::Priority::kBulk : geoccl::Priority::kGradient;
  bo.timeout = std::chrono::seconds(opt.timeout_s);
  std::atomic<int> left{static_cast<int>(parts.size())};
  std::atomic<std::int64_t> done_ns{0};
  const auto tb0 = Clock::now();
  std::vector<geoccl::Work> works;
  std::thread blob_thread;
  std::exception_ptr blob_error;
  std::vector<std::uint8_t> blob_in, blob_out;
  if (opt.background_api == "blob") {
    left = 1;
    if (rank == opt.background_root)
      for (auto& p : parts) blob_in.insert(blob_in.end(), p.begin(), p.end());
    blob_thread = std::thread([&, tb0] {
      try {
        geoccl::BlobOptions o;
        o.timeout = bo.timeout;
        geoccl::broadcast_blob(c, opt.background_root, blob_in, &blob_out, o);
      } catch (...) {
        blob_error = std::current_exception();
      }
      done_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - tb0).count();
      left = 0;
    });
  } else {
    for (auto& p : parts) {
      works.push_back(c.broadcast(p.data(), p.size(), geoccl::DataType::kUInt8, opt.background_root, bo));
      works.back().on_complete([&, tb0](std::exception_ptr) {
        if (--left == 0)
          done_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - tb0).count();
      });
    }
  }
  step_us.clear();
  int steps_b = 0;
  std::vector<double> overlapped;  // 1: the background was still running on this rank at the step's start
  while (!opt.background_alone) {
    overlapped.push_back(left.load() > 0 ? 1.0 : 0.0);
    run_step(true);
    ++steps_b;
    // Every rank must agree on whether to run another step (the barrier in each step).
    std::vector<double> flag{left.load() > 0 || steps_b < opt.steps ? 1.0 : 0.0};
    be.max(flag);
    if (flag[0] == 0) break;
  }
  const double tb_steps = std::chrono::duration<double>(Clock::now() - tb0).count();
  for (auto& w : works) w.wait();
  if (blob_thread.joinable()) blob_thread.join();
  if (blob_error) std::rethrow_exception(blob_error);
  if (opt.background_api == "blob" && rank != opt.background_root) {
    // The blob's bytes land in blob_out: check them where the parts would be.
    std::size_t off = 0;
    for (auto& p : parts) {
      if (blob_out.size() >= off + p.size()) std::copy_n(blob_out.begin() + static_cast<std::ptrdiff_t>(off), p.size(), p.begin());
      off += p.size();
    }
    if (blob_out.size() != off) ++mismatches;
  }
  const double tb = std::chrono::duration<double>(Clock::now() - tb0).count();
  const std::vector<double> after_b = UplinkBytes(c);
  std::size_t bad = 0;
  for (std::size_t k = 0, off = 0; k < parts.size(); off += parts[k].size(), ++k) {
    std::vector<std::uint8_t> want(parts[k].size());
    FillCheckpoint(want, off);
    bad += want != parts[k];
  }
  mismatches += bad;

  // Max over ranks of every figure.
  std::vector<double> g = phase_a;
  g.insert(g.end(), step_us.begin(), step_us.end());
  g.insert(g.end(), overlapped.begin(), overlapped.end());
  g.push_back(static_cast<double>(done_ns.load()) / 1e9);
  g.push_back(mismatches ? 1.0 : 0.0);
  be.max(g);
  const bool correct = g.back() == 0.0;
  const double t_bg = g[g.size() - 2];
  std::vector<double> sa(g.begin(), g.begin() + static_cast<std::ptrdiff_t>(phase_a.size()));
  std::vector<double> sb(g.begin() + static_cast<std::ptrdiff_t>(phase_a.size()),
                         g.begin() + static_cast<std::ptrdiff_t>(phase_a.size() + step_us.size()));
  // The steps that ran while the background did (on any rank): their mean against phase A's.
  std::vector<double> during;
  for (std::size_t i = 0; i < sb.size(); ++i)
    if (g[phase_a.size() + sb.size() + i] > 0) during.push_back(sb[i]);
  auto mean = [](const std::vector<double>& v) {
    return v.empty() ? 0.0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  };
  // Leftover bandwidth: training used grad_rate_d of uplink d over phase A's wall time; the
  // background put bg_d bytes on it (phase B's bytes less the training's per-step bytes).
  const double link = opt.uplink_gbps * 1e9;
  double allowed = 0, bottleneck_bg = 0, bottleneck_used = 0;
  for (std::size_t d = 0; d < after_b.size(); ++d) {
    const double grad_step = (after_a[d] - before_a[d]) / opt.steps;
    const double grad_rate = opt.background_alone ? 0 : (after_a[d] - before_a[d]) * 8 / ta;
    const double bg = (after_b[d] - after_a[d]) - grad_step * steps_b;
    const double t = bg * 8 / std::max(link - grad_rate, link * 0.01);
    if (t > allowed) {
      allowed = t;
      bottleneck_bg = bg;
      bottleneck_used = grad_rate;
    }
  }
  if (rank == 0) {
    const double ma = mean(sa) / 1000, mb = mean(during) / 1000;
    const double wall_a = ta / opt.steps, wall_b = steps_b > 0 ? tb_steps / steps_b : 0;
    std::printf("# background: %.0f MiB broadcast from rank %d on class %s with %s\n", opt.background_mb,
                opt.background_root, opt.background_class.c_str(),
                opt.background_api == "blob" ? "broadcast_blob" : "64 MiB broadcasts");
    std::printf("  step alone      mean %8.1f ms (%d steps)\n", ma, opt.steps);
    std::printf("  step with bg    mean %8.1f ms (%zu of %d steps ran during the background)   slowdown %+.1f%%\n",
                mb, during.size(), steps_b, ma > 0 && mb > 0 ? (mb / ma - 1) * 100 : 0.0);
    // What a user sees: training throughput. Wall time per step, barriers included (a
    // background on the gradient class delays the next step's barrier, not its timed part).
    if (steps_b > 0)
      std::printf("  wall per step   alone %8.1f ms, with background %8.1f ms   slowdown %+.1f%%\n",
                  wall_a * 1000, wall_b * 1000, (wall_b / wall_a - 1) * 100);
    std::printf("  background      %8.2f s; leftover-bandwidth time %.2f s (bottleneck uplink: %.0f MiB "
                "of background, training uses %.0f Mbit/s of %.0f)   ratio %.2f\n",
                t_bg, allowed, bottleneck_bg / (1 << 20), bottleneck_used / 1e6, link / 1e6,
                allowed > 0 ? t_bg / allowed : 0.0);
    std::printf("  correct %s   (phase B wall %.1f s)\n", correct ? "yes" : "NO", tb);
    std::fflush(stdout);
    if (!opt.json_path.empty()) {
      std::ostringstream os;
      os << "[{\"backend\": \"geoccl\", \"op\": \"train_step_background\", \"world_size\": " << n
         << ", \"background_mb\": " << JsonNumber(opt.background_mb) << ", \"background_class\": \""
         << opt.background_class << "\", \"background_api\": \"" << opt.background_api
         << "\", \"step_ms_alone\": " << JsonNumber(ma)
         << ", \"step_ms_with_background\": " << JsonNumber(mb) << ", \"slowdown\": " << JsonNumber(mb / ma - 1)
         << ", \"wall_per_step_ms_alone\": " << JsonNumber(wall_a * 1000)
         << ", \"wall_per_step_ms_with_background\": " << JsonNumber(wall_b * 1000)
         << ", \"steps_with_background\": " << steps_b << ", \"background_s\": " << JsonNumber(t_bg)
         << ", \"leftover_bandwidth_s\": " << JsonNumber(allowed)
         << ", \"ratio_to_leftover\": " << JsonNumber(allowed > 0 ? t_bg / allowed : 0.0)
         << ", \"correct\": " << (correct ? "true" : "false") << "}]\n";
      WriteFileAtomic(opt.json_path, os.str());
    }
  }
  return CheckedExit(correct, "train_step", rank, "wrong results");
}

int Run(int argc, char** argv) {
  const Options opt = ParseArgs(argc, argv);
  if (opt.print_layers) {
    PrintLayers();
    return 0;
  }
  Plan plan = MakePlan(opt);
  std::unique_ptr<Backend> be;
  if (opt.backend == "geoccl") {
    be = std::make_unique<GeocclBackend>(opt);
  } else {
#ifdef GEOCCL_HAVE_GLOO
    be = std::make_unique<GlooBackend>(opt);
#endif
  }
  const int rank = be->rank(), n = be->size();
  const auto& ts = ResNet50();
  if (rank == 0) {
    std::printf("# train_step: resnet50, %zu tensors, %zu params (%.1f MiB fp32), %zu buckets "
                "(first %.3g MiB, then %.3g MiB), compute %.0f ms, backend %s, world_size %d\n",
                ts.size(), plan.total_params, plan.total_params * 4.0 / (1 << 20),
                plan.buckets.size(), opt.first_bucket_mb, opt.bucket_mb, opt.compute_ms,
                opt.backend.c_str(), n);
    std::printf("# %6s %12s %12s %10s\n", "step", "step_ms", "compute_ms", "exposed");
    std::fflush(stdout);
  }

  std::vector<double> step_us, compute_us;  // this rank's, measured steps only
  std::size_t mismatches = 0;
  const bool compressed = !opt.compression.empty();
  double worst_error = 0;  // compressed runs (RelativeError)
  std::uint64_t digest = 1469598103934665603ull;
  auto run_step = [&](bool measured) {
    for (auto& b : plan.buckets) FillPattern(b.data, rank);
    be->barrier();
    const auto t0 = Clock::now();
    auto due = t0;
    for (std::size_t i = 0; i < ts.size(); ++i) {
      due += std::chrono::nanoseconds(static_cast<std::int64_t>(plan.sleep_us[i] * 1000));
      SleepUntil(due);
      Bucket& b = plan.buckets[plan.bucket_of[i]];
      if (b.last == i + 1) be->start(b);
    }
    const auto t_compute = Clock::now();
    be->wait_all();
    const auto t_step = Clock::now();
    for (const auto& b : plan.buckets) {
      if (compressed) worst_error = std::max(worst_error, RelativeError(b.data, n, &digest));
      else mismatches += CountMismatches(b.data, n);
    }
    if (measured) {
      step_us.push_back(std::chrono::duration<double, std::micro>(t_step - t0).count());
      compute_us.push_back(std::chrono::duration<double, std::micro>(t_compute - t0).count());
    }
  };
  for (int s = 0; s < opt.warmup + opt.steps; ++s) run_step(s >= opt.warmup);
  if (opt.background_mb > 0) {
    return RunWithBackground(opt, static_cast<GeocclBackend&>(*be), run_step, step_us, mismatches);
  }

  std::vector<double> g = step_us;
  g.insert(g.end(), compute_us.begin(), compute_us.end());
  // Compressed: bit-identical on every rank (the digest's max and min agree) and finite.
  const double d53 = static_cast<double>(digest >> 11);
  g.push_back(worst_error);
  g.push_back(d53);
  g.push_back(-d53);
  g.push_back(mismatches ? 1.0 : 0.0);
  be->max(g);
  const bool identical = g[g.size() - 3] == -g[g.size() - 2];
  worst_error = g[g.size() - 4];
  const bool correct = g.back() == 0.0 && identical && worst_error < 1e300;
  std::vector<double> step(g.begin(), g.begin() + opt.steps);
  std::vector<double> comp(g.begin() + opt.steps, g.begin() + 2 * opt.steps);
  std::vector<double> exposed;
  for (int s = 0; s < opt.steps; ++s) exposed.push_back((step[s] - comp[s]) / step[s]);

  if (rank == 0) {
    for (int s = 0; s < opt.steps; ++s) {
      std::printf("  %6d %12.1f %12.1f %9.1f%%\n", s, step[s] / 1000, comp[s] / 1000,
                  exposed[s] * 100);
    }
    std::printf("  median %12.1f %12.1f %9.1f%%   correct %s", Median(step) / 1000,
                Median(comp) / 1000, Median(exposed) * 100, correct ? "yes" : "NO");
    if (compressed)
      std::printf("   (%s%s: bit-identical %s, largest error %.3g of the largest value)",
                  opt.compression.c_str(), opt.error_feedback ? " + error feedback" : "",
                  identical ? "yes" : "NO", worst_error);
    std::printf("\n");
    std::fflush(stdout);
    if (!opt.json_path.empty()) {
      std::ostringstream os;
      os << "[{\"backend\": \"" << opt.backend << "\", \"op\": \"train_step\""
         << ", \"model\": \"resnet50\", \"params\": " << plan.total_params
         << ", \"bytes\": " << plan.total_params * 4 << ", \"buckets\": " << plan.buckets.size()
         << ", \"bucket_mb\": " << JsonNumber(opt.bucket_mb)
         << ", \"first_bucket_mb\": " << JsonNumber(opt.first_bucket_mb)
         << ", \"world_size\": " << n << ", \"steps\": " << opt.steps
         << ", \"compute_ms_target\": " << JsonNumber(opt.compute_ms)
         << ", \"step_ms_median\": " << JsonNumber(Median(step) / 1000)
         << ", \"step_ms_min\": " << JsonNumber(*std::min_element(step.begin(), step.end()) / 1000)
         << ", \"step_ms_max\": " << JsonNumber(*std::max_element(step.begin(), step.end()) / 1000)
         << ", \"compute_ms_median\": " << JsonNumber(Median(comp) / 1000)
         << ", \"exposed_comm_share_median\": " << JsonNumber(Median(exposed))
         << ", \"step_ms\": " << JsonList([&] {
              std::vector<double> v;
              for (double x : step) v.push_back(x / 1000);
              return v;
            }())
         << ", \"compression\": \"" << (compressed ? opt.compression : "none") << "\""
         << ", \"error_feedback\": " << (compressed && opt.error_feedback ? "true" : "false")
         << ", \"max_rel_error\": " << JsonNumber(worst_error)
         << ", \"correct\": " << (correct ? "true" : "false") << "}]\n";
      WriteFileAtomic(opt.json_path, os.str());
    }
  }
  return CheckedExit(correct, "train_step", rank, "wrong allreduce results");
}

}  // namespace
}  // namespace geoccl_bench

int main(int argc, char** argv) {
  using geoccl_bench::kUsage, geoccl_bench::Run;
  return geoccl_bench::RunMain("train_step", kUsage, [&] { return Run(argc, argv); });
}
