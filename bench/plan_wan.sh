#!/usr/bin/env bash
# docs/benchmarks.md, "Two-hop paths" and "Small allreduces on unequal RTTs; algorithm choice by
# a cost model": geoccl with the planner's cost model against geoccl with the old size
# thresholds (geoccl-thresholds: GEOCCL_EXPERIMENT=plan_probe=0) and Gloo, alternating, on
#   - unequal-rtt.toml (3 regions, RTTs 30/80/110 ms, uplinks 1000/500/250 Mbit/s): 4 KiB
#     back-to-back, against the small-message bound (the largest one-way delay, 55 ms);
#   - four-uneven.toml (4 regions of 3/1/2/2 ranks, RTTs 20..140 ms, 500 Mbit/s uplinks):
#     16 MiB and 96 MiB against the link limit (Gloo at 16 MiB only: ~30 s per 96 MiB call);
# and geoccl with two-hop paths for bulk data against geoccl with every pair direct
# (geoccl-direct: GEOCCL_EXPERIMENT=two_hop_gain=0) on
#   - two-hop.toml (3 regions x 1 rank, a-c 50 Mbit/s, a-b and b-c 1 Gbit/s): 16 and 96 MiB.
# Every row runs the defaults but for the variable its backend names. Run as root from anywhere:
#   bash bench/plan_wan.sh            # BUILD=build OUT=bench/results ITERS=5 ROUNDS=2
#   ONLY=two-hop bash bench/plan_wan.sh   # one of unequal-rtt, four-uneven, two-hop
set -euo pipefail
# "geoccl" is the default (measured paths, cost model, two-hop paths); geoccl-thresholds turns the
# start-up path probe off.
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build=${BUILD:-build}
out=${OUT:-bench/results}
only=${ONLY:-}
mkdir -p "$out"
common=(--geoccl "$build/tools/geoccl/geoccl" --gloo "$build/bench/gloo_bench" --op allreduce
        --warmup 1 --rounds "${ROUNDS:-2}" --timeout-s 900)
want() { [ -z "$only" ] || [ "$only" = "$1" ]; }
if want unequal-rtt; then
  python3 bench/compare.py "${common[@]}" --wan bench/scenarios/unequal-rtt.toml \
    --backends geoccl,geoccl-thresholds,gloo --sizes 4K --iters "${SMALL_ITERS:-30}" \
    --json "$out/unequal-rtt.json" | tee "$out/unequal-rtt.log"
fi
if want four-uneven; then
  python3 bench/compare.py "${common[@]}" --wan bench/scenarios/four-uneven.toml \
    --backends geoccl,geoccl-thresholds,gloo --sizes 16M --iters "${ITERS:-5}" \
    --json "$out/four-uneven-16M.json" | tee "$out/four-uneven-16M.log"
  python3 bench/compare.py "${common[@]}" --wan bench/scenarios/four-uneven.toml \
    --backends geoccl,geoccl-thresholds --sizes 96M --iters "${ITERS:-5}" \
    --json "$out/four-uneven-96M.json" | tee "$out/four-uneven-96M.log"
fi
if want two-hop; then
  # compare.py's limit counts a-c at its widest way (through b, 1 Gbit/s).
  python3 bench/compare.py "${common[@]}" --wan bench/scenarios/two-hop.toml \
    --backends geoccl,geoccl-direct --sizes 16M,96M --iters "${ITERS:-3}" \
    --json "$out/two-hop.json" | tee "$out/two-hop.log"
fi
