// The decision of the weighted allreduce (robust_decide) driven by hand: rows in, shares,
// outliers and stale ranks out. No sockets.
#include "geoccl/weighted.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

using namespace geoccl;

namespace {

Contribution row(double weight, double norm, int64_t step = -1,
                 double loss = std::numeric_limits<double>::quiet_NaN()) {
  Contribution c;
  c.weight = weight;
  c.norm = norm;
  c.step = step;
  c.loss = loss;
  return c;
}

ErrorCode code_of(const std::vector<Contribution>& rows, const WeightedOptions& o) {
  try {
    (void)robust_decide(rows, o);
  } catch (const Error& e) {
    return e.code();
  }
  return ErrorCode::kOk;
}

TEST(WeightedDecision, SharesAreTheNormalizedWeights) {
  const auto r = robust_decide(std::vector{row(1, 1), row(3, 1), row(4, 1)}, {});
  EXPECT_DOUBLE_EQ(r.applied[0], 0.125);
  EXPECT_DOUBLE_EQ(r.applied[1], 0.375);
  EXPECT_DOUBLE_EQ(r.applied[2], 0.5);
  EXPECT_DOUBLE_EQ(r.total_weight, 8);
  EXPECT_EQ(r.included, (std::vector<int>{0, 1, 2}));
  EXPECT_TRUE(r.outliers.empty());
}

TEST(WeightedDecision, ZeroWeightIsLeftOutButNotAnOutlier) {
  const auto r = robust_decide(std::vector{row(0, 1), row(2, 1)}, {});
  EXPECT_EQ(r.applied[0], 0);
  EXPECT_EQ(r.applied[1], 1);
  EXPECT_EQ(r.included, (std::vector<int>{1}));
  EXPECT_TRUE(r.outliers.empty());
}

TEST(WeightedDecision, NormOutlierIsExcludedByTheMedianRule) {
  WeightedOptions o;
  o.robust = RobustMode::kExclude;
  // Norms 1.0, 1.1, 0.9, 1.05, 50: median 1.05, MAD 0.05 -> scale max(0.0741, 0.0525) = 0.0741,
  // limit 3 * 0.0741 = 0.222: only rank 4 is out.
  const auto r = robust_decide(
      std::vector{row(1, 1.0), row(1, 1.1), row(1, 0.9), row(1, 1.05), row(1, 50)}, o);
  EXPECT_EQ(r.outliers, (std::vector<int>{4}));
  EXPECT_EQ(r.included, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_DOUBLE_EQ(r.median_norm, 1.05);
  EXPECT_NEAR(r.norm_scale, 1.4826 * 0.05, 1e-12);
  EXPECT_EQ(r.applied[4], 0);
  EXPECT_DOUBLE_EQ(r.applied[0], 0.25);
  // A far too small norm is an outlier too (a rank that sends nothing useful).
  const auto s = robust_decide(std::vector{row(1, 1.0), row(1, 1.1), row(1, 0.9), row(1, 0.0)}, o);
  EXPECT_EQ(s.outliers, (std::vector<int>{3}));
}

TEST(WeightedDecision, DownweightScalesByTheLimitOverTheDeviation) {
  WeightedOptions o;
  o.robust = RobustMode::kDownweight;
  const auto r = robust_decide(
      std::vector{row(1, 1.0), row(1, 1.1), row(1, 0.9), row(1, 1.05), row(1, 50)}, o);
  EXPECT_TRUE(r.outliers.empty());
  EXPECT_EQ(r.downweighted, (std::vector<int>{4}));
  const double limit = 3 * 1.4826 * 0.05;
  const double f = limit / (50 - 1.05);
  EXPECT_NEAR(r.applied[4], f / (4 + f), 1e-15);
  EXPECT_NEAR(r.applied[0], 1 / (4 + f), 1e-15);
}

TEST(WeightedDecision, IdenticalContributionsAreNeverOutliers) {
  WeightedOptions o;
  o.robust = RobustMode::kExclude;
  // MAD 0: the scale floor (5 % of the median) keeps small differences in.
  const auto r = robust_decide(std::vector{row(1, 2.0), row(1, 2.0), row(1, 2.0), row(1, 2.2)}, o);
  EXPECT_TRUE(r.outliers.empty());
  EXPECT_NEAR(r.norm_scale, 0.1, 1e-15);
}

TEST(WeightedDecision, FewerThanThreeCandidatesHaveNoOutliers) {
  WeightedOptions o;
  o.robust = RobustMode::kExclude;
  const auto r = robust_decide(std::vector{row(1, 1.0), row(1, 1000.0)}, o);
  EXPECT_TRUE(r.outliers.empty());
  EXPECT_DOUBLE_EQ(r.applied[1], 0.5);
}

TEST(WeightedDecision, NonFiniteNormIsAlwaysAnOutlierInRobustMode) {
  WeightedOptions o;
  o.robust = RobustMode::kDownweight;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const auto r = robust_decide(std::vector{row(1, 1.0), row(1, 1.0), row(1, nan), row(1, 1.0)}, o);
  EXPECT_EQ(r.outliers, (std::vector<int>{2}));
}

TEST(WeightedDecision, HighLossIsAnOutlierLowLossIsNot) {
  WeightedOptions o;
  o.robust = RobustMode::kExclude;
  o.statistic = RobustStatistic::kLoss;
  const auto r =
      robust_decide(std::vector{row(1, 1, -1, 0.5), row(1, 1, -1, 0.55), row(1, 1, -1, 0.45),
                                row(1, 1, -1, 0.01), row(1, 1, -1, 2.3)},
                    o);
  EXPECT_EQ(r.outliers, (std::vector<int>{4}));
  EXPECT_DOUBLE_EQ(r.median_loss, 0.5);
  // Ranks reporting no loss are kept; with fewer than three reporting, nobody is out.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const auto s = robust_decide(
      std::vector{row(1, 1, -1, nan), row(1, 1, -1, 0.5), row(1, 1, -1, 9.0), row(1, 1)}, o);
  EXPECT_TRUE(s.outliers.empty());
  // Both: the norm or the loss.
  o.statistic = RobustStatistic::kBoth;
  const auto b = robust_decide(
      std::vector{row(1, 1, -1, 0.5), row(1, 1, -1, 0.5), row(1, 40, -1, 0.5), row(1, 1, -1, 7.0)},
      o);
  EXPECT_EQ(b.outliers, (std::vector<int>{2, 3}));
}

TEST(WeightedDecision, StaleContributionsAreLeftOut) {
  WeightedOptions o;
  o.current_step = 100;
  o.max_staleness = 2;
  const auto r =
      robust_decide(std::vector{row(1, 1, 100), row(1, 1, 98), row(1, 1, 97), row(1, 1, -1)}, o);
  EXPECT_EQ(r.stale, (std::vector<int>{2}));
  EXPECT_EQ(r.included, (std::vector<int>{0, 1, 3}));
  EXPECT_DOUBLE_EQ(r.applied[2], 0);
  EXPECT_DOUBLE_EQ(r.applied[0], 1.0 / 3);
  // Stale ranks are not candidates of the robust rule.
  o.robust = RobustMode::kExclude;
  const auto s =
      robust_decide(std::vector{row(1, 1, 100), row(1, 1, 100), row(1, 1, 100), row(1, 90, 10)}, o);
  EXPECT_EQ(s.stale, (std::vector<int>{3}));
  EXPECT_TRUE(s.outliers.empty());
}

TEST(WeightedDecision, BadArgumentsAreInvalid) {
  WeightedOptions o;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(code_of({row(-1, 1), row(1, 1)}, o), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of({row(nan, 1), row(1, 1)}, o), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of({row(INFINITY, 1), row(1, 1)}, o), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of({row(0, 1), row(0, 1)}, o), ErrorCode::kInvalidArgument);  // no weight left
  o.current_step = 5;
  EXPECT_EQ(code_of({row(1, 1, 6), row(1, 1, 5)}, o),
            ErrorCode::kInvalidArgument);  // from the future
  o.max_staleness = 1;
  EXPECT_EQ(code_of({row(1, 1, 1), row(1, 1, 2)}, o), ErrorCode::kInvalidArgument);  // all stale
  o.current_step = -3;
  EXPECT_EQ(code_of({row(1, 1, -1)}, o), ErrorCode::kInvalidArgument);
  o.current_step = 5;
  o.max_staleness = -1;
  EXPECT_EQ(code_of({row(1, 1, 5)}, o), ErrorCode::kInvalidArgument);
  WeightedOptions t;
  t.threshold = 0;
  EXPECT_EQ(code_of({row(1, 1)}, t), ErrorCode::kInvalidArgument);
  WeightedOptions ok;
  EXPECT_EQ(code_of({row(1, 1)}, ok), ErrorCode::kOk);
}

}  // namespace
