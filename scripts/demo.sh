#!/usr/bin/env bash
# The README's main job: data-parallel training (torch DDP, scikit-learn's digits) across three
# emulated regions (bench/scenarios/seed.toml: 20 ms RTT, 1 Gbit/s uplinks, 0.05 % loss; 3 x 2
# ranks), first with torch's gloo backend, then with geoccl, and the headline table: steps/s,
# step time, exposed communication share, accuracy, speed-up. Then the allreduce table of the
# same WAN against Gloo and the link's physical limit (bench/compare.py).
# Knobs: SCENARIO, STEPS, CODEC (int8), HOST_CC (cubic|bbr), SIZES, ITERS, ROUNDS, SKIP_ALLREDUCE=1.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/install-deps.sh
bash scripts/build.sh build
scenario=${SCENARIO:-bench/scenarios/seed.toml}
geoccl=build/tools/geoccl/geoccl
cc_opt=()
[[ -n "${HOST_CC:-}" ]] && cc_opt=(--host-cc "$HOST_CC")
out=build/demo
mkdir -p "$out"
rm -f "$out"/train-*

for backend in gloo geoccl; do
  echo "== training with backend $backend on $scenario"
  "$geoccl" run --wan "$scenario" "${cc_opt[@]}" --timeout 600 -- \
    /usr/bin/python3 examples/ddp_digits.py --backend "$backend" --steps "${STEPS:-300}" \
    --json "$out/train-$backend"
done
# The same training with the WAN codec we recommend (int8 with error feedback, docs/compression.md):
# the DDP hook compresses the hops that cross regions; inside a region gradients stay fp32.
codec=${CODEC:-int8}
echo "== training with backend geoccl, WAN codec $codec, on $scenario"
"$geoccl" run --wan "$scenario" "${cc_opt[@]}" --timeout 600 -- \
  /usr/bin/python3 examples/ddp_digits.py --backend geoccl --compression "$codec" \
  --steps "${STEPS:-300}" --json "$out/train-geoccl-$codec"
python3 scripts/demo_table.py "$scenario" "$out/train" gloo geoccl "geoccl-$codec"

if [[ "${SKIP_ALLREDUCE:-0}" != 1 ]]; then
  echo
  echo "== allreduce: geoccl vs Gloo on $scenario"
  python3 bench/compare.py --geoccl "$geoccl" --gloo build/bench/gloo_bench \
    --wan "$scenario" "${cc_opt[@]}" --sizes "${SIZES:-4K,1M,16M,64M}" --iters "${ITERS:-3}" \
    --rounds "${ROUNDS:-1}" --json "$out/allreduce.json" --plot "$out/allreduce.png"
fi
