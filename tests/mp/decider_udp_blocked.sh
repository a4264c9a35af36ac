#!/usr/bin/env bash
# The protocol decider's fallback: GEOCCL_TRANSPORT remote=auto in a network namespace of its
# own whose firewall drops every UDP packet (iptables). 4 ranks in 2 labelled domains must come
# up on TCP, warn that QUIC does not reach their peers, and compute exact collectives.
# Usage: decider_udp_blocked.sh MP_CHECK. Exit 77 (skipped) without root or iptables.
set -euo pipefail
check=$1
. "$(dirname "$0")/netns.sh"
# The namespace lives as long as the processes in it; `timeout` bounds every rank.
unshare -n bash -s "$check" "$logs" <<'INNER'
set -euo pipefail
check=$1 logs=$2
ip link set lo up
iptables -A INPUT -p udp -j DROP
iptables -A OUTPUT -p udp -j DROP
doms=(a a b b)
pids=()
for r in 0 1 2 3; do
  RANK=$r WORLD_SIZE=4 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 GEOCCL_DOMAIN=${doms[$r]} \
    GEOCCL_TRANSPORT=host=tcp,remote=auto GEOCCL_EXPERIMENT=quic_connect_ms=2000 GEOCCL_TEST_EXPECT_TRANSPORT=tcp \
    GEOCCL_CONNECT_TIMEOUT_MS=30000 timeout -k 5 90 "$check" decider >"$logs/rank$r.log" 2>&1 &
  pids+=($!)
done
status=0
for r in 0 1 2 3; do
  wait "${pids[$r]}" || { echo "rank $r failed (exit $?)"; status=1; }
done
for r in 0 1 2 3; do
  if ! grep -q "QUIC does not reach" "$logs/rank$r.log"; then
    echo "rank $r did not warn that QUIC does not reach its peers"
    status=1
  fi
done
grep -h -- "->" "$logs"/rank*.log | head -4
[ $status = 0 ] || { tail -n 20 "$logs"/rank*.log; exit 1; }
INNER
echo "UDP blocked: every rank came up on TCP with a warning"
