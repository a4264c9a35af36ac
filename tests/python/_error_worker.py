"""One rank of the failure tests.

mode "die":  the default group is geoccl; rank world-1 dies after the first allreduce
             (os._exit); the others must get an error from Work.wait() and from the future.
mode "hang": a geoccl group made by dist.new_group(timeout=T); rank world-1 never joins the
             second allreduce; the others must get a timeout error after about T seconds.
Writes what happened to argv[1].rank.
"""

import datetime
import json
import os
import sys
import time

import torch
import torch.distributed as dist

import geoccl  # noqa: F401

out, mode, timeout_s = sys.argv[1], sys.argv[2], float(sys.argv[3])
if mode == "die":
    dist.init_process_group("geoccl", timeout=datetime.timedelta(seconds=timeout_s))
    group = None
else:
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    group = dist.new_group(backend="geoccl", timeout=datetime.timedelta(seconds=timeout_s))
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.ones(1000)
dist.all_reduce(t, group=group)
assert t[0].item() == world
if rank == world - 1:
    if mode == "die":
        os._exit(3)
    # Stay alive (connections open, never joining) until the others have reported.
    give_up = time.monotonic() + timeout_s + 30
    while time.monotonic() < give_up and not all(os.path.exists(f"{out}.{r}") for r in range(world - 1)):
        time.sleep(0.1)
    os._exit(3)
result = {"rank": rank}
start = time.monotonic()
work = dist.all_reduce(torch.ones(1000), group=group, async_op=True)
try:
    work.wait()
    result["wait"] = "no error"
except Exception as e:  # noqa: BLE001
    result["wait"] = f"{type(e).__name__}: {e}"
    result["wait_is_runtime_error"] = isinstance(e, RuntimeError)
    result["wait_code"] = getattr(e, "code", None)
    result["wait_ranks"] = list(getattr(e, "ranks", None) or [])
result["seconds"] = time.monotonic() - start
try:
    work.get_future().wait()
    result["future"] = "no error"
except Exception as e:  # noqa: BLE001
    result["future"] = f"{type(e).__name__}: {e}"
result["completed"] = work.is_completed()
with open(f"{out}.{rank}.tmp", "w") as f:
    json.dump(result, f)
os.rename(f"{out}.{rank}.tmp", f"{out}.{rank}")  # appears complete, for the waiting rank
os._exit(0)  # the group is broken: skip destroy_process_group
