// Compressed allreduces between real processes on loopback (compression_check.cc is the rank
// program), the domains given by labels: every codec and form, bit-identical on every rank and
// within its error bound; error feedback; the typed errors.
#include <gtest/gtest.h>

#include "run_ranks.h"

namespace {

using Env = std::vector<std::pair<std::string, std::string>>;

void expect_all_zero(const std::vector<int>& codes, const std::string& what) {
  for (size_t r = 0; r < codes.size(); ++r) EXPECT_EQ(codes[r], 0) << what << ": rank " << r;
}

TEST(Compression, EveryCodecAndFormOnThreeDomainsIsBitIdenticalAndWithinBounds) {
  // 2 + 2 + 1 ranks: the single-rank domain owns every piece of its domain. Small chunks make
  // the 3M-element call take the pipelined blocks.
  expect_all_zero(run_ranks(5, "accuracy", 300, {{"GEOCCL_TEST_DOMAINS", "a,a,b,b,c"},
                                                 {"GEOCCL_EXPERIMENT", "chunk=64K"}}),
                  "3 domains");
}

TEST(Compression, TwoDomainsTakeTheAllgatherForm) {
  expect_all_zero(run_ranks(4, "accuracy", 300, {{"GEOCCL_TEST_DOMAINS", "a,b,a,b"},
                                                 {"GEOCCL_TEST_CODECS", "int8,topk:0.05,fp16@ring"}}),
                  "2 domains");
}

TEST(Compression, ErrorFeedbackMakesTheMeanConverge) {
  expect_all_zero(run_ranks(4, "feedback", 300, {{"GEOCCL_TEST_DOMAINS", "a,a,b,c"}}), "feedback");
}

TEST(Compression, RanksThatDisagreeOnTheCodecAllFailWithMismatch) {
  expect_all_zero(run_ranks(4, "mismatch", 60, {{"GEOCCL_TEST_DOMAINS", "a,a,b,b"}}), "mismatch");
}

TEST(Compression, InvalidRequestsAreTypedErrorsAndTheGroupGoesOn) {
  expect_all_zero(run_ranks(3, "invalid", 60, {{"GEOCCL_TEST_DOMAINS", "a,b,c"}}), "invalid");
}

TEST(Compression, OneSiteIsUnchanged) { expect_all_zero(run_ranks(3, "single", 60), "single"); }

}  // namespace
