// Weighted allreduce (geoccl/weighted.h): an allgather of one 64-byte row per rank, the same
// decision on every rank from it, then one sum allreduce of the buffers scaled by their shares.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>

#include "core/logging.h"
#include "geoccl/weighted.h"

namespace geoccl {
namespace {

// A row on the wire: eight little-endian 64-bit fields.
constexpr size_t kRowFields = 8;
constexpr size_t kRowBytes = kRowFields * 8;

// Problems a rank found with its own arguments, reported in its row so that every rank fails.
enum class LocalProblem : uint64_t { kNone = 0, kDtype = 1, kNullBuffer = 2 };

struct Row {
  Contribution c;
  uint64_t count = 0;
  uint64_t dtype = 0;
  uint64_t problem = 0;
  uint64_t policy = 0;  // hash of the options every rank must share
};

uint64_t bits_of(double d) {
  uint64_t u;
  std::memcpy(&u, &d, 8);
  return u;
}
double double_of(uint64_t u) {
  double d;
  std::memcpy(&d, &u, 8);
  return d;
}

void put_u64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

void encode_row(const Row& r, uint8_t* p) {
  const uint64_t f[kRowFields] = {bits_of(r.c.weight),
                                  static_cast<uint64_t>(r.c.step),
                                  bits_of(r.c.norm),
                                  bits_of(r.c.loss),
                                  r.count,
                                  r.dtype,
                                  r.problem,
                                  r.policy};
  for (size_t i = 0; i < kRowFields; ++i) put_u64(p + 8 * i, f[i]);
}

Row decode_row(const uint8_t* p) {
  Row r;
  r.c.weight = double_of(get_u64(p));
  r.c.step = static_cast<int64_t>(get_u64(p + 8));
  r.c.norm = double_of(get_u64(p + 16));
  r.c.loss = double_of(get_u64(p + 24));
  r.count = get_u64(p + 32);
  r.dtype = get_u64(p + 40);
  r.problem = get_u64(p + 48);
  r.policy = get_u64(p + 56);
  return r;
}

// FNV-1a over the decision's options: ranks that disagree on them would decide differently.
uint64_t policy_hash(const WeightedOptions& o) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  mix(o.current_step ? 1 : 0);
  mix(static_cast<uint64_t>(o.current_step.value_or(0)));
  mix(static_cast<uint64_t>(o.max_staleness));
  mix(static_cast<uint64_t>(o.robust));
  mix(static_cast<uint64_t>(o.statistic));
  mix(bits_of(o.threshold));
  mix(bits_of(o.min_relative_scale));
  return h;
}

[[noreturn]] void invalid(const std::string& what) {
  throw Error(ErrorCode::kInvalidArgument, "weighted_allreduce: " + what);
}

template <typename T>
double l2_norm(const T* x, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  return std::sqrt(s);
}

template <typename T>
void scale(T* x, size_t n, double share) {
  if (share == 0) {
    std::fill(x, x + n, T(0));  // an excluded rank adds exact zeros, even where it held NaN
    return;
  }
  const T f = static_cast<T>(share);
  for (size_t i = 0; i < n; ++i) x[i] *= f;
}

double median_of(std::vector<double> v) {  // v non-empty, finite
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return (v[(n - 1) / 2] + v[n / 2]) / 2;
}

// The robust rule for one statistic over the candidates (see WeightedOptions). Returns, per
// candidate, the factor its weight is multiplied by (1 = kept as is, 0 = excluded); sets
// median and scale (0 when the rule did not apply).
std::vector<double> robust_factors(const std::vector<double>& x, bool upper_only,
                                   const WeightedOptions& o, double* median, double* scale_out) {
  std::vector<double> factor(x.size(), 1.0);
  std::vector<double> finite;
  for (double v : x)
    if (std::isfinite(v)) finite.push_back(v);
  for (size_t i = 0; i < x.size(); ++i)
    if (!std::isfinite(x[i])) factor[i] = 0;
  *median = 0;
  *scale_out = 0;
  if (finite.size() < 3) return factor;
  const double m = median_of(finite);
  std::vector<double> dev;
  dev.reserve(finite.size());
  for (double v : finite) dev.push_back(std::fabs(v - m));
  const double s = std::max(1.4826 * median_of(dev), o.min_relative_scale * std::fabs(m));
  *median = m;
  *scale_out = s;
  const double limit = o.threshold * s;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!std::isfinite(x[i])) continue;
    const double d = upper_only ? x[i] - m : std::fabs(x[i] - m);
    if (d <= limit) continue;
    factor[i] = (o.robust == RobustMode::kDownweight && limit > 0) ? limit / d : 0.0;
  }
  return factor;
}

