#!/usr/bin/env bash
# Fails unless the compiler vectorizes the reduction kernels: every combine loop (8 dtypes x
# 4 ops x 2 operand orders) must be reported as vectorized by -fopt-info-vec.
set -euo pipefail
cxx=$1 src=$2 inc=$3
out=$("$cxx" -std=c++20 -O3 -I"$inc/include" -I"$inc/src" -fopt-info-vec-optimized -c "$src" -o /dev/null 2>&1)
loops=$(grep -c "loop vectorized" <<<"$out" || true)
echo "vectorized loops in reduce.cc: $loops"
[ "$loops" -ge 64 ] || { echo "expected >= 64 vectorized loops"; exit 1; }
