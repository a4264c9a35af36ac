#!/usr/bin/env bash
# Fails unless every loop marked "// must vectorize" in the given sources is reported vectorized
# by -fopt-info-vec (same flags the library builds them with). Marking the hot loops one by one,
# rather than counting, names the loop that stopped vectorizing.
# Usage: check_marked_vectorized.sh CXX ROOT SRC...
set -euo pipefail
cxx=$1 root=$2
shift 2
status=0
for src in "$@"; do
  out=$("$cxx" -std=c++20 -O3 -ftree-vectorize -ffp-contract=off -I"$root/include" -I"$root/src" \
        -fopt-info-vec-optimized -c "$src" -o /dev/null 2>&1)
  marked=$(grep -n "// must vectorize" "$src" | cut -d: -f1)
  [ -n "$marked" ] || { echo "$src: no loop marked"; status=1; }
  for line in $marked; do
    # The marker belongs on the loop's own line (-fopt-info reports that one).
    sed -n "${line}p" "$src" | grep -q "for (" || { echo "$src:$line: marker not on a for line"; status=1; continue; }
    if grep -q "$(basename "$src"):$line:[0-9]*: optimized: loop vectorized" <<<"$out"; then
      echo "$(basename "$src"):$line vectorized"
    else
      echo "$(basename "$src"):$line NOT vectorized: $(sed -n "${line}p" "$src" | sed 's/^ *//')"
      status=1
    fi
  done
done
exit $status
