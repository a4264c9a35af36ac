"""One rank of the completion tests: Python callbacks run on geoccl's completion threads, with the
GIL, never on the thread that runs collectives. Both APIs: geoccl.Communicator's Work.on_complete
and torch futures of a "geoccl" process group (then-callbacks that issue a collective and wait on
it, nested, and a slow one that other collectives do not wait for). Writes
{"cases": N, "failures": [...], "seconds": {...}} to argv[1].rank; argv[2] is "communicator" or
"torch".
"""

import datetime
import json
import os
import sys
import threading
import time
import traceback

import numpy as np
import torch
import torch.distributed as dist

import geoccl

failures = []
cases = 0
seconds = {}


def check(name, ok, detail=""):
    global cases
    cases += 1
    if not ok:
        failures.append(f"{name}: {detail}")


def gated(comm, register):
    """On rank 0: a receive that cannot complete before register(work, buf) has run on it (a
    callback registered after completion would run at once on this thread, not on a completion
    thread): rank 1 sends only when rank 0 says so. Elsewhere: None."""
    r = comm.rank
    buf = np.zeros(4, dtype=np.int64)
    if r == 0:
        w = comm.recv(buf, 1, tag=77)
        register(w, buf)
        comm.send(np.zeros(1, dtype=np.int64), 1, tag=78).wait(timeout=30)
        return w, buf
    if r == 1:
        comm.recv(np.zeros(1, dtype=np.int64), 0, tag=78).wait(timeout=30)
        comm.send(np.full(4, 5, dtype=np.int64), 0, tag=77).wait(timeout=30)
    return None, buf


def torch_gated(pg, then):
    """The torch form of gated(): on rank 0, the future of an irecv with then() attached before it
    can complete; elsewhere None."""
    r = dist.get_rank()
    if r == 0:
        fut = dist.irecv(torch.zeros(4), 1, group=pg, tag=77).get_future().then(then)
        dist.send(torch.zeros(1), 1, group=pg, tag=78)
        return fut
    if r == 1:
        dist.recv(torch.zeros(1), 0, group=pg, tag=78)
        dist.send(torch.full((4,), 5.0), 0, group=pg, tag=77)
    return None