std::string rank_list(const std::vector<int>& v) {
  std::ostringstream os;
  for (size_t i = 0; i < v.size(); ++i) os << (i ? "," : "") << v[i];
  return os.str();
}

}  // namespace

WeightedResult robust_decide(std::span<const Contribution> rows, const WeightedOptions& o) {
  if (!(o.threshold > 0) || !std::isfinite(o.threshold))
    invalid("threshold must be finite and > 0");
  if (!(o.min_relative_scale >= 0) || !std::isfinite(o.min_relative_scale))
    invalid("min_relative_scale must be finite and >= 0");
  if (o.max_staleness < 0) invalid("max_staleness must be >= 0");
  if (o.current_step && *o.current_step < 0) invalid("current_step must be >= 0");
  const size_t n = rows.size();
  WeightedResult r;
  r.weights.resize(n);
  r.applied.assign(n, 0.0);
  r.steps.resize(n);
  r.norms.resize(n);
  r.losses.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const Contribution& c = rows[i];
    const int rank = static_cast<int>(i);
    if (!std::isfinite(c.weight) || c.weight < 0)
      invalid("rank " + std::to_string(rank) + " passed weight " + std::to_string(c.weight) +
              " (must be finite and >= 0)");
    if (c.step < -1)
      invalid("rank " + std::to_string(rank) + " passed step " + std::to_string(c.step));
    if (o.current_step && c.step > *o.current_step)
      invalid("rank " + std::to_string(rank) + " contributes step " + std::to_string(c.step) +
              ", beyond the current step " + std::to_string(*o.current_step));
    r.weights[i] = c.weight;
    r.steps[i] = c.step;
    r.norms[i] = c.norm;
    r.losses[i] = c.loss;
  }
  // Candidates: not stale, weight > 0.
  std::vector<size_t> cand;
  for (size_t i = 0; i < n; ++i) {
    const Contribution& c = rows[i];
    // current_step - max_staleness without overflow: a step is stale when the gap exceeds it.
    if (o.current_step && c.step >= 0 && *o.current_step - c.step > o.max_staleness) {
      r.stale.push_back(static_cast<int>(i));
      continue;
    }
    if (c.weight > 0) cand.push_back(i);
  }
  std::vector<double> factor(cand.size(), 1.0);
  if (o.robust != RobustMode::kNone && cand.size() >= 3) {
    if (o.statistic == RobustStatistic::kNorm || o.statistic == RobustStatistic::kBoth) {
      std::vector<double> x;
      for (size_t i : cand) x.push_back(rows[i].norm);
      const auto f = robust_factors(x, false, o, &r.median_norm, &r.norm_scale);
      for (size_t k = 0; k < cand.size(); ++k) factor[k] = std::min(factor[k], f[k]);
    }
    if (o.statistic == RobustStatistic::kLoss || o.statistic == RobustStatistic::kBoth) {
      // Only the candidates that report a loss take part; the others are kept.
      std::vector<double> x;
      std::vector<size_t> at;
      for (size_t k = 0; k < cand.size(); ++k)
        if (!std::isnan(rows[cand[k]].loss)) {
          x.push_back(rows[cand[k]].loss);
          at.push_back(k);
        }
      if (x.size() >= 3) {
        const auto f = robust_factors(x, true, o, &r.median_loss, &r.loss_scale);
        for (size_t j = 0; j < at.size(); ++j) factor[at[j]] = std::min(factor[at[j]], f[j]);
      }
    }
  }
  double total = 0;
  for (size_t k = 0; k < cand.size(); ++k) {
    const size_t i = cand[k];
    const int rank = static_cast<int>(i);
    if (factor[k] == 0) {
      r.outliers.push_back(rank);
      continue;
    }
    if (factor[k] < 1) r.downweighted.push_back(rank);
    r.applied[i] = rows[i].weight * factor[k];
    total += r.applied[i];  // in rank order: the same bits on every rank
    r.included.push_back(rank);
  }
  if (!(total > 0) || !std::isfinite(total)) {
    std::ostringstream os;
    os << "no weight left to average (" << n << " ranks: " << r.stale.size() << " stale, "
       << r.outliers.size() << " outliers, the rest weight 0)";
    invalid(os.str());
  }
  r.total_weight = total;
  for (size_t i = 0; i < n; ++i) r.applied[i] /= total;
  return r;
}

