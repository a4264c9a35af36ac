"""Per-step quorum semantics for data-parallel training on an elastic geoccl group (torchft-like).

Each membership epoch is a "geoccl" process group among the live processes. A step whose gradient
allreduce failed is skipped on every rank; the survivors then form the next epoch and go on; a
process that is restarted (or starts late) is admitted at a step boundary and catches up by
receiving the model and optimizer state from a live member over geoccl's blob broadcast, verified
by a SHA-256 of the serialized state and by comparing a digest of the loaded state on every rank::

    mgr = geoccl.elastic.Manager(model, optimizer)     # RANK, WORLD_SIZE, MASTER_* from the env
    while mgr.step < steps:
        mgr.start_step()                               # admits joiners (new epoch), catches up
        loss_fn(model(x[mgr.rank::mgr.size])).backward()
        mgr.allreduce_gradients()                      # average over the epoch's members
        if mgr.should_commit():                        # False everywhere when the allreduce failed
            optimizer.step()
        optimizer.zero_grad()

A standalone store must serve MASTER_ADDR:MASTER_PORT for the whole job (``geoccl store --port P``,
or a ``geoccl.StoreServer`` in a process that outlives the workers: examples/elastic_ddp.py runs
one in rank 0's supervisor), so that the death of any worker, rank 0 included, leaves it up.

Consistency: a step counts as committed on a rank when its allreduce completed there. After every
transition all members adopt the state (model, optimizer, step count) of the new epoch's lowest
surviving rank, so a step that completed on some ranks only is then either kept everywhere or
dropped everywhere.
"""

import hashlib
import io
import os
import time

import torch

from . import _C

_STATE_TAG = b"geoccl-elastic-state-v1"


def _env_int(name, default):
    v = os.environ.get(name)
    return int(v) if v not in (None, "") else default


