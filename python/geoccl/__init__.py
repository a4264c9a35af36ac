"""geoccl: collective communication for training across regions over WAN links.

``import geoccl`` registers the torch.distributed backend "geoccl"::

    import torch.distributed as dist, geoccl
    dist.init_process_group("geoccl")          # env:// (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)

and exposes the C++ Communicator for numpy arrays and torch CPU tensors (in place, no copies)::

    comm = geoccl.Communicator.from_env()
    comm.allreduce(array, op="avg").wait()

Gradients can be compressed on the hops that cross domains (docs/compression.md): per call,
``comm.allreduce(array, op="avg", compression="int8", feedback_key="grad0")``; for DDP, the
comm hook ``geoccl.compression_hook`` with ``geoccl.GeocclHookState(pg, compression="int8")``.

A failed operation raises ``geoccl.GeocclError`` (a RuntimeError) with ``code``, the kind of
failure ("peer_lost", "peer_unresponsive", "peer_unreachable", "timeout", "mismatch", "aborted",
"protocol", "io", "internal"), and ``ranks``, the peers it is about (the same on every rank;
empty when it is not about a peer)::

    try:
        comm.allreduce(array).wait()
    except geoccl.GeocclError as e:
        if e.code == "peer_lost": ...          # e.ranks: who

Beyond DDP (docs/diloco.md): ``geoccl.weighted.weighted_allreduce`` (weighted mean, robust
against outliers, staleness-checked) and ``geoccl.diloco.DiLoCo`` (inner steps, an outer Nesterov
step on the pseudo-gradients averaged every H steps; streaming and hierarchical).

Checkpoints and other background traffic go on the bulk priority class: ``priority="bulk"`` on a
Communicator operation, or a torch group made by ``geoccl.new_bulk_group()``.
"""

import torch  # noqa: F401  (the extension links torch; its types must be registered first)
import torch.distributed  # noqa: F401

from ._C import (  # noqa: F401
    Communicator,
    GeocclError,
    ProcessGroupGeoccl,
    StoreServer,
    Work,
    auto_codec_ladder,
    choose_bucket_codecs,
    compression_name,
)
from .torch_backend import (  # noqa: F401
    BACKEND_NAME,
    ProcessGroupOptions,
    abort,
    create_process_group,
    new_bulk_group,
    register,
)
from . import diloco, elastic, hooks, sparse, weighted  # noqa: F401
from ._C import ElasticGroup  # noqa: F401
from .hooks import GeocclHookState, allreduce_hook, compression_hook  # noqa: F401

__all__ = [
    "BACKEND_NAME",
    "Communicator",
    "ElasticGroup",
    "GeocclError",
    "GeocclHookState",
    "ProcessGroupGeoccl",
    "ProcessGroupOptions",
    "StoreServer",
    "Work",
    "abort",
    "allreduce_hook",
    "auto_codec_ladder",
    "choose_bucket_codecs",
    "compression_hook",
    "compression_name",
    "create_process_group",
    "diloco",
    "elastic",
    "hooks",
    "new_bulk_group",
    "register",
    "weighted",
]

register()