def communicator_callbacks(comm):
    r, n = comm.rank, comm.size
    main = threading.get_ident()

    # A callback receives None, runs on another thread with the GIL, and wait() returns after it.
    seen = {}
    w, _ = gated(comm, lambda w, buf: w.on_complete(
        lambda err: seen.update(err=err, thread=threading.get_ident(), value=int(buf[0]))))
    if w is not None:
        w.wait(timeout=30)
        check("callback ran before wait() returned", "err" in seen, seen)
        check("callback got None on success", seen.get("err", 1) is None, seen)
        check("callback ran off the calling thread", seen.get("thread") not in (None, main), seen)
        check("callback saw the result", seen.get("value") == 5, seen)

    # A callback that issues an allreduce and waits on it, nested three deep.
    bufs = [np.full(64, r + d, dtype=np.float64) for d in range(4)]
    reached = []

    def nested(d):
        def cb(err):
            if err is not None:
                reached.append(f"error at depth {d}: {err}")
            elif d == 3:
                reached.append(threading.get_ident())
            else:
                w = comm.allreduce(bufs[d + 1], priority="gradient")
                w.on_complete(nested(d + 1))
                w.wait(timeout=30)
        return cb

    # Rank 0's callbacks run on completion threads (gated); the others issue the same allreduces.
    w, _ = gated(comm, lambda w, buf: w.on_complete(nested(0)))
    if w is not None:
        w.wait(timeout=60)
        check("nested callbacks reached depth 3", len(reached) == 1 and reached[0] != main, reached)
    else:
        nested(0)(None)
    for d in range(1, 4):
        want = n * (n - 1) / 2 + n * d
        check(f"nested allreduce depth {d}", (bufs[d] == want).all(), bufs[d][:3])

    # A callback that sleeps 2 s: later collectives complete while it sleeps.
    slow_done = threading.Event()
    slow, _ = gated(comm, lambda w, buf: w.on_complete(lambda err: (time.sleep(2.0), slow_done.set())))
    if slow is None:
        slow_done.set()  # only rank 0 has the slow callback
    else:
        while not slow.test():  # done while its callback sleeps
            time.sleep(0.001)
    t0 = time.monotonic()
    before = 0
    for i in range(5):
        v = np.full(100, r + i, dtype=np.int32)
        comm.allreduce(v, priority="bulk").wait(timeout=30)
        check(f"allreduce {i} behind a slow callback", (v == n * (n - 1) // 2 + n * i).all(), v[:3])
        before += not slow_done.is_set()
    seconds["five_allreduces_behind_slow_callback"] = time.monotonic() - t0
    check("later collectives completed before the slow callback returned", before == (5 if r == 0 else 0), before)
    if slow is not None:
        slow.wait(timeout=30)
    check("wait() returned after the slow callback", slow_done.is_set())

    check("priority is checked", _raises(ValueError, lambda: comm.barrier(priority="urgent")))

    # A callback that raises: reported, not fatal.
    raised = comm.allreduce(np.zeros(4, dtype=np.float32))
    raised.on_complete(lambda err: 1 / 0)
    raised.wait(timeout=30)
    check("a raising callback is not fatal", raised.is_success())


def communicator_failure(comm):
    """Last use of `comm`: an operation that fails (its deadline passes, which fails the group)
    hands its GeocclError to the callback."""
    r, n = comm.rank, comm.size
    errors = []
    bad = np.zeros(4, dtype=np.float32)
    w = comm.recv(bad, (r + 1) % n, tag=4242, timeout=0.5)  # never sent
    w.on_complete(lambda err: errors.append(err))
    try:
        w.wait(timeout=30)
        check("recv that nobody sends fails", False, "no error")
    except geoccl.GeocclError:
        pass
    check("callback got GeocclError", len(errors) == 1 and isinstance(errors[0], geoccl.GeocclError), errors)


def torch_futures(pg):
    r, n = dist.get_rank(), dist.get_world_size()

    # A then-callback that issues an allreduce on the same group and waits on it (as powerSGD's
    # hook does): it used to hang, the callback blocking the collective thread.
    x = torch.full((16,), float(r))

    def first_allreduce(t):
        y = t.clone()
        dist.all_reduce(y, group=pg)
        return y

    def first(fut):  # rank 0: on a completion thread, completing the irecv's future
        return inner_fut(first_allreduce(x))

    def inner_fut(y):
        return dist.all_reduce(y + 1, group=pg, async_op=True).get_future().wait()[0]

    fut = torch_gated(pg, first)
    got = fut.wait() if fut is not None else inner_fut(first_allreduce(x))
    check("then() issuing a collective", torch.equal(got, torch.full((16,), float(n * (n - 1) // 2 * n + n))),
          got[:3])

    # Nested three deep.
    def nest(d):
        def cb(fut):
            t = fut.value()[0]
            if d == 3:
                return t
            return dist.all_reduce(t.clone(), group=pg, async_op=True).get_future().then(nest(d + 1)).wait()
        return cb

    def start(fut):
        return dist.all_reduce(torch.ones(8), group=pg, async_op=True).get_future().then(nest(1)).wait()

    fut = torch_gated(pg, start)
    got = fut.wait() if fut is not None else start(None)
    check("nested then() depth 3", torch.equal(got, torch.full((8,), float(n ** 3))), got[:3])

    # A slow then-callback: later collectives complete meanwhile.
    slow_done = threading.Event()

    def slow(fut):
        time.sleep(2.0)
        slow_done.set()
        return fut.value()[0]

    slow_fut = torch_gated(pg, slow)
    if slow_fut is None:
        slow_done.set()
    before = 0
    for i in range(5):
        v = torch.full((50,), float(i))
        dist.all_reduce(v, group=pg)
        check(f"torch allreduce {i} behind a slow callback", torch.equal(v, torch.full((50,), float(i * n))), v[:3])
        before += not slow_done.is_set()
    check("torch collectives completed before the slow callback returned", before == (5 if r == 0 else 0), before)
    if slow_fut is not None:
        slow_fut.wait()
    check("slow then() completed", slow_done.is_set())


def _raises(exc, fn):
    try:
        fn()
    except exc:
        return True
    return False


def main():
    out, api = sys.argv[1], sys.argv[2]
    try:
        if api == "communicator":
            comm = geoccl.Communicator.from_env()
            communicator_callbacks(comm)
            comm.barrier().wait(timeout=30)
            communicator_failure(comm)
            del comm
        else:
            dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
            pg = dist.new_group(backend="geoccl", timeout=datetime.timedelta(seconds=60))
            torch_futures(pg)
            dist.barrier(group=pg)
            dist.destroy_process_group()
    except Exception:  # noqa: BLE001  (the ranks may now be out of step: stop here)
        failures.append(traceback.format_exc())
    with open(f"{out}.{os.environ['RANK']}", "w") as f:
        json.dump({"cases": cases, "failures": failures, "seconds": seconds}, f)


if __name__ == "__main__":
    main()
