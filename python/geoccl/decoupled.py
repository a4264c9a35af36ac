"""Decoupled outer sync for geoccl.diloco (DiLoCo(quorum=Q)): instead of an allreduce that every
rank must join, a central syncer (the group's rank 0) merges the pseudo-gradients that have
arrived, with a minimum quorum and a grace window, so a stopped or straggling region does not stop
the others (Douillard et al., "Decoupled DiLoCo for Resilient Distributed Pre-training", 2026,
arXiv 2604.21428).

The syncer keeps the global parameters, their version (how many outer steps they have had) and a
pool of contributions; every rank, the syncer included, is a learner:
- a learner's sync sends (its base version, its weight, its pseudo-gradient) to the syncer and
  waits for the reply: global parameters and their version, which become its parameters and its
  next base;
- the syncer opens a round at its own sync and closes it (:func:`round_closes`) when every rank
  has contributed, or when at least `quorum` have and `grace` seconds have passed since it saw the
  quorum. Every contribution in the pool is merged (:func:`merge`): weighted by its weight times
  :func:`staleness_weight` of its staleness (the round's version minus its base: the outer steps
  it missed; more than `max_staleness` behind, it is left out), over the sum of the weights
  without that factor, so a stale contribution also shrinks the step. The outer optimizer steps
  with the result, and every contributor still waiting gets the new parameters;
- a contribution that comes after a round it was due in closed (from a learner that was stopped
  or is slower) gets the current parameters back at once, so that learner goes on instead of
  waiting for the next round, and waits in the pool for that round, where its staleness lowers
  its weight (one that comes while a round is open is merged in it and answered when it closes,
  so its rank catches up). Contributions are folded into the round's sum as they arrive.
- every receive has the group's operation timeout: the syncer posts one for a late rank when a
  round opens, and that rank may send only a sync period (H steps) later, plus however far it
  lags; the group's timeout must exceed that, or the group fails with kTimeout. Every rank still
  takes the same number of steps, so a slower rank's lag grows over the run and the others wait
  it out at the full sync.
A full sync (:meth:`DecoupledSync.exchange` with full=True, what DiLoCo.sync_now() does at the end
of training) takes every rank: the syncer answers the regular contributions of ranks still behind
at once while it waits for every rank's full one, merges what they sent in one more round, and
then sends every rank the global parameters: every rank ends with the same parameters. Its
message has the regular one's size (a receive posted for a rank takes either), its
pseudo-gradient unused: like a lock-step DiLoCo, the steps since a rank's last sync are dropped.

Messages are point-to-point on the group (tags TAG and TAG + 1): a contribution is a 24-byte
header (kind, base version, weight as float64) and the float32 pseudo-gradient; a reply, an
8-byte version and the float32 parameters. A group's point-to-point messages between two ranks are
matched in order whatever their tag, so no other point-to-point traffic may use the group while
this runs (a group of its own for them). The syncer is a single point: a syncer that fails or
times out aborts the group, and every learner's wait ends with the group's error.
"""

import logging
import threading
import time

import torch

log = logging.getLogger("geoccl.diloco")

TAG = 0x6C0C0  # p2p tags of the outer sync: TAG (contributions), TAG + 1 (replies)
_HEADER = 24
_REGULAR, _FULL = 0.0, 1.0


def staleness_weight(staleness, max_staleness):
    """The factor on a contribution's weight that is `staleness` outer steps behind: 1 / (1 + s),
    0 beyond max_staleness."""
    if staleness < 0:
        raise ValueError(f"geoccl.diloco: staleness {staleness} < 0")
    return 0.0 if staleness > max_staleness else 1.0 / (1.0 + staleness)


def round_closes(present, world, quorum, quorum_since, grace, now):
    """Whether a round with contributions from `present` ranks closes at `now` (seconds): all
    `world` ranks are in, or the quorum has been met since `quorum_since` (None: not met) for
    `grace` seconds."""
    if present >= world:
        return True
    return present >= quorum and quorum_since is not None and now - quorum_since >= grace


class _Merge:
    """A round's merge, folded in as contributions arrive (the version does not change before the
    round closes, so neither does a contribution's staleness): each counts with weight *
    staleness_weight, over the sum of the weights of those not left out."""

    def __init__(self, version, max_staleness):
        self.version, self.max_staleness = version, max_staleness
        self.acc, self.total, self.rows = None, 0.0, []

    def add(self, rank, base, weight, delta):
        s = self.version - base
        w = weight * staleness_weight(s, self.max_staleness)
        self.rows.append((rank, s, w))
        if w > 0:
            self.acc = delta * w if self.acc is None else self.acc.add_(delta, alpha=w)
            self.total += weight

    def result(self):
        """The merged pseudo-gradient, or None when every contribution was left out or weighs 0."""
        return self.acc / self.total if self.acc is not None else None


