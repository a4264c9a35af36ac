"""Decoupled outer sync for geoccl.diloco (DiLoCo(quorum=Q)): instead of an allreduce that every
rank must join, a central syncer (the group's rank 0) merges the pseudo-gradients that have
arrived, with a minimum quorum and a grace window, so a stopped or straggling region does not stop
the others (Douillard et al., "Decoupled DiLoCo for Resilient Distributed Pre-training", 2026,
arXiv 2604.21428).

Per fragment f the syncer keeps the global parameters, their version (how many outer steps they
have had) and a pool of contributions; every rank, the syncer included, is a learner:
- a learner's sync sends (its base version, its weight, its pseudo-gradient) to the syncer and
  waits for the reply: the global parameters of the round that took the contribution, and their
  version, which become its parameters and its next base;
- the syncer opens a round at its own sync of f and closes it (:func:`round_closes`) when every
  rank has contributed, or when at least `quorum` have and `grace` seconds have passed since the
  quorum was reached. Every contribution in the pool is merged, weighted by its weight times
  :func:`staleness_weight` of its staleness (the round's version minus its base: how many outer
  steps it missed); one more than `max_staleness` steps behind, its weight is 0. The mean steps
  the outer optimizer, and each contributor gets the new parameters;
- a contribution that arrives between rounds (from a learner that was stopped or slow) waits in
  the pool for the next round, where its staleness lowers its weight.
A full sync (:meth:`DecoupledSync.exchange` with full=True, what DiLoCo.sync_now() does at the end
of training) takes every rank: the syncer first closes a round for each late regular contribution
(the ranks that are ahead wait for a late one to catch up), then, once every rank has come to its
full sync, sends every rank the global parameters, with no outer step of its own (as a lock-step
DiLoCo ends at its last sync): every rank ends with the same parameters. Its message has the
regular one's size (a receive posted for a rank takes either), its pseudo-gradient unused.

Messages are point-to-point on the group (tags TAG + 2f and TAG + 2f + 1): a contribution is a
24-byte header (kind, base version, weight as float64) and the float32 pseudo-gradient; a reply,
an 8-byte version and the float32 parameters. The syncer is a single point: if it fails, every
learner's wait fails with the group's error.
"""

import logging
import threading
import time

import torch

log = logging.getLogger("geoccl.diloco")

TAG = 0x6C0C0  # p2p tags of the outer sync: TAG + 2f (contributions), TAG + 2f + 1 (replies)
_HEADER = 24
_REGULAR, _FULL = 0.0, 1.0


def staleness_weight(staleness, max_staleness):
    """The factor on a contribution's weight that is `staleness` outer steps behind: 1 / (1 + s),
    0 beyond max_staleness."""
    if staleness < 0:
        raise ValueError(f"geoccl.diloco: staleness {staleness} < 0")
    return 0.0 if staleness > max_staleness else 1.0 / (1.0 + staleness)


def round_closes(present, world, quorum, quorum_since, grace, now):
    """Whether a round with `present` contributions closes at `now` (seconds): all `world` ranks
    are in, or the quorum has been met since `quorum_since` (None: not met) for `grace` seconds."""
    if present >= world:
        return True
    return present >= quorum and quorum_since is not None and now - quorum_since >= grace


def merge(contributions, version, max_staleness):
    """The weighted mean of the pool's pseudo-gradients at a round of global `version`:
    contributions maps rank -> (base version, weight, flat tensor). Returns (mean or None when
    every weight is 0, [(rank, staleness, applied weight)] sorted by rank)."""
    total, acc, rows = 0.0, None, []
    for rank in sorted(contributions):
        base, weight, delta = contributions[rank]
        s = version - base
        w = weight * staleness_weight(s, max_staleness)
        rows.append((rank, s, w))
        if w > 0:
            acc = delta * w if acc is None else acc.add_(delta, alpha=w)
            total += w
    return (acc.div_(total) if acc is not None else None), rows


