"""A worker under torchrun's elastic agents (tests/python/test_torchrun_regions.py): DDP on the
digits MLP over backend "geoccl", a checkpoint every --every steps (rank 0 writes it, then every
rank passes a barrier), resumed after a restart. In the agents' first round the worker in region
--kill-domain kills itself (SIGKILL) after step --kill-at. Every rank writes OUT.<rank>: its
incarnation, the step it started from, its domain and its parameters' checksum."""

import argparse
import datetime
import json
import os
import signal
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                "examples"))
import ddp_digits as dd  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--every", type=int, default=20)
    p.add_argument("--kill-domain", default="b")
    p.add_argument("--kill-at", type=int, default=30)
    p.add_argument("--dir", required=True)
    args = p.parse_args()
    import geoccl  # noqa: F401  (registers the backend)

    torch.set_num_threads(1)
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    domain = os.environ.get("GEOCCL_DOMAIN", "")
    dist.init_process_group("geoccl", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    x_train, y_train, x_test, y_test = dd.load_data(0)
    torch.manual_seed(0)
    model = dd.make_model(argparse.Namespace(model="mlp", hidden=64))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    ckpt = os.path.join(args.dir, "checkpoint.pt")
    start = 0
    if os.path.exists(ckpt):
        state = torch.load(ckpt)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = state["step"]
    net = DDP(model)
    batch = 32
    for step in range(start, args.steps):
        g = torch.Generator().manual_seed(step)
        idx = torch.randperm(len(y_train), generator=g)[rank * batch:(rank + 1) * batch]
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(net(x_train[idx]), y_train[idx]).backward()
        opt.step()
        done = step + 1
        if done % args.every == 0:
            if rank == 0:
                torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": done}, ckpt + ".tmp")
                os.replace(ckpt + ".tmp", ckpt)
            dist.barrier()
        if restart == 0 and domain == args.kill_domain and done == args.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
    shas = [None] * world
    dist.all_gather_object(shas, dd.param_checksum(model))
    with open(os.path.join(args.dir, f"out.{rank}"), "w") as f:
        json.dump({"rank": rank, "restart": restart, "start": start, "domain": domain, "shas": shas,
                   "accuracy": dd.accuracy(model, x_test, y_test)}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
