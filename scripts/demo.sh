#!/usr/bin/env bash
# The README's main job: a multi-region allreduce on the emulated WAN (bench/scenarios/seed.toml:
# three regions, 20 ms RTT, 1 Gbit/s uplinks, 0.05 % loss), geoccl against Gloo in one run,
# alternating A B A B, with the time ratio per size.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/install-deps.sh
bash scripts/build.sh build
scenario=${SCENARIO:-bench/scenarios/seed.toml}
n=${NRANKS:-6}
sizes=${SIZES:-4K,1M,16M,64M}
geoccl=build/tools/geoccl/geoccl
echo "== geoccl vs Gloo, $n ranks on $scenario (sizes $sizes)"
python3 bench/compare.py --geoccl "$geoccl" --gloo build/bench/gloo_bench \
  --launcher "$geoccl run --wan $scenario" -n "$n" --sizes "$sizes" --iters "${ITERS:-5}" \
  --rounds "${ROUNDS:-2}" --json "${JSON:-build/demo.json}"
