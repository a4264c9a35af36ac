#!/usr/bin/python3
"""DDP against DiLoCo on the WAN test bed: runs examples/diloco_digits.py under
`geoccl run --wan SCENARIO --domains a:2,b:2,c:2 -n 6` once per configuration and scenario, and
prints one table per scenario: time to the target accuracy (training wall time, evaluation left
out), the accuracy reached, the training wall time, and the bytes that crossed the WAN (the
emulator's link counters: IP bytes delivered on every inter-region link over the whole job,
start-up and rendezvous included: the start-up path probe alone sends 48 MiB on three domains;
GEOCCL_EXPERIMENT=plan_probe=0 leaves it out). Needs root (network namespaces) and a built tree.

    PYTHONPATH=build/python /usr/bin/python3 bench/diloco_wan.py --scenarios seed,lossy \\
        --configs ddp,ddp-int8,h10,h10-int8,h50,h50-int8 --steps 600 --json diloco.json
    /usr/bin/python3 bench/diloco_wan.py --show diloco.json
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(REPO, "examples", "diloco_digits.py")

# Configuration name -> arguments of examples/diloco_digits.py.
CONFIGS = {
    "ddp": ["--mode", "ddp"],
    "ddp-int8": ["--mode", "ddp", "--compression", "int8"],
    "h10": ["--mode", "diloco", "--sync-every", "10"],
    "h10-int8": ["--mode", "diloco", "--sync-every", "10", "--compression", "int8"],
    "h50": ["--mode", "diloco", "--sync-every", "50"],
    "h50-int8": ["--mode", "diloco", "--sync-every", "50", "--compression", "int8"],
    "h50-streaming": ["--mode", "diloco", "--sync-every", "50", "--fragments", "5", "--overlap", "2"],
    "h50-streaming-o8": ["--mode", "diloco", "--sync-every", "50", "--fragments", "5", "--overlap", "8"],
    "h50-hierarchical": ["--mode", "diloco", "--sync-every", "50", "--hierarchical"],
    # One bad participant (rank 5's pseudo-gradient times -8), H = 10.
    "bad-equal": ["--mode", "diloco", "--sync-every", "10", "--bad-rank", "5"],
    "bad-weighted": ["--mode", "diloco", "--sync-every", "10", "--bad-rank", "5", "--weights", "1,1,1,1,1,0.1"],
    "bad-exclude": ["--mode", "diloco", "--sync-every", "10", "--bad-rank", "5", "--robust", "exclude"],
    "bad-downweight": ["--mode", "diloco", "--sync-every", "10", "--bad-rank", "5", "--robust", "downweight"],
}


def wan_bytes(stderr):
    """Sum of bytes_out over the links in the launcher's final counters."""
    total, seen = 0, False
    for line in stderr.splitlines():
        m = re.match(r"^\s*\[?\w*\]?\s*(\w+)>(\w+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)", line)
        if m:
            total += int(m.group(6))
            seen = True
    return total if seen else None


def run_one(geoccl, scenario, name, steps, target, timeout, env=None):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "result.json")
        cmd = [geoccl, "run", "--wan", os.path.join(REPO, "bench", "scenarios", f"{scenario}.toml"),
               "--domains", "a:2,b:2,c:2", "-n", "6", "--timeout", str(timeout), "--",
               "/usr/bin/python3", SCRIPT, *CONFIGS[name], "--steps", str(steps), "--target", str(target),
               "--json", out]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout + 60,
                           env=dict(os.environ, **(env or {})))
        if p.returncode != 0 or not os.path.exists(out):
            sys.stderr.write(p.stdout[-3000:] + p.stderr[-3000:])
            return {"error": f"exit {p.returncode}"}
        with open(out) as f:
            res = json.load(f)
    res["wan_bytes"] = wan_bytes(p.stderr)
    return res


def table(results, scenario):
    rows = [f"| configuration | time to {results[0][1].get('target', 0.95):.2f} acc (s) | step reached | "
            "accuracy | wall time (s) | WAN bytes (MB) | vs DDP fp32 | syncs | excluded (rank: syncs) | "
            "down-weighted |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    ref = next((r["wan_bytes"] for n, r in results if n == "ddp" and "error" not in r), None)
    for name, r in results:
        if "error" in r:
            rows.append(f"| {name} | {r['error']} | | | | | | | | |")
            continue
        tt = r["time_to_target"]
        mb = r["wan_bytes"] / 1e6 if r["wan_bytes"] is not None else float("nan")
        ratio = f"{r['wan_bytes'] / ref:.3f}" if ref else "-"
        rows.append(f"| {name} | {tt[1]:.1f} | {tt[0]} | {r['accuracy']:.4f} | {r['seconds']:.1f} | {mb:.2f} | "
                    f"{ratio} | {r['syncs'] if r['syncs'] is not None else '-'} | {r['excluded'] or '-'} | "
                    f"{r.get('downweighted') or '-'} |"
                    if tt else
                    f"| {name} | not reached | - | {r['accuracy']:.4f} | {r['seconds']:.1f} | {mb:.2f} | "
                    f"{ratio} | {r['syncs'] if r['syncs'] is not None else '-'} | {r['excluded'] or '-'} | "
                    f"{r.get('downweighted') or '-'} |")
    return f"**{scenario}**\n\n" + "\n".join(rows)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scenarios", default="seed,lossy")
    p.add_argument("--configs", default="ddp,ddp-int8,h10,h10-int8,h50,h50-int8")
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--target", type=float, default=0.95)
    p.add_argument("--timeout", type=int, default=600)
    p.add_argument("--geoccl", default=os.path.join(REPO, "build", "tools", "geoccl", "geoccl"))
    p.add_argument("--json", default=None)
    p.add_argument("--show", default=None, help="print the tables of a --json file again")
    args = p.parse_args()
    if args.show:
        with open(args.show) as f:
            data = json.load(f)
    else:
        data = {}
        for scenario in args.scenarios.split(","):
            data[scenario] = []
            for name in args.configs.split(","):
                r = run_one(args.geoccl, scenario, name, args.steps, args.target, args.timeout)
                print(scenario, name, {k: r.get(k) for k in ("accuracy", "seconds", "wan_bytes", "time_to_target",
                                                            "syncs", "excluded", "error")}, flush=True)
                data[scenario].append([name, r])
                if args.json:
                    with open(args.json, "w") as f:
                        json.dump(data, f)
    for scenario, results in data.items():
        print()
        print(table(results, scenario))
    return 0


if __name__ == "__main__":
    sys.exit(main())
