// Sparse allgathers between real processes on loopback (sparse_check.cc is the rank program):
// exact against a dense reference and identical on every rank, for every value width; the
// bytes reported; the typed errors.
#include <gtest/gtest.h>

#include "run_ranks.h"

namespace {

void expect_all_zero(const std::vector<int>& codes, const std::string& what) {
  for (size_t r = 0; r < codes.size(); ++r) EXPECT_EQ(codes[r], 0) << what << ": rank " << r;
}

TEST(SparseAllgather, EqualsTheDenseReferenceOnEveryRankForEveryWidth) {
  // Small chunks make the 1M-element pieces several frames each.
  expect_all_zero(
      run_ranks(4, "exact", 300,
                {{"GEOCCL_TEST_DOMAINS", "a,a,b,c"}, {"GEOCCL_EXPERIMENT", "chunk=16K"}}),
      "exact");
}

TEST(SparseAllgather, RanksThatDisagreeOnTheLengthAllFailWithMismatch) {
  expect_all_zero(run_ranks(3, "mismatch", 60, {{"GEOCCL_TEST_DOMAINS", "a,b,c"}}), "mismatch");
}

TEST(SparseAllgather, InvalidPairsAreTypedErrorsAndTheGroupGoesOn) {
  expect_all_zero(run_ranks(3, "invalid", 60, {{"GEOCCL_TEST_DOMAINS", "a,b,c"}}), "invalid");
}

}  // namespace
