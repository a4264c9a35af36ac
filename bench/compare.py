#!/usr/bin/env python3
"""Side-by-side allreduce comparison: geoccl vs Gloo (and optionally torch's Gloo backend).

Every backend runs under the same launcher (`geoccl run -n N -- PROGRAM ...`) with the same
flags, and writes the shared JSON schema (backend, op, dtype, bytes, count, world_size, iters,
time_us_median/min/max, algbw_gbps, busbw_gbps, correct). Backends are interleaved
(A B C A B C ... for --rounds rounds) so that slow drift of the machine, e.g. another job or
thermal throttling, hits all of them alike instead of biasing whichever ran last.

    compare.py --geoccl BUILD/tools/geoccl/geoccl --gloo BUILD/bench/gloo_bench \
        [--torch-gloo bench/torch_gloo_bench.py] -n 2,4 --sizes 1M,4M,16M,96M \
        --iters 10 --rounds 2 [--json FILE]

Per world size it prints a Markdown table: the median over rounds of each backend's median
time, and the ratio backend/geoccl (> 1 means geoccl is faster). Exits nonzero if any run
failed, timed out, wrote no or malformed JSON, or reported correct=false.

Standard library only; runs under any python3 >= 3.8.
"""

import argparse
import json
import os
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time

REQUIRED_KEYS = {
    "backend": str, "op": str, "dtype": str, "bytes": int, "count": int, "world_size": int,
    "iters": int, "time_us_median": (int, float), "time_us_min": (int, float),
    "time_us_max": (int, float), "algbw_gbps": (int, float), "busbw_gbps": (int, float),
    "correct": bool,
}


def parse_size(text):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:].upper(), 1)
    digits = text[:-1] if mult != 1 else text
    if not digits.isdigit() or int(digits) == 0:
        raise argparse.ArgumentTypeError("bad size '%s' (want e.g. 4096, 4K, 1M, 2G)" % text)
    return int(digits) * mult


def parse_sizes(text):
    # Keep the user's spelling to pass through unchanged; the byte values are for matching.
    specs = [s for s in text.split(",") if s]
    for s in specs:
        parse_size(s)
    return specs


def parse_world_sizes(text):
    try:
        sizes = [int(s) for s in text.split(",") if s]
    except ValueError:
        raise argparse.ArgumentTypeError("bad world size list '%s'" % text)
    if not sizes or any(n < 1 for n in sizes):
        raise argparse.ArgumentTypeError("world sizes must be >= 1")
    return sizes


def positive(text):
    v = int(text)
    if v < 1:
        raise argparse.ArgumentTypeError("must be >= 1")
    return v


def parse_args(argv):
    p = argparse.ArgumentParser(
        description="Compare geoccl allreduce against Gloo baselines under `geoccl run`.")
    p.add_argument("--geoccl", required=True, help="path to the geoccl binary (launcher + bench)")
    p.add_argument("--gloo", help="path to gloo_bench (bench/gloo_bench in the build tree)")
    p.add_argument("--torch-gloo", help="path to bench/torch_gloo_bench.py")
    p.add_argument("--python", default="/usr/bin/python3",
                   help="interpreter with torch for --torch-gloo (default: %(default)s)")
    p.add_argument("-n", "--world-sizes", type=parse_world_sizes, default=[2, 4],
                   help="comma-separated world sizes (default: 2,4)")
    p.add_argument("--sizes", type=parse_sizes, default=parse_sizes("1M,4M,16M,96M"),
                   help="bytes per rank; K/M/G are powers of 1024 (default: 1M,4M,16M,96M)")
    p.add_argument("--iters", type=positive, default=10)
    p.add_argument("--warmup", type=int, default=None,
                   help="passed through as --warmup (default: each program's own)")
    p.add_argument("--rounds", type=positive, default=2)
    p.add_argument("--timeout-s", type=positive, default=900, help="per run (default: 900)")
    p.add_argument("--launcher", default=None,
                   help="launcher prefix, called as `LAUNCHER -n N -- CMD...` "
                        "(default: '<geoccl> run')")
    p.add_argument("--json", help="write all results and the summary here")
    p.add_argument("-v", "--verbose", action="store_true", help="echo every run's output")
    args = p.parse_args(argv)
    if args.warmup is not None and args.warmup < 0:
        p.error("--warmup must be >= 0")
    return args


