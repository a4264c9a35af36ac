#!/bin/bash
# Outage recovery on the emulated WAN: the seed's 3 regions x 2 ranks run 16 MiB allreduces in a
# loop (every result checked exactly) while the link between regions a and b is cut for 5 s and
# for 60 s (bench/scenarios/outage-*.toml). Each cut runs, in one go, with geoccl's recovery
# (heartbeats, stalled connections replaced: the defaults) and with the transport's own
# retransmission backoff only (GEOCCL_HEARTBEAT_MS=0: no heartbeats, no detector, no stall checks;
# GEOCCL_EXPERIMENT=quic_redial_ms=0: no re-dialling), the transport as it was before recovery existed; on
# QUIC also with heartbeats but no re-dialling. Prints the slowest iteration (the one the cut
# hits) of each run against the targets: at most 6 s for the 5 s cut and 61.5 s for the 60 s cut.
#
#   sudo bash bench/outage_recovery.sh                    # both cuts, TCP
#   CUTS=5 TRANSPORTS="tcp quic" sudo bash bench/outage_recovery.sh
set -euo pipefail
cd "$(dirname "$0")/.."
G=${G:-build/tools/geoccl/geoccl}
CHECK=${CHECK:-build/tests/liveness_check}
CUTS=${CUTS:-"5 60"}
TRANSPORTS=${TRANSPORTS:-tcp}
out=$(mktemp)
trap 'rm -f "$out"' EXIT

slowest() {  # the worst "slowest" over the ranks, in ms
  grep -o 'slowest [0-9]* ms' "$out" | awk '{if ($2 > m) m = $2} END {print m + 0}'
}
median() {
  grep -o 'median [0-9]* ms' "$out" | awk '{s += $2; n++} END {print (n ? int(s / n) : 0)}'
}

printf '%-8s %-6s %-26s %12s %12s %10s\n' cut trans recovery "median ms" "slowest ms" target
for cut in $CUTS; do
  run_s=$((cut + 20))
  target=$([ "$cut" = 60 ] && echo 61500 || echo $((cut * 1000 + 1000)))
  for t in $TRANSPORTS; do
    modes="1000:2000 0:0"
    [ "$t" = quic ] && modes="1000:2000 1000:0 0:0"
    for mode in $modes; do
      hb=${mode%%:*} redial=${mode##*:}
      GEOCCL_TRANSPORT=$([ "$t" = quic ] && echo host=shm,remote=quic || echo auto) \
      GEOCCL_HEARTBEAT_MS=$hb GEOCCL_EXPERIMENT=quic_redial_ms=$redial \
      GEOCCL_TEST_RUN_S=$run_s \
        "$G" run --wan "bench/scenarios/outage-${cut}s.toml" --domains a:2,b:2,c:2 -n 6 --timeout $((run_s + 120)) \
        -- "$CHECK" outage >"$out" 2>&1 || { echo "run failed:"; tail -20 "$out"; exit 1; }
      case $mode in
        0:0) what="backoff only" ;;
        1000:0) what="heartbeats, no re-dial" ;;
        *) what="geoccl recovery" ;;
      esac
      s=$(slowest)
      verdict=$([ "$s" -le "$target" ] && echo "met" || echo "missed")
      printf '%-8s %-6s %-26s %12s %12s %10s %s\n' "${cut}s" "$t" "$what" "$(median)" "$s" "$target" \
        "$([ "$mode" = 1000:2000 ] && echo "$verdict" || echo "")"
    done
  done
done
