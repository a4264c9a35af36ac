#!/usr/bin/env bash
# Configures and builds geoccl, warnings as errors (GEOCCL_WERROR=ON), as CI and developers do.
# Usage: scripts/build.sh [BUILD_DIR] [extra cmake args...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-$root/build}
shift || true
# -g1: line tables (stack traces, sanitizer reports) without the full debug info, which costs a
# quarter of the compile time of the torch-heavy files.
cmake -S "$root" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGEOCCL_WERROR=ON \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" "-DCMAKE_CXX_FLAGS_DEBUG=-g1" "$@" >/dev/null
ninja -C "$dir"
