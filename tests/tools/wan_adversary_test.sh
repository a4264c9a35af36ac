#!/usr/bin/env bash
# wan_adversary: an on-path adversary between two regions of the emulated WAN (adversary.toml:
# 2 x 1 rank, 20 ms RTT, 200 Mbit/s; the emulator sniffs both directions for mp_check marker's
# 16-byte marker from the start) against real ranks allreducing a buffer full of that marker.
# 1. sniff, with the job's secret (`geoccl run` makes one): no TCP segment on the wire carries the
#    marker, every allreduce is exact;
# 2. sniff, --insecure: the same run shows the marker on the wire (so check 1 can fail);
# 3. tamper a>b 1, with the secret, once every rank's loop runs: rank 1 (it receives the segment)
#    fails with kProtocol and logs the refusal naming rank 0, rank 0 fails with a typed error too,
#    within 10 s, no rank hangs, no allreduce gave a wrong result;
# 4. replay b>a 1 (a segment gets its flow's previous segment's payload): the same, rank 0 refusing;
# 5. tamper a>b 20, --insecure: the job must not pass (rank 1 computes a wrong sum): the changed
#    segments reach the application, so checks 3 and 4 test the seal, not a dropped packet.
# Usage: wan_adversary_test.sh GEOCCL MP_CHECK SCENARIO. Exit 77 (skipped) without root or TUN.
# `geoccl run --wan` owns the namespaces and processes it starts and removes them on every way out
# (SIGTERM included, which the trap below sends to a job still running).
set -euo pipefail
geoccl=$1 mp_check=$2 scenario=$3
if [ "$(id -u)" != 0 ] || [ ! -c /dev/net/tun ]; then
  echo "SKIP: the WAN test bed needs root and /dev/net/tun"
  exit 77