def backends(args):
    """(name, argv prefix) of every program to compare; geoccl first, it is the reference."""
    out = [("geoccl", [args.geoccl, "bench"])]
    if args.gloo:
        out.append(("gloo", [args.gloo]))
    if args.torch_gloo:
        out.append(("torch-gloo", [args.python, args.torch_gloo]))
    return out


def run_once(args, launcher, backend, program, n, json_path):
    """Runs one backend at one world size. Returns (results, error message or None)."""
    cmd = list(launcher) + ["-n", str(n), "--"] + program + [
        "--op", "allreduce", "--sizes", ",".join(args.sizes), "--iters", str(args.iters),
        "--json", json_path]
    if args.warmup is not None:
        cmd += ["--warmup", str(args.warmup)]
    print("  $ %s" % " ".join(shlex.quote(c) for c in cmd), flush=True)
    start = time.monotonic()
    try:
        # A session of its own, so that a timeout can stop the launcher and all its ranks.
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True)
    except OSError as e:
        return None, "cannot start %s: %s" % (cmd[0], e)
    try:
        output, _ = proc.communicate(timeout=args.timeout_s)
    except subprocess.TimeoutExpired:
        # SIGTERM first so the launcher can stop ranks it started in sessions of their own;
        # then SIGKILL whatever is left of the group.
        _signal_group(proc.pid, signal.SIGTERM)
        try:
            output, _ = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            _signal_group(proc.pid, signal.SIGKILL)
            output, _ = proc.communicate()
        _echo_tail(output)
        return None, "timed out after %d s" % args.timeout_s
    text = output.decode("utf-8", "replace")
    if args.verbose:
        sys.stdout.write(text)
    elapsed = time.monotonic() - start
    if proc.returncode != 0:
        if not args.verbose:
            _echo_tail(output)
        return None, "exit status %d after %.1f s" % (proc.returncode, elapsed)
    try:
        with open(json_path, encoding="utf-8") as f:
            results = json.load(f)
    except (OSError, ValueError) as e:
        return None, "no usable JSON from %s: %s" % (backend, e)
    err = validate(results, backend, n, [parse_size(s) for s in args.sizes])
    if err:
        return None, err
    return results, None


def _signal_group(pgid, sig):
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass  # already gone


def _echo_tail(output, lines=30):
    text = output.decode("utf-8", "replace").splitlines()
    for line in text[-lines:]:
        print("    | " + line)


def validate(results, backend, n, sizes):
    if not isinstance(results, list):
        return "JSON is not an array"
    for r in results:
        if not isinstance(r, dict):
            return "JSON array element is not an object"
        for key, typ in REQUIRED_KEYS.items():
            if key not in r:
                return "result lacks key '%s'" % key
            # bool is an int in Python; do not let true pass as a count, or 1 as a bool.
            if not isinstance(r[key], typ) or (typ is not bool and isinstance(r[key], bool)):
                return "result key '%s' has the wrong type: %r" % (key, r[key])
        if r["backend"] != backend:
            return "backend is '%s', expected '%s'" % (r["backend"], backend)
        if r["world_size"] != n:
            return "world_size is %d, expected %d" % (r["world_size"], n)
    got = sorted(r["bytes"] for r in results)
    if got != sorted(sizes):
        return "sizes in JSON %s do not match the requested %s" % (got, sorted(sizes))
    return None


def fmt_us(v):
    return "-" if v is None else "%.1f" % v


def fmt_ratio(num, den):
    return "-" if num is None or den is None or den <= 0 else "%.2f" % (num / den)


