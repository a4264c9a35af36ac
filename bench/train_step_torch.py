#!/usr/bin/python3
"""torch-gloo variant of bench/train_step.cc: one ResNet-50 data-parallel step on
torch.distributed's Gloo backend, with the same model table, compute emulation, DDP-like
buckets, timing and JSON as `train_step --backend geoccl|gloo` (backend "torch-gloo").

Buckets are flat fp32 tensors allreduced with `dist.all_reduce(..., async_op=True)` as soon as
their last gradient is released (ProcessGroupGloo runs them on its worker threads: two by
default, so up to two buckets are in flight, where train_step's Gloo comm thread has one);
the step ends when every returned Work has completed.

The tensor table comes from the C++ program (one source of truth):
    geoccl run -n 6 -- /usr/bin/python3 bench/train_step_torch.py \
        [--train-step build/bench/train_step | --layers layers.json] [--steps 5] ...
Run it with Debian's interpreter (python3-torch). Environment as bench/torch_gloo_bench.py.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_gloo_bench import choose_gloo_interface, require_env  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="torch-gloo", choices=["torch-gloo"])
    p.add_argument("--model", default="resnet50", choices=["resnet50"])
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--compute-ms", type=float, default=200.0)
    p.add_argument("--bucket-mb", type=float, default=25.0)
    p.add_argument("--first-bucket-mb", type=float, default=1.0)
    p.add_argument("--algo", default="auto", help="accepted for CLI compatibility; ignored")
    p.add_argument("--json")
    p.add_argument("--timeout-s", type=int, default=600)
    p.add_argument("--layers", help="JSON from `train_step --print-layers`")
    p.add_argument("--train-step", default=os.path.join(ROOT, "build", "bench", "train_step"),
                   help="C++ train_step binary to take the table from (default: %(default)s)")
    a = p.parse_args(argv)
    if a.steps < 1 or a.warmup < 0 or a.compute_ms < 0 or a.bucket_mb <= 0:
        p.error("bad --steps/--warmup/--compute-ms/--bucket-mb")
    return a


def load_tensors(args):
    if args.layers:
        with open(args.layers, encoding="utf-8") as f:
            doc = json.load(f)
    else:
        doc = json.loads(subprocess.run([args.train_step, "--print-layers"], check=True,
                                        capture_output=True, text=True).stdout)
    out = []
    for t in doc["tensors"]:
        n = 1
        for d in t["shape"]:
            n *= d
        out.append((t["name"], n, t["macs"]))
    return out


def make_plan(tensors, args):
    """Same bucketing as train_step.cc: close a bucket once it reaches its cap."""
    total_macs = sum(m for _, _, m in tensors)
    buckets, bucket_of, sleep_s = [], [], []
    cur = 0
    for i, (_, n, macs) in enumerate(tensors):
        cap = (args.first_bucket_mb if not buckets else args.bucket_mb) * 1024 * 1024
        cur += n
        bucket_of.append(len(buckets))
        sleep_s.append(args.compute_ms / 1000.0 * macs / total_macs)
        if cur * 4 >= cap or i + 1 == len(tensors):
            buckets.append((i + 1, cur))  # (last tensor index + 1, element count)
            cur = 0
    return buckets, bucket_of, sleep_s


def main(argv):
    args = parse_args(argv)
    rank = int(require_env("RANK"))
    world = int(require_env("WORLD_SIZE"))
    addr = os.environ.get("MASTER_ADDR") or "127.0.0.1"
    port = os.environ.get("TORCH_GLOO_PORT") or require_env("MASTER_PORT")
    tensors = load_tensors(args)
    buckets, bucket_of, sleep_s = make_plan(tensors, args)
    choose_gloo_interface(rank)

    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://{addr}:{port}", rank=rank,
                            world_size=world,
                            timeout=datetime.timedelta(seconds=args.timeout_s))
    # Rank r contributes (r+1) + (i % 7); the sum is exact in fp32.
    patterns, datas = [], []
    for _, count in buckets:
        pat = (torch.arange(count, dtype=torch.int64) % 7).to(torch.float32) + (rank + 1)
        patterns.append(pat)
        datas.append(torch.empty_like(pat))
    expected = [(torch.arange(c, dtype=torch.int64) % 7).to(torch.float32) * world
                + world * (world + 1) / 2 for _, c in buckets]
    params = sum(n for _, n, _ in tensors)
    if rank == 0:
        print("# train_step_torch: resnet50, %d tensors, %d params (%.1f MiB fp32), %d buckets "
              "(first %g MiB, then %g MiB), compute %.0f ms, backend torch-gloo, world_size %d"
              % (len(tensors), params, params * 4 / 2**20, len(buckets), args.first_bucket_mb,
                 args.bucket_mb, args.compute_ms, world), flush=True)
        print("# %6s %12s %12s %10s" % ("step", "step_ms", "compute_ms", "exposed"))
    step_s, comp_s, bad = [], [], 0
    try:
        for s in range(args.warmup + args.steps):
            for d, pat in zip(datas, patterns):
                d.copy_(pat)
            dist.barrier()
            t0 = time.monotonic()
            due = t0
            works = []
            for i in range(len(tensors)):
                due += sleep_s[i]
                delay = due - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                b = bucket_of[i]
                if buckets[b][0] == i + 1:
                    works.append(dist.all_reduce(datas[b], op=dist.ReduceOp.SUM, async_op=True))
            t_comp = time.monotonic()
            for w in works:
                w.wait()
            t_step = time.monotonic()
            bad += sum(0 if torch.equal(d, e) else 1 for d, e in zip(datas, expected))
            if s >= args.warmup:
                step_s.append(t_step - t0)
                comp_s.append(t_comp - t0)
        g = torch.tensor(step_s + comp_s + [1.0 if bad else 0.0], dtype=torch.float64)
        dist.all_reduce(g, op=dist.ReduceOp.MAX)
    finally:
        dist.destroy_process_group()
    g = g.tolist()
    correct = g[-1] == 0.0
    step = [x * 1000 for x in g[:args.steps]]
    comp = [x * 1000 for x in g[args.steps:2 * args.steps]]
    exposed = [(a - b) / a for a, b in zip(step, comp)]
    if rank == 0:
        for s in range(args.steps):
            print("  %6d %12.1f %12.1f %9.1f%%" % (s, step[s], comp[s], exposed[s] * 100))
        print("  median %12.1f %12.1f %9.1f%%   correct %s"
              % (statistics.median(step), statistics.median(comp),
                 statistics.median(exposed) * 100, "yes" if correct else "NO"), flush=True)
        if args.json:
            rec = {"backend": "torch-gloo", "op": "train_step", "model": "resnet50",
                   "params": params, "bytes": params * 4, "buckets": len(buckets),
                   "bucket_mb": args.bucket_mb, "first_bucket_mb": args.first_bucket_mb,
                   "world_size": world, "steps": args.steps,
                   "compute_ms_target": args.compute_ms,
                   "step_ms_median": statistics.median(step), "step_ms_min": min(step),
                   "step_ms_max": max(step), "compute_ms_median": statistics.median(comp),
                   "exposed_comm_share_median": statistics.median(exposed),
                   "step_ms": step, "correct": correct}
            tmp = args.json + ".tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump([rec], f)
                f.write("\n")
            os.replace(tmp, args.json)
    if not correct:
        print("train_step_torch[rank %d]: wrong allreduce results" % rank, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
