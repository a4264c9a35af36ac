"""One rank of the compression "auto" test (test_auto_codec.py): DDP of a small MLP whose
gradients go through geoccl.compression_hook with compression "auto", for --steps steps of
--sleep seconds of stand-in compute each, on the WAN test bed. Writes OUT.RANK (JSON): per step
its time since the job's start, the codecs auto chose for it, and the group's re-plans so far;
the parameters' checksum at the end."""

import argparse
import hashlib
import json
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import geoccl


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--sleep", type=float, default=0.3)
    p.add_argument("--exposed", type=float, default=0.5)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    dist.init_process_group("geoccl")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    ddp = DDP(model, bucket_cap_mb=1)
    state = geoccl.GeocclHookState(compression="auto", exposed=args.exposed)
    ddp.register_comm_hook(state, geoccl.compression_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    pg = dist.distributed_c10d._get_default_group()
    gen = torch.Generator().manual_seed(1 + rank)
    steps = []
    t0 = time.monotonic()
    for i in range(args.steps):
        x = torch.randn(64, 512, generator=gen)
        y = torch.randint(0, 10, (64,), generator=gen)
        loss = nn.functional.cross_entropy(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        steps.append({"t": time.monotonic() - t0, "codecs": list(state.auto_choices),
                      "replans": pg.topology()["replans"],
                      "rates": pg.topology()["wan_rate_mbps"], "window": state.auto_window_ms,
                      "predicted": state.auto_predicted_ms})
        time.sleep(args.sleep)
    digest = hashlib.sha256()
    for prm in model.parameters():
        digest.update(prm.detach().numpy().tobytes())
    with open(f"{args.out}.{rank}", "w") as f:
        json.dump({"steps": steps, "param_sha256": digest.hexdigest(), "auto_changes": state.auto_changes}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