def merge(contributions, version, max_staleness):
    """The pool's pseudo-gradients merged at a round of global `version`: contributions is a list
    of (rank, base version, weight, flat tensor). Each counts with weight * staleness_weight over
    the sum of the weights of those not left out. Returns (result or None when every one is left
    out or weighs 0, [(rank, staleness, applied weight)] in the list's order)."""
    m = _Merge(version, max_staleness)
    for c in contributions:
        m.add(*c)
    return m.result(), m.rows


class DecoupledSync:
    """The outer sync's messages and rounds for a fragment of `numel` elements (see the module's
    doc). `pg` is a geoccl process group; every rank constructs it with the same arguments. On the
    syncer, `params()` returns the global parameters as a flat float32 tensor."""

    def __init__(self, pg, numel, quorum, grace, max_staleness, timeout, params):
        self.pg = pg
        self.rank, self.world = pg.rank(), pg.size()
        if not 1 <= int(quorum) <= self.world:
            raise ValueError(f"geoccl.diloco: quorum must be in [1, {self.world}], got {quorum}")
        if grace < 0 or max_staleness < 0:
            raise ValueError("geoccl.diloco: grace and max_staleness must be >= 0")
        self.quorum, self.grace, self.max_staleness = int(quorum), float(grace), int(max_staleness)
        # Seconds the syncer waits for a quorum, and for every rank at a full sync (None: the
        # group's operation timeout).
        self.timeout = float(timeout) if timeout is not None else pg.op_timeout.total_seconds()
        self.syncer = self.rank == 0
        self.numel = numel
        self.params = params
        self.version = 0  # syncer: of the global parameters; a learner: of its last reply
        # Syncer: the regular contributions of the next round, [rank, answered], folded into
        # _merge as they arrive (a buffer is let go once folded in).
        self.regular = []
        self._merge = _Merge(0, self.max_staleness)
        self.full = {}  # syncer: rank -> base, of the ranks at their full sync
        self.recvs = {}  # syncer: rank -> (future, buffer) of the receive posted for its next message
        self.in_round = False  # syncer: a regular round is open
        self.in_full = False  # syncer: at its full sync
        self.rounds = []  # syncer: one dict per closed round (version, contributors, ...)
        self.bytes_sent = 0
        self._arrived = threading.Event()
        self._sends = []  # replies in flight (syncer) and the buffers they keep alive
        self._packed = None  # syncer: (version, reply buffer) of the parameters last sent

    # ---- syncer ----

    def _waiting(self, r):
        """Whether rank r has a contribution the syncer has not answered."""
        return r in self.full or any(e[0] == r and not e[1] for e in self.regular)

    def _listen(self):
        """Syncer: a receive for the next message of every rank that has none posted and is not
        waiting for an answer. A receive waiting for a rank that is stopped holds back no other
        operation of the group; messages that come before their receive is posted wait in the
        transport."""
        for r in range(1, self.world):
            if r in self.recvs or self._waiting(r):
                continue
            buf = torch.empty(_HEADER + 4 * self.numel, dtype=torch.uint8)
            fut = self.pg.recv([buf], r, TAG).get_future()
            fut.add_done_callback(lambda _: self._arrived.set())
            self.recvs[r] = (fut, buf)

    def poll(self):
        """Syncer: takes in arrived contributions (answering at once those that missed their
        round) and drops finished replies; a failed send or receive raises the group's error.
        Cheap when nothing arrived."""
        if not self.syncer:
            return
        self._arrived.clear()
        for src, (fut, buf) in list(self.recvs.items()):
            if not fut.done():  # (the future completes before its Work does)
                continue
            fut.wait()  # raises the receive's error
            del self.recvs[src]
            head = buf[:_HEADER].view(torch.float64)
            kind, base, weight = float(head[0]), int(head[1]), float(head[2])
            self._add(src, kind == _FULL, base, weight, buf[_HEADER:].view(torch.float32))
        still = []
        for fut, buf in self._sends:
            if fut.done():
                fut.wait()
            else:
                still.append((fut, buf))
        self._sends = still

    def _add(self, src, full, base, weight, delta):
        if self._waiting(src):
            raise RuntimeError(f"geoccl.diloco: rank {src} sent a contribution before its last was answered")
        if full:
            self.full[src] = base
            return
        # Late: it missed the round it was due in, and no round is open to take it now (one that is
        # open answers it when it closes, with the parameters the rank would have missed again).
        late = src != self.rank and ((base < self.version and not self.in_round) or self.in_full)
        self._merge.add(src, base, weight, delta)
        self.regular.append([src, late])
        if late:
            self._reply([src])
            if self.in_full:
                self._listen()

    def _close(self, waited, full):
        """A round: merges the regular contributions and steps the outer optimizer (apply); a full
        one then hands every rank at its full sync the global parameters. Replies to every rank
        still waiting."""
        rows = self._merge.rows
        merged = self._merge.result()
        if merged is not None:
            self._apply(merged)
            self.version += 1
        waiting = sorted(set(self.full) if full else {r for r, answered in self.regular if not answered})
        record = {"version": self.version, "full": full, "waited_s": round(waited, 3),
                  "contributors": [r for r, _, _ in rows], "staleness": [s for _, s, _ in rows],
                  "weights": [w for _, _, w in rows], "closed_at": time.time()}
        self.rounds.append(record)
        if len(rows) < self.world or any(s for _, s, _ in rows):
            log.info("diloco round: version %d, contributors %s, staleness %s (waited %.3f s)",
                     self.version, record["contributors"], record["staleness"], waited)
        params = self._reply([r for r in waiting if r != self.rank])
        self.regular = []
        self._merge = _Merge(self.version, self.max_staleness)
        if full:
            self.full = {}
        return params

    def _reply(self, dsts):
        """Sends the global parameters and their version to every rank of `dsts`, from one buffer
        packed once per version (the parameters change only with it); returns the parameters
        (a view of that buffer)."""
        if self._packed is None or self._packed[0] != self.version:
            buf = torch.empty(8 + 4 * self.numel, dtype=torch.uint8)
            buf[:8].view(torch.float64)[0] = float(self.version)
            buf[8:].view(torch.float32).copy_(self.params())
            self._packed = (self.version, buf)
        buf = self._packed[1]
        for dst in dsts:
            self._sends.append((self.pg.send([buf], dst, TAG + 1).get_future(), buf))
            self.bytes_sent += buf.numel()
        return buf[8:].view(torch.float32)

    def _wait(self, until):
        """Syncer: waits for an arrival or `until` (monotonic seconds)."""
        self._arrived.wait(max(0.0, until - time.monotonic()))
        self.poll()

    @staticmethod
    def _fail(message):
        """Syncer: TimeoutError (exchange() then aborts the group: the learners waiting for a
        reply would otherwise wait out their own deadline)."""
        raise TimeoutError(message)

    def _run_round(self, full):
        start = time.monotonic()
        deadline = start + self.timeout
        if full:
            self.in_full = True
            try:
                # Contributions of ranks still behind are answered at once (_add) until every
                # rank has come to its full sync.
                behind = [e for e in self.regular if not e[1] and e[0] != self.rank]
                for e in behind:
                    e[1] = True
                self._reply([e[0] for e in behind])
                while len(self.full) < self.world:
                    self._listen()
                    self.poll()
                    if len(self.full) < self.world and time.monotonic() > deadline:
                        self._fail(f"geoccl.diloco: full sync: {len(self.full)} of {self.world} ranks "
                                   f"came within {self.timeout:.0f} s")
                    if len(self.full) < self.world:
                        self._wait(deadline)
                return self._close(time.monotonic() - start, True)
            finally:
                self.in_full = False
        quorum_since = None
        self.in_round = True
        try:
            while True:
                self._listen()
                self.poll()
                now = time.monotonic()
                # The ranks with a contribution waiting for this round (one answered at once as
                # late is merged too, but its rank is not counted: it is not waiting).
                present = len({r for r, answered in self.regular if not answered})
                if quorum_since is None and present >= self.quorum:
                    quorum_since = now
                if round_closes(present, self.world, self.quorum, quorum_since, self.grace, now):
                    return self._close(now - start, False)
                if quorum_since is None and now > deadline:
                    self._fail(f"geoccl.diloco: {present} of a quorum of {self.quorum} contributions "
                               f"came within {self.timeout:.0f} s")
                self._wait(deadline if quorum_since is None else quorum_since + self.grace)
        finally:
            self.in_round = False

    # ---- every rank ----

    def exchange(self, delta, weight, apply, full=False):
        """One sync: this rank's pseudo-gradient `delta` (flat float32, from the global parameters
        of its last reply) with `weight`. On the syncer `apply(result)` steps the outer optimizer
        with a round's merged pseudo-gradient. Returns (global parameters as a flat float32 tensor,
        their version)."""
        if self.syncer:
            self._apply = apply
            try:
                self.poll()
                self._add(self.rank, full, self.version, float(weight), delta)
                params = self._run_round(full)
                if full:
                    self.flush()
            except BaseException as e:
                # Learners waiting for a reply would otherwise wait out their deadline.
                self.pg.abort(f"geoccl.diloco: the syncer failed: {e}")
                raise
            return params, self.version
        msg = torch.empty(_HEADER + 4 * self.numel, dtype=torch.uint8)
        msg[:_HEADER].view(torch.float64).copy_(
            torch.tensor([_FULL if full else _REGULAR, self.version, float(weight)], dtype=torch.float64))
        msg[_HEADER:].view(torch.float32).copy_(delta)
        send = self.pg.send([msg], 0, TAG)
        self.bytes_sent += msg.numel()
        reply = torch.empty(8 + 4 * self.numel, dtype=torch.uint8)
        self.pg.recv([reply], 0, TAG + 1).wait()
        send.wait()
        self.version = int(reply[:8].view(torch.float64)[0])
        return reply[8:].view(torch.float32), self.version

    def flush(self):
        """Syncer: waits for every reply in flight (the end of training)."""
        for fut, _ in self._sends:
            fut.wait()
        self._sends = []


__all__ = ["DecoupledSync", "merge", "round_closes", "staleness_weight"]
