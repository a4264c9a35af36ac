"""DDP communication hooks on geoccl.

    model = DDP(model, process_group=pg)            # pg: a "geoccl" group (or the default group)
    model.register_comm_hook(geoccl.GeocclHookState(pg), geoccl.allreduce_hook)

    # gradients compressed on the hops that cross domains, with error feedback:
    state = geoccl.GeocclHookState(pg, compression="int8", error_feedback=True)
    model.register_comm_hook(state, geoccl.compression_hook)

    # per bucket, the least lossy codec whose WAN time fits the bucket's compute window:
    state = geoccl.GeocclHookState(pg, compression="auto")

Both hooks average each gradient bucket across the group asynchronously and return a
torch.futures.Future. :func:`compression_hook` runs the bucket's allreduce with a codec on the
hops between domains (docs/compression.md: work inside a domain stays in full precision, every
rank gets bit-identical results) and, with error feedback, keeps what the codec dropped on this
rank under a key of the bucket and adds it to the bucket's next allreduce.

Bucket keys are made from the bucket's parameters (which ones, in buffer order), never from
``bucket.index()``: DDP rebuilds its buckets after the first iteration, and a key names the same
memory layout for as long as the bucket exists. Keys that stop appearing (a rebuild) are
forgotten at the end of the iteration that no longer has them, so the residuals' memory is that
of the current buckets. ``state.feedback_keys`` / ``state.feedback_bytes`` (and the log of
logger "geoccl.hooks" whenever the bucket set changes) say how much memory that is on this rank.
"""

import hashlib
import logging
import time

import torch
import torch.distributed as dist

from . import _C

log = logging.getLogger("geoccl.hooks")


