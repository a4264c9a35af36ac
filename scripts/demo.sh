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
sizes=${SIZES:-4K,1M,16M,64M}
geoccl=build/tools/geoccl/geoccl
cc_opt=()
[[ -n "${HOST_CC:-}" ]] && cc_opt=(--host-cc "$HOST_CC")
echo "== geoccl vs Gloo on $scenario (sizes $sizes)"
# Ranks are placed as the scenario says (seed: 3 regions x 2); DOMAINS=a:1,b:1,c:1 overrides.
dom_opt=()
[[ -n "${DOMAINS:-}" ]] && dom_opt=(--domains "$DOMAINS")
python3 bench/compare.py --geoccl "$geoccl" --gloo build/bench/gloo_bench \
  --wan "$scenario" "${dom_opt[@]}" "${cc_opt[@]}" --sizes "$sizes" --iters "${ITERS:-5}" \
  --rounds "${ROUNDS:-2}" --json "${JSON:-build/demo.json}" --plot "${PLOT:-build/demo.png}"
