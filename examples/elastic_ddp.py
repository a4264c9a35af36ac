#!/usr/bin/python3
"""Elastic data-parallel training (the MLP on scikit-learn's digits of examples/ddp_digits.py) with
per-step quorum semantics (geoccl.elastic.Manager): one rank is killed in the middle of training,
the others skip that step, form the next epoch and go on; the killed rank is restarted, rejoins at
a step boundary and catches up from a live member (model + optimizer state, hash-verified).

Every launched process is a small supervisor (what torchelastic's agent is to its workers): it runs
the training worker as a child and restarts it once when it is killed. Rank 0's supervisor hosts
the standalone rendezvous store, so the death of rank 0's *worker* leaves it up. Run it under any
launcher that sets RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; on the emulated WAN (3 regions):

    geoccl run --wan bench/scenarios/three-regions.toml --domains a:1,b:1,c:1 -n 3 -- \\
        /usr/bin/python3 examples/elastic_ddp.py --kill-rank 2 --kill-at-step 100

(PYTHONPATH must reach the built package.) Each worker prints the transitions it saw and a final
line; --json writes every rank's result (accuracy, parameter checksum, transitions) for tests.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ddp_digits import MLP, accuracy, load_data, param_checksum  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=300, help="committed optimizer steps in total")
    p.add_argument("--batch-size", type=int, default=32, help="per-rank batch size")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--kill-rank", type=int, default=2, help="launcher rank whose worker is killed (-1: none)")
    p.add_argument("--kill-at-step", type=int, default=100, help="committed step at which it is killed")
    p.add_argument("--restart-delay", type=float, default=1.0, help="seconds before the killed worker restarts")
    p.add_argument("--step-sleep", type=float, default=0.0, help="extra seconds per step (stands in for compute)")
    p.add_argument("--join-window", type=float, default=3.0, help="seconds survivors wait for each other")
    p.add_argument("--hold-at-step", type=int, default=-1,
                   help="at this step the members wait (up to 120 s) until the group is back to its launch size, "
                        "so that a restarted worker rejoins before the end however slowly it starts (-1: never)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per operation")
    p.add_argument("--target", type=float, default=0.9, help="test accuracy the run must reach")
    p.add_argument("--json", default=None, help="write this rank's result to JSON (rank suffix added)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def supervise(argv):
    """Runs the worker, restarting it once if it is killed; rank 0 hosts the store meanwhile."""
    rank = int(os.environ.get("RANK", "0"))
    store = None
    if rank == 0:
        import geoccl

        store = geoccl.StoreServer(os.environ.get("MASTER_ADDR", "127.0.0.1"), int(os.environ.get("MASTER_PORT", "29500")))
    restarts = 0
    while True:
        env = dict(os.environ, GEOCCL_ELASTIC_INCARNATION=str(restarts))
        rc = subprocess.call([sys.executable, os.path.abspath(__file__), "--worker", *argv], env=env)
        if rc == -signal.SIGKILL and restarts == 0:
            print(f"[supervisor {rank}] worker killed; restarting it in a moment", flush=True)
            restarts += 1
            time.sleep(parse_args(argv).restart_delay)
            continue
        break
    if store is not None:
        time.sleep(2.0)  # the other workers may still be finishing their last step
    return 0 if rc == 0 else 1


def train(args):
    import geoccl

    rank0 = int(os.environ.get("RANK", "0"))
    incarnation = int(os.environ.get("GEOCCL_ELASTIC_INCARNATION", "0"))
    torch.manual_seed(args.seed)
    x_train, y_train, x_test, y_test = load_data(args.seed)
    model = MLP(args.hidden)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    t_start = time.monotonic()
    mgr = geoccl.elastic.Manager(model, opt, timeout=args.timeout, join_window=args.join_window,
                                 join_timeout=120.0, log=lambda s: print(f"[rank {rank0}] {s}", flush=True))
    skipped = 0
    last_report = 0
    launch_size = int(os.environ.get("WORLD_SIZE", "1"))
    holds = 0
    while mgr.step < args.steps:
        mgr.start_step()
        # Every member decides alike (the step, the size and the count are the same everywhere),
        # so the boundary checks of start_step() stay collective while they wait.
        if mgr.step == args.hold_at_step and mgr.size < launch_size and holds < 2400:
            holds += 1
            time.sleep(0.05)
            continue
        if incarnation == 0 and rank0 == args.kill_rank and mgr.step == args.kill_at_step:
            print(f"[rank {rank0}] killed at step {mgr.step} (epoch {mgr.epoch})", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        # The step's global batch, split among the epoch's members.
        base = (mgr.step * args.batch_size * mgr.size + mgr.rank * args.batch_size) % len(y_train)
        idx = (torch.arange(args.batch_size) + base) % len(y_train)
        loss = F.cross_entropy(model(x_train[idx]), y_train[idx])
        loss.backward()
        if args.step_sleep:
            time.sleep(args.step_sleep)
        mgr.allreduce_gradients()
        if mgr.should_commit():
            opt.step()
        else:
            skipped += 1
        opt.zero_grad(set_to_none=True)
        if mgr.rank == 0 and mgr.step - last_report >= 50:
            last_report = mgr.step
            print(f"[rank {rank0}] step {mgr.step} epoch {mgr.epoch} members {mgr.size} loss {loss.item():.4f} "
                  f"test accuracy {accuracy(model, x_test, y_test):.4f}", flush=True)
    acc = accuracy(model, x_test, y_test)
    seconds = time.monotonic() - t_start
    print(f"[rank {rank0}] final: accuracy {acc:.4f} (target {args.target}) after {mgr.step} steps, epoch {mgr.epoch}, "
          f"{mgr.size} members, {skipped} skipped steps, {seconds:.1f} s, transitions "
          + ", ".join(f"{t['kind']}->e{t['epoch']}({t['size']}) {t['seconds']:.2f}s" for t in mgr.transitions),
          flush=True)
    if args.json:
        with open(f"{args.json}.{rank0}", "w") as f:
            json.dump({"accuracy": acc, "param_sha256": param_checksum(model), "steps": mgr.step,
                       "epoch": mgr.epoch, "size": mgr.size, "rank": mgr.rank, "joined_late": mgr.joined_late,
                       "incarnation": incarnation, "skipped": skipped, "transitions": mgr.transitions,
                       "seconds": seconds}, f)
    return 0 if acc >= args.target else 3


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.worker:
        return train(args)
    return supervise([a for a in argv if a != "--worker"])


if __name__ == "__main__":
    sys.exit(main())