fi
tmp=$(mktemp -d /tmp/wan_adversary.XXXXXX)
job="" log=""
cleanup() {
  if [ -n "$job" ] && kill -0 "$job" 2>/dev/null; then
    kill -TERM "$job"
    wait "$job" || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
trap "exit 130" INT TERM
fail() {
  [ -n "$log" ] && [ -f "$log" ] && cat "$log"
  echo "FAIL: $*"
  exit 1
}

pattern=$(sed -n 's/^command = "sniff a-b \([0-9a-f]*\)"$/\1/p' "$scenario")
[ ${#pattern} = 32 ] || fail "no 16-byte 'sniff a-b' pattern in $scenario"

# start NAME [RUN OPTIONS]: the job in the background, its output in $tmp/NAME.log.
start() {
  local name=$1
  shift
  log=$tmp/$name.log
  "$geoccl" run --wan "$scenario" --timeout 30 "$@" -- env GEOCCL_TRANSPORT=tcp "$mp_check" marker >"$log" 2>&1 &
  job=$!
}
# finish: waits for the job (at most its --timeout), prints its output; $rc is its exit status.
finish() {
  rc=0
  wait "$job" || rc=$?
  job=""
  cat "$log"
}
# The adversary's line of a link in the stats `geoccl run` prints at exit: FIELD's number.
#   adversary a>b tampered T (pending P) replayed R (pending P) sniff_matches M of S payload segments ...
adv_stat() { sed -n "s/^adversary $1.* $2 \([0-9]*\).*/\1/p" "$log"; }
segments() { sed -n "s/^adversary $1 .* of \([0-9]*\) payload segments.*/\1/p" "$log"; }

sniff_case() {
  local name=$1
  shift
  GEOCCL_TEST_RUN_S=3 start "$name" "$@"
  finish
  [ "$rc" = 0 ] || fail "$name: geoccl run exited with $rc"
  for r in 0 1; do
    grep -q "^\[$r\] rank $r: marker $pattern," "$log" || fail "$name: rank $r's marker is not the scenario's pattern $pattern"
    n=$(sed -n "s/^\[$r\] rank $r: \([0-9]*\) exact allreduce(s), no error$/\1/p" "$log")
    [ -n "$n" ] && [ "$n" -ge 10 ] || fail "$name: rank $r did not finish 10 exact allreduces (${n:-none})"
  done
  for link in 'a>b' 'b>a'; do
    s=$(segments "$link")
    [ -n "$s" ] && [ "$s" -ge 1000 ] || fail "$name: the sniffer on $link saw ${s:-no} payload segments"
  done
}

sniff_case sniff-sealed
ab=$(adv_stat 'a>b' sniff_matches) ba=$(adv_stat 'b>a' sniff_matches)
[ "$ab" = 0 ] && [ "$ba" = 0 ] || fail "sniff-sealed: the marker is on the wire with a secret (a>b $ab, b>a $ba segments)"
echo "PASS: with the secret no segment carries the marker: a>b 0 of $(segments 'a>b'), b>a 0 of $(segments 'b>a')"

sniff_case sniff-insecure --insecure
ab=$(adv_stat 'a>b' sniff_matches) ba=$(adv_stat 'b>a' sniff_matches)
[ "$ab" -gt 0 ] && [ "$ba" -gt 0 ] || fail "sniff-insecure: the sniffer did not see the marker in clear (a>b $ab, b>a $ba)"
echo "PASS: without a secret the sniffer sees the marker: a>b $ab of $(segments 'a>b'), b>a $ba of $(segments 'b>a')"

# attack NAME COMMAND [RUN OPTIONS]: starts the job, sends COMMAND through the control socket once
# both ranks' loops run, waits for the job; $t0 is when the command was sent (ms since the epoch).
attack() {
  local name=$1 command=$2
  shift 2
  GEOCCL_TEST_EXPECT_ERROR=1 GEOCCL_TEST_RUN_S=20 start "$name" "$@"
  local deadline=$((SECONDS + 25))
  until [ "$(grep -c '^\[[01]\] rank [01]: loop running$' "$log")" = 2 ]; do
    kill -0 "$job" 2>/dev/null || { finish; fail "$name: the job ended before its loops ran"; }
    [ "$SECONDS" -lt "$deadline" ] || fail "$name: the loops did not start within 25 s"
    sleep 0.1
  done
  local sock
  sock=$(sed -n 's/^geoccl run: emulator control //p' "$log")
  t0=$(date +%s%3N)
  "$geoccl" wanem ctl "$sock" "$command" || fail "$name: '$command' refused"
  finish
  # The adversary acted: at least once, at most N times (a job that fails first stops the rest).
  local link field n acted
  link=$(echo "$command" | cut -d' ' -f2)
  n=$(echo "$command" | cut -d' ' -f3)
  field=$(echo "$command" | sed 's/^tamper .*/tampered/; s/^replay .*/replayed/')
  acted=$(adv_stat "$link" "$field")
  [ -n "$acted" ] && [ "$acted" -ge 1 ] && [ "$acted" -le "$n" ] ||
    fail "$name: the adversary's $field count on $link is ${acted:-missing}, not 1 to $n"
}

# sealed_attack NAME COMMAND VICTIM SENDER: with the secret; VICTIM receives the changed segment
# from SENDER.
sealed_attack() {
  local name=$1 command=$2 victim=$3 sender=$4
  attack "$name" "$command"
  grep -q "WRONG RESULT" "$log" && fail "$name: an allreduce returned a wrong result"
  [ "$rc" = 0 ] || fail "$name: geoccl run exited with $rc (3: a rank saw no error; 124: a rank hung)"
  grep -q "^\[$victim\] rank $victim: typed error kProtocol after" "$log" || fail "$name: rank $victim did not fail with kProtocol"
  grep -q "^\[$victim\] .*a frame on stream [0-9]* from rank $sender failed authentication" "$log" ||
    fail "$name: rank $victim did not log the refusal naming rank $sender"
  local other=$((1 - victim))
  grep -Eq "^\[$other\] rank $other: typed error (kProtocol|kPeerLost|kAborted) after" "$log" ||
    fail "$name: rank $other did not fail with a typed error"
  local worst=0 t
  for r in 0 1; do
    t=$(sed -n "s/^\[$r\] rank $r: typed error .* at unix_ms \([0-9]*\):.*/\1/p" "$log")
    if [ $((t - t0)) -gt "$worst" ]; then worst=$((t - t0)); fi
  done
  [ "$worst" -le 10000 ] || fail "$name: a rank took $worst ms to fail"
  echo "PASS: $command: every rank failed with a typed error within $worst ms of the command, no wrong result"
}

sealed_attack tamper "tamper a>b 1" 1 0
sealed_attack replay "replay b>a 1" 0 1

# 5. tamper a>b 20 without a secret: the flipped bytes reach rank 1 (its kernel took the changed
#    segments) and the job must not pass: a wrong sum (a byte in a gradient), or a typed error (a
#    byte in a frame header). 20 segments, not 1: in plaintext one flipped byte can land in a
#    control frame the receiver does not check (it went unnoticed in 3 of 6 tries by hand), and
#    the first of the 20 that lands in a gradient gives the wrong sum.
attack tamper-insecure "tamper a>b 20" --insecure
[ "$rc" != 0 ] || fail "tamper-insecure: the job passed: the tampered segments never reached rank 1"
if grep -q "^\[1\] rank 1: WRONG RESULT" "$log"; then
  echo "PASS: without a secret the tampered segments reached rank 1 as a wrong sum ($(adv_stat 'a>b' tampered) tampered)"
else
  grep -q "^\[1\] rank 1: typed error" "$log" || fail "tamper-insecure: rank 1 saw neither a wrong sum nor an error"
  echo "PASS: without a secret the tampered segments reached rank 1 (a byte hit a frame header: typed error)"
fi
