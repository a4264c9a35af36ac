#!/usr/bin/env bash
# Reproduces the committed results in bench/results/ (docs/benchmarks.md): the seed scenario
# (3 regions x 2 ranks, 20 ms RTT, 1 Gbit/s uplinks, 0.05 % loss) with host cc cubic and bbr,
# allreduce sizes 4K..96M and the ResNet-50 training-step replay, geoccl vs Gloo vs torch-gloo.
# About 10 minutes on a 2-core VM. Run as root (network namespaces) from anywhere:
#   bash bench/results/reproduce.sh            # BUILD=build OUT=bench/results CCS="cubic bbr"
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
build=${BUILD:-build}
out=${OUT:-bench/results}
scenario=${SCENARIO:-bench/scenarios/seed.toml}
name=$(basename "$scenario" .toml)
mkdir -p "$out"
for cc in ${CCS:-cubic bbr}; do
  python3 bench/compare.py --geoccl "$build/tools/geoccl/geoccl" --gloo "$build/bench/gloo_bench" \
    --torch-gloo bench/torch_gloo_bench.py --train-step "$build/bench/train_step" \
    --wan "$scenario" --domains "${DOMAINS:-a:2,b:2,c:2}" --host-cc "$cc" \
    --op allreduce --sizes "${SIZES:-4K,256K,4M,32M,96M}" --iters "${ITERS:-3}" --warmup 1 \
    --rounds "${ROUNDS:-1}" --train resnet50 --steps "${STEPS:-3}" --timeout-s 600 \
    --json "$out/$name-$cc.json" --plot "$out/$name-$cc.png" | tee "$out/$name-$cc.log"
done
