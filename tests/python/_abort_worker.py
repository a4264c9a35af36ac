"""One rank of the abort test: the default group is geoccl; the last rank calls geoccl.abort()
while rank 0 waits in an allreduce and the others in a receive from the aborting rank. Every rank
records when its pending work failed and with what, how long a later call took to fail, and how
long destroy_process_group() took. Writes argv[1].rank.
"""

import datetime
import json
import os
import sys
import time

import torch
import torch.distributed as dist

import geoccl

out = sys.argv[1]
dist.init_process_group("geoccl", timeout=datetime.timedelta(seconds=30))
rank, world = dist.get_rank(), dist.get_world_size()
aborter = world - 1
stamp = out + ".stamp"
dist.barrier()
t = torch.ones(1 << 18)
r = torch.zeros(10)
if rank == aborter:
    works = [dist.irecv(r, src=0, tag=5)]  # its own pending operation: nobody sends
    time.sleep(0.3)  # the others are blocked by now
    with open(stamp, "w") as f:
        f.write(repr(time.time()))
    geoccl.abort(reason="pytest abort")
elif rank == 0:
    works = [dist.all_reduce(t, async_op=True), dist.all_reduce(t.clone(), async_op=True)]
else:
    works = [dist.irecv(r, src=aborter, tag=1), dist.all_reduce(t, async_op=True)]
errors, failed_at = [], 0.0
for w in works:
    try:
        w.wait()
        errors.append(None)
    except RuntimeError as e:
        failed_at = time.time()
        errors.append(f"{type(e).__name__}: {e}")
with open(stamp) as f:
    aborted_at = float(f.read())
t0 = time.monotonic()
try:
    dist.all_reduce(t)
    later = None
except RuntimeError as e:
    later = str(e)
later_s = time.monotonic() - t0
t0 = time.monotonic()
dist.destroy_process_group()
destroy_s = time.monotonic() - t0
with open(f"{out}.{rank}", "w") as f:
    json.dump({"rank": rank, "errors": errors, "latency_s": failed_at - aborted_at, "later": later,
               "later_s": later_s, "destroy_s": destroy_s}, f)
print(f"rank {rank}: pending work failed {1000 * (failed_at - aborted_at):.1f} ms after the abort; "
      f"a later call failed in {1000 * later_s:.1f} ms; destroy_process_group took {1000 * destroy_s:.1f} ms")
