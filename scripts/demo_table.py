#!/usr/bin/env python3
"""Prints the main demo's headline table from the per-rank JSON files of examples/ddp_digits.py:
one row per backend (steps/s, step time, exposed communication share, final accuracy) and the
speed-up of geoccl over each other backend. Usage: demo_table.py SCENARIO PREFIX BACKEND..."""
import glob
import json
import sys


def load(prefix, backend):
    rows = [json.load(open(f)) for f in sorted(glob.glob(f"{prefix}-{backend}.*"))]
    if not rows:
        sys.exit(f"no results for {backend} ({prefix}-{backend}.*)")
    # The slowest rank defines the job's pace; accuracy and parameters are the same on every rank.
    slow = min(rows, key=lambda r: r["steps_per_s"])
    same = len({r["param_sha256"] for r in rows}) == 1
    return slow, same, len(rows)


def main():
    scenario, prefix, backends = sys.argv[1], sys.argv[2], sys.argv[3:]
    res = {b: load(prefix, b) for b in backends}
    print(f"\n## DDP training across emulated regions ({scenario})\n")
    print("| backend | ranks | steps/s | step time (median) | compute | exposed comm | final accuracy | params equal on all ranks |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for b in backends:
        r, same, n = res[b]
        share = r.get("exposed_comm_share")
        share_s = f"{100 * share:.0f} %" if share is not None else "n/a"
        print(f"| {b} | {n} | {r['steps_per_s']:.1f} | {r['step_ms_median']:.1f} ms | {r.get('compute_ms', 0):.1f} ms "
              f"| {share_s} | {r['accuracy']:.4f} | {'yes' if same else 'NO'} |")
    for fast in [b for b in backends if b.startswith("geoccl")]:
        g = res[fast][0]
        for b in backends:
            if not b.startswith("geoccl"):
                print(f"\nspeed-up of {fast} over {b}: {g['steps_per_s'] / res[b][0]['steps_per_s']:.2f}x "
                      f"(steps/s)")
    if "geoccl" in res:
        base = res["geoccl"][0]
        for b in backends:
            if b.startswith("geoccl-"):
                r = res[b][0]
                print(f"\n{b} against fp32 geoccl: {r['steps_per_s'] / base['steps_per_s']:.2f}x steps/s, "
                      f"accuracy {r['accuracy']:.4f} vs {base['accuracy']:.4f} "
                      f"({100 * (r['accuracy'] - base['accuracy']):+.2f} points)")
    if not all(same for _, same, _ in res.values()):
        sys.exit("parameters differ between ranks")


if __name__ == "__main__":
    main()
