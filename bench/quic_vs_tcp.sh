#!/bin/bash
# TCP against QUIC on the emulated WAN, side by side in one run, and what the protocol decider
# (GEOCCL_TRANSPORT remote=auto) picks on each scenario: a 96 MiB allreduce (median of ITERS)
# and back-to-back 4 KiB allreduces (median and p99 over SMALL iterations) per transport, plus
# the CPU time of the whole job (user + system: every rank and the emulator) for the 96 MiB run.
#
#   sudo bash bench/quic_vs_tcp.sh                       # every scenario below
#   SCENARIOS="p2p-40ms-lossy" sudo bash bench/quic_vs_tcp.sh
set -euo pipefail
cd "$(dirname "$0")/.."
G=${G:-build/tools/geoccl/geoccl}
ITERS=${ITERS:-3}
SMALL=${SMALL:-200}
SCENARIOS=${SCENARIOS:-"p2p-40ms p2p-40ms-lossy seed lossy intercontinental"}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

domains_of() {  # the --domains spec of a scenario
  case $1 in p2p-*) echo a:1,b:1 ;; *) echo a:2,b:2,c:2 ;; esac
}

run() {  # scenario transport size iters -> median_us p99_us cpu_s (all ranks)
  local s=$1 t=$2 size=$3 iters=$4
  local spec; spec=$(domains_of "$s")
  local n; n=$(echo "$spec" | tr ',' '\n' | awk -F: '{s += $2} END {print s}')
  rm -f "$tmp/b.json"
  # /usr/bin/time counts the launcher (the emulator runs in it) and every rank.
  GEOCCL_TRANSPORT=$t /usr/bin/time -f "%U %S" -o "$tmp/cpu" timeout 600 "$G" run --wan "bench/scenarios/$s.toml" \
    --domains "$spec" -n "$n" -- "$G" bench --sizes "$size" --iters "$iters" --warmup 1 --json "$tmp/b.json" \
    >"$tmp/log" 2>&1 || { echo "FAILED $s $t"; tail -5 "$tmp/log"; return 1; }
  python3 - "$tmp/b.json" "$tmp/cpu" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))[0]
u, s = open(sys.argv[2]).read().split()[-2:]
print(f"{r['time_us_median']:.0f} {r['time_us_max']:.0f} {float(u) + float(s):.2f}")
PY
}

printf '%-17s %-6s %12s %10s %12s %12s %9s\n' scenario trans "96M_ms" "Gbit/s" "4K_p50_ms" "4K_max_ms" "cpu_s"
for s in $SCENARIOS; do
  for t in tcp host=shm,remote=quic; do
    name=${t##*=}
    read -r big_us _ cpu <<<"$(run "$s" "$t" 96M "$ITERS")"
    read -r small_us small_max _ <<<"$(run "$s" "$t" 4K "$SMALL")"
    gbps=$(python3 -c "print(f'{96*2**20*8/($big_us*1e3):.3f}')")
    printf '%-17s %-6s %12.0f %10s %12.1f %12.1f %9s\n' "$s" "$name" "$(echo "$big_us/1000" | bc -l)" "$gbps" \
      "$(echo "$small_us/1000" | bc -l)" "$(echo "$small_max/1000" | bc -l)" "$cpu"
  done
  # The decider: what it chose, from rank 0's log.
  GEOCCL_TRANSPORT=host=shm,remote=auto GEOCCL_LOG_LEVEL=info timeout 600 "$G" run --wan "bench/scenarios/$s.toml" \
    --domains "$(domains_of "$s")" -n "$(domains_of "$s" | tr ',' '\n' | awk -F: '{s += $2} END {print s}')" -- \
    "$G" bench --sizes 4K --iters 2 --warmup 0 >"$tmp/auto" 2>&1 || true
  grep -o "transport domains .*" "$tmp/auto" | sed "s/^/  $s decider: /" || echo "  $s decider: no decision logged"
done
