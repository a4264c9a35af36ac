"""DiLoCo for torch on geoccl: train locally, synchronise across regions every H steps.

    model = Net()
    inner = torch.optim.AdamW(model.parameters(), lr=1e-3)
    diloco = geoccl.diloco.DiLoCo(model, inner, sync_every=50, compression="int8")
    for x, y in data:
        loss = F.cross_entropy(model(x), y)
        inner.zero_grad(); loss.backward()
        diloco.step()                     # the inner step; every H steps the outer sync

Every `sync_every` (H) inner steps each rank computes its pseudo-gradient, the global parameters
of the last sync minus its local ones, and the pseudo-gradients are averaged over the group with
one weighted allreduce (geoccl.weighted: optional weights, robust mode against outliers, the
codec on the hops between domains with error feedback); the outer optimizer, SGD with Nesterov
momentum (the DiLoCo paper's outer lr 0.7, momentum 0.9), steps the global parameters with that
average as their gradient, and every rank continues from them (Douillard et al., "DiLoCo:
Distributed Low-Communication Training of Language Models", 2023).

Streaming (Douillard et al., "Streaming DiLoCo", 2025): fragments=P cuts the parameters into P
groups of about equal size, synchronised in turn (fragment p at steps p*H/P + kH), and
overlap_steps=tau > 0 lets a fragment's allreduce run on a background thread during the next
tau inner steps; its result is then merged as local = mix * local + (1 - mix) * global.

SparseLoCo (Sarfi et al., "Communication Efficient LLM Pre-training with SparseLoCo", 2025,
arXiv 2508.15706): recipe="sparseloco" replaces the dense average by sparse, low-bit
pseudo-gradients. At each sync of a fragment every rank folds its pseudo-gradient into the
fragment's error-feedback accumulator, e = ef_decay * e + delta; sends the top-k of e (the
sparse_k largest magnitudes of every chunk of sparse_chunk elements of the fragment's flat
vector, 64 of 4096 = 1.6 % by default) with sparse_bits-bit values (2: sign + one bit of
magnitude) through the sparse allgather (geoccl.sparse); and keeps in e what it did not send,
e -= what every rank decoded. The outer step is the paper's: the global parameters move by
outer_lr (1.0 by default) times the mean of the ranks' sparse contributions, with no outer
momentum; the decayed accumulator takes its place. error_feedback=False sends the top-k of each
round's pseudo-gradient alone and drops the rest.

Decoupled (quorum=Q; Douillard et al., "Decoupled DiLoCo for Resilient Distributed Pre-training",
2026): no allreduce that every rank must join; each rank sends its pseudo-gradient to a syncer
(the group's rank 0), which steps the outer optimizer as soon as Q ranks have sent and a grace
window has passed (or all have), and sends the new global parameters back to those that sent. A
stopped or slow region does not stop the others: its contribution, when it comes, is answered at
once and merged in the syncer's next round with its weight divided by 1 + the outer steps it
missed (left out beyond max_staleness). sync_now() is a full sync of every rank
(geoccl.decoupled).

Hierarchical: ranks of one domain can run DDP every step on a group of their own
(:func:`domain_group`) while DiLoCo's outer sync goes over the whole group: only it crosses the
WAN, and the hierarchical allreduce carries each domain's share once.
"""

import logging
import os
import threading

import torch
import torch.distributed as dist

from . import decoupled as _decoupled
from . import sparse as _sparse
from . import weighted as _weighted

log = logging.getLogger("geoccl.diloco")


def _split(params, parts):
    """Contiguous groups of `params` of about equal element counts (at most len(params))."""
    parts = max(1, min(parts, len(params)))
    total = sum(p.numel() for p in params)
    groups, cur, acc = [], [], 0
    for p in params:
        cur.append(p)
        acc += p.numel()
        if len(groups) < parts - 1 and acc >= total * (len(groups) + 1) / parts:
            groups.append(cur)
            cur = []
    if cur:
        groups.append(cur)
    return groups