class _Pool:
    def __init__(self, numel):
        self.numel = numel
        self.regular = {}  # rank -> (base version, weight, delta)
        self.full = {}
        self.version = 0
        self.recvs = {}  # syncer: rank -> (future, buffer) of the receive posted for its next message


class DecoupledSync:
    """The outer sync's messages and rounds for fragments of `sizes` elements (see the module's
    doc). `pg` is a geoccl process group; every rank constructs it with the same arguments."""

    def __init__(self, pg, sizes, quorum, grace, max_staleness, timeout):
        self.pg = pg
        self.rank, self.world = pg.rank(), pg.size()
        if not 1 <= int(quorum) <= self.world:
            raise ValueError(f"geoccl.diloco: quorum must be in [1, {self.world}], got {quorum}")
        if grace < 0 or max_staleness < 0:
            raise ValueError("geoccl.diloco: grace and max_staleness must be >= 0")
        self.quorum, self.grace, self.max_staleness = int(quorum), float(grace), int(max_staleness)
        # Seconds the syncer waits for a quorum (None: the group's operation timeout).
        self.timeout = float(timeout) if timeout is not None else pg.op_timeout.total_seconds()
        self.syncer = self.rank == 0
        self.pools = [_Pool(n) for n in sizes]
        self.rounds = []  # syncer: one dict per closed round (fragment, version, contributors, ...)
        self.bytes_sent = 0
        self._arrived = threading.Event()
        self._sends = []  # replies in flight (syncer) and the buffers they keep alive

    # ---- syncer ----

    def _listen(self, f):
        """Syncer: a receive for the next message of every rank whose contribution is not in
        fragment f's pool and that has none posted. A receive waiting for a rank that is stopped
        holds back no other operation of the group; messages that come before their receive is
        posted wait in the transport."""
        pool = self.pools[f]
        for r in range(1, self.world):
            if r in pool.recvs or r in pool.regular or r in pool.full:
                continue
            buf = torch.empty(_HEADER + 4 * pool.numel, dtype=torch.uint8)
            fut = self.pg.recv([buf], r, TAG + 2 * f).get_future()
            fut.add_done_callback(lambda _: self._arrived.set())
            pool.recvs[r] = (fut, buf)

    def poll(self):
        """Syncer: moves arrived contributions into the pools and drops finished replies; a
        failed send or receive raises the group's error. Cheap when nothing arrived."""
        if not self.syncer:
            return
        self._arrived.clear()
        for pool in self.pools:
            for src, (fut, buf) in list(pool.recvs.items()):
                if not fut.done():  # (the future completes before its Work does)
                    continue
                fut.wait()  # raises the receive's error
                del pool.recvs[src]
                head = buf[:_HEADER].view(torch.float64)
                kind, base, weight = float(head[0]), int(head[1]), float(head[2])
                self._add(pool, src, kind == _FULL, base, weight, buf[_HEADER:].view(torch.float32))
        still = []
        for fut, buf in self._sends:
            if fut.done():
                fut.wait()
            else:
                still.append((fut, buf))
        self._sends = still

    def _add(self, pool, src, full, base, weight, delta):
        into = pool.full if full else pool.regular
        if src in into:
            raise RuntimeError(f"geoccl.diloco: rank {src} sent two contributions to one round")
        into[src] = (base, weight, delta)

    def _close(self, f, into, apply, waited, full):
        """A regular round: merges the contributions of `into` and steps the outer optimizer
        (apply(mean) -> flat float32 parameters); a full one (every rank's full sync) only hands
        out the global parameters as they are. Replies to every contributor; returns the
        parameters."""
        pool = self.pools[f]
        if full:
            mean, rows = None, [(r, pool.version - into[r][0], 0.0) for r in sorted(into)]
        else:
            mean, rows = merge(into, pool.version, self.max_staleness)
        params = apply(mean)
        if mean is not None:
            pool.version += 1
        record = {"fragment": f, "version": pool.version, "full": full, "waited_s": round(waited, 3),
                  "contributors": [r for r, _, _ in rows], "staleness": {r: s for r, s, _ in rows},
                  "weights": {r: w for r, _, w in rows}, "closed_at": time.time()}
        self.rounds.append(record)
        if len(rows) < self.world or any(s for _, s, _ in rows):
            log.info("diloco round: fragment %d version %d, contributors %s, staleness %s (waited %.3f s)",
                     f, pool.version, record["contributors"], record["staleness"], waited)
        for r in into:
            if r != self.rank:
                self._reply(f, r, params, pool.version)
        into.clear()
        return params

    def _reply(self, f, dst, params, version):
        buf = torch.empty(8 + 4 * params.numel(), dtype=torch.uint8)
        buf[:8].view(torch.float64)[0] = float(version)
        buf[8:].view(torch.float32).copy_(params)
        self._sends.append((self.pg.send([buf], dst, TAG + 2 * f + 1).get_future(), buf))
        self.bytes_sent += buf.numel()

    def _wait(self, until):
        """Syncer: waits for an arrival or `until` (monotonic seconds)."""
        self._arrived.wait(max(0.0, until - time.monotonic()))
        self.poll()

    def _run_round(self, f, apply, full):
        pool = self.pools[f]
        start = time.monotonic()
        deadline = start + self.timeout
        if full:
            # Late regular contributions first, each set in a round of its own, so that every
            # learner reaches its full sync.
            while len(pool.full) < self.world:
                self._listen(f)
                self.poll()
                if pool.regular:
                    self._close(f, pool.regular, apply, time.monotonic() - start, False)
                    continue
                if time.monotonic() > deadline:
                    raise TimeoutError(f"geoccl.diloco: full sync of fragment {f}: {len(pool.full)} of "
                                       f"{self.world} ranks arrived")
                self._wait(deadline)
            return self._close(f, pool.full, apply, time.monotonic() - start, True)
        quorum_since = None
        while True:
            self._listen(f)
            self.poll()
            now = time.monotonic()
            present = len(pool.regular)
            if quorum_since is None and present >= self.quorum:
                quorum_since = now
            if round_closes(present, self.world, self.quorum, quorum_since, self.grace, now):
                return self._close(f, pool.regular, apply, now - start, False)
            if quorum_since is None and now > deadline:
                raise TimeoutError(f"geoccl.diloco: fragment {f}: {present} of a quorum of {self.quorum} "
                                   f"contributions arrived")
            self._wait(deadline if quorum_since is None else quorum_since + self.grace)

    # ---- every rank ----

    def exchange(self, f, delta, weight, apply, full=False):
        """One sync of fragment f: this rank's pseudo-gradient `delta` (flat float32, from the
        global parameters of the last reply) with `weight`. On the syncer `apply(mean)` steps the
        outer optimizer with the round's mean (None: no step, every weight was 0) and returns the
        flat float32 global parameters. Returns (parameters, their version)."""
        pool = self.pools[f]
        if self.syncer:
            self.poll()
            self._add(pool, self.rank, full, pool.version, float(weight), delta)
            params = self._run_round(f, apply, full)
            if full:
                self.flush()
            return params, pool.version
        msg = torch.empty(_HEADER + 4 * pool.numel, dtype=torch.uint8)
        msg[:_HEADER].view(torch.float64).copy_(torch.tensor([_FULL if full else _REGULAR, pool.version, float(weight)],
                                                             dtype=torch.float64))
        msg[_HEADER:].view(torch.float32).copy_(delta)
        send = self.pg.send([msg], 0, TAG + 2 * f)
        self.bytes_sent += msg.numel()
        reply = torch.empty(8 + 4 * pool.numel, dtype=torch.uint8)
        self.pg.recv([reply], 0, TAG + 2 * f + 1).wait()
        send.wait()
        pool.version = int(reply[:8].view(torch.float64)[0])
        return reply[8:].view(torch.float32), pool.version

    def flush(self):
        """Syncer: waits for every reply in flight (the end of training)."""
        for fut, _ in self._sends:
            fut.wait()
        self._sends = []


__all__ = ["DecoupledSync", "merge", "round_closes", "staleness_weight"]