class Manager:
    """Wraps the training step of one process of an elastic group.

    Keyword arguments: rank, world_size, master_addr, master_port, session (default: the
    environment: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, GEOCCL_SESSION), timeout (seconds per
    operation), join_window (seconds the survivors of a failure wait for each other), join_timeout
    (seconds a joiner waits to be admitted), connect_timeout, min_members, grow_every (steps
    between checks for joiners; each costs one store lookup on rank 0 and an 8-byte broadcast),
    log (a callable taking a line, or None).
    """

    def __init__(self, model, optimizer, *, rank=None, world_size=None, master_addr=None, master_port=None,
                 session=None, timeout=60.0, join_window=3.0, join_timeout=300.0, connect_timeout=30.0,
                 min_members=1, grow_every=1, log=print):
        self.model = model
        self.optimizer = optimizer
        self.step = 0  # committed steps
        self.grow_every = max(1, int(grow_every))
        self.transitions = []  # one dict per epoch change: kind, epoch, size, seconds, state_bytes
        self._log = log
        self._failed = None
        t0 = time.monotonic()
        self.group = _C.ElasticGroup(
            rank=_env_int("RANK", 0) if rank is None else rank,
            world_size=_env_int("WORLD_SIZE", 1) if world_size is None else world_size,
            master_addr=master_addr or os.environ.get("MASTER_ADDR", "127.0.0.1"),
            master_port=master_port or _env_int("MASTER_PORT", 29500),
            session=session or os.environ.get("GEOCCL_SESSION", "elastic"),
            timeout=timeout, join_window=join_window, join_timeout=join_timeout,
            connect_timeout=connect_timeout, min_members=min_members)
        self.joined_late = self.group.joined
        if self.group.joined:
            # A restarted or late process: it is in the group now, with stale state.
            try:
                self._transition("join", t0)
            except RuntimeError as e:  # the epoch failed during the transfer
                self._failed = e
                self._recover()
        self._say(f"epoch {self.epoch}: rank {self.rank} of {self.size}")

    # ---- what the training loop reads ----

    @property
    def epoch(self):
        return self.group.epoch

    @property
    def rank(self):
        return self.group.rank

    @property
    def size(self):
        return self.group.size

    @property
    def pg(self):
        """The current epoch's torch process group (backend "geoccl")."""
        return self.group.process_group()

    # ---- the step ----

    def start_step(self):
        """Step boundary: recovers from a failed step (next epoch among the survivors) and, every
        ``grow_every`` steps, admits waiting joiners; both bring every member to the same state."""
        if self._failed is not None:
            self._recover()
        if self.step % self.grow_every != 0:
            return
        # Every epoch begins alike on old members and joiners: state transfer, then this check
        # (repeated after a grow), then steps.
        while True:
            t0 = time.monotonic()
            try:
                grew = self.group.maybe_grow()
            except RuntimeError as e:  # GeocclError: the epoch failed at the boundary
                self._failed = e
                self._say(f"epoch {self.epoch}: step {self.step}: step boundary failed: {e}")
                self._recover()
                continue
            if not grew:
                return
            try:
                self._transition("grow", t0)
            except RuntimeError as e:  # the new epoch failed during the transfer
                self._failed = e
                self._recover()

    def allreduce_gradients(self):
        """Averages the gradients of every parameter over the epoch's members (one allreduce of
        the flattened gradients). Returns False when it failed: the step must then be skipped,
        which should_commit() tells every rank."""
        params = [p for p in self.model.parameters() if p.requires_grad]
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        flat = torch.cat([g.reshape(-1) for g in grads])
        try:
            self.pg.allreduce([flat]).wait()
        except RuntimeError as e:
            self._failed = e
            self._say(f"epoch {self.epoch}: step {self.step}: allreduce failed: {e}")
            return False
        flat /= self.size
        off = 0
        for p, g in zip(params, grads):
            n = g.numel()
            if p.grad is None:
                p.grad = flat[off:off + n].view_as(p).clone()
            else:
                p.grad.copy_(flat[off:off + n].view_as(p))
            off += n
        return True

    def should_commit(self):
        """True when this step's allreduce succeeded (count it as committed); False on every rank
        whose step failed, and the next start_step() forms the next epoch."""
        if self._failed is not None:
            return False
        self.step += 1
        return True

    # ---- transitions ----

    def _recover(self):
        """The next epoch among the survivors (and waiting joiners), with their state made equal.
        A failure during the state transfer costs that epoch too; failing to form one at all
        (GeocclError timeout, past the group's bounds) is raised."""
        while True:
            t0 = time.monotonic()
            before = self.epoch
            self.group.next_epoch()
            try:
                self._transition("shrink", t0, before)
                self._failed = None
                return
            except RuntimeError as e:
                self._say(f"epoch {self.epoch}: failed during the state transfer ({e}); forming the next")

    def _transition(self, kind, t0, before=None):
        nbytes = self._sync_state()
        rec = {"kind": kind, "epoch": self.epoch, "size": self.size, "rank": self.rank,
               "seconds": time.monotonic() - t0, "state_bytes": nbytes, "step": self.step}
        self.transitions.append(rec)
        prev = "" if before is None else f"{before} -> "
        self._say(f"{kind}: epoch {prev}{self.epoch} with {self.size} members in {rec['seconds']:.2f} s "
                  f"(rank {self.rank}, state {nbytes} B from rank {self.group.state_source}, step {self.step})")

    def _state_bytes(self):
        buf = io.BytesIO()
        torch.save({"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                    "step": self.step}, buf)
        data = buf.getvalue()
        return hashlib.sha256(_STATE_TAG + data).digest() + data

    def _sync_state(self):
        """Every member adopts the state of the epoch's first surviving rank (a joiner's own state
        is stale). Returns the size of the state moved (0 when there is no survivor to take it
        from). Raises GeocclError when the transfer fails, ValueError when it does not verify."""
        src = self.group.state_source
        if src < 0 or self.size == 1:
            return 0
        data = self._state_bytes() if self.rank == src else None
        got, result = _C.broadcast_blob(self.pg, src, data)
        if got is not None:
            digest, body = got[:32], got[32:]
            if hashlib.sha256(_STATE_TAG + body).digest() != digest:
                raise ValueError(f"geoccl.elastic: the state from rank {src} does not match its hash")
            state = torch.load(io.BytesIO(body), map_location="cpu")
            self.model.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
            self.step = state["step"]
        self._verify_same_state()
        return len(data) if data is not None else len(got)

    def _verify_same_state(self):
        """Every rank's digest of its loaded model and step must be the same."""
        h = hashlib.sha256()
        for t in self.model.state_dict().values():
            h.update(t.detach().contiguous().numpy().tobytes())
        h.update(str(self.step).encode())
        mine = torch.tensor([int.from_bytes(h.digest()[:8], "little", signed=True)], dtype=torch.int64)
        everyone = [torch.zeros_like(mine) for _ in range(self.size)]
        self.pg.allgather([everyone], [mine]).wait()
        if any(int(x) != int(mine) for x in everyone):
            raise ValueError(f"geoccl.elastic: epoch {self.epoch}: members hold different state after the transfer")

    def state_digest(self):
        """SHA-256 of the model's parameters (hex), to compare ranks."""
        h = hashlib.sha256()
        for p in self.model.parameters():
            h.update(p.detach().contiguous().numpy().tobytes())
        return h.hexdigest()

    def _say(self, line):
        if self._log:
            self._log(f"[geoccl.elastic] {line}")
