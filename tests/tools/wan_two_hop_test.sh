#!/usr/bin/env bash
# wan_two_hop: a job on the emulated WAN where the direct a-c path is 20 times slower than the way
# through b (two-hop.toml), with measured paths (GEOCCL_EXPERIMENT plan_probe).
# 1. mp_check two_hop: pair 0-2 (a-c) sends its bulk data through rank 1 (b), both ends report
#    it, every other pair is direct, allreduces are exact, the relay forwarded the bulk.
# 2. geoccl probe: lists the two-hop path between the domains and the pair.
# Usage: wan_two_hop_test.sh GEOCCL MP_CHECK SCENARIO. `geoccl run --wan` owns the namespaces and
# processes it starts, and removes them on every way out.
set -euo pipefail
geoccl=$1 mp_check=$2 scenario=$3
run=("$geoccl" run --wan "$scenario" --domains a:1,b:1,c:1 -n 3 --timeout 120 --)
GEOCCL_TEST_TWO_HOP=0-2:1 "${run[@]}" env GEOCCL_TRANSPORT=tcp "$mp_check" two_hop
out=$("${run[@]}" env GEOCCL_TRANSPORT=tcp "$geoccl" probe --rate-bytes 0 2>&1) || { echo "$out"; echo "FAIL: probe"; exit 1; }
report=$(echo "$out" | sed -n 's/^\[0\] //p')  # rank 0 prints; the launcher prefixes "[rank] "
echo "$report" | sed -n '/^# domains/,/^# allreduce/p'
echo "$report" | grep -q '^# two-hop paths for bulk data: 1 between domains$' || { echo "FAIL: probe lists no two-hop path"; exit 1; }
echo "$report" | grep -q '^a-c through b: ' || { echo "FAIL: probe does not name a-c through b"; exit 1; }
echo "$report" | grep -q '^0 <-> 2: bulk data through rank 1$' || { echo "FAIL: probe does not list pair 0-2 through rank 1"; exit 1; }
echo "PASS: probe lists the two-hop path a-c through b, pair 0 <-> 2 through rank 1"