def chunked_topk(x, chunk, k):
    """Indices (int64) of the k largest magnitudes of every `chunk` elements of the 1-D tensor
    x, and a shorter last chunk's share round(k * len / chunk) (at least 1); ascending within
    each chunk's selection is not promised."""
    n = x.numel()
    full = n // chunk * chunk
    parts = []
    if full:
        k_full = min(k, chunk)
        _, i = x[:full].view(-1, chunk).abs().topk(k_full, dim=1, sorted=False)
        parts.append((i + torch.arange(0, full, chunk, dtype=torch.int64).unsqueeze(1)).reshape(-1))
    rest = n - full
    if rest:
        k_rest = min(rest, max(1, int(k * rest / chunk + 0.5)))
        _, i = x[full:].abs().topk(k_rest, sorted=False)
        parts.append(i + full)
    return torch.cat(parts)


class _Fragment:
    def __init__(self, index, params, offset, outer_lr, momentum, nesterov, residual):
        self.index = index
        self.params = params
        self.offset = offset  # first inner step of its sync schedule
        self.global_params = [p.detach().clone() for p in params]
        self.outer = torch.optim.SGD(self.global_params, lr=outer_lr, momentum=momentum, nesterov=nesterov)
        self.numel = sum(p.numel() for p in params)
        # SparseLoCo with error feedback: what this rank has not sent yet (flat float32).
        self.residual = torch.zeros(self.numel) if residual else None
        self.pending = None  # (finish_step, thread, buffer, box) while its allreduce runs


