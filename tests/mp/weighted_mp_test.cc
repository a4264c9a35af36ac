// Weighted, robust and staleness-checked allreduces between real processes on loopback
// (weighted_check.cc is the rank program), the domains given by labels: the weighted mean
// against the exact one, bit-identical on every rank; outliers and stale contributions left out
// and reported alike everywhere; bad arguments typed errors on every rank.
#include <gtest/gtest.h>

#include "run_ranks.h"

namespace {

// Runs `mode` on n ranks (labelled with `domains` unless empty); every rank must exit 0.
void ranks_pass(int n, const std::string& mode, const std::string& domains, int timeout_s = 240) {
  std::vector<std::pair<std::string, std::string>> env;
  if (!domains.empty()) env.emplace_back("GEOCCL_TEST_DOMAINS", domains);
  const auto codes = run_ranks(n, mode, timeout_s, env);
  for (size_t r = 0; r < codes.size(); ++r)
    EXPECT_EQ(codes[r], 0) << mode << " [" << domains << "]: rank " << r;
}

TEST(Weighted, MeanIsExactAndBitIdenticalAcrossThreeDomains) { ranks_pass(5, "mean", "a,a,b,b,c"); }
TEST(Weighted, MeanOnOneSite) { ranks_pass(3, "mean", ""); }
TEST(Weighted, OutliersByNormOrLossAreExcludedOrDownweighted) {
  ranks_pass(5, "robust", "a,a,b,b,c");
}
TEST(Weighted, StaleContributionsAreLeftOutOnEveryRank) {
  ranks_pass(5, "stale", "a,b,c,a,b", 120);
}
TEST(Weighted, BadArgumentsFailOnEveryRankAndTheGroupGoesOn) {
  ranks_pass(3, "invalid", "a,b,c", 120);
}

}  // namespace
