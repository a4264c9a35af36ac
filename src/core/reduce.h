// Reduction kernels: dst[i] = dst[i] (op) src[i]. Written as plain loops over contiguous arrays
// so the compiler vectorizes them (built with -O3; see tests/unit/reduce_test.cc and
// `-fopt-info-vec` in docs). f16/bf16 are widened to f32 per element and rounded once.
#pragma once

#include <cstddef>

#include "geoccl/types.h"

namespace geoccl::core {

// Operand order matters for bit-identical results: min/max of +0/-0 or NaNs is not symmetric.
enum class Operands { kDstFirst, kSrcFirst };

// Combines `count` elements: dst[i] = dst[i] op src[i] (kDstFirst) or src[i] op dst[i]
// (kSrcFirst). kAvg combines as kSum (see finish_avg).
void reduce_into(void* dst, const void* src, size_t count, DataType dtype, ReduceOp op,
                 Operands order = Operands::kDstFirst);

// out[i] = a[i] op b[i]: reduce_into with dst = a (kDstFirst), its result written to `out`
// instead, in one pass (a receive reduced on its way to the next hop). `out` overlaps neither.
void reduce_to(void* out, const void* a, const void* b, size_t count, DataType dtype, ReduceOp op);

// Divides each element by `divisor` (integers: truncating division) to finish an average.
void finish_avg(void* buf, size_t count, DataType dtype, int divisor);

}  // namespace geoccl::core
