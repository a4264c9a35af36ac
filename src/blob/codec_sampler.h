// Measures each candidate codec on a sample of the data: compression and decompression speed
// (this CPU's, standing in for the receivers') and ratio. Reads the clock; no other I/O.
#pragma once

#include <span>
#include <vector>

#include "blob/chooser.h"

namespace geoccl::blob {

// One CodecSample per candidate (kNone skipped), compressing and decompressing `sample` once.
// A codec that fails on the sample gets ratio 0 (never chosen).
std::vector<CodecSample> sample_codecs(std::span<const uint8_t> sample,
                                       std::span<const CodecChoice> candidates);

// The candidates of the "auto" mode: lz4, zstd-1, zstd-3.
std::span<const CodecChoice> auto_candidates();

}  // namespace geoccl::blob
