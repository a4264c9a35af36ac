#!/bin/bash
# Measures the WAN test bed against its configuration: RTT (ping), TCP
# throughput (iperf3 -P 8), end-to-end loss (iperf3 UDP) and the emulator's
# CPU use (/proc/PID/schedstat). Produces the tables of docs/testbed.md.
#
#   WANEM="geoccl wanem" tests/testbed/measure_fidelity.sh scenarios  [FILES...]
#   WANEM="geoccl wanem" tests/testbed/measure_fidelity.sh maxrate MTU RATE...
#   WANEM="geoccl wanem" tests/testbed/measure_fidelity.sh parallel SCENARIO CC
#
# Needs root, iperf3, ping, python3. Takes about 30 s per scenario / rate.
set -euo pipefail
WANEM=${WANEM:-geoccl wanem}
HERE=$(cd "$(dirname "$0")" && pwd)
SCEN_DIR=${SCEN_DIR:-$HERE/../../bench/scenarios}
T=${T:-8}            # seconds per throughput test
WORK=$(mktemp -d)
RUN_PID=""
cleanup() {
  [ -n "$RUN_PID" ] && kill "$RUN_PID" 2>/dev/null && wait "$RUN_PID" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

up() {  # up SCENARIO [run options...]: starts wanem, sources its env file
  rm -f "$WORK/env"
  $WANEM run "$@" --env-file "$WORK/env" >"$WORK/run.log" 2>&1 &
  RUN_PID=$!
  for _ in $(seq 100); do [ -f "$WORK/env" ] && break; sleep 0.1; done
  [ -f "$WORK/env" ] || { cat "$WORK/run.log"; exit 1; }
  # shellcheck disable=SC1091
  . "$WORK/env"
}
down() { kill "$RUN_PID"; wait "$RUN_PID" || true; RUN_PID=""; }
ns() { local v="WANEM_NETNS_$1"; echo "${!v}"; }
addr() { local v="WANEM_ADDR_$1"; echo "${!v}"; }
cpu_ns() { awk '{print $1}' "/proc/$WANEM_PID/schedstat"; }

rtt_ms() {  # rtt_ms FROM TO: average idle ping RTT
  ip netns exec "$(ns "$1")" ping -q -c 20 -i 0.05 "$(addr "$2")" |
    awk -F/ '/^rtt/ {print $5}'
}

tcp_mbit() {  # tcp_mbit FROM TO PORT: iperf3 -P 8 receiver rate, Mbit/s
  ip netns exec "$(ns "$2")" iperf3 -s -1 -p "$3" >/dev/null 2>&1 &
  sleep 0.3
  ip netns exec "$(ns "$1")" iperf3 -c "$(addr "$2")" -p "$3" -P 8 -t "$T" -O 2 -J >"$WORK/tcp-$3.json"
  wait $!
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('%.0f' % (d['end']['sum_received']['bits_per_second']/1e6))" "$WORK/tcp-$3.json"
}

udp_loss() {  # udp_loss FROM TO RATE: end-to-end datagram loss in %
  ip netns exec "$(ns "$2")" iperf3 -s -1 -p 5299 >/dev/null 2>&1 &
  sleep 0.3
  ip netns exec "$(ns "$1")" iperf3 -c "$(addr "$2")" -p 5299 -u -b "$3" -l 1200 -t 10 -J >"$WORK/udp.json"
  wait
  python3 -c "import json,sys; s=json.load(open(sys.argv[1]))['end']['sum']; print('%.3f%% (%d/%d)' % (100.0*s['lost_packets']/s['packets'], s['lost_packets'], s['packets']))" "$WORK/udp.json"
}

case "${1:-}" in
  scenarios)
    shift
    files=("$@")
    [ ${#files[@]} -eq 0 ] && files=("$SCEN_DIR"/*.toml)
    printf "%-18s %10s %10s %12s %14s %8s\n" scenario rtt_ms tcp_mbit udp_loss loaded_rtt_ms emu_cpu
    for f in "${files[@]}"; do
      up "$f" --domains a:1,b:1
      r=$(rtt_ms a b)
      c0=$(cpu_ns); t0=$(date +%s%N)
      ip netns exec "$(ns a)" ping -q -c $((T * 4)) -i 0.25 "$(addr b)" >"$WORK/lping" 2>&1 &
      ping_pid=$!
      m=$(tcp_mbit a b 5201)
      wait $ping_pid
      c1=$(cpu_ns); t1=$(date +%s%N)
      lr=$(awk -F/ '/^rtt/ {print $5}' "$WORK/lping")
      l=$(udp_loss a b 20M)
      printf "%-18s %10s %10s %12s %14s %7.0f%%\n" "$(basename "$f" .toml)" "$r" "$m" "$l" "$lr" \
        "$(echo "($c1 - $c0) * 100 / ($t1 - $t0)" | bc -l)"
      down
    done
    ;;
  maxrate)  # one link, 40 ms RTT, no loss, BBR (fills the pipe regardless of loss)
    mtu=$2; shift 2
    printf "%-6s %10s %10s %10s %8s  %s\n" mtu rate_mbit tcp_mbit idle_rtt emu_cpu other_drops
    for rate in "$@"; do
      cat >"$WORK/s.toml" <<TOML
name = "maxrate"
mtu = $mtu
queue = "20ms"
host_cc = "bbr"
[domains.a]
[domains.b]
[links.default]
rtt = "40ms"
rate = "$rate"
TOML
      up "$WORK/s.toml" ${RUN_OPTS:-}
      r=$(rtt_ms a b)
      c0=$(cpu_ns); t0=$(date +%s%N)
      m=$(tcp_mbit a b 5201)
      c1=$(cpu_ns); t1=$(date +%s%N)
      od=$($WANEM ctl "$WANEM_CONTROL" stats | awk '$1=="a>b" {print $10}')
      printf "%-6s %10s %10s %10s %7.0f%%  %s\n" "$mtu" "$rate" "$m" "$r" \
        "$(echo "($c1 - $c0) * 100 / ($t1 - $t0)" | bc -l)" "$od"
      down
    done
    ;;
  parallel)  # all three links a>b, b>c, c>a saturated at once
    up "$2" --cc "$3"
    c0=$(cpu_ns); t0=$(date +%s%N)
    tcp_mbit a b 5201 >"$WORK/ab" & p1=$!
    tcp_mbit b c 5202 >"$WORK/bc" & p2=$!
    tcp_mbit c a 5203 >"$WORK/ca" & p3=$!
    wait $p1 $p2 $p3
    c1=$(cpu_ns); t1=$(date +%s%N)
    printf "%s %s: a>b %s, b>c %s, c>a %s Mbit/s, emulator CPU %.0f%%\n" "$(basename "$2")" "$3" \
      "$(cat "$WORK/ab")" "$(cat "$WORK/bc")" "$(cat "$WORK/ca")" \
      "$(echo "($c1 - $c0) * 100 / ($t1 - $t0)" | bc -l)"
    $WANEM ctl "$WANEM_CONTROL" stats
    down
    ;;
  *)
    sed -n '2,12p' "$0"
    exit 2
    ;;
esac
