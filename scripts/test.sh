#!/usr/bin/env bash
# The README's test command: installs dependencies, builds, and runs every test suite:
# ctest (release build), pytest, ctest again under ASan+UBSan, and the fuzzers briefly.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/install-deps.sh
jobs=$(nproc)
# Each phase prints its start as seconds since the script began, so a slow phase shows in CI logs.
start=$SECONDS
phase() { echo "== $1 (t+$((SECONDS - start)) s)"; }

fuzzers=(fuzz_frame fuzz_handshake fuzz_store_codec fuzz_group_params fuzz_transport_address fuzz_shm_hello fuzz_blob_descriptor fuzz_blob_resume_state fuzz_quorum fuzz_etcd_response fuzz_compression fuzz_sparse_piece fuzz_exposition fuzz_trace_merge fuzz_auth fuzz_sealed_frame fuzz_testbed)

# Unity builds (batches of 8 sources per compiler run): 230 s instead of 410 on 2 cores for this
# one, 580 CPU-s instead of about 1000 for the ASan build below. A user's plain build compiles
# each source on its own, where a file missing an #include cannot borrow it from its batch
# neighbours: `SCOPE=all scripts/check-standalone.sh DIR` checks that (470 CPU-s, too much for
# CI's 30 minutes on 2 cores) before a change to includes is committed.
phase "build (RelWithDebInfo, unity)"
bash scripts/build.sh build -DCMAKE_UNITY_BUILD=ON

# The ASan+UBSan build and the fuzzers build in the background at nice 19 while the release
# ctest runs: it leaves about half of the 2 cores idle (its tests wait on peers, timers and the
# emulated WAN), and a nice-19 compiler gives a test its core back as soon as it wants it. The
# build is stopped while the WAN timing tests and pytest run (pytest's training jobs keep both
# cores busy: it took 606 s beside the build against 390 s alone) and continued after them.
# -O1: the sanitizers' own advice; the mp tests run about twice as fast as at -O0. clang: the
# same tree builds in 5.6 min on 2 cores where g++ takes 8.2 (and the release build stays g++).
# No Python module: pytest runs on the release build, and the torch-heavy files are a sixth of the
# compile time.
phase "build (ASan+UBSan, then the fuzzers; clang; in the background at nice 19: build/background-build.log)"
background_log="$root/build/background-build.log"
setsid nice -n 19 bash -c '
  set -euo pipefail
  CC=clang CXX=clang++ bash scripts/build.sh build-asan -DGEOCCL_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug \
    -DGEOCCL_BUILD_BENCH=OFF -DGEOCCL_BUILD_PYTHON=OFF "-DCMAKE_CXX_FLAGS_DEBUG=-O1 -g1" -DCMAKE_UNITY_BUILD=ON
  CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DGEOCCL_BUILD_FUZZERS=ON \
    -DGEOCCL_BUILD_TESTS=OFF -DGEOCCL_BUILD_BENCH=OFF -DGEOCCL_BUILD_PYTHON=OFF -DGEOCCL_WERROR=ON >/dev/null
  ninja -C build-fuzz "$@"
' background-build "${fuzzers[@]}" >"$background_log" 2>&1 &
background=$!
# A failed phase ends the script: the background build goes with it.
trap 'kill -CONT -- -"$background" 2>/dev/null; kill -TERM -- -"$background" 2>/dev/null || true' EXIT

phase "ctest (RelWithDebInfo), all but the WAN timing tests"
ctest --test-dir build --output-on-failure --timeout 600 -j "$jobs" -LE serial

# The WAN tests that compare measured times and rates (label "serial") run alone, with the
# background build stopped: a compiler beside the emulator skews the rates it delivers.
kill -STOP -- -"$background" 2>/dev/null || true
phase "ctest (RelWithDebInfo), the WAN timing tests, the background build stopped"
ctest --test-dir build --output-on-failure --timeout 600 -L serial

phase "pytest (Python module and torch backend, release build)"
if [ ! -f build/python/geoccl/__init__.py ]; then
  echo "build/python/geoccl is missing: the Python module was not built (see cmake's 'geoccl python' message)" >&2
  exit 1
fi
PYTHONPATH="$root/build/python${PYTHONPATH:+:$PYTHONPATH}" /usr/bin/python3 -m pytest -q --durations=12 tests/python
kill -CONT -- -"$background" 2>/dev/null || true

phase "waiting for the background build"
if ! wait "$background"; then
  tail -n 60 "$background_log" >&2
  echo "the ASan+UBSan or fuzzer build failed (whole log: $background_log)" >&2
  exit 1
fi
trap - EXIT

phase "ctest (ASan+UBSan)"
# Everything but the WAN tests (real namespaces and rate measurements, meaningless under ASan),
# and five long multi-process tests whose code paths shorter ones cover under ASan (they run in
# the release build above): pipelined uneven hierarchical blocks (the unpipelined uneven test and
# CollectivesBig's pipelined buffers), kills at random points (Errors.KilledRank...), error
# feedback over 40 steps (every compression test with a feedback key), the allgather form on two
# domains (every codec and form on three), a 5 s outage under QUIC (QuicTransport's re-dials).
# About 5 min on 2 cores.
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure --timeout 900 -j "$jobs" -LE wan \
  -E '^(Hierarchical\.PipelinedBlocksWithUnevenDomainsMatchReference|Liveness\.RankKilledAtRandomPointsGivesPeerLostOnAllSurvivors|Compression\.ErrorFeedbackMakesTheMeanConverge|Compression\.TwoDomainsTakeTheAllgatherForm|quic_outage)$'

phase "fuzzers (clang, libFuzzer, 2 s each, $jobs at a time)"
# One fuzzer: its last line of output, or its whole output and a non-zero status on a finding.
fuzz_one() {
  local name=$1 seeds=() out
  mkdir -p "build-fuzz/corpus/$name"
  [ -d "fuzz/corpus/$name" ] && seeds=("fuzz/corpus/$name")
  if out=$("build-fuzz/fuzz/$name" -max_total_time=2 -print_final_stats=0 "build-fuzz/corpus/$name" "${seeds[@]}" 2>&1); then
    echo "$name: ${out##*$'\n'}"
  else
    printf '%s FAILED:\n%s\n' "$name" "$out"
    return 1
  fi
}
export -f fuzz_one
printf '%s\n' "${fuzzers[@]}" | xargs -P "$jobs" -I{} bash -c 'fuzz_one {}'
echo "all test suites passed in $((SECONDS - start)) s"
