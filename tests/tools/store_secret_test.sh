#!/usr/bin/env bash
# A standalone `geoccl store` with the group secret (docs/security.md): it serves only requests
# authenticated with it.
# 1. A job with the secret sets up through it and computes exact collectives.
# 2. A job without a secret, and one with another secret, fail at setup with a protocol error
#    (the store refuses their requests), within the timeout, and the store logs each refusal.
# 3. The job with the secret runs again after those: the strangers changed nothing it needs.
# Usage: store_secret_test.sh GEOCCL MP_CHECK. Processes are real; the store is killed on exit.
set -euo pipefail
geoccl=$1 mp_check=$2
dir=$(mktemp -d)
store_pid=
cleanup() {
  [ -n "$store_pid" ] && kill "$store_pid" 2>/dev/null && wait "$store_pid" 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT
secret=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
GEOCCL_SECRET=$secret "$geoccl" store --bind 127.0.0.1 --port 0 > "$dir/store.log" 2>&1 &
store_pid=$!
port=
for _ in $(seq 100); do
  port=$(sed -n 's/^geoccl store listening on 127.0.0.1:\([0-9]*\) (requests authenticated.*/\1/p' "$dir/store.log")
  [ -n "$port" ] && break
  sleep 0.05
done
[ -n "$port" ] || { cat "$dir/store.log"; echo "FAIL: the store did not say it authenticates requests"; exit 1; }
export GEOCCL_STORE=tcp://127.0.0.1:$port

job() {  # job NAME RUN-FLAG|-- ENV...: a 3-rank job through the store; its output in $dir/NAME.log
  local name=$1 flag=$2; shift 2
  local rc=0
  [ "$flag" = -- ] && flag=
  env "$@" GEOCCL_SESSION="$name" "$geoccl" run $flag -n 3 --timeout 60 -- "$mp_check" collectives \
    > "$dir/$name.log" 2>&1 || rc=$?
  return $rc
}
job good -- GEOCCL_SECRET="$secret" || { tail -30 "$dir/good.log"; echo "FAIL: the job with the secret"; exit 1; }
echo "PASS: a job with the secret ran through the authenticated store"

for stranger in none other; do
  # `geoccl run` gives a job without a secret a fresh one of its own unless --insecure.
  if [ $stranger = none ]; then args=(--insecure -u GEOCCL_SECRET); else
    args=(-- GEOCCL_SECRET=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')); fi
  start=$(date +%s)
  if job "stranger-$stranger" "${args[@]}"; then
    tail -20 "$dir/stranger-$stranger.log"; echo "FAIL: a job with secret '$stranger' ran"; exit 1
  fi
  took=$(( $(date +%s) - start ))
  if ! grep -q "protocol" "$dir/stranger-$stranger.log"; then
    tail -20 "$dir/stranger-$stranger.log"; echo "FAIL: job with secret '$stranger': no protocol error"; exit 1
  fi
  echo "PASS: a job with secret '$stranger' failed at setup in ${took} s: $(grep -m1 -o 'protocol[^"]*' "$dir/stranger-$stranger.log" | cut -c1-160)"
done
refused=$(grep -c "store: refused request" "$dir/store.log" || true)
[ "$refused" -ge 2 ] || { cat "$dir/store.log"; echo "FAIL: the store logged $refused refusals"; exit 1; }
echo "PASS: the store logged $refused refused requests"

job good2 -- GEOCCL_SECRET="$secret" || { tail -30 "$dir/good2.log"; echo "FAIL: the job with the secret, after the strangers"; exit 1; }
echo "PASS: a job with the secret ran again after the strangers"
