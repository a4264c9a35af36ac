#!/usr/bin/python3
"""torch-gloo variant of bench/train_step.cc: one ResNet-50 data-parallel step on
torch.distributed's Gloo backend, with the same model table, compute emulation, DDP-like
buckets, timing and JSON as `train_step --backend geoccl|gloo` (backend "torch-gloo").

Buckets are flat fp32 tensors allreduced with `dist.all_reduce(..., async_op=True)` as soon as
their last gradient is released (ProcessGroupGloo runs them on its worker threads: two by
default, so up to two buckets are in flight, where train_step's Gloo comm thread has one);
the step ends when every returned Work has completed.

--hook fp16|powersgd hands each bucket, with its gradients' shapes, to torch's built-in DDP comm
hook instead (bench/torch_gloo_bench.py: fp16_compress_hook, powerSGD_hook), as DDP would; the
step ends when every hook's future has completed, and the averaged result is checked within what
the hook loses ("rel_error" in the JSON). powerSGD_hook issues further allreduces from its
futures' callbacks, in an order that differs across ranks when several buckets are in flight on
gloo (gloo then fails: "op.preamble.length <= op.nbytes"), so with it the buckets go through the
hook one at a time on a thread of their own, in order, while compute goes on: what train_step's
Gloo comm thread does.

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
import queue
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_gloo_bench import (  # noqa: E402
    HOOK_TOLERANCE, POWERSGD_START, FlatBucket, add_hook_args, choose_gloo_interface,
    hook_description, make_hook, require_env, wire_elements)

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
    add_hook_args(p)
    a = p.parse_args(argv)
    if a.steps < 1 or a.warmup < 0 or a.compute_ms < 0 or a.bucket_mb <= 0:
        p.error("bad --steps/--warmup/--compute-ms/--bucket-mb")
    if a.hook == "powersgd" and a.warmup < POWERSGD_START:
        p.error(f"--hook powersgd needs --warmup >= {POWERSGD_START} (it compresses from its "
                f"iteration {POWERSGD_START} on)")
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
        out.append((t["name"], n, t["macs"], tuple(t["shape"])))
    return out


def make_plan(tensors, args):
    """Same bucketing as train_step.cc: close a bucket once it reaches its cap."""
    total_macs = sum(t[2] for t in tensors)
    buckets, bucket_of, sleep_s = [], [], []
    cur = 0
    for i, (_, n, macs, _) in enumerate(tensors):
        cap = (args.first_bucket_mb if not buckets else args.bucket_mb) * 1024 * 1024
        cur += n
        bucket_of.append(len(buckets))
        sleep_s.append(args.compute_ms / 1000.0 * macs / total_macs)
        if cur * 4 >= cap or i + 1 == len(tensors):
            buckets.append((i + 1, cur))  # (last tensor index + 1, element count)
            cur = 0
    return buckets, bucket_of, sleep_s


class SerialHook:
    """Runs hook(state, bucket) for one bucket at a time, in submission order, on its own thread;
    submit() returns a handle whose wait() gives the hook's result (or raises its error)."""

    class Handle:
        def __init__(self):
            self.done = threading.Event()
            self.value = self.error = None

        def wait(self):
            self.done.wait()
            if self.error is not None:
                raise self.error
            return self.value

    def __init__(self, hook, state):
        self.hook, self.state = hook, state
        self.q = queue.Queue()
        self.thread = threading.Thread(target=self._run, name="serial-hook", daemon=True)
        self.thread.start()

    def submit(self, bucket):
        h = SerialHook.Handle()
        self.q.put((bucket, h))
        return h

    def _run(self):
        while True:
            item = self.q.get()
            if item is None:
                return
            bucket, h = item
            try:
                h.value = self.hook(self.state, bucket).wait()
            except Exception as e:  # noqa: BLE001  (handed to the waiter)
                h.error = e
            h.done.set()

    def close(self):
        self.q.put(None)
        self.thread.join()


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
    params = sum(t[1] for t in tensors)
    hook, hook_state, shapes = None, None, []
    if args.hook != "none":
        hook, hook_state = make_hook(args)
        expected = [e / world for e in expected]  # the hooks average
        first = 0
        for end, _ in buckets:
            shapes.append([tensors[i][3] for i in range(first, end)])
            first = end
    if rank == 0:
        print("# train_step_torch: resnet50, %d tensors, %d params (%.1f MiB fp32), %d buckets "
              "(first %g MiB, then %g MiB), compute %.0f ms, backend torch-gloo%s, world_size %d"
              % (len(tensors), params, params * 4 / 2**20, len(buckets), args.first_bucket_mb,
                 args.bucket_mb, args.compute_ms,
                 "" if hook is None else " with " + hook_description(args), world), flush=True)
        print("# %6s %12s %12s %10s" % ("step", "step_ms", "compute_ms", "exposed"))
    step_s, comp_s, bad = [], [], 0
    rel_error = 0.0
    serial = SerialHook(hook, hook_state) if args.hook == "powersgd" else None
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
                    if hook is None:
                        works.append(dist.all_reduce(datas[b], op=dist.ReduceOp.SUM, async_op=True))
                    elif serial is not None:
                        works.append(serial.submit(FlatBucket(b, datas[b], shapes[b],
                                                              b + 1 == len(buckets))))
                    else:
                        works.append(hook(hook_state, FlatBucket(b, datas[b], shapes[b],
                                                                 b + 1 == len(buckets))))
            t_comp = time.monotonic()
            outs = [w.wait() for w in works]
            t_step = time.monotonic()
            if hook is None:
                bad += sum(0 if torch.equal(d, e) else 1 for d, e in zip(datas, expected))
            elif s >= args.warmup:
                for o, e in zip(outs, expected):
                    err = ((o.double() - e).norm() / e.double().norm()).item()
                    rel_error = max(rel_error, err)
                    bad += 0 if err <= HOOK_TOLERANCE[args.hook] else 1
            if s >= args.warmup:
                step_s.append(t_step - t0)
                comp_s.append(t_comp - t0)
        g = torch.tensor(step_s + comp_s + [rel_error, 1.0 if bad else 0.0], dtype=torch.float64)
        dist.all_reduce(g, op=dist.ReduceOp.MAX)
    finally:
        if serial is not None:
            serial.close()
        dist.destroy_process_group()
    g = g.tolist()
    correct = g[-1] == 0.0
    rel_error = g[-2]
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
            if hook is not None:
                wire = sum(wire_elements(args, sh) for sh in shapes) * (2 if args.hook == "fp16" else 4)
                rec.update({"hook": hook_description(args), "rel_error": rel_error,
                            "compression_ratio": params * 4 / wire})
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
