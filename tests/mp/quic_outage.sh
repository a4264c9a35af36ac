#!/usr/bin/env bash
# QUIC through an outage: 3 ranks on QUIC in a network namespace of the test's own; once every
# rank has finished its first allreduce (each writes a ready file), every UDP packet is dropped
# (iptables) for 5 s, longer than the re-dial silence
# (GEOCCL_EXPERIMENT quic_redial_ms). Every rank must go on with exact results (mp_check quic-outage), a connection must have been replaced by a
# re-dialled one (counted on both its ends), every replacement must have resumed its TLS session
# with its frames as 0-RTT early data, every connection's flow-control windows must be the ones
# sized from the figures it reports (a replacement's from a measured path), and no rank may fail. Heartbeats are off: they would
# make old connections send through the outage and recover by themselves about as soon, a race the
# test avoids.
# Usage: quic_outage.sh MP_CHECK. Exit 77 (skipped) without root, iptables or unshare.
set -euo pipefail
check=$1
. "$(dirname "$0")/netns.sh"
# The namespace lives as long as the processes in it; `timeout` bounds every rank.
unshare -n bash -s "$check" "$logs" <<'INNER'
set -euo pipefail
check=$1 logs=$2
ip link set lo up
pids=()
for r in 0 1 2; do
  RANK=$r WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 GEOCCL_TRANSPORT=quic \
    GEOCCL_EXPERIMENT=quic_redial_ms=1000 GEOCCL_HEARTBEAT_MS=0 GEOCCL_TEST_RUN_S=12 GEOCCL_TEST_EXPECT_REDIAL=1 \
    GEOCCL_LOG_LEVEL=info GEOCCL_TEST_READY_FILE="$logs/ready" \
    timeout -k 5 90 "$check" quic-outage >"$logs/rank$r.log" 2>&1 &
  pids+=($!)
done
# Every rank connected and past its first allreduce (bounded: a rank that fails exits, and its
# wait below reports it).
for _ in $(seq 600); do
  [ -e "$logs/ready.0" ] && [ -e "$logs/ready.1" ] && [ -e "$logs/ready.2" ] && break
  sleep 0.1
done
sleep 1  # traffic under way for a while, as in a job
iptables -I INPUT -p udp -j DROP
echo "UDP dropped"
sleep 5
iptables -D INPUT -p udp -j DROP
echo "UDP back"
status=0
for r in 0 1 2; do
  wait "${pids[$r]}" || { echo "rank $r failed (exit $?)"; status=1; }
done
grep -h "reconnect\|iterations\|replaces\|windows\|acknowledged" "$logs"/rank*.log || true
[ $status = 0 ] || { tail -n 20 "$logs"/rank*.log; exit 1; }
INNER
echo "QUIC outage: every connection was re-dialled and every result is exact"
