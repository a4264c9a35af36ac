// One rank of the compression multi-process tests (compression_mp_test.cc starts N of them, real
// processes on loopback sockets, in the domains GEOCCL_TEST_DOMAINS names). Modes:
//   accuracy  for every codec and form (GEOCCL_TEST_CODECS, comma-separated Compression
//             spellings), sum and avg, on sizes that take the leaders' exchange, the one-block
//             ring and the pipelined blocks: all ranks' results are bit-identical (allgather of
//             the raw bytes), and the relative RMS error against the exact sum (in double) is
//             within the codec's bound. Checks the stats: every element is encoded once per
//             domain, so the encoded elements of all ranks add up to domains * count per call.
//   feedback  the same input every step for T steps, with and without error feedback: with it,
//             the mean of the results converges to the exact sum (the error of the mean falls
//             well below one step's error); without it, it does not. Checks the residual memory
//             (4 bytes per element this rank encodes) and forget_feedback.
//   mismatch  the last rank asks for another codec: every rank fails with kMismatch.
//   invalid   an explicit codec on int32, on max, a bad ratio: kInvalidArgument from the call on
//             every rank; the group goes on (a compressed allreduce after it is correct).
//   single    one site: an explicit codec leaves the allreduce exact (nothing is compressed).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "rank_checks.h"
#include "geoccl/geoccl.h"

using namespace geoccl;

namespace {

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out(1);
  for (char ch : s)
    if (ch == ',') out.emplace_back();
    else out.back() += ch;
  return out;
}

// Rank r's input: gaussian values with a per-rank scale, plus a few large outliers (what top-k
// picks), the same on every run.
std::vector<float> input(int rank, size_t count, uint32_t salt = 0) {
  std::mt19937 gen(1234u + static_cast<uint32_t>(rank) * 7919u + salt);
  std::normal_distribution<float> g(0.0f, 1.0f + 0.25f * static_cast<float>(rank));
  std::vector<float> x(count);
  for (auto& v : x) v = g(gen);
  for (size_t i = 0; i < count; i += 997) x[i] *= 20.0f;
  return x;
}

std::vector<double> exact_sum(int n, size_t count, uint32_t salt = 0) {
  std::vector<double> s(count, 0.0);
  for (int r = 0; r < n; ++r) {
    const auto x = input(r, count, salt);
    for (size_t i = 0; i < count; ++i) s[i] += x[i];
  }
  return s;
}

double rel_rms(const std::vector<float>& got, const std::vector<double>& want, double scale = 1) {
  double e = 0, w = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = got[i] - want[i] * scale;
    e += d * d;
    w += want[i] * scale * want[i] * scale;
  }
  return std::sqrt(e / std::max(w, 1e-300));
}

int domains_of(Communicator& c) {
  int d = 0;
  for (int x : c.topology().domain_of) d = std::max(d, x + 1);
  return d;
}

// The bound on the relative RMS error of one compressed allreduce (inputs as above).
double bound(const Compression& z) {
  switch (z.codec) {
    case Codec::kFp16: return 2e-3;
    case Codec::kBf16: return 1.5e-2;
    case Codec::kInt8: return 3e-2;
    case Codec::kInt4: return 0.45;
    case Codec::kTopK: return z.topk_ratio >= 1.0 ? 2e-3 : 0.85;  // 5 %: 0.67-0.77 measured
    // 2 bits: the inputs' outliers set the blocks' ranges and the error exceeds the signal (an
    // output of zeros would pass these two: what they check is bit-identity and no blow-up).
    case Codec::kInt2: return 2.0;    // 1.01-1.64 measured
    case Codec::kInt2Sr: return 2.6;  // 1.42-2.17 measured (ring and allgather)
    case Codec::kTopKInt8: return z.topk_ratio >= 1.0 ? 0.1 : 0.85;  // 1: 0.082; 5 %: 0.67-0.77
    case Codec::kTopKInt4: return z.topk_ratio >= 1.0 ? 0.95 : 0.85;  // 1: 0.84; 5 %: 0.68-0.73
    case Codec::kTopKInt2: return z.topk_ratio >= 1.0 ? 1.0 : 0.95;   // 1: 0.91; 5 %: 0.74-0.90
    default: return 0;
  }
}