class GeocclHookState:
    """State of the geoccl DDP hooks: the process group, the codec and per-run counters.

    process_group: a "geoccl" group; None = the default group.
    compression: for :func:`compression_hook`: a codec spelling (``"int8"``, ``"int4"``,
        ``"int2"``, ``"int2-sr"``, ``"fp16"``, ``"bf16"``, ``"topk:0.01"``, ``"topk-int8:0.01"``,
        ``"topk-int4:0.01"``, ``"topk-int2:0.01"``, optionally ``"@allgather"``/``"@ring"``),
        ``"auto"``, or None for the group's GEOCCL_WAN_COMPRESSION (applied to buckets of 64 KiB
        and up). A bad spelling is a ValueError here.
        ``"auto"`` chooses per bucket and iteration, from the codecs of
        ``geoccl.auto_codec_ladder()`` (none, fp16, int8, int4, int2, top-k 1 % with int8
        values), the least lossy whose allreduce time on the path figures in force fits the
        bucket's window: from when the bucket was ready to when the last bucket was, plus
        ``exposed`` times the iteration's compute time (its length but for its wait on the
        communication after its last bucket; the least of the last three), as the iteration
        before last measured them (the latest over the ranks, so that every rank decides alike);
        the buckets share the WAN one after another (docs/compression.md, "auto"). The first
        iterations, with no timings of the current buckets yet (three, with DDP's rebuild of
        its buckets after the first), take the strongest. ``state.auto_choices`` holds the codec
        of each bucket of the last decision; each change is logged (logger "geoccl.hooks") and
        the metrics count the calls that ran with each codec (``geoccl_wan_codec_calls_total``).
    error_feedback: keep each bucket's residual on this rank and add it to the bucket's next
        allreduce (recommended with every lossy codec: top-k does not converge without it). With
        ``"auto"`` a bucket keeps two residuals, one for the dense codecs and one for top-k (they
        are laid out by the form each runs), and one it sends uncompressed keeps both for its
        next compressed call.
    exposed: ``"auto"`` only: the communication allowed after the last bucket is ready, as a
        fraction of an iteration's compute time (0.1: a tenth).

    One state per DDP model: the bucket keys are numbered within it, and carry the state's own
    number (states made in the same order on every rank get the same keys on every rank).
    :meth:`forget` drops the state's residuals (after training, or to restart the feedback).
    """

    _made = 0  # states made in this process: the prefix of their keys

    def __init__(self, process_group=None, compression=None, error_feedback=True, exposed=0.1):
        self.process_group = process_group
        self._prefix = f"ddp{GeocclHookState._made}"
        GeocclHookState._made += 1
        self.auto = compression == "auto"
        self.compression = None if compression is None or self.auto else _C.compression_name(compression)
        self.error_feedback = bool(error_feedback)
        self.exposed = float(exposed)
        if not self.exposed >= 0:
            raise ValueError(f"exposed must be a fraction >= 0, got {exposed!r}")
        # Compression "auto": the ladder; the iteration under way: when its first bucket came, each
        # bucket's ready time (ms after it) and whether it is float32; the last iterations'
        # compute times; the agreement in flight (its Work and tensor); the levels decided.
        self._ladder = _C.auto_codec_ladder() if self.auto else []
        self._first_at = None
        self._last_ready_at = None
        self._hook_ms = 0.0  # time spent in the hook this iteration (left out of compute)
        self._done_at = None  # when the last iteration's last bucket completed
        self._ready_now = []
        self._dense_now = []
        self._dense = []
        self._computes = []  # the last 3 iterations' compute time (ms): length but the wait
        self._agreed = None
        self._levels = []
        self.auto_choices = []
        self.auto_changes = 0  # decisions that differed from the one before
        self.auto_window_ms = None  # the last decision's deadline, ms after the first bucket
        self.auto_predicted_ms = []  # and its predictions: per bucket, per ladder codec
        self.buckets = 0  # buckets reduced so far
        self.bytes = 0  # payload bytes handed to the allreduce so far (fp32, before the codec)
        self.iterations = 0  # iterations seen by compression_hook (its last buckets)
        self.forgotten_keys = 0  # residual keys dropped because their bucket went away
        self.feedback_keys = 0  # residuals this rank holds (the group's compression_stats)
        self.feedback_bytes = 0  # their memory
        # The group's compression_stats() after the last iteration: calls, elements_encoded and
        # bytes_encoded counted from this state's first bucket on (with whatever else the group
        # compressed meanwhile), feedback_keys and feedback_bytes as they are.
        self.compression_stats = {}
        self._stats_base = None
        self._param_number = {}  # id(parameter) -> number, in order of first appearance
        self._params = []  # keeps the numbered parameters alive, so their ids stay theirs
        self._keys_now = []  # keys of the iteration under way
        self._keys_live = set()  # keys of the last complete iteration
        self._layout_now = []  # bytes of each bucket of the iteration under way, for the log
        self._layout = []  # and of the last complete one

    def group(self):
        pg = self.process_group
        if pg is None:
            pg = dist.distributed_c10d._get_default_group()
        return pg

    # Kept for allreduce_hook (identity): tensor in -> tensor to reduce, and back.
    def encode(self, tensor):
        return tensor

    def decode(self, reduced, bucket_buffer):
        return reduced

    def bucket_key(self, bucket):
        """The error-feedback key of a bucket: its parameters in buffer order, numbered by first
        appearance in this state. Every rank sees the buckets in the same order, so every rank
        gives a bucket the same key; a rebuilt bucket with other parameters gets another."""
        numbers = []
        for p in bucket.parameters():
            n = self._param_number.get(id(p))
            if n is None:
                n = len(self._params)
                self._param_number[id(p)] = n
                self._params.append(p)
            numbers.append(n)
        digest = hashlib.sha1(",".join(map(str, numbers)).encode()).hexdigest()[:16]
        return f"{self._prefix}:{len(numbers)}:{digest}"

    def forget(self):
        """Drops the residuals of this state's buckets on this rank (its keys only: other states
        and direct allreduces on the group keep theirs); the next iteration starts afresh."""
        pg = self.group()
        for key in sorted(self._keys_live | set(self._keys_now)):
            pg.forget_feedback(key)
        self._keys_live = set()
        self._keys_now = []
        self._read_stats(pg)

    def _end_iteration(self, pg):
        """At the last bucket of an iteration: forget the residuals of keys this iteration did
        not use (their buckets are gone), and say so when the set of buckets changed."""
        now = set(self._keys_now)
        stale = self._keys_live - now
        for key in sorted(stale):
            pg.forget_feedback(key)
        self.forgotten_keys += len(stale)
        changed = now != self._keys_live or self._layout_now != self._layout
        self._keys_live = now
        self._keys_now = []
        self._layout, self._layout_now = self._layout_now, []
        self.iterations += 1
        return changed, len(stale)

    def _auto_codec(self, pg, index, dense):
        """Compression "auto": the codec of the `index`-th bucket of this iteration (called when
        the bucket is ready, which it notes). The first bucket decides them all, from the
        agreement issued at the last iteration's first bucket, and issues the next one."""
        now = time.monotonic()
        if index == 0:
            if self._first_at is not None:
                # The last iteration's compute: its length but for its wait on the communication
                # after its last bucket (which a lighter codec would cut) and the time the hook
                # itself held the backward pass (issuing, waiting on the agreement).
                last = self._last_ready_at
                done = self._done_at if self._done_at is not None and self._done_at >= last else last
                compute = (now - self._first_at) - (done - last) - self._hook_ms / 1e3
                self._computes = (self._computes + [max(0.0, compute) * 1e3])[-3:]
            self._levels = self._decide(pg)
            if self._first_at is not None:
                self._agree(pg)
            self._first_at = now
            self._hook_ms = 0.0
            self._ready_now, self._dense = [], self._dense_now
            self._dense_now = []
        self._last_ready_at = now
        self._ready_now.append((now - self._first_at) * 1e3 - self._hook_ms)
        self._dense_now.append(dense)
        level = self._levels[index] if index < len(self._levels) else len(self._ladder) - 1
        return self._ladder[level]

    def _agree(self, pg):
        """Every rank's timings of the last iteration, the latest of each taken, and the least
        of its last compute times, in one small allreduce (max) issued before this iteration's
        first bucket, and waited for at the next iteration's first bucket (done long before):
        every rank then decides the same codecs (the frames carry the codec: ranks that differ
        fail with a mismatch). Each iteration's agreement completes before its buckets do."""
        t = torch.tensor(self._ready_now + [min(self._computes), self.exposed], dtype=torch.float64)
        opts = dist.AllreduceOptions()
        opts.reduceOp = dist.ReduceOp.MAX
        self._agreed = (pg.allreduce([t], opts), t)

    def _decide(self, pg):
        agreed, self._agreed = self._agreed, None
        strongest = []  # no timings of this layout yet: the strongest for every bucket
        if agreed is not None:
            agreed[0].wait()
            values = agreed[1].tolist()
            ready, compute, exposed = values[:-2], values[-2], values[-1]
            layout = self._layout  # the last complete iteration's buckets
            if layout and len(ready) == len(layout) and len(self._dense) == len(layout):
                return self._choose(pg, layout, ready, ready[-1] + exposed * compute)
        self._note([self._ladder[-1]] * len(self._layout), None, [])
        return strongest

    def _choose(self, pg, layout, ready, deadline):
        predicted = []
        for nbytes, dense in zip(layout, self._dense):
            if dense:
                predicted.append([pg.predicted_allreduce_ms(nbytes // 4, c) for c in self._ladder])
            else:  # sent uncompressed whatever the choice
                predicted.append([pg.predicted_allreduce_ms(nbytes // 4, None)] * len(self._ladder))
        levels = _C.choose_bucket_codecs(ready, predicted, deadline)
        self._note([self._ladder[l] for l in levels], deadline, predicted)
        return levels

    def _note(self, names, deadline, predicted):
        if names != self.auto_choices:
            self.auto_changes += 1
            counts = {}
            for n in names:
                counts[n] = counts.get(n, 0) + 1
            log.info("geoccl compression auto: %s (%s)", ", ".join(f"{n} x{k}" for n, k in counts.items()),
                     "no timings yet" if deadline is None else
                     f"window {deadline:.0f} ms after the first bucket, predicted uncompressed "
                     f"{sum(p[0] for p in predicted):.0f} ms in all")
        self.auto_choices = names
        self.auto_window_ms = deadline
        self.auto_predicted_ms = predicted

    def _start_stats(self, pg):
        if self._stats_base is None:
            self._stats_base = pg.compression_stats()

    def _read_stats(self, pg):
        s = pg.compression_stats()
        base = self._stats_base or {}
        for k in ("calls", "elements_encoded", "bytes_encoded"):
            s[k] -= base.get(k, 0)
        self.compression_stats = s
        self.feedback_keys = s["feedback_keys"]
        self.feedback_bytes = s["feedback_bytes"]

    def _refresh_stats(self, pg, changed, forgot):
        self._read_stats(pg)
        if changed:
            log.info("geoccl compression_hook: %s%s, %d buckets (%.2f MiB); residuals on this "
                     "rank: %d keys, %.2f MiB%s",
                     "auto" if self.auto else self.compression or "GEOCCL_WAN_COMPRESSION",
                     " with error feedback" if self.error_feedback else " without error feedback",
                     len(self._layout), sum(self._layout) / 2**20, self.feedback_keys,
                     self.feedback_bytes / 2**20,
                     f"; forgot {forgot} keys of buckets DDP rebuilt" if forgot else "")


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


def compression_hook(state, bucket):
    """Averages ``bucket.buffer()`` over the group with ``state.compression`` on the hops that
    cross domains and, with ``state.error_feedback``, the bucket's residual; returns a
    Future[Tensor]. Buckets that are not float32 are averaged uncompressed."""
    entered = time.monotonic()
    try:
        return _compressed_bucket(state, bucket)
    finally:
        if isinstance(state, GeocclHookState) and state.auto:
            state._hook_ms += (time.monotonic() - entered) * 1e3


def _compressed_bucket(state, bucket):
    if state is None:
        raise ValueError("geoccl.compression_hook needs a GeocclHookState (its codec and residual keys)")
    pg = state.group()
    if not isinstance(pg, _C.ProcessGroupGeoccl):
        raise TypeError("geoccl.compression_hook needs a process group of backend \"geoccl\", got "
                        f"{type(pg).__name__}")
    state._start_stats(pg)
    buf = bucket.buffer()
    dense = buf.dtype == torch.float32
    codec = state._auto_codec(pg, len(state._layout_now), dense) if state.auto else state.compression
    state.buckets += 1
    state.bytes += buf.numel() * buf.element_size()
    state._layout_now.append(buf.numel() * buf.element_size())
    key = ""
    if dense:
        if state.error_feedback:
            key = state.bucket_key(bucket)
            state._keys_now.append(key)
            if state.auto:
                # Top-k runs the allgather form, the dense codecs the ring form (with 3 domains
                # or more), and a residual is laid out by its form: each keeps its own, so that a
                # switch defers, and does not drop, what the other had deferred.
                state._keys_now.append(key + "/topk")
                if codec.startswith("topk"):
                    key += "/topk"
        fut = pg.allreduce_compressed(buf, dist.ReduceOp.AVG, codec, key).get_future()
    else:
        opts = dist.AllreduceOptions()
        opts.reduceOp = dist.ReduceOp.AVG
        fut = pg.allreduce([buf], opts).get_future()
    if not bucket.is_last():
        return fut.then(lambda f: f.value()[0])
    changed, forgot = state._end_iteration(pg)

    def _last(f):
        # Runs once every bucket of the iteration has completed (they complete in issue order).
        state._done_at = time.monotonic()
        value = f.value()[0]
        state._refresh_stats(pg, changed, forgot)
        return value

    return fut.then(_last)
