#!/usr/bin/env bash
# wan_relay: a job on the emulated WAN where regions a and c cannot reach each other (relay.toml).
# 1. mp_check relay: the job starts, the a-c pairs (GEOCCL_TEST_RELAYED) go through a relay in
#    region b, every collective is exact.
# 2. geoccl probe: lists those pairs as relayed by a rank of region b (rank 0 or 1).
# Usage: wan_relay_test.sh GEOCCL MP_CHECK SCENARIO. `geoccl run --wan` owns the namespaces and
# processes it starts, and removes them on every way out.
set -euo pipefail
geoccl=$1 mp_check=$2 scenario=$3
run=("$geoccl" run --wan "$scenario" --domains b:2,a:2,c:2 -n 6 --timeout 120 --)
"${run[@]}" env GEOCCL_TRANSPORT=tcp "$mp_check" relay
out=$("${run[@]}" env GEOCCL_TRANSPORT=tcp "$geoccl" probe --rate-bytes 0 2>&1) || { echo "$out"; echo "FAIL: probe"; exit 1; }
# Rank 0 prints the report; the launcher prefixes each line with "[rank] ".
report=$(echo "$out" | sed -n 's/^\[0\] //p')
echo "$report" | sed -n '/^# domains/,/^# allreduce/p'
want=$(echo "${GEOCCL_TEST_RELAYED:?}" | tr ',' '\n' | sort)
got=$(echo "$report" | sed -n 's/^\([0-9]*\) <-> \([0-9]*\): relayed by rank [01]$/\1-\2/p' | sort)
if [ "$got" != "$want" ]; then
  echo "FAIL: probe lists relayed pairs [$(echo $got)], expected [$(echo $want)] relayed by rank 0 or 1"
  exit 1
fi
echo "PASS: probe lists the relayed pairs: $(echo $got)"