WeightedResult weighted_allreduce(Communicator& comm, void* buf, size_t count, DataType dtype,
                                  const WeightedOptions& o) {
  const int me = comm.rank(), n = comm.size();
  Row mine;
  mine.c.weight = o.weight;
  mine.c.step = o.step;
  mine.c.loss = o.loss ? *o.loss : std::numeric_limits<double>::quiet_NaN();
  mine.count = count;
  mine.dtype = static_cast<uint64_t>(dtype);
  mine.policy = policy_hash(o);
  if (dtype != DataType::kFloat32 && dtype != DataType::kFloat64)
    mine.problem = static_cast<uint64_t>(LocalProblem::kDtype);
  else if (buf == nullptr && count > 0)
    mine.problem = static_cast<uint64_t>(LocalProblem::kNullBuffer);
  else
    mine.c.norm = dtype == DataType::kFloat32 ? l2_norm(static_cast<const float*>(buf), count)
                                              : l2_norm(static_cast<const double*>(buf), count);

  // The table: every rank's row, the same bytes everywhere.
  OpOptions meta;
  meta.timeout = o.op.timeout;
  meta.priority = o.op.priority;
  uint8_t my_row[kRowBytes];
  encode_row(mine, my_row);
  std::vector<uint8_t> table(kRowBytes * static_cast<size_t>(n));
  comm.allgather(my_row, table.data(), kRowBytes, DataType::kUInt8, meta).wait();
  std::vector<Row> rows;
  std::vector<Contribution> contributions;
  for (int r = 0; r < n; ++r) {
    rows.push_back(decode_row(table.data() + kRowBytes * static_cast<size_t>(r)));
    contributions.push_back(rows.back().c);
  }
  for (int r = 0; r < n; ++r) {
    const Row& row = rows[static_cast<size_t>(r)];
    if (row.problem == static_cast<uint64_t>(LocalProblem::kDtype))
      invalid("rank " + std::to_string(r) + " passed dtype " +
              std::string(dtype_name(static_cast<DataType>(row.dtype))) +
              " (float32 or float64 only)");
    if (row.problem == static_cast<uint64_t>(LocalProblem::kNullBuffer))
      invalid("rank " + std::to_string(r) + " passed a null buffer");
  }
  for (int r = 1; r < n; ++r) {
    const Row& row = rows[static_cast<size_t>(r)];
    if (row.count != rows[0].count || row.dtype != rows[0].dtype)
      throw Error(ErrorCode::kMismatch,
                  "weighted_allreduce: rank " + std::to_string(r) + " passed " +
                      std::to_string(row.count) + " elements of " +
                      std::string(dtype_name(static_cast<DataType>(row.dtype))) + ", rank 0 " +
                      std::to_string(rows[0].count) + " of " +
                      std::string(dtype_name(static_cast<DataType>(rows[0].dtype))));
    if (row.policy != rows[0].policy)
      throw Error(ErrorCode::kMismatch,
                  "weighted_allreduce: rank " + std::to_string(r) +
                      " passed other staleness or robust options than rank 0");
  }
  WeightedResult res = robust_decide(contributions, o);
  if (me == 0 && (!res.stale.empty() || !res.outliers.empty() || !res.downweighted.empty())) {
    GEOCCL_LOG(
        kWarn,
        "weighted allreduce"
            << (o.current_step ? " at step " + std::to_string(*o.current_step) : "") << ": "
            << res.included.size() << " of " << n << " ranks included"
            << (res.stale.empty() ? ""
                                  : "; stale (older than " + std::to_string(o.max_staleness) +
                                        " steps): " + rank_list(res.stale))
            << (res.outliers.empty() ? "" : "; outliers excluded: " + rank_list(res.outliers))
            << (res.downweighted.empty() ? "" : "; down-weighted: " + rank_list(res.downweighted)));
  }
  if (count == 0) return res;
  const double share = res.applied[static_cast<size_t>(me)];
  if (dtype == DataType::kFloat32)
    scale(static_cast<float*>(buf), count, share);
  else
    scale(static_cast<double*>(buf), count, share);
  comm.allreduce(buf, count, dtype, ReduceOp::kSum, o.op).wait();
  return res;
}

}  // namespace geoccl
