// Weighted (federated) allreduce: every rank contributes a buffer and a weight, and every rank
// gets the weighted mean, bit-identical. Optionally robust (contributions whose norm or reported
// loss is an outlier against the others are down-weighted or left out) and staleness-checked
// (contributions computed at a logical step too far behind the current one are left out).
//
// How (docs/diloco.md, "Weighted allreduce"): one small allgather of every rank's
// (weight, step, norm, loss, count, dtype, local problems) comes first, and every rank decides
// from that same table, with the same arithmetic, who is in and with what weight; then each rank
// scales its own buffer by its normalized weight (an excluded rank contributes zeros) and one
// sum allreduce (compression and error feedback as in OpOptions) adds them up. Every rank
// decides alike, so a bad argument on one rank is an Error on every rank and nothing hangs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "geoccl/communicator.h"
#include "geoccl/types.h"

namespace geoccl {

// What the robust mode does with an outlier.
enum class RobustMode : uint8_t {
  kNone = 0,        // plain weighted mean
  kExclude = 1,     // outliers get weight 0
  kDownweight = 2,  // outliers' weights are scaled by threshold * scale / |deviation| (Huber)
};

// Which statistic marks an outlier.
enum class RobustStatistic : uint8_t {
  kNorm = 1,  // the L2 norm of the contribution, computed by the library
  kLoss = 2,  // the loss the rank reports (WeightedOptions::loss); ranks reporting none are kept
  kBoth = 3,  // an outlier by either
};

struct WeightedOptions {
  // This rank's weight (its sample count, for example): finite, >= 0.
  double weight = 1.0;
  // The logical step this contribution was computed at; -1 = none (never stale).
  int64_t step = -1;
  // The loss this rank reports (robust mode by loss); unset = none.
  std::optional<double> loss;

  // Staleness: with current_step set, a contribution with step < current_step - max_staleness
  // is left out (counted in WeightedResult::stale); a step beyond current_step, or a negative
  // current_step, is Error(kInvalidArgument). Every rank must pass the same current_step and
  // max_staleness.
  std::optional<int64_t> current_step;
  int64_t max_staleness = 0;

  // Robust mode, over the contributions that are not stale and have weight > 0. The rule
  // (robust_decide): the median m of the statistic and its scale s = 1.4826 * median |x - m|
  // (floored at min_relative_scale * |m|, so that identical contributions do not make every
  // tiny difference an outlier); a contribution is an outlier when x - m > threshold * s (the
  // loss: only higher than the others is bad) or |x - m| > threshold * s (the norm: far larger
  // or far smaller); non-finite statistics are always outliers. Needs at least 3 candidates;
  // with fewer nobody is an outlier.
  RobustMode robust = RobustMode::kNone;
  RobustStatistic statistic = RobustStatistic::kNorm;
  double threshold = 3.0;
  double min_relative_scale = 0.05;

  // The sum allreduce's options (timeout, compression, feedback_key, priority).
  OpOptions op;
};

// What every rank contributed and what was decided; equal on every rank.
struct WeightedResult {
  std::vector<double> weights;             // per rank: the weight it passed
  std::vector<double> applied;             // per rank: its share of the mean (sums to 1)
  std::vector<int64_t> steps;              // per rank: its step (-1 = none)
  std::vector<double> norms;               // per rank: L2 norm of its contribution
  std::vector<double> losses;              // per rank: reported loss (NaN = none)
  std::vector<int> included;               // ranks whose contribution is in the result
  std::vector<int> outliers;               // ranks the robust mode excluded (weight 0)
  std::vector<int> downweighted;           // ranks the robust mode kept with a smaller weight
  std::vector<int> stale;                  // ranks left out as too old
  double total_weight = 0;                 // sum of the weights applied, before normalizing
  double median_norm = 0, norm_scale = 0;  // the robust rule's figures (norm), 0 when unused
  double median_loss = 0, loss_scale = 0;  // (loss)
};

// One rank's row of the table every rank decides from.
struct Contribution {
  double weight = 1.0;
  int64_t step = -1;
  double norm = 0;
  double loss = 0;  // NaN = none
};

// The decision of weighted_allreduce from every rank's row, as a pure function (the same on
// every rank for the same rows). Throws Error(kInvalidArgument) for a negative or non-finite
// weight, a step beyond current_step, a negative max_staleness, a bad threshold, or when no
// weight is left (all stale, excluded or zero), naming the rank and the reason.
WeightedResult robust_decide(std::span<const Contribution> rows, const WeightedOptions& o);

// Replaces `buf` (count elements of kFloat32 or kFloat64) on every rank by the weighted mean of
// all ranks' buffers, bit-identical on every rank. Blocks until done (the options' timeout, else
// the config's, applies to each of its two collectives). Errors, on every rank alike:
// kInvalidArgument (as robust_decide, plus a dtype other than f32/f64 on any rank, a null
// buffer), kMismatch (ranks with different counts or dtypes), and whatever the collectives
// fail with. On an error `buf` is left as it was, unless the failure came from the sum
// allreduce itself.
WeightedResult weighted_allreduce(Communicator& comm, void* buf, size_t count, DataType dtype,
                                  const WeightedOptions& o = {});

}  // namespace geoccl