class DiLoCo:
    """Wraps `model` and its inner optimizer; call :meth:`step` instead of ``inner.step()``.

    sync_every: H, inner steps between two syncs of a fragment (paper: 500; 10-50 here).
    outer_lr, outer_momentum, nesterov: the outer SGD (paper: 0.7, 0.9, Nesterov; outer_lr None:
        0.7, or 1.0 with recipe="sparseloco", which has no outer momentum).
    recipe: "diloco" (the dense, weighted average) or "sparseloco" (see the module's doc);
        sparse_k, sparse_chunk: top-k kept per chunk (64 of 4096), sparse_bits: the values'
        width on the wire (2, 4, 8 or 32), ef_decay: the accumulator's decay (0.95);
        error_feedback: keep the accumulator per fragment (False: send each round's top-k alone).
        SparseLoCo takes no compression, weight, or robust mode (ValueError).
    group: the "geoccl" process group the outer sync runs on (None = default group).
    compression: codec on the hops between domains ("int8", "int4", "int2-sr", "fp16", "topk:0.01",
        "topk-int8:0.01", ...;
        None = the group's GEOCCL_WAN_COMPRESSION), error_feedback: keep its residual per fragment.
    weight: this rank's weight in the average, a number or a function of no arguments called at
        every sync (for example the samples seen since the last one).
    robust, statistic, threshold: geoccl.weighted's robust mode ("none", "exclude",
        "downweight"; "norm", "loss", "both"); :meth:`report_loss` sets the loss sent.
    fragments, overlap_steps, mix: streaming (see the module's doc); mix defaults to 0.5 with
        overlap, 0 (replace) without.
    pseudo_gradient_hook: f(fragment_index, tensor) -> None, modifies this rank's flat
        pseudo-gradient before the average (clipping, or a fault injected in tests).
    quorum, grace, max_staleness: decoupled mode (see the module's doc; None: every rank joins
        every sync): the syncer's round closes when all ranks have sent, or `quorum` have and
        `grace` seconds have passed since; a contribution s outer steps behind counts with
        weight / (1 + s), not at all when s > max_staleness. Takes the dense recipe without
        compression, robust mode, overlap, fragments or a DDP-wrapped model (a rank waiting for
        the syncer would hold up its region's DDP): ValueError. The group carries no other
        point-to-point traffic meanwhile. :attr:`rounds` is the syncer's log.

    Every rank must construct it with the same arguments (but weight) and call step() equally
    often. Parameters are broadcast from the group's rank 0 at construction.
    """

    _made = 0

    def __init__(self, model, inner_optimizer, *, sync_every=500, outer_lr=None, outer_momentum=0.9,
                 nesterov=True, group=None, compression=None, error_feedback=True, weight=1.0,
                 robust="none", statistic="norm", threshold=3.0, fragments=1, overlap_steps=0,
                 mix=None, pseudo_gradient_hook=None, timeout=None, recipe="diloco", sparse_k=64,
                 sparse_chunk=4096, sparse_bits=2, ef_decay=0.95, quorum=None, grace=1.0,
                 max_staleness=4):
        if sync_every < 1:
            raise ValueError("geoccl.diloco: sync_every must be >= 1")
        if recipe not in ("diloco", "sparseloco"):
            raise ValueError(f"geoccl.diloco: recipe must be 'diloco' or 'sparseloco', got {recipe!r}")
        self.sparse = recipe == "sparseloco"
        if self.sparse:
            if compression is not None or robust != "none" or weight != 1.0:
                raise ValueError("geoccl.diloco: recipe='sparseloco' takes no compression, weight or robust mode")
            if not 1 <= int(sparse_k) <= int(sparse_chunk):
                raise ValueError("geoccl.diloco: sparse_k must be in [1, sparse_chunk]")
            if int(sparse_bits) not in (2, 4, 8, 32):
                raise ValueError("geoccl.diloco: sparse_bits must be 2, 4, 8 or 32")
            if not 0.0 <= float(ef_decay) <= 1.0:
                raise ValueError("geoccl.diloco: ef_decay must be in [0, 1]")
            outer_momentum, nesterov = 0.0, False
        if outer_lr is None:
            outer_lr = 1.0 if self.sparse else 0.7
        self.sparse_k, self.sparse_chunk = int(sparse_k), int(sparse_chunk)
        self.sparse_bits, self.ef_decay = int(sparse_bits), float(ef_decay)
        self.error_feedback = bool(error_feedback)
        if quorum is not None and (self.sparse or compression is not None or robust != "none"
                                   or overlap_steps or mix is not None or int(fragments) != 1
                                   or isinstance(model, torch.nn.parallel.DistributedDataParallel)):
            raise ValueError("geoccl.diloco: quorum (decoupled mode) takes the 'diloco' recipe without "
                             "compression, robust mode, overlap_steps, mix, fragments or a DDP model")
        if overlap_steps < 0 or overlap_steps >= sync_every:
            raise ValueError("geoccl.diloco: overlap_steps must be in [0, sync_every)")
        self.model = model
        self.inner = inner_optimizer
        self.sync_every = int(sync_every)
        self.group = group
        self.compression = compression
        self.weight = weight
        self.robust, self.statistic, self.threshold = robust, statistic, float(threshold)
        self.overlap_steps = int(overlap_steps)
        self.mix = (0.5 if overlap_steps else 0.0) if mix is None else float(mix)
        self.pseudo_gradient_hook = pseudo_gradient_hook
        self.timeout = timeout
        self._key = f"diloco{DiLoCo._made}" if error_feedback else ""
        DiLoCo._made += 1
        params = [p for p in model.parameters() if p.requires_grad]
        if not params:
            raise ValueError("geoccl.diloco: the model has no trainable parameters")
        self._broadcast(params)
        groups = _split(params, int(fragments))
        self.fragments = [
            _Fragment(i, g, (i * self.sync_every) // len(groups), outer_lr, outer_momentum, nesterov,
                      self.sparse and self.error_feedback)
            for i, g in enumerate(groups)
        ]
        self.inner_steps = 0
        self.syncs = 0  # fragment syncs completed
        self.bytes_reduced = 0  # float32 bytes handed to the outer allreduces on this rank
        # SparseLoCo: bytes the sparse allgathers reported sending from this rank (pieces and
        # their lengths to every peer), and what dense float32 pseudo-gradients sent the same way
        # (4 bytes per element to every peer) would have been.
        self.wire_bytes_sent = 0
        self.dense_bytes_equivalent = 0
        self.excluded = {}  # rank -> times left out (outlier or stale)
        self.downweighted = {}  # rank -> times its weight was reduced (robust="downweight")
        self.last_result = None  # WeightedResult of the last sync (sparseloco: the sparse allgather's info)
        self._loss = None
        self._decoupled = None
        if quorum is not None:
            f = self.fragments[0]
            self._decoupled = _decoupled.DecoupledSync(
                _weighted._target(group, None), f.numel, quorum, grace, max_staleness, timeout,
                lambda: torch.cat([g.detach().reshape(-1).float() for g in f.global_params]))

    @property
    def rounds(self):
        """Decoupled mode, on the syncer: one dict per round it closed (version, full, the
        contributors with their staleness and applied weights as lists, seconds waited, wall time
        closed)."""
        return self._decoupled.rounds if self._decoupled is not None else []

    def _broadcast(self, params):
        flat = torch.cat([p.detach().reshape(-1) for p in params])
        src = 0 if self.group is None else dist.distributed_c10d._get_global_rank(self.group, 0)
        dist.broadcast(flat, src, group=self.group)
        _weighted.copy_back(flat, params)

    def report_loss(self, loss):
        """The loss this rank sends with its next sync (robust mode by loss)."""
        self._loss = float(loss)

    def step(self, closure=None):
        """One inner step, then whatever outer work is due: finish the fragments whose overlap
        has run out, start (or, without overlap, do) the syncs scheduled at this step."""
        out = self.inner.step(closure) if closure is not None else self.inner.step()
        self.inner_steps += 1
        t = self.inner_steps
        if self._decoupled is not None:
            self._decoupled.poll()
            for f in self.fragments:
                if t % self.sync_every == f.offset:
                    self._exchange(f, full=False)
            return out
        for f in self.fragments:
            if f.pending is not None and f.pending[0] <= t:
                self._finish(f)
        for f in self.fragments:
            if t % self.sync_every == f.offset:
                # One sync in flight at a time: every rank must issue the group's operations in
                # the same order, and two threads would interleave them differently.
                self.sync_now()
                self._start(f, t)
        return out

    def sync_now(self):
        """Finishes every pending fragment sync (at the end of training); in decoupled mode, a
        full sync of every fragment: every rank must call it, and all end with equal parameters."""
        if self._decoupled is not None:
            for f in self.fragments:
                self._exchange(f, full=True)
            return
        for f in self.fragments:
            if f.pending is not None:
                self._finish(f)

    def _delta(self, f):
        with torch.no_grad():
            delta = torch.cat([(g - p.detach()).reshape(-1).float() for g, p in zip(f.global_params, f.params)])
        if self.pseudo_gradient_hook is not None:
            self.pseudo_gradient_hook(f.index, delta)
        self.bytes_reduced += delta.numel() * 4
        return delta

    def _exchange(self, f, full):
        """Decoupled mode: one sync of fragment f through the syncer."""
        delta = self._delta(f)

        def apply(merged):  # the syncer's outer step on a round's merged pseudo-gradient
            with torch.no_grad():
                self._set_grads(f, merged)
                f.outer.step()

        w = self.weight() if callable(self.weight) else self.weight
        params, _ = self._decoupled.exchange(delta, w, apply, full)
        with torch.no_grad():
            _weighted.copy_back(params, f.global_params)
            for g, p in zip(f.global_params, f.params):
                p.copy_(g)
        self.syncs += 1

    @staticmethod
    def _set_grads(f, flat):
        offset = 0
        for g in f.global_params:
            n = g.numel()
            g.grad = flat[offset:offset + n].view_as(g).to(g.dtype)
            offset += n

    def _average(self, f, buf, box):
        try:
            w = self.weight() if callable(self.weight) else self.weight
            box["result"] = _weighted.weighted_allreduce(
                buf, w, group=self.group, loss=self._loss, robust=self.robust, statistic=self.statistic,
                threshold=self.threshold, compression=self.compression,
                feedback_key=f"{self._key}/{f.index}" if self._key else "", timeout=self.timeout)
        except BaseException as e:  # noqa: BLE001  (re-raised on the training thread)
            box["error"] = e

    def _sparse_average(self, f, idx, values, box):
        try:
            out, info = _sparse.sparse_allgather(idx, values, f.numel, value_bits=self.sparse_bits,
                                                 group=self.group, timeout=self.timeout)
            world = dist.get_world_size(self.group)
            box["result"] = (out.div_(world), info)
        except BaseException as e:  # noqa: BLE001  (re-raised on the training thread)
            box["error"] = e

    def _start(self, f, t):
        delta = self._delta(f)
        box = {}
        if self.sparse:
            # e = decay * e + delta; the top-k of e goes out (its values replaced by what every
            # rank decodes), and _finish keeps the rest in e.
            acc = f.residual.mul_(self.ef_decay).add_(delta) if f.residual is not None else delta
            idx = chunked_topk(acc, self.sparse_chunk, self.sparse_k)
            values = acc[idx]
            box["sent"] = (idx, values)
            target, args = self._sparse_average, (f, idx, values, box)
        else:
            target, args = self._average, (f, delta, box)
        if self.overlap_steps == 0:
            target(*args)
            f.pending = (t, None, delta, box)
            self._finish(f)
            return
        th = threading.Thread(target=target, args=args, name=f"diloco-sync-{f.index}", daemon=True)
        th.start()
        f.pending = (t + self.overlap_steps, th, delta, box)

    def _finish(self, f):
        _, th, delta, box = f.pending
        f.pending = None
        if th is not None:
            th.join()
        if "error" in box:
            raise box["error"]
        if self.sparse:
            delta, info = box["result"]
            idx, sent = box["sent"]
            if f.residual is not None:
                f.residual[idx] -= sent
            self.wire_bytes_sent += info["bytes_sent"]
            peers = dist.get_world_size(self.group) - 1
            self.dense_bytes_equivalent += f.numel * 4 * peers
            self.last_result = info
        else:
            res = box["result"]
            self.last_result = res
            for r in res.excluded:
                self.excluded[r] = self.excluded.get(r, 0) + 1
            for r in res.downweighted:
                self.downweighted[r] = self.downweighted.get(r, 0) + 1
        with torch.no_grad():
            self._set_grads(f, delta)
            f.outer.step()
            for g, p in zip(f.global_params, f.params):
                if self.mix:
                    p.mul_(self.mix).add_(g, alpha=1.0 - self.mix)
                else:
                    p.copy_(g)
        self.syncs += 1


def domain_group(backend="geoccl", domain=None):
    """The process group of this rank's domain (GEOCCL_DOMAIN, as `geoccl run --wan` sets it, or
    `domain`), for DDP inside a region (hierarchical DiLoCo). Every rank of the default group must
    call it (it creates one group per domain, in sorted order). Returns (group, domain name)."""
    mine = domain if domain is not None else os.environ.get("GEOCCL_DOMAIN", "")
    names = [None] * dist.get_world_size()
    dist.all_gather_object(names, mine)
    mine_group = None
    for d in sorted(set(names)):
        ranks = [r for r, n in enumerate(names) if n == d]
        g = dist.new_group(ranks, backend=backend)
        if d == mine:
            mine_group = g
    return mine_group, mine


__all__ = ["DiLoCo", "chunked_topk", "domain_group"]
