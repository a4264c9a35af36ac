"""One rank of the bucket-rebuild test of geoccl.compression_hook, on a "geoccl" process group
whose ranks are labelled as argv[2] domains (contiguous blocks): DDP's bucket rebuild after the
first iteration with error feedback, which keys each iteration used, the residuals held and what
was forgotten; then ProcessGroupGeoccl.allreduce_compressed directly and the hook's typed errors.
Writes the record to argv[1].rank.
"""

import datetime
import json
import logging
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import geoccl


class Permuted(nn.Module):
    """Layers defined in another order than they run: DDP's rebuilt buckets (execution order)
    then hold other parameters than its first-iteration bucket (definition order)."""

    def __init__(self):
        super().__init__()
        self.out = nn.Linear(64, 10)
        self.inp = nn.Linear(64, 64)
        self.mid = nn.Linear(64, 64)

    def forward(self, x):
        return self.out(F.relu(self.mid(F.relu(self.inp(x)))))


def rebuild():
    """Six iterations of a small model with 3 buckets after the rebuild; per iteration the keys
    used and the residuals held."""
    torch.manual_seed(0)
    dist._DEFAULT_FIRST_BUCKET_BYTES = 16 * 1024
    model = DDP(Permuted(), bucket_cap_mb=16 / 1024)
    state = geoccl.GeocclHookState(compression="int8", error_feedback=True)
    model.register_comm_hook(state, geoccl.compression_hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(dist.get_rank())
    iters = []
    for _ in range(6):
        x = torch.randn(32, 64, generator=g)
        y = torch.randint(0, 10, (32,), generator=g)
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        opt.step()
        iters.append({"keys": sorted(state._keys_live), "feedback_keys": state.feedback_keys,
                      "feedback_bytes": state.feedback_bytes, "forgotten": state.forgotten_keys,
                      "stats": dict(state.compression_stats)})
    state.forget()
    out = {"iterations": iters, "after_forget": dict(state.compression_stats), "buckets": state.buckets}
    # The process group's own entry point for hooks: a torch Work whose future holds the tensor.
    pg = dist.distributed_c10d._get_default_group()
    t = torch.full((1 << 15,), float(dist.get_rank() + 1))
    w = pg.allreduce_compressed(t, dist.ReduceOp.SUM, "int8", "direct")
    fut_value = w.get_future().wait()
    out["direct"] = {"same_tensor": fut_value[0].data_ptr() == t.data_ptr(), "value0": t[0].item(),
                     "stats": pg.compression_stats()}
    pg.forget_feedback("direct")
    errors = {}
    for name, call in [
            ("bad codec", lambda: pg.allreduce_compressed(t, "avg", "int7")),
            ("int64", lambda: pg.allreduce_compressed(torch.ones(8, dtype=torch.int64), "sum", "int8")),
            ("max", lambda: pg.allreduce_compressed(t, dist.ReduceOp.MAX, "int8")),
            ("bad op", lambda: pg.allreduce_compressed(t, 3, "int8"))]:
        try:
            call().wait()
            errors[name] = "no error"
        except (ValueError, TypeError) as e:
            errors[name] = type(e).__name__
    gloo = dist.new_group(backend="gloo")
    try:
        geoccl.compression_hook(geoccl.GeocclHookState(gloo, compression="int8"), None)
        errors["gloo group"] = "no error"
    except TypeError as e:
        errors["gloo group"] = "TypeError" if "geoccl" in str(e) else str(e)
    out["errors"] = errors
    return out


def main():
    out, domains = sys.argv[1], int(sys.argv[2])
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    os.environ["GEOCCL_DOMAIN"] = f"d{rank * domains // world}"
    torch.set_num_threads(1)
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")  # the hook's report
    dist.init_process_group("geoccl", timeout=datetime.timedelta(seconds=120))
    results = rebuild()
    with open(f"{out}.{rank}", "w") as f:
        json.dump(results, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