def summarize(n, sizes, names, rows):
    """Median over rounds per (backend, size); rows are all result dicts for world size n."""
    summary = []
    for spec in sizes:
        nbytes = parse_size(spec)
        entry = {"world_size": n, "bytes": nbytes, "size": spec}
        for name in names:
            ts = [r["time_us_median"] for r in rows if r["backend"] == name and r["bytes"] == nbytes]
            ok = [r["correct"] for r in rows if r["backend"] == name and r["bytes"] == nbytes]
            entry[name] = {
                "time_us_median": statistics.median(ts) if ts else None,
                "rounds": len(ts),
                "busbw_gbps": (statistics.median(r["busbw_gbps"] for r in rows
                                                 if r["backend"] == name and r["bytes"] == nbytes)
                               if ts else None),
                "correct": bool(ok) and all(ok),
            }
        ref = entry["geoccl"]["time_us_median"]
        for name in names[1:]:
            t = entry[name]["time_us_median"]
            entry[name]["ratio_vs_geoccl"] = (t / ref) if (t is not None and ref) else None
        summary.append(entry)
    return summary


def print_table(n, names, summary, rounds):
    print("\n### allreduce f32, world size %d (median of %d round(s))\n" % (n, rounds))
    head = ["size", "geoccl us", "geoccl busbw GB/s"]
    for name in names[1:]:
        head += ["%s us" % name, "%s/geoccl" % name]
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join("---:" for _ in head) + "|")
    for e in summary:
        g = e["geoccl"]
        cells = [e["size"], fmt_us(g["time_us_median"]),
                 "-" if g["busbw_gbps"] is None else "%.3f" % g["busbw_gbps"]]
        for name in names[1:]:
            t = e[name]["time_us_median"]
            cells += [fmt_us(t), fmt_ratio(t, g["time_us_median"])]
        print("| " + " | ".join(cells) + " |")
    print("\nratio > 1: geoccl is faster.", flush=True)


def main(argv):
    args = parse_args(argv)
    launcher = shlex.split(args.launcher) if args.launcher else [args.geoccl, "run"]
    progs = backends(args)
    names = [name for name, _ in progs]
    all_results, failures, summaries = [], [], []
    with tempfile.TemporaryDirectory(prefix="geoccl-compare-") as tmp:
        for n in args.world_sizes:
            rows = []
            for rnd in range(args.rounds):
                for name, program in progs:
                    print("[n=%d round %d/%d] %s" % (n, rnd + 1, args.rounds, name), flush=True)
                    path = os.path.join(tmp, "%s-n%d-r%d.json" % (name, n, rnd))
                    results, err = run_once(args, launcher, name, program, n, path)
                    if err:
                        print("  FAILED: %s" % err, flush=True)
                        failures.append({"backend": name, "world_size": n, "round": rnd,
                                         "error": err})
                        continue
                    for r in results:
                        r["round"] = rnd
                        if not r["correct"]:
                            failures.append({"backend": name, "world_size": n, "round": rnd,
                                             "error": "correct=false at %d bytes" % r["bytes"]})
                    rows += results
            all_results += rows
            summary = summarize(n, args.sizes, names, rows)
            summaries += summary
            print_table(n, names, summary, args.rounds)

    if args.json:
        merged = {
            "config": {"world_sizes": args.world_sizes, "sizes": args.sizes,
                       "iters": args.iters, "warmup": args.warmup, "rounds": args.rounds,
                       "backends": names},
            "results": all_results,
            "summary": summaries,
            "failures": failures,
        }
        tmp_path = args.json + ".tmp"
        with open(tmp_path, "w", encoding="utf-8") as f:
            json.dump(merged, f, indent=1)
            f.write("\n")
        os.replace(tmp_path, args.json)
    if failures:
        print("\n%d failure(s):" % len(failures), file=sys.stderr)
        for fl in failures:
            print("  %(backend)s n=%(world_size)d round %(round)d: %(error)s" % fl,
                  file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
