#!/bin/bash
# Stream recovery on the emulated WAN: runs a 96 MiB allreduce loop between two regions and,
# while it runs, kills busy data sockets from outside the processes (`ss -K`: the kernel aborts
# the socket and sends an RST, as a middlebox would). Prints the benchmark line (median/min/max
# per allreduce; the max holds the iterations that lost a stream) and the reconnect counters.
#
#   sudo bash bench/stream_reset_wan.sh            # kills on, resume on
#   KILLS=0 sudo bash bench/stream_reset_wan.sh    # the same run without kills (baseline)
#   RESUME=off sudo bash bench/stream_reset_wan.sh # without resume: the job fails with peer-lost
set -euo pipefail
cd "$(dirname "$0")/.."
G=${G:-build/tools/geoccl/geoccl}
SCENARIO=${SCENARIO:-bench/scenarios/p2p-40ms.toml}
KILLS=${KILLS:-3}
ITERS=${ITERS:-10}
RESUME=${RESUME:-on}
out=$(mktemp)
trap 'rm -f "$out"' EXIT

GEOCCL_EXPERIMENT=resume=$RESUME "$G" run --wan "$SCENARIO" -n 2 --host-cc cubic --timeout 600 -- \
  "$G" bench --op allreduce --sizes 96M --iters "$ITERS" --warmup 1 --verbose >"$out" 2>&1 &
job=$!

# The busy data sockets (>= 1 MiB sent) of geoccl processes in the run's namespaces, as
# "netns local peer" lines.
busy() {
  for ns in $(ip netns list | awk '/^geoccl-/{print $1}'); do
    ip netns exec "$ns" ss -tinpH state established 2>/dev/null |
      awk -v ns="$ns" '/users:/{l=$3; p=$4; ours=($0 ~ /"geoccl"/); next}
        ours && match($0, /bytes_sent:[0-9]+/) {
          if (substr($0, RSTART + 11, RLENGTH - 11) + 0 >= 1048576) print ns, l, p; ours = 0 }'
  done
}

killed=0
sleep 8  # start-up, connections, warm-up iteration
for _ in $(seq 1 "$KILLS"); do
  kill -0 $job 2>/dev/null || break
  line=$(busy | shuf -n 1 || true)
  if [ -n "$line" ]; then
    read -r ns l p <<<"$line"
    ip netns exec "$ns" ss -K -tnH state established "( src $l and dst $p )" >/dev/null
    echo "killed data socket $l -> $p in $ns"
    killed=$((killed + 1))
  fi
  sleep 3
done
rc=0
wait $job || rc=$?
grep -E "^\[0\] +(bytes|[0-9]+ )" "$out" || true
grep -E "reconnects [1-9]|error|peer lost" "$out" | sed 's/^/  /' | head -20 || true
echo "streams killed: $killed, exit status: $rc"
exit $rc
