"""The sparse allgather on a "geoccl" process group or a Communicator.

    out, info = geoccl.sparse.sparse_allgather(indices, values, n, value_bits=2)

Every rank contributes (index, value) pairs of a float32 vector of n elements; every rank gets
the dense sum of all ranks' pairs, bit-identical on every rank. The pairs stay sparse on the wire
(indices delta-coded, values as float32 or sign + magnitude codes of 8, 4 or 2 bits); the dense
vector is built once, at the end, from the pieces in rank order (docs/compression.md, "Sparse
allgather").
"""

import torch

from . import _C
from .weighted import _target


def sparse_allgather(indices, values, count, *, value_bits=32, group=None, comm=None, timeout=None):
    """Returns (dense float32 tensor of `count` elements, info) and blocks.

    indices: int64 tensor of distinct positions in [0, count), any order; values: float32 tensor
    of the same length. Both are made contiguous 1-D copies if they are not; `values` (when it
    already is a contiguous 1-D float32 CPU tensor) is replaced by the values every rank decoded:
    what this rank contributed, for error feedback. info: {"piece_bytes", "bytes_sent",
    "bytes_received"}, the bytes this rank put on and took off the wire in this call.
    group: a "geoccl" process group (None = the default group), or comm: a geoccl.Communicator.
    """
    idx = indices.reshape(-1).to(torch.int64).contiguous()
    val = values.reshape(-1)
    if val.dtype != torch.float32 or not val.is_contiguous():
        val = val.to(torch.float32).contiguous()
    return _C.sparse_allgather(_target(group, comm), idx, val, int(count), value_bits=int(value_bits),
                               timeout=timeout)


__all__ = ["sparse_allgather"]
