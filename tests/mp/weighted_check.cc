// Rank program of weighted_mp_test.cc: weighted allreduces between real processes on loopback
// sockets, in the domains GEOCCL_TEST_DOMAINS names. Modes:
//   mean     weighted mean (f32, f64, compressed int8 with error feedback) against the exact one
//            computed here in double, bit-identical on every rank, shares as the weights say
//   robust   one rank sends a 100x update, one reports a high loss: excluded or down-weighted,
//            reported, and the mean is that of the others
//   stale    contributions older than max_staleness are left out on every rank
//   invalid  a bad argument on one rank is kInvalidArgument (or kMismatch) on every rank, fast,
//            and the group goes on
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "rank_checks.h"
#include "geoccl/geoccl.h"

using namespace geoccl;

namespace {

std::vector<double> input(int rank, size_t count) {
  std::mt19937 gen(777u + static_cast<uint32_t>(rank) * 31u);
  std::normal_distribution<double> g(0.5 * rank, 1.0);
  std::vector<double> x(count);
  for (auto& v : x) v = g(gen);
  return x;
}

template <typename T>
std::vector<T> as(const std::vector<double>& x) {
  return std::vector<T>(x.begin(), x.end());
}

// sum_r share[r] * input(r) with the ranks' inputs as they were rounded to T, in double.
template <typename T>
std::vector<double> expected(int n, size_t count, const std::vector<double>& share) {
  std::vector<double> want(count, 0.0);
  for (int r = 0; r < n; ++r) {
    const auto x = as<T>(input(r, count));
    for (size_t i = 0; i < count; ++i)
      want[i] += share[static_cast<size_t>(r)] * static_cast<double>(x[i]);
  }
  return want;
}

template <typename T>
double max_err(const std::vector<T>& got, const std::vector<double>& want) {
  double e = 0;
  for (size_t i = 0; i < got.size(); ++i)
    e = std::max(e, std::fabs(static_cast<double>(got[i]) - want[i]));
  return e;
}

int mode_mean(Communicator& c) {
  const int me = c.rank(), n = c.size();
  const size_t count = 300000;  // above the small-message threshold: the ring / hierarchical path
  std::vector<double> share(static_cast<size_t>(n));
  double total = 0;
  for (int r = 0; r < n; ++r) total += r + 1;
  for (int r = 0; r < n; ++r) share[static_cast<size_t>(r)] = (r + 1) / total;
  WeightedOptions o;
  o.weight = me + 1;  // sample counts 1..n
  {
    auto buf = as<float>(input(me, count));
    const auto res = weighted_allreduce(c, buf.data(), count, DataType::kFloat32, o);
    const double err = max_err(buf, expected<float>(n, count, share));
    CHECK(err < 2e-5, "f32: max error %g", err);
    CHECK(bit_identical(c, buf), "f32: ranks differ");
    CHECK(res.included.size() == static_cast<size_t>(n), "f32: %zu included", res.included.size());
    for (int r = 0; r < n; ++r) {
      CHECK(std::fabs(res.applied[static_cast<size_t>(r)] - share[static_cast<size_t>(r)]) < 1e-15,
            "share of %d: %g", r, res.applied[static_cast<size_t>(r)]);
      CHECK(res.weights[static_cast<size_t>(r)] == r + 1, "weight of %d", r);
    }
    CHECK(res.total_weight == total, "total %g", res.total_weight);
    // The norms are the ranks' own, the same table on every rank.
    const auto mine = as<float>(input(me, count));
    double s = 0;
    for (float v : mine) s += static_cast<double>(v) * v;
    CHECK(std::fabs(res.norms[static_cast<size_t>(me)] - std::sqrt(s)) < 1e-9 * std::sqrt(s),
          "norm");
    if (me == 0) std::fprintf(stderr, "f32 weighted mean: max error %.3g\n", err);
  }
  {
    auto buf = input(me, count);
    (void)weighted_allreduce(c, buf.data(), count, DataType::kFloat64, o);
    const double err = max_err(buf, expected<double>(n, count, share));
    CHECK(err < 1e-12, "f64: max error %g", err);
    CHECK(bit_identical(c, buf), "f64: ranks differ");
  }
  {
    // int8 on the hops between domains, with error feedback: within the codec's bound.
    WeightedOptions z = o;
    z.op.compression = Compression::parse("int8");
    z.op.feedback_key = "weighted";
    const auto before = c.compression_stats();
    auto buf = as<float>(input(me, count));
    (void)weighted_allreduce(c, buf.data(), count, DataType::kFloat32, z);
    const auto want = expected<float>(n, count, share);
    double e = 0, w = 0;
    for (size_t i = 0; i < count; ++i) {
      e += (buf[i] - want[i]) * (buf[i] - want[i]);
      w += want[i] * want[i];
    }
    const double rel = std::sqrt(e / w);
    CHECK(rel < 3e-2 && rel > 0, "int8: relative RMS error %g", rel);
    CHECK(bit_identical(c, buf), "int8: ranks differ");
    const auto dom = c.topology().domain_of;
    const bool several = std::any_of(dom.begin(), dom.end(), [&](int d) { return d != dom[0]; });
    // One site: nothing crosses a domain, nothing is compressed (docs/compression.md).
    CHECK(c.compression_stats().calls == before.calls + (several ? 1 : 0), "int8: %s",
          several ? "not compressed" : "compressed on one site");
    if (me == 0) std::fprintf(stderr, "int8 weighted mean: relative RMS error %.3g\n", rel);
  }
  return g_failures ? 1 : 0;
}

int mode_robust(Communicator& c) {
  const int me = c.rank(), n = c.size();
  const size_t count = 200000;
  const int bad = 3, liar = 1;
  auto mine = [&](int r) {
    auto x = input(r, count);
    if (r == bad)
      for (auto& v : x) v *= 100;
    return x;
  };
  auto expect_others = [&](const std::vector<float>& got, const std::vector<int>& out) {
    std::vector<double> want(count, 0.0);
    const double k = n - static_cast<double>(out.size());
    for (int r = 0; r < n; ++r) {
      if (std::find(out.begin(), out.end(), r) != out.end()) continue;
      const auto x = as<float>(mine(r));
      for (size_t i = 0; i < count; ++i) want[i] += static_cast<double>(x[i]) / k;
    }
    return max_err(got, want);
  };
  {
    // Equal weights without the robust mode: the bad rank drags the mean far away.
    auto buf = as<float>(mine(me));
    const auto res = weighted_allreduce(c, buf.data(), count, DataType::kFloat32, {});
    CHECK(res.outliers.empty(), "plain mode excluded ranks");
    CHECK(expect_others(buf, {bad}) > 1.0, "plain mode: the bad rank made no difference");
  }
  {
    WeightedOptions o;
    o.robust = RobustMode::kExclude;
    auto buf = as<float>(mine(me));
    const auto res = weighted_allreduce(c, buf.data(), count, DataType::kFloat32, o);
    CHECK(res.outliers == std::vector<int>{bad}, "exclude: %zu outliers", res.outliers.size());
    CHECK(res.applied[bad] == 0, "exclude: the bad rank has a share");
    const double err = expect_others(buf, {bad});
    CHECK(err < 2e-5, "exclude: max error %g against the others' mean", err);
    CHECK(bit_identical(c, buf), "exclude: ranks differ");
    CHECK(res.median_norm > 0 && res.norm_scale > 0, "exclude: no median figures");
  }
  {
    WeightedOptions o;
    o.robust = RobustMode::kDownweight;
    auto buf = as<float>(mine(me));
    const auto res = weighted_allreduce(c, buf.data(), count, DataType::kFloat32, o);
    CHECK(res.outliers.empty() && res.downweighted == std::vector<int>{bad}, "downweight: %zu/%zu",
          res.outliers.size(), res.downweighted.size());
    CHECK(res.applied[bad] > 0 && res.applied[bad] < 0.02, "downweight: share %g",
          res.applied[bad]);
    // The mean with the shares decided: the bad rank's contribution is bounded by the limit.
    std::vector<double> want(count, 0.0);
    for (int r = 0; r < n; ++r) {
      const auto x = as<float>(mine(r));
      for (size_t i = 0; i < count; ++i)
        want[i] += res.applied[static_cast<size_t>(r)] * static_cast<double>(x[i]);
    }
    CHECK(max_err(buf, want) < 1e-4, "downweight: max error %g", max_err(buf, want));
    CHECK(bit_identical(c, buf), "downweight: ranks differ");
  }
  {
    // By loss: rank `liar` reports a loss far above the others (its norm is normal).
    WeightedOptions o;
    o.robust = RobustMode::kExclude;
    o.statistic = RobustStatistic::kLoss;
    o.loss = me == liar ? 9.0 : 0.4 + 0.01 * me;
    auto buf = as<float>(input(me, count));
    const auto res = weighted_allreduce(c, buf.data(), count, DataType::kFloat32, o);
    CHECK(res.outliers == std::vector<int>{liar}, "loss: %zu outliers", res.outliers.size());
    CHECK(res.losses[liar] == 9.0, "loss table");
    CHECK(bit_identical(c, buf), "loss: ranks differ");
  }
  return g_failures ? 1 : 0;
}

int mode_stale(Communicator& c) {
  const int me = c.rank(), n = c.size();
  const size_t count = 50000;
  const int64_t steps[] = {10, 9, 7, 10, 8, 10};
  WeightedOptions o;
  o.current_step = 10;
  o.max_staleness = 2;
  o.step = steps[me % 6];
  auto buf = as<float>(input(me, count));
  const auto res = weighted_allreduce(c, buf.data(), count, DataType::kFloat32, o);
  std::vector<int> want_stale;
  for (int r = 0; r < n; ++r)
    if (10 - steps[r % 6] > 2) want_stale.push_back(r);
  CHECK(res.stale == want_stale, "stale: %zu ranks, wanted %zu", res.stale.size(),
        want_stale.size());
  std::vector<double> share(static_cast<size_t>(n), 0.0);
  for (int r = 0; r < n; ++r)
    if (std::find(want_stale.begin(), want_stale.end(), r) == want_stale.end())
      share[static_cast<size_t>(r)] = 1.0 / static_cast<double>(n - want_stale.size());
  const double err = max_err(buf, expected<float>(n, count, share));
  CHECK(err < 2e-5, "stale: max error %g", err);
  CHECK(bit_identical(c, buf), "stale: ranks differ");
  CHECK(res.steps[static_cast<size_t>(me)] == steps[me % 6], "steps table");
  return g_failures ? 1 : 0;
}

template <class F>
void expect_code_quickly(F&& f, ErrorCode code, const char* what) {
  const auto t0 = std::chrono::steady_clock::now();
  try {
    f();
    CHECK(false, "%s: no error", what);
  } catch (const Error& e) {
    CHECK(e.code() == code, "%s: got %s: %s", what, std::string(error_code_name(e.code())).c_str(),
          e.what());
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(s < 10, "%s: took %.1f s", what, s);
}

int mode_invalid(Communicator& c) {
  const int me = c.rank(), n = c.size();
  const size_t count = 10000;
  std::vector<float> buf(count, 1.0f);
  const auto original = buf;
  // A float32 call on `buf` with the options `set` makes.
  auto with = [&](auto set) {
    return [&, set] {
      WeightedOptions o;
      set(o);
      weighted_allreduce(c, buf.data(), count, DataType::kFloat32, o);
    };
  };
  expect_code_quickly(with([&](WeightedOptions& o) { o.weight = me == 1 ? -2.0 : 1.0; }),
              ErrorCode::kInvalidArgument, "negative weight on rank 1");
  CHECK(buf == original, "the buffer changed after an invalid call");
  expect_code_quickly(with([&](WeightedOptions& o) { o.weight = me == 2 ? std::nan("") : 1.0; }),
              ErrorCode::kInvalidArgument, "NaN weight on rank 2");
  expect_code_quickly(with([](WeightedOptions& o) { o.weight = 0; }), ErrorCode::kInvalidArgument,
              "all weights 0");
  expect_code_quickly(with([&](WeightedOptions& o) {
                o.current_step = 4;
                o.step = me == 0 ? 5 : 4;
              }),
              ErrorCode::kInvalidArgument, "step in the future on rank 0");
  std::vector<int32_t> ints(count, 1);
  expect_code_quickly(
      [&] {
        if (me == n - 1)
          weighted_allreduce(c, ints.data(), count, DataType::kInt32, {});
        else
          weighted_allreduce(c, buf.data(), count, DataType::kFloat32, {});
      },
      ErrorCode::kInvalidArgument, "int32 on the last rank");
  expect_code_quickly([&] { weighted_allreduce(c, ints.data(), count, DataType::kInt32, {}); },
              ErrorCode::kInvalidArgument, "int32 everywhere");
  expect_code_quickly(
      [&] {
        weighted_allreduce(c, buf.data(), me == 0 ? count - 1 : count, DataType::kFloat32, {});
      },
      ErrorCode::kMismatch, "counts differ");
  expect_code_quickly(with([&](WeightedOptions& o) {
                o.robust = me == 1 ? RobustMode::kExclude : RobustMode::kNone;
              }),
              ErrorCode::kMismatch, "robust options differ");
  CHECK(buf == original, "the buffer changed after the invalid calls");
  // The group goes on.
  WeightedOptions o;
  o.weight = me + 1;
  const auto res = weighted_allreduce(c, buf.data(), count, DataType::kFloat32, o);
  for (float v : buf)
    CHECK(std::fabs(v - 1.0f) < 1e-6f, "after the errors: %g", static_cast<double>(v));
  CHECK(res.included.size() == static_cast<size_t>(n), "after the errors: %zu included",
        res.included.size());
  return g_failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::map<std::string, int (*)(Communicator&)> modes = {{"mean", mode_mean},
                                                               {"robust", mode_robust},
                                                               {"stale", mode_stale},
                                                               {"invalid", mode_invalid}};
  const auto mode = modes.find(argc > 1 ? argv[1] : "");
  if (mode == modes.end()) {
    std::fprintf(stderr, "usage: weighted_check mean|robust|stale|invalid\n");
    return 2;
  }
  try {
    apply_test_domains();
    Config cfg = Config::from_env();
    cfg.op_timeout = std::chrono::seconds(60);  // a hang fails the test well before its own limit
    Communicator comm(cfg);
    return mode->second(comm);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "weighted_check %s: %s\n", argv[1], e.what());
    return 1;
  }
}
