#!/usr/bin/python3
"""The character transformer (examples/ddp_charlm.py) on the WAN test bed: DDP against DiLoCo's
SparseLoCo recipe, under `geoccl run --wan SCENARIO --domains a:2,b:2,c:2 -n 6`, the same steps
and seeds. Prints, per configuration, rank 0's held-out loss, the bytes the outer sparse
allgathers reported sending from rank 0 (and dense float32 sent the same way), and the bytes that
crossed the WAN (the emulator's link counters over the whole job, bench/diloco_wan.py's
wan_bytes; the start-up path probe is left out with GEOCCL_EXPERIMENT=plan_probe=0, as in
test_diloco.py). Needs root and a built tree.

    /usr/bin/python3 bench/charlm_wan.py --configs ddp,sparseloco,sparseloco-noef --steps 300 \\
        --json charlm.json
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

from diloco_wan import REPO, wan_bytes

SCRIPT = os.path.join(REPO, "examples", "ddp_charlm.py")
CONFIGS = {
    "ddp": ["--recipe", "ddp"],
    "sparseloco": ["--recipe", "sparseloco", "--sync-every", "10"],
    "sparseloco-noef": ["--recipe", "sparseloco", "--sync-every", "10", "--sparse-no-ef"],
    "sparseloco-k128": ["--recipe", "sparseloco", "--sync-every", "10", "--sparse-k", "128"],
    "sparseloco-h5-k128": ["--recipe", "sparseloco", "--sync-every", "5", "--sparse-k", "128"],
    "diloco-h5": ["--recipe", "diloco", "--sync-every", "5"],
}
KEYS = ("val_loss", "outer_syncs", "outer_wire_bytes_sent", "outer_dense_bytes_equivalent", "seconds")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scenario", default="seed")
    p.add_argument("--configs", default="ddp,sparseloco,sparseloco-noef")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--timeout", type=int, default=1500)
    p.add_argument("--geoccl", default=os.path.join(REPO, "build", "tools", "geoccl", "geoccl"))
    p.add_argument("--json", default=None)
    args = p.parse_args()
    data = {}
    for name in args.configs.split(","):
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "result.json")
            cmd = [args.geoccl, "run", "--wan", os.path.join(REPO, "bench", "scenarios", f"{args.scenario}.toml"),
                   "--domains", "a:2,b:2,c:2", "-n", "6", "--timeout", str(args.timeout), "--", "/usr/bin/python3",
                   SCRIPT, *CONFIGS[name], "--steps", str(args.steps), "--eval-every", str(args.steps // 3),
                   "--json", out, "--quiet"]
            env = dict(os.environ, OMP_NUM_THREADS="1", GEOCCL_EXPERIMENT="plan_probe=0",
                       PYTHONPATH=os.path.join(REPO, "build", "python"))
            r = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env, timeout=args.timeout + 60)
            if r.returncode != 0:
                sys.stderr.write(r.stdout[-3000:] + r.stderr[-3000:])
                data[name] = {"error": f"exit {r.returncode}"}
                continue
            with open(out + ".0") as f:
                res = json.load(f)
        data[name] = {k: res.get(k) for k in KEYS}
        data[name]["wan_bytes"] = wan_bytes(r.stderr)
        print(name, data[name], flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(data, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