int mode_accuracy(Communicator& c) {
  const int me = c.rank(), n = c.size(), doms = domains_of(c);
  const char* list = std::getenv("GEOCCL_TEST_CODECS");
  const auto codecs = split(list ? list : "fp16,bf16,int8,int4,topk:0.05,topk:1,int8@allgather,int8@ring,topk:0.05@ring,"
                                   "int2-sr,topk-int8:0.05,topk-int8:1");
  // 40000 elements take the leaders' exchange (< the wan_small_msg threshold), 600000 the ring in
  // one block, 3M (with GEOCCL_EXPERIMENT=chunk=64K in the test) the pipelined blocks.
  for (size_t count : {size_t{40000}, size_t{600000}, size_t{3000000}}) {
    const auto want = exact_sum(n, count);
    const auto mine = input(me, count);
    for (const auto& name : codecs) {
      const Compression z = Compression::parse(name);
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
        // Under the sanitizers avg (a scale after the same path) runs on the smallest size only.
        if (kSanitized && op == ReduceOp::kAvg && count > 40000) continue;
        // The pipelined blocks (3M) on one codec per form: the same code for every codec.
        if (count == 3000000 && name != "int8" && name != "topk:0.05@ring") continue;
        const auto before = c.compression_stats();
        auto buf = mine;
        OpOptions o;
        o.compression = z;
        c.allreduce(buf.data(), count, DataType::kFloat32, op, o).wait();
        const double scale = op == ReduceOp::kAvg ? 1.0 / n : 1.0;
        const double err = rel_rms(buf, want, scale);
        if (me == 0)
          std::printf("%-16s %8zu %s: relative RMS error %.3g (bound %.3g)\n", name.c_str(), count,
                      op == ReduceOp::kSum ? "sum" : "avg", err, bound(z));
        CHECK(err <= bound(z), "%s %zu: relative RMS error %g above %g", name.c_str(), count, err, bound(z));
        CHECK(bit_identical(c, buf), "%s %zu: ranks' results differ", name.c_str(), count);
        const auto after = c.compression_stats();
        CHECK(after.calls == before.calls + 1, "%s: calls %llu -> %llu", name.c_str(),
              static_cast<unsigned long long>(before.calls), static_cast<unsigned long long>(after.calls));
        // Every element is encoded once per domain: by its owner in that domain (allgather
        // form), or by each domain's owner once as it passes through (ring).
        uint64_t encoded = after.elements_encoded - before.elements_encoded;
        c.allreduce(&encoded, 1, DataType::kInt64, ReduceOp::kSum).wait();
        const uint64_t expect = count * static_cast<uint64_t>(doms);
        CHECK(encoded == expect, "%s %zu: %llu elements encoded in all, wanted %llu", name.c_str(), count,
              static_cast<unsigned long long>(encoded), static_cast<unsigned long long>(expect));
      }
    }
  }
  return g_failures ? 1 : 0;
}

int mode_feedback(Communicator& c) {
  const int me = c.rank(), n = c.size();
  const char* list = std::getenv("GEOCCL_TEST_CODECS");
  // Under the sanitizers one codec per form: the feedback code is the same for every codec.
  const auto codecs = split(list ? list : kSanitized ? "int4,topk:0.1@ring" : "int4,topk:0.1,int4@ring,topk:0.1@ring");
  const int steps = 40;
  // 300000 elements (1.2 MB) on the ring (forced below); the release build checks twice that.
  const size_t ring_count = kSanitized ? 300000 : 600000;
  for (size_t count : {size_t{40000}, ring_count}) {
    const auto want = exact_sum(n, count, 5);
    const auto mine = input(me, count, 5);
    for (const auto& name : codecs) {
      double err_of_mean[2] = {0, 0}, first_err[2] = {0, 0};
      for (int fb = 0; fb < 2; ++fb) {
        OpOptions o;
        o.compression = Compression::parse(name);
        // The leaders' path and the ring's path, whatever the cost model would choose here.
        o.algo = count == ring_count ? "hier-ring" : "hier-small";
        if (fb) o.feedback_key = "k/" + name + "/" + std::to_string(count);
        std::vector<double> total(count, 0.0);
        for (int t = 0; t < steps; ++t) {
          auto buf = mine;
          c.allreduce(buf.data(), count, DataType::kFloat32, ReduceOp::kSum, o).wait();
          if (t == 0) first_err[fb] = rel_rms(buf, want);
          for (size_t i = 0; i < count; ++i) total[i] += buf[i];
        }
        std::vector<float> mean(count);
        for (size_t i = 0; i < count; ++i) mean[i] = static_cast<float>(total[i] / steps);
        err_of_mean[fb] = rel_rms(mean, want);
        CHECK(bit_identical(c, mean), "%s: means differ between ranks", name.c_str());
      }
      if (me == 0)
        std::printf("%-16s %8zu: one step's error %.3g; error of the mean of %d steps: %.3g without "
                    "feedback, %.3g with\n",
                    name.c_str(), count, first_err[0], steps, err_of_mean[0], err_of_mean[1]);
      // Without feedback the same input gives the same error every step: the mean keeps it.
      CHECK(err_of_mean[0] > 0.9 * first_err[0], "%s: without feedback the mean improved", name.c_str());
      CHECK(err_of_mean[1] < 0.25 * err_of_mean[0], "%s: with feedback the mean's error %g is not "
            "well below %g", name.c_str(), err_of_mean[1], err_of_mean[0]);
    }
  }
  // Residual memory: 4 bytes per element this rank encodes, per key; forget drops it.
  const auto s = c.compression_stats();
  uint64_t bytes = s.feedback_bytes;
  c.allreduce(&bytes, 1, DataType::kInt64, ReduceOp::kSum).wait();
  if (me == 0)
    std::printf("residuals: %llu keys on rank 0, %llu bytes on rank 0, %llu bytes on all ranks\n",
                static_cast<unsigned long long>(s.feedback_keys),
                static_cast<unsigned long long>(s.feedback_bytes), static_cast<unsigned long long>(bytes));
  // Rank 0 leads its domain, so it encodes on both paths: one key per codec, size and form.
  if (me == 0) CHECK(s.feedback_keys == codecs.size() * 2, "%llu keys", static_cast<unsigned long long>(s.feedback_keys));
  c.forget_feedback("k/" + codecs[0] + "/" + std::to_string(ring_count));  // on the ring path every rank holds it
  CHECK(c.compression_stats().feedback_keys == s.feedback_keys - 1, "forget(key) did not drop it");
  c.forget_feedback();
  CHECK(c.compression_stats().feedback_bytes == 0, "forget() left residuals");
  return g_failures ? 1 : 0;
}

