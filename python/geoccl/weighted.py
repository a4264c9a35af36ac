"""Weighted, robust and staleness-checked averaging across ranks (C++: geoccl/weighted.h).

    res = geoccl.weighted.weighted_allreduce(tensor, weight=len(my_shard))        # default group
    res = geoccl.weighted.weighted_allreduce(tensor, weight=n, robust="exclude")   # drop outliers
    res = geoccl.weighted.weighted_allreduce(tensor, step=my_step, current_step=t, max_staleness=2)
    geoccl.weighted.average_tensors_([p.grad for p in model.parameters()], weight=n)

Every rank gets the weighted mean, bit-identical, and the same :class:`WeightedResult` (who was
included, left out as an outlier or as stale, the shares applied). The robust rule
(docs/diloco.md): median m of the statistic (the contribution's L2 norm, or the loss a rank
reports) over the candidates, scale s = max(1.4826 * median|x - m|, min_relative_scale * |m|);
an outlier is a norm with |x - m| > threshold * s or a loss with x - m > threshold * s (or a
non-finite value); with robust="exclude" it gets weight 0, with "downweight" its weight is scaled
by threshold * s / |x - m|. At least 3 candidates are needed for the rule to apply.

A bad argument on any rank (negative or NaN weight, a step beyond current_step, a tensor that is
not float32/float64, every weight left out) is a ValueError on every rank.
"""

import logging
from dataclasses import dataclass, field
from typing import List, Optional

import torch
import torch.distributed as dist

from . import _C

log = logging.getLogger("geoccl.weighted")


@dataclass
class WeightedResult:
    """The decision of one weighted allreduce; equal on every rank."""

    weights: List[float] = field(default_factory=list)  # per rank: the weight it passed
    applied: List[float] = field(default_factory=list)  # per rank: its share of the mean (sum 1)
    steps: List[int] = field(default_factory=list)  # per rank: its step (-1 = none)
    norms: List[float] = field(default_factory=list)  # per rank: L2 norm of its contribution
    losses: List[float] = field(default_factory=list)  # per rank: reported loss (nan = none)
    included: List[int] = field(default_factory=list)
    outliers: List[int] = field(default_factory=list)  # excluded by the robust rule
    downweighted: List[int] = field(default_factory=list)
    stale: List[int] = field(default_factory=list)  # left out as too old
    total_weight: float = 0.0
    median_norm: float = 0.0
    norm_scale: float = 0.0
    median_loss: float = 0.0
    loss_scale: float = 0.0

    @property
    def excluded(self):
        """Ranks whose contribution is not in the result (outliers and stale), sorted."""
        return sorted(self.outliers + self.stale)


def _target(group, comm):
    if comm is not None:
        return comm
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    if not isinstance(pg, _C.ProcessGroupGeoccl):
        raise ValueError(f"geoccl: needs a 'geoccl' process group, got {type(pg).__name__}")
    return pg


def weighted_allreduce(tensor, weight=1.0, *, group=None, comm=None, step=None, loss=None,
                       current_step=None, max_staleness=0, robust="none", statistic="norm",
                       threshold=3.0, min_relative_scale=0.05, compression=None, feedback_key="",
                       timeout=None):
    """Replaces `tensor` (CPU float32/float64 torch tensor or numpy array) in place by the
    weighted mean over the group; blocks; returns a :class:`WeightedResult`.

    group: a "geoccl" process group (None = the default group), or comm: a geoccl.Communicator.
    weight: this rank's weight (its sample count, ...), finite and >= 0.
    step / current_step / max_staleness: contributions with step < current_step - max_staleness
        are left out (every rank must pass the same current_step and max_staleness).
    robust: "none", "exclude" or "downweight"; statistic: "norm", "loss" (needs `loss`) or "both".
    compression / feedback_key: the codec on the hops between domains and its error feedback
        (docs/compression.md), for float32.
    """
    if not isinstance(tensor, torch.Tensor):
        tensor = torch.from_numpy(tensor)  # shares the array's memory: still in place
    target = _target(group, comm)
    buf = tensor if tensor.is_contiguous() else tensor.contiguous()
    d = _C.weighted_allreduce(target, buf, weight=float(weight), step=-1 if step is None else int(step),
                              loss=None if loss is None else float(loss), current_step=current_step,
                              max_staleness=int(max_staleness), robust=robust, statistic=statistic,
                              threshold=float(threshold), min_relative_scale=float(min_relative_scale),
                              compression=compression, feedback_key=feedback_key, timeout=timeout)
    if buf is not tensor:
        tensor.copy_(buf)
    res = WeightedResult(**d)
    if res.stale or res.outliers or res.downweighted:
        log.info("weighted allreduce%s: included %s, outliers %s, down-weighted %s, stale %s",
                 "" if current_step is None else f" at step {current_step}", res.included,
                 res.outliers, res.downweighted, res.stale)
    return res


def average_tensors_(tensors, weight=1.0, **kwargs):
    """The weighted mean of a list of same-dtype tensors (parameters, gradients) in one call: they
    are packed into one buffer, averaged with :func:`weighted_allreduce` (same keyword arguments;
    the norm the robust rule sees is that of all of them together) and copied back. Returns the
    :class:`WeightedResult`."""
    tensors = [t for t in tensors if t is not None]
    if not tensors:
        raise ValueError("geoccl.weighted.average_tensors_: no tensors")
    flat = torch.cat([t.detach().reshape(-1) for t in tensors])
    res = weighted_allreduce(flat, weight, **kwargs)
    copy_back(flat, tensors)
    return res


def copy_back(flat, tensors):
    """Copies consecutive pieces of the 1-D tensor `flat` into `tensors` (their shapes, in order)."""
    offset = 0
    with torch.no_grad():
        for t in tensors:
            n = t.numel()
            t.copy_(flat[offset:offset + n].view_as(t))
            offset += n


__all__ = ["WeightedResult", "average_tensors_", "weighted_allreduce"]
