// Compression "auto" (geoccl/auto_codec.h): the ladder level of each bucket from the
// previous iteration's timings and the cost model's predictions, without sockets.
#include <gtest/gtest.h>

#include <vector>

#include "geoccl/auto_codec.h"

using geoccl::auto_codec_ladder;
using geoccl::BucketTiming;
using geoccl::choose_bucket_codecs;

namespace {

// Buckets ready every `spacing` ms from 0; each level sends `bytes_per_level[l]` of the fp32
// bytes, at `ms_per_mib` ms per MiB of wire bytes plus `rtt` ms.
std::vector<BucketTiming> buckets(int n, double spacing, double mib, double ms_per_mib, double rtt = 20) {
  const std::vector<double> ratio = {1, 0.5, 0.25, 0.125, 0.0625, 0.0125};
  std::vector<BucketTiming> b(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    b[static_cast<size_t>(i)].ready_ms = i * spacing;
    for (double r : ratio) b[static_cast<size_t>(i)].predicted_ms.push_back(rtt + r * mib * ms_per_mib);
  }
  return b;
}

}  // namespace

TEST(CodecChoice, TheLadderGoesFromNoneToTopK) {
  const auto& l = auto_codec_ladder();
  ASSERT_EQ(l.size(), 6u);
  EXPECT_EQ(l.front().name(), "none");
  EXPECT_EQ(l[2].name(), "int8");
  EXPECT_TRUE(l.back().is_topk());
}

TEST(CodecChoice, AFastPathKeepsEveryBucketUncompressed) {
  // 4 buckets of 25 MiB, 50 ms apart; 1 Gbit/s: about 8.4 ms per MiB, 230 ms each uncompressed.
  const auto b = buckets(4, 50, 25, 8.4 / 8 * 8, 20);
  // Deadline: the last bucket's ready time (150 ms) plus 1000 ms exposed.
  const auto c = choose_bucket_codecs(b, 1150);
  EXPECT_EQ(c, (std::vector<size_t>{0, 0, 0, 0}));
}

TEST(CodecChoice, ASlowPathTakesTheLeastLossyLevelThatFitsAndLightensEarlyBuckets) {
  // 10 Mbit/s: about 840 ms per MiB; 4 buckets of 4 MiB, 200 ms apart, 100 ms exposed.
  const auto b = buckets(4, 200, 4, 840, 20);
  const auto c = choose_bucket_codecs(b, 700);
  // Levels 3, 4, 5 take 440, 230 and 62 ms per bucket. All at int2 (4) end at 920 ms: too late;
  // all at top-k (5) end at 662. The first bucket, ready first, can afford int4 (it ends at 440,
  // the others at top-k at 662); the second cannot even afford int2 (the third would end at 732).
  EXPECT_EQ(c, (std::vector<size_t>{3, 5, 5, 5}));
}

TEST(CodecChoice, NothingFitsTakesTheStrongest) {
  const auto b = buckets(3, 10, 100, 840, 20);
  EXPECT_EQ(choose_bucket_codecs(b, 30), (std::vector<size_t>{5, 5, 5}));
}

TEST(CodecChoice, APathThatDropsAndRecoversMovesTheChoiceBothWays) {
  // The same buckets and window; the path at 1 Gbit/s, then at 10 Mbit/s, then back.
  const double deadline = 150 + 300;
  const auto fast = choose_bucket_codecs(buckets(4, 50, 8, 8.4), deadline);
  const auto slow = choose_bucket_codecs(buckets(4, 50, 8, 840), deadline);
  const auto again = choose_bucket_codecs(buckets(4, 50, 8, 8.4), deadline);
  for (size_t i = 0; i < 4; ++i) EXPECT_GT(slow[i], fast[i]) << i;
  EXPECT_EQ(fast, again);
}

TEST(CodecChoice, EachBucketEndsByTheDeadlineWhenALevelFits) {
  // Uneven buckets and spacing: whatever is chosen, the schedule ends by the deadline.
  std::vector<BucketTiming> b = buckets(5, 0, 1, 100, 5);
  const double ready[] = {0, 5, 40, 41, 120};
  const double mib[] = {6, 1, 12, 0.5, 3};
  for (size_t i = 0; i < b.size(); ++i) {
    b[i].ready_ms = ready[i];
    for (size_t l = 0; l < b[i].predicted_ms.size(); ++l)
      b[i].predicted_ms[l] = 5 + (b[i].predicted_ms[l] - 5) * mib[i];
  }
  for (double deadline : {150.0, 300.0, 800.0, 3000.0}) {
    const auto c = choose_bucket_codecs(b, deadline);
    double free_at = 0;
    for (size_t i = 0; i < b.size(); ++i) free_at = std::max(free_at, b[i].ready_ms) + b[i].predicted_ms[c[i]];
    EXPECT_LE(free_at, deadline) << deadline;
  }
}

TEST(CodecChoice, NoBucketsOrNoLevels) {
  EXPECT_TRUE(choose_bucket_codecs({}, 100).empty());
  std::vector<BucketTiming> b(2);
  EXPECT_EQ(choose_bucket_codecs(b, 100), (std::vector<size_t>{0, 0}));
}
