#!/bin/bash
# Head-of-line blocking, TCP against QUIC, side by side in one run: back-to-back
# 4 KiB allreduces (p50 and p99 over SMALL iterations), alone and while a 256 MiB bulk-class
# allreduce runs back to back on the same WAN path (`geoccl bench --background 256M`). The bulk
# class stays on TCP in both runs (its scavenger paces it); what differs is the transport of the
# gradient class that carries the 4 KiB operations.
#
#   sudo bash bench/quic_hol.sh                       # p2p-40ms-lossy and lossy
#   SCENARIOS=lossy SMALL=100 sudo bash bench/quic_hol.sh
set -euo pipefail
cd "$(dirname "$0")/.."
G=${G:-build/tools/geoccl/geoccl}
SMALL=${SMALL:-200}
BULK=${BULK:-256M}
SCENARIOS=${SCENARIOS:-"p2p-40ms-lossy lossy"}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

domains_of() { case $1 in p2p-*) echo a:1,b:1 ;; *) echo a:2,b:2,c:2 ;; esac; }

run() {  # scenario transport background -> p50_ms p99_ms background_ops
  local s=$1 t=$2 bg=$3 spec n
  spec=$(domains_of "$s")
  n=$(echo "$spec" | tr ',' '\n' | awk -F: '{s += $2} END {print s}')
  local extra=()
  [ "$bg" != none ] && extra=(--background "$bg")
  rm -f "$tmp/b.json"
  GEOCCL_TRANSPORT=$t timeout 900 "$G" run --wan "bench/scenarios/$s.toml" --domains "$spec" -n "$n" -- \
    "$G" bench --sizes 4K --iters "$SMALL" --warmup 5 "${extra[@]}" --json "$tmp/b.json" >"$tmp/log" 2>&1 ||
    { echo "FAILED $s $t $bg" >&2; tail -5 "$tmp/log" >&2; echo "- - -"; return 0; }
  python3 - "$tmp/b.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))[0]
assert r["correct"], "wrong results"
print(f"{r['time_us_median'] / 1e3:.1f} {r['time_us_p99'] / 1e3:.1f} {r.get('background_ops', 0)}")
PY
}

printf '%-16s %-6s %-10s %10s %10s %8s\n' scenario trans beside 4K_p50_ms 4K_p99_ms bulk_ops
for s in $SCENARIOS; do
  for bg in none "$BULK"; do
    for t in tcp host=shm,remote=quic; do
      read -r p50 p99 ops <<<"$(run "$s" "$t" "$bg")"
      printf '%-16s %-6s %-10s %10s %10s %8s\n' "$s" "${t##*=}" "$bg" "$p50" "$p99" "$ops"
    done
  done
done
