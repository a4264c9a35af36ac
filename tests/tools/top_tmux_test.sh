#!/usr/bin/env bash
# `geoccl top` under tmux: a 3-rank job serves /metrics (GEOCCL_TRANSPORT=tcp, so every peer has
# an RTT), `geoccl top` runs in a detached tmux window of a private tmux server, and the screen
# is read with capture-pane until it shows a PEER row for every (rank, peer) pair with transport
# tcp and a measured RTT, numeric rates, and an OP row per rank with the job's allreduce count.
# Usage: top_tmux_test.sh GEOCCL METRICS_RANK. Exit 77: no tmux. Everything started here is
# stopped on every path out (the job, the tmux server).
set -euo pipefail
geoccl=$1 rank_prog=$2
command -v tmux >/dev/null || { echo "SKIP: no tmux"; exit 77; }
tmp=$(mktemp -d /tmp/geoccl-top-XXXXXX)
sock="geoccl-top-$$"
# Three consecutive ports no one listens on, below the ephemeral range (32768-60999), so that
# no outgoing connection holds them either.
base=
for try in $(seq 50); do
  b=$((20000 + (RANDOM * 7 + $$ + try * 97) % 12000))
  if ! ss -Htln "( sport >= :$b and sport <= :$((b + 2)) )" | grep -q .; then base=$b; break; fi
done
[ -n "$base" ] || { echo "FAIL: no free port range"; exit 1; }
job=
cleanup() {
  touch "$tmp/stop"
  tmux -L "$sock" kill-server 2>/dev/null || true
  if [ -n "$job" ]; then
    for _ in $(seq 100); do kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
    kill "$job" 2>/dev/null || true
    wait "$job" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

GEOCCL_TRANSPORT=tcp "$geoccl" run -n 3 --timeout 60 --metrics --metrics-base-port "$base" -- \
  "$rank_prog" "$tmp/stop" 262144 40 > "$tmp/job.log" 2>&1 &
job=$!
eps="127.0.0.1:$base 127.0.0.1:$((base + 1)) 127.0.0.1:$((base + 2))"
tmux -L "$sock" new-session -d -s top -x 160 -y 50 "$geoccl top --interval 0.5 $eps"

want_ops=$((20 + 40))
for i in $(seq 120); do
  sleep 0.25
  kill -0 "$job" 2>/dev/null || { sleep 0.5; screen=$(tmux -L "$sock" capture-pane -p -t top 2>/dev/null || true); break; }
  screen=$(tmux -L "$sock" capture-pane -p -t top 2>/dev/null || true)
  # PEER rank peer transport rtt_ms minrtt_ms send recv retrans/s retrans reconn
  peers=$(awk '$1 == "PEER" && $4 == "tcp" && $5 ~ /^[0-9.]+$/ && $5 > 0 && $7 ~ /^[0-9.]+$/ && $8 ~ /^[0-9.]+$/ {print $2 "-" $3}' <<<"$screen" | sort -u | wc -l)
  ops=$(awk -v n="$want_ops" '$1 == "OP" && $3 == "allreduce" && $6 == n {print $2}' <<<"$screen" | sort -u | wc -l)
  if [ "$peers" -eq 6 ] && [ "$ops" -eq 3 ] && grep -q "3/3 ranks up" <<<"$screen"; then
    echo "$screen"
    echo "PASS after $i captures"
    exit 0
  fi
done
echo "FAIL: the screen never showed 6 tcp peer rows and 3 allreduce rows of $want_ops:"
echo "$screen"
echo "--- job:"
cat "$tmp/job.log"
exit 1
