// Compression "auto": per gradient bucket, the least lossy codec whose WAN time fits the compute
// window the bucket has, as the previous iteration measured it (docs/compression.md, "auto").
//
// A bucket handed to the allreduce while backward still runs overlaps with the rest of backward:
// its window runs from when it was ready to when the last bucket was, plus the exposed time the
// caller allows. The buckets of one iteration share the WAN one after another, so bucket i starts
// when it is ready or when bucket i-1 is predicted to end, whichever is later. The choice, pure
// (time and predictions in, ladder levels out; unit-tested without sockets):
//   1. the least lossy level at which every bucket, all at that level, ends by the deadline (the
//      strongest when none does);
//   2. then, in order, each bucket takes the least lossy level that still lets it and every
//      later bucket, at the level of step 1, end by the deadline: early buckets, whose window is
//      long, lose least.
// The predictions come from the cost model on the path figures in force
// (Communicator::predicted_allreduce_ms), so a re-plan that changes them (a path that drops or
// recovers) changes the choice at the next iteration. The DDP hook's GeocclHookState("auto")
// measures the timings and applies the choice; implemented in src/collectives/codec_choice.cc.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "geoccl/compression.h"

namespace geoccl {

// The codecs "auto" chooses among, least lossy first: each sends fewer bytes than the one before
// (fp32 4 B per value, fp16 2, int8 about 1, int4 0.5, int2 0.25, top-k 1 % with int8 values
// about 0.05) and, with error feedback, defers more of each update to later steps.
const std::vector<Compression>& auto_codec_ladder();

struct BucketTiming {
  double ready_ms = 0;               // when it was handed over, from the iteration's first bucket
  std::vector<double> predicted_ms;  // its allreduce time at each ladder level (same length)
};

// The ladder level of every bucket (indices into predicted_ms), for buckets in issue order, all
// to end by `deadline_ms` (same clock as ready_ms).
std::vector<size_t> choose_bucket_codecs(std::span<const BucketTiming> buckets, double deadline_ms);

}  // namespace geoccl
