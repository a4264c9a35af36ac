#!/usr/bin/env python3
"""The defaults matrix: geoccl with nothing set against every forced alternative, per scenario.

For each scenario (one at a time, so the matrix can be run in pieces) and each size, geoccl's
defaults run alternating with every alternative a user could force (each GEOCCL_ALGO across
domains, the start-up path probe off, two-hop paths off, TCP / QUIC / the TCP-QUIC decider, 2, 4,
8 and 16 fixed data streams per peer against the measured count) in the same compare.py run, and the table says, per size: the
default's median, the best alternative and its median, default / best, and the default against
the physical bound (the bytes at the bottleneck rate plus one crossing of the largest one-way
delay).

Target: the default within 5 % of the best alternative in every cell, and within 1.10x of the
bound wherever the best alternative reaches it.

Run as root from the repository root:
  python3 bench/defaults_matrix.py --scenario bench/scenarios/seed.toml
  python3 bench/defaults_matrix.py --scenario bench/scenarios/unequal-rtt.toml --sizes 4K,1M
Options: --build DIR (build), --sizes (4K,1M,16M,96M), --iters (3), --rounds (2),
--only NAME,... (a subset of the alternatives), --out DIR (bench/results).
Not in CI: it is a benchmark (minutes per scenario).
"""
import argparse
import json
import os
import subprocess
import sys

# (backend name, the variables its ranks get). Each differs from the defaults in one setting.
ALTERNATIVES = [
    ("geoccl-ring", "GEOCCL_ALGO=ring"),
    ("geoccl-rd", "GEOCCL_ALGO=rd"),
    ("geoccl-hier-ring", "GEOCCL_ALGO=hier-ring"),
    ("geoccl-hier-small", "GEOCCL_ALGO=hier-small"),
    ("geoccl-hier-leaders", "GEOCCL_ALGO=hier-leaders"),
    ("geoccl-hier-direct", "GEOCCL_ALGO=hier-direct"),
    ("geoccl-noprobe", "GEOCCL_EXPERIMENT=plan_probe=0"),
    ("geoccl-notwohop", "GEOCCL_EXPERIMENT=two_hop_gain=0"),
    ("geoccl-quic", "GEOCCL_TRANSPORT=host=shm,remote=quic"),
    ("geoccl-decider", "GEOCCL_TRANSPORT=host=shm,remote=auto"),
    ("geoccl-s2", "GEOCCL_TCP_STREAMS=2"),
    ("geoccl-s4", "GEOCCL_TCP_STREAMS=4"),
    ("geoccl-s8", "GEOCCL_TCP_STREAMS=8"),
    ("geoccl-s16", "GEOCCL_TCP_STREAMS=16"),
]


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scenario", required=True, help="scenario TOML (bench/scenarios/)")
    p.add_argument("--build", default="build")
    p.add_argument("--sizes", default="4K,1M,16M,96M")
    p.add_argument("--iters", type=int, default=3)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--only", default="", help="comma-separated subset of the alternatives")
    p.add_argument("--out", default=os.path.join(here, "results"))
    p.add_argument("--timeout-s", type=int, default=600)
    p.add_argument("--table-only", action="store_true", help="print the table of the last run's JSON")
    args = p.parse_args()
    names = [n for n, _ in ALTERNATIVES]
    chosen = [a for a in ALTERNATIVES if not args.only or a[0] in args.only.split(",")]
    unknown = [n for n in args.only.split(",") if n and n not in names]
    if unknown:
        p.error("unknown alternative(s) %s (want %s)" % (",".join(unknown), ",".join(names)))
    scen = os.path.splitext(os.path.basename(args.scenario))[0]
    os.makedirs(args.out, exist_ok=True)
    out_json = os.path.join(args.out, "defaults-%s.json" % scen)
    cmd = [sys.executable, os.path.join(here, "compare.py"),
           "--geoccl", os.path.join(args.build, "tools", "geoccl", "geoccl"),
           "--wan", args.scenario, "--sizes", args.sizes, "--iters", str(args.iters),
           "--warmup", "1", "--rounds", str(args.rounds), "--timeout-s", str(args.timeout_s),
           "--backends", ",".join(["geoccl"] + [n for n, _ in chosen]), "--json", out_json]
    for n, env in chosen:
        cmd += ["--variant", "%s=%s" % (n, env)]
    if args.table_only:
        with open(out_json) as f:
            print_matrix(scen, json.load(f), [n for n, _ in chosen])
        return
    # The defaults are what is measured: nothing of the caller's environment may change them.
    env = {k: v for k, v in os.environ.items() if not k.startswith("GEOCCL_")}
    print("$ " + " ".join(cmd), flush=True)
    rc = subprocess.call(cmd, env=env)
    if not os.path.exists(out_json):
        sys.exit(rc or 1)
    with open(out_json) as f:
        data = json.load(f)
    print_matrix(scen, data, [n for n, _ in chosen])
    sys.exit(rc)


def ms(us):
    return "-" if us is None else ("%.1f" % (us / 1e3) if us >= 1e4 else "%.2f" % (us / 1e3))


def print_matrix(scen, data, alts):
    rtt_us = data["config"].get("rtt_s", 0) * 1e6
    print()
    print("### %s (%s)" % (scen, data["config"].get("domains", "")))
    print()
    print("| size | default ms | best alternative | its ms | default / best | default / bound | best / bound | every alternative (ms) |")
    print("|---|---:|---|---:|---:|---:|---:|---|")
    for e in data["summary"]:
        d = e.get("geoccl", {}).get("time_us_median")
        cells = [(n, e.get(n, {}).get("time_us_median")) for n in alts]
        measured = [(n, t) for n, t in cells if t]
        best = min(measured, key=lambda x: x[1]) if measured else (None, None)
        # The physical bound: the bytes at the bottleneck's rate (compare.py's limit less its round
        # trip) plus one crossing of the largest one-way delay.
        lim, small = e.get("limit_us"), e.get("small_bound_us")
        bound = lim - rtt_us + small if lim and small else None
        ratio = "%.2f" % (d / best[1]) if d and best[1] else "-"
        miss = d and best[1] and d > 1.05 * best[1]
        print("| %s | %s | %s | %s | %s%s | %s | %s | %s |" % (
            e["size"], ms(d), best[0] or "-", ms(best[1]), ratio, " **miss**" if miss else "",
            "%.2f" % (d / bound) if d and bound else "-",
            "%.2f" % (best[1] / bound) if best[1] and bound else "-",
            ", ".join("%s %s" % (n.replace("geoccl-", ""), ms(t)) for n, t in cells)))


if __name__ == "__main__":
    main()
