#!/usr/bin/env bash
# Every source of the library (src/) compiles on its own, as a user's plain (non-unity) build
# compiles it: g++ -fsyntax-only per file, from the compile commands of a non-unity configure in
# BUILD_DIR (configured here, nothing built). CI's builds are unity builds, where a file missing an
# #include can borrow it from the file before it in its batch. The library's 144 files take about
# 260 CPU-s on 2 cores; the CLI, the benchmarks and the tests 210 more (SCOPE=all). Too slow for
# CI on 2 cores: run it before committing a change to includes.
# Usage: scripts/check-standalone.sh BUILD_DIR [JOBS]   (SCOPE=all: every source)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$1
jobs=${2:-$(nproc)}
cmake -S "$root" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=g++ \
  -DCMAKE_UNITY_BUILD=OFF -DCMAKE_EXPORT_COMPILE_COMMANDS=ON -DCMAKE_CXX_COMPILER_LAUNCHER= -DGEOCCL_BUILD_TESTS=ON \
  -DGEOCCL_BUILD_PYTHON=OFF -DGEOCCL_WERROR=ON >/dev/null
python3 - "$dir/compile_commands.json" "$root" "${SCOPE:-src}" >"$dir/standalone-commands.txt" <<'PY'
import json, shlex, sys
root, scope = sys.argv[2], sys.argv[3]
prefix = root + "/" if scope == "all" else root + "/src/"
for e in json.load(open(sys.argv[1])):
    f = e["file"]
    if not f.startswith(prefix) or "/CMakeFiles/" in f:
        continue
    args = shlex.split(e["command"])
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a == "-o":
            skip = True
        elif a == "-c" or a.startswith("-O") or a.startswith("-g"):
            continue
        else:
            out.append(a)
    out.append("-fsyntax-only")
    print("cd %s && %s" % (shlex.quote(e["directory"]), shlex.join(out)))
PY
n=$(wc -l <"$dir/standalone-commands.txt")
[ "$n" -gt 0 ] || { echo "no sources found in $dir/compile_commands.json" >&2; exit 1; }
if ! xargs -P "$jobs" -d '\n' -I{} bash -c '{}' <"$dir/standalone-commands.txt" >"$dir/standalone.log" 2>&1; then
  grep -m 40 -E "error|Error" "$dir/standalone.log" >&2 || tail -40 "$dir/standalone.log" >&2
  echo "a source does not compile on its own (whole log: $dir/standalone.log)" >&2
  exit 1
fi
echo "$n sources compile on their own"
