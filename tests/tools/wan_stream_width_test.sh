#!/usr/bin/env bash
# wan_stream_width: two domains of two ranks over a path whose provider caps each flow at a
# twentieth of the uplink (flow-cap-narrow.toml). With nothing set, every rank that sends across
# finds that 4 streams are too few and settles on 8 or more to its WAN peers (mp_check
# stream_width), every allreduce exact.
# Usage: wan_stream_width_test.sh GEOCCL MP_CHECK SCENARIO. `geoccl run --wan` owns the namespaces
# and processes it starts, and removes them on every way out.
set -euo pipefail
geoccl=$1 mp_check=$2 scenario=$3
"$geoccl" run --wan "$scenario" --timeout 150 -- env -u GEOCCL_TCP_STREAMS "$mp_check" stream_width
echo "PASS: the ranks that send across settled on 8 or more streams on a flow-capped path"
