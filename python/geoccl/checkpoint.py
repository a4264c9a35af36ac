"""Checkpoints and state_dicts from one rank to all, on geoccl's bulk priority class.

Every rank calls the same function with the same ``src``. The object crosses each WAN path once
and then spreads inside each domain; it goes in chunks, each hashed (xxh3) and compressed (lz4 or
zstd) only when that is faster on the link measured by the transfer itself. A chunk that arrives
damaged is sent again; a file transfer that breaks resumes from the chunks already verified when it
is called again::

    import geoccl.checkpoint as ckpt
    sd = ckpt.broadcast_state_dict(model.state_dict() if rank == 0 else None, src=0)
    model.load_state_dict(sd)
    ckpt.broadcast_checkpoint("/ckpt/step1000.pt", src=0)      # the same path on every rank

``group`` is a process group of backend "geoccl" (default: the default group) or a
``geoccl.Communicator``. Keyword options go to the transfer: chunk_bytes, window, codec
("auto", "none", "lz4", "zstd"), zstd_level, resume, timeout (seconds per operation) and progress
(a callable receiving a dict with bytes_done, bytes_total, rate_bytes_per_s, eta_s, ...).
"""

import io

import torch

from . import _C


def _target(group):
    if group is None:
        import torch.distributed as dist

        group = dist.distributed_c10d._get_default_group()
    return group


def _rank(target):
    rank = target.rank
    return rank() if callable(rank) else rank


def broadcast_state_dict(state_dict, src, group=None, *, map_location="cpu", **options):
    """Returns src's ``state_dict`` on every rank (src gets its own object back).

    The state_dict is serialized with ``torch.save`` at src and loaded with ``torch.load`` (onto
    ``map_location``) elsewhere; other ranks may pass None.
    """
    target = _target(group)
    data = None
    if _rank(target) == src:
        buf = io.BytesIO()
        torch.save(state_dict, buf)
        data = buf.getbuffer()
    got, _ = _C.broadcast_blob(target, src, data, **options)
    if got is None:
        return state_dict
    return torch.load(io.BytesIO(got), map_location=map_location)


def broadcast_checkpoint(path, src, group=None, *, dest=None, load=False, map_location="cpu", **options):
    """Copies the checkpoint file ``path`` at src to ``dest`` (default: the same path) on every
    other rank, resumably. Returns the transfer's result dict, or with ``load=True`` the loaded
    checkpoint (``torch.load`` of the file) on every rank.
    """
    target = _target(group)
    dst = path if dest is None else dest
    result = _C.broadcast_blob_file(target, src, path, dst, **options)
    if not load:
        return result
    return torch.load(path if _rank(target) == src else dst, map_location=map_location)


def send_file(path, peer, group=None, **options):
    """Sends a file to ``peer``, which calls :func:`recv_file` with this rank. Returns the result dict."""
    return _C.send_file(_target(group), peer, path, **options)


def recv_file(path, peer, group=None, **options):
    """Receives a file from ``peer`` (which calls :func:`send_file`) into ``path``, resumably."""
    return _C.recv_file(_target(group), peer, path, **options)
