#!/bin/bash
# Scale on one host: N ranks under `geoccl run`, default settings (shared memory between the ranks)
# and TCP only (GEOCCL_TRANSPORT=tcp), each running `geoccl bench --op allreduce --sizes 4K,1M
# --iters 5 --resources`. One row per job size and transport:
#   wall_s     the whole job, launch to exit (mostly set-up at these sizes)
#   setup_s    the slowest rank's Communicator constructor
#   sockets    the sockets a rank holds open, mean and most (rank 0 also holds the store's clients);
#              segments: shared-memory segments it maps
#   rss_mb     a rank's resident memory (mean), shared memory included; shmem_mb: of it shared (max)
#   4K_us 1M_us  median allreduce time
# A job that fails or passes TIMEOUT seconds prints its status in place of the figures. The run stops
# growing a transport's job size once a job fails or MemAvailable falls under MIN_FREE_MB.
#
#   bash bench/scale.sh                        # shm 4..64, tcp 4..128
#   SHM="4 8 16" TCP="" bash bench/scale.sh
set -uo pipefail
cd "$(dirname "$0")/.."
G=${G:-build/tools/geoccl/geoccl}
SHM=${SHM-"4 8 16 32 64"}
TCP=${TCP-"4 8 16 32 64 128"}
TIMEOUT=${TIMEOUT:-120}
MIN_FREE_MB=${MIN_FREE_MB:-4096}
out=$(mktemp)
trap 'rm -f "$out"' EXIT

free_mb() { awk '/MemAvailable/ {print int($2 / 1024)}' /proc/meminfo; }
figure() {  # figure NAME max|mean: from the "# resources" lines
  awk -v n="$1" -v k="$2" '$0 ~ "# resources " n " " { for (i = 1; i < NF; i++) if ($i == k) print $(i + 1) }' "$out"
}
median_us() {  # median_us BYTES: the bench table's median column
  awk -v b="$1" '$2 == b && $NF ~ /yes|NO/ {print $4}' "$out"
}

printf '%-5s %5s %8s %8s %8s %8s %9s %8s %9s %10s %10s\n' trans ranks wall_s setup_s sockets max_sock segments rss_mb shmem_mb 4K_us 1M_us
for trans in shm tcp; do
  sizes=$([ "$trans" = shm ] && echo "$SHM" || echo "$TCP")
  for n in $sizes; do
    if [ "$(free_mb)" -lt "$MIN_FREE_MB" ]; then
      printf '%-5s %5d  stopped: %s MB available\n' "$trans" "$n" "$(free_mb)"
      break
    fi
    env=()
    [ "$trans" = tcp ] && env=(GEOCCL_TRANSPORT=tcp)
    t0=$(date +%s.%N)
    env "${env[@]}" "$G" run -n "$n" --timeout "$TIMEOUT" -- \
      "$G" bench --op allreduce --sizes 4K,1M --iters 5 --resources >"$out" 2>&1
    rc=$?
    wall=$(echo "$(date +%s.%N) - $t0" | bc)
    if [ $rc -ne 0 ]; then
      printf '%-5s %5d %8.1f  failed (exit %d): %s\n' "$trans" "$n" "$wall" "$rc" \
        "$(grep -m1 -iE 'error|killed|timeout' "$out" | cut -c1-100)"
      break
    fi
    printf '%-5s %5d %8.2f %8.2f %8.1f %8.0f %9.0f %8.1f %9.1f %10.1f %10.1f\n' "$trans" "$n" "$wall" \
      "$(figure setup_s max)" "$(figure sockets mean)" "$(figure sockets max)" "$(figure segments max)" "$(figure rss_mb mean)" \
      "$(figure shmem_mb max)" "$(median_us 4096)" "$(median_us 1048576)"
  done
done
