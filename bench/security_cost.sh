#!/bin/bash
# The cost of a group secret (docs/security.md), encrypted against plaintext in one run:
#  1. a 96 MiB allreduce on the emulated WAN of seed.toml (3 domains x 2 ranks), median of ITERS,
#     `geoccl run --insecure` (plaintext) and `geoccl run` (a fresh secret: sealed TCP between
#     domains; shared memory inside one, as the launcher trusts its host), ROUNDS alternations;
#  2. loopback: a 64 MiB allreduce between 2 local ranks over TCP (GEOCCL_TRANSPORT=tcp), with the
#     CPU time of the job, plaintext and sealed, per cipher;
#  3. one core sealing and opening 4 MiB frames (bench/seal_bench).
#
#   sudo bash bench/security_cost.sh          # (root: the WAN test bed makes namespaces)
set -euo pipefail
cd "$(dirname "$0")/.."
G=${G:-build/tools/geoccl/geoccl}
ITERS=${ITERS:-3}
ROUNDS=${ROUNDS:-2}
LITERS=${LITERS:-20}
PARTS=${PARTS:-"wan loopback core"}  # which of the three parts to run
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

bench() {  # label env... -- geoccl-run-args... -> median_ms busbw_GBps cpu_s
  local label=$1; shift
  rm -f "$tmp/b.json"
  env "$@" >"$tmp/log" 2>&1 || { echo "FAILED $label" >&2; tail -5 "$tmp/log" >&2; return 1; }
  python3 - "$tmp/b.json" "$tmp/cpu" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))[0]
u, s = open(sys.argv[2]).read().split()[-2:]
print(f"{r['time_us_median'] / 1000:.1f} {r.get('busbw_gbps', r.get('bus_bw_gbps', 0)):.2f} {float(u) + float(s):.2f}")
PY
}

wan() {  # --insecure or "" -> median_ms busbw cpu_s
  bench "seed $1" /usr/bin/time -f "%U %S" -o "$tmp/cpu" timeout 900 "$G" run $1 --wan bench/scenarios/seed.toml \
    --domains a:2,b:2,c:2 -n 6 -- "$G" bench --op allreduce --sizes 96M --iters "$ITERS" --warmup 1 --json "$tmp/b.json"
}

loopback() {  # --insecure or "", cipher -> median_ms busbw cpu_s
  bench "loopback $1 $2" GEOCCL_TRANSPORT=tcp GEOCCL_CIPHER="$2" /usr/bin/time -f "%U %S" -o "$tmp/cpu" timeout 600 \
    "$G" run $1 -n 2 -- "$G" bench --op allreduce --sizes 64M --iters "$LITERS" --warmup 2 --json "$tmp/b.json"
}

if [[ " $PARTS " == *" wan "* ]]; then
echo "== 96 MiB allreduce, seed.toml (a:2,b:2,c:2), median of $ITERS, $ROUNDS rounds"
printf '%-6s %-10s %10s %10s %8s\n' round mode median_ms busbw cpu_s
for r in $(seq 1 "$ROUNDS"); do
  read -r pm pb pc < <(wan --insecure)
  printf '%-6s %-10s %10s %10s %8s\n' "$r" plaintext "$pm" "$pb" "$pc"
  read -r em eb ec < <(wan "")
  printf '%-6s %-10s %10s %10s %8s\n' "$r" sealed "$em" "$eb" "$ec"
  python3 -c "print(f'       sealed/plaintext time: {$em / $pm:.3f}')"
  echo "$pm $em" >>"$tmp/pairs"
done
python3 - "$tmp/pairs" <<'PY'
import statistics, sys
pairs = [tuple(map(float, l.split())) for l in open(sys.argv[1])]
p, e = statistics.median(x for x, _ in pairs), statistics.median(y for _, y in pairs)
print(f"median over rounds: plaintext {p:.1f} ms, sealed {e:.1f} ms, sealed/plaintext {e / p:.3f}")
PY
fi

if [[ " $PARTS " == *" loopback "* ]]; then
echo "== loopback 64 MiB allreduce, 2 ranks over TCP, median of $LITERS"
printf '%-10s %-18s %10s %10s %8s\n' mode cipher median_ms busbw cpu_s
read -r m b c < <(loopback --insecure auto)
printf '%-10s %-18s %10s %10s %8s\n' plaintext - "$m" "$b" "$c"
for cipher in aes256gcm xchacha20poly1305; do
  if read -r m b c < <(loopback "" $cipher); then
    printf '%-10s %-18s %10s %10s %8s\n' sealed $cipher "$m" "$b" "$c"
  fi
done
fi

if [[ " $PARTS " == *" core "* ]]; then
echo "== one core, 4 MiB frames"
build/bench/seal_bench $((4 << 20)) 2
fi
