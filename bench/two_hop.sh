#!/usr/bin/env bash
# Issue 18, item 2 (docs/benchmarks.md, "Two-hop paths"): on two-hop.toml (a-c 50 Mbit/s, a-b and
# b-c 1 Gbit/s), geoccl with two-hop paths for bulk data against geoccl with every pair direct
# (geoccl-direct: GEOCCL_TWO_HOP_GAIN=0), alternating in one run, 16 MiB and 96 MiB allreduces.
# Both measure the paths at start-up (GEOCCL_PLAN_PROBE_BYTES=4M: the two-hop choice needs them).
# compare.py's limit is the direct path's (50 Mbit/s bottleneck): the two-hop run goes below it.
# Run as root from anywhere:
#   bash bench/two_hop.sh            # BUILD=build OUT=bench/results ITERS=3 ROUNDS=2
set -euo pipefail
export GEOCCL_PLAN_PROBE_BYTES=${GEOCCL_PLAN_PROBE_BYTES:-4M}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build=${BUILD:-build}
out=${OUT:-bench/results}
mkdir -p "$out"
export GEOCCL_TCP_STALL_MS=${GEOCCL_TCP_STALL_MS:-10000}
python3 bench/compare.py --geoccl "$build/tools/geoccl/geoccl" --gloo "$build/bench/gloo_bench" --op allreduce \
  --warmup 1 --rounds "${ROUNDS:-2}" --timeout-s 900 --wan bench/scenarios/two-hop.toml \
  --backends geoccl,geoccl-direct --sizes 16M,96M --iters "${ITERS:-3}" \
  --json "$out/two-hop.json" | tee "$out/two-hop.log"
