"""DDP communication hooks on geoccl.

    model = DDP(model, process_group=pg)            # pg: a "geoccl" group (or the default group)
    model.register_comm_hook(geoccl.GeocclHookState(pg), geoccl.allreduce_hook)

The hook averages each gradient bucket across the group asynchronously and returns a
torch.futures.Future. Compression hooks plug in at :meth:`GeocclHookState.encode` /
:meth:`GeocclHookState.decode` (identity here).
"""

import torch.distributed as dist


class GeocclHookState:
    """State of the geoccl DDP hooks: the process group and per-run counters."""

    def __init__(self, process_group=None):
        self.process_group = process_group
        self.buckets = 0  # buckets reduced so far
        self.bytes = 0  # payload bytes handed to the allreduce so far

    def group(self):
        pg = self.process_group
        if pg is None:
            pg = dist.distributed_c10d._get_default_group()
        return pg

    # Compression hooks (later issues) override these: tensor in -> tensor to reduce, and back.
    def encode(self, tensor):
        return tensor

    def decode(self, reduced, bucket_buffer):
        return reduced


def allreduce_hook(state, bucket):
    """Averages ``bucket.buffer()`` over the group through geoccl; returns a Future[Tensor]."""
    if state is None:
        state = GeocclHookState()
    pg = state.group()
    buf = bucket.buffer()
    payload = state.encode(buf)
    state.buckets += 1
    state.bytes += payload.numel() * payload.element_size()
    opts = dist.AllreduceOptions()
    opts.reduceOp = dist.ReduceOp.AVG
    fut = pg.allreduce([payload], opts).get_future()

    def _done(f):
        return state.decode(f.value()[0], buf)

    return fut.then(_done)