int mode_invalid(Communicator& c) {
  const int me = c.rank(), n = c.size();
  std::vector<int32_t> ints(100000, me);
  std::vector<float> floats(100000, 1.0f);
  OpOptions o;
  o.compression = Compression::parse("int8");
  expect_code([&] { c.allreduce(ints.data(), ints.size(), DataType::kInt32, ReduceOp::kSum, o); },
              ErrorCode::kInvalidArgument, "int32");
  expect_code([&] { c.allreduce(floats.data(), floats.size(), DataType::kFloat32, ReduceOp::kMax, o); },
              ErrorCode::kInvalidArgument, "max");
  OpOptions bad;
  bad.compression = Compression{Codec::kTopK, 0.0, CompressedAlgo::kAuto};
  expect_code([&] { c.allreduce(floats.data(), floats.size(), DataType::kFloat32, ReduceOp::kSum, bad); },
              ErrorCode::kInvalidArgument, "ratio 0");
  expect_code([] { (void)Compression::parse("int9"); }, ErrorCode::kInvalidArgument, "parse int9");
  // The group goes on.
  c.allreduce(floats.data(), floats.size(), DataType::kFloat32, ReduceOp::kSum, o).wait();
  for (float v : floats) CHECK(v == static_cast<float>(n), "after the errors: %g", static_cast<double>(v));
  return g_failures ? 1 : 0;
}

int mode_single(Communicator& c) {
  const int me = c.rank(), n = c.size();
  CHECK(domains_of(c) == 1, "expected one domain");
  const size_t count = 600000;
  auto a = input(me, count), b = a;
  OpOptions o;
  o.compression = Compression::parse("int4");
  c.allreduce(a.data(), count, DataType::kFloat32, ReduceOp::kSum, o).wait();
  c.allreduce(b.data(), count, DataType::kFloat32, ReduceOp::kSum).wait();
  CHECK(std::memcmp(a.data(), b.data(), count * 4) == 0, "one site: the codec changed the result");
  CHECK(c.compression_stats().calls == 0, "one site: a call was compressed");
  (void)n;
  return g_failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  try {
    apply_test_domains();
    Config cfg = Config::from_env();
    cfg.op_timeout = std::chrono::seconds(120);
    if (mode == "mismatch") {
      if (cfg.rank == cfg.world_size - 1) setenv("GEOCCL_TEST_CODEC", "fp16", 1);
      return expect_code([&] {
        Communicator c(cfg);
        const char* mine = std::getenv("GEOCCL_TEST_CODEC");
        std::vector<float> buf(600000, 1.0f);
        OpOptions o;
        o.compression = Compression::parse(mine ? mine : "int8");
        c.allreduce(buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum, o).wait();
      }, ErrorCode::kMismatch, "codecs differ") | (g_failures ? 1 : 0);
    }
    Communicator c(cfg);
    if (mode == "accuracy") return mode_accuracy(c);
    if (mode == "feedback") return mode_feedback(c);
    if (mode == "invalid") return mode_invalid(c);
    if (mode == "single") return mode_single(c);
    std::fprintf(stderr, "unknown mode '%s'\n", mode.c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank error: %s\n", e.what());
    return 1;
  }
}
