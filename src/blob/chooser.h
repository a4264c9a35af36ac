// Which codec a chunk goes with: the one whose pipeline (compress at the root, the link, then
// decompress at the receivers, all overlapping) moves raw bytes fastest. Pure: measured numbers
// in, a choice out.
#pragma once

#include <span>

#include "blob/codec.h"

namespace geoccl::blob {

// One codec measured on a sample of the data being sent.
struct CodecSample {
  CodecChoice choice;
  double compress_bytes_per_s = 0;    // raw bytes in per second of compression
  double decompress_bytes_per_s = 0;  // raw bytes out per second of decompression
  double ratio = 1;                   // raw bytes / compressed bytes
};

// Raw bytes per second the pipeline sustains with this codec over a link of `link_bytes_per_s`
// (wire bytes): the slowest of its stages, min(compress, link * ratio, decompress).
double pipeline_rate(const CodecSample& s, double link_bytes_per_s);

// Returns the sample with the highest pipeline_rate, or none (rate = the link) unless a codec beats
// the raw link by at least `margin` (> 1: compression costs CPU and latency, so a tie goes raw).
// An unknown link (<= 0) or a sample with non-positive or non-finite numbers never selects
// compression: without a measurement there is nothing to win.
CodecChoice choose_codec(double link_bytes_per_s, std::span<const CodecSample> samples,
                         double margin = 1.1);

}  // namespace geoccl::blob
