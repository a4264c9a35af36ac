"""One rank of the external-store test: GEOCCL_STORE names a store outside the ranks, so no rank
may host one. Constructing a StoreServer here fails the rank, which forces the check: the default
group and a new group form through the external store alone. Writes argv[1].rank.
"""

import datetime
import json
import sys

import torch
import torch.distributed as dist

import geoccl
from geoccl import _C


class _Forbidden:
    def __init__(self, *args, **kwargs):
        raise AssertionError("a rank started a geoccl store although GEOCCL_STORE names one")


_C.StoreServer = _Forbidden

out = sys.argv[1]
dist.init_process_group("geoccl", timeout=datetime.timedelta(seconds=30))
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.full((1000,), float(rank + 1))
dist.all_reduce(t)
pair = dist.new_group([0, world - 1], backend="geoccl")
u = torch.full((10,), float(rank + 1))
if rank in (0, world - 1):
    dist.all_reduce(u, group=pair)
dist.barrier()
dist.destroy_process_group()
with open(f"{out}.{rank}", "w") as f:
    json.dump({"rank": rank, "sum": t[0].item(), "pair_sum": u[0].item()}, f)
print(f"rank {rank}: allreduce {t[0].item()}, pair {u[0].item()}")
