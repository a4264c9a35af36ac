"""One rank of tests/python/test_weighted.py: geoccl.weighted on the default "geoccl" process
group (torch tensors) and on a geoccl.Communicator (numpy), ranks labelled as argv[2] domains in
contiguous blocks. Writes {"cases", "failures", "digests", "results"} to argv[1].rank: digests of
every result (the test compares them across ranks) and the decisions (WeightedResult as a dict).
"""

import dataclasses
import datetime
import hashlib
import json
import math
import os
import sys
import traceback

import numpy as np

failures = []
checked = []  # names of the checks made, failed or not


def check(name, ok, detail=""):
    checked.append(name)
    ok or failures.append(f"{name}: {detail}")


def inputs(n, rank):
    return np.random.default_rng(50 + rank).standard_normal(n).astype(np.float32) + 0.3 * rank


def plain(res):
    """A WeightedResult as JSON-comparable data (no NaN: a loss not reported is None)."""
    d = dataclasses.asdict(res)
    d["losses"] = [None if math.isnan(x) else x for x in d["losses"]]
    return d


def digest(a):
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


def main():
    out, domains = sys.argv[1], int(sys.argv[2])
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    os.environ["GEOCCL_DOMAIN"] = f"d{rank * domains // world}"
    import torch
    import torch.distributed as dist
    import geoccl
    import geoccl.weighted as gw

    dist.init_process_group("geoccl", timeout=datetime.timedelta(seconds=60))
    digests, results = {}, {}
    n = 100000
    try:
        # Sample-count weights on torch tensors: the exact weighted mean.
        w = [float(r + 1) for r in range(world)]
        t = torch.from_numpy(inputs(n, rank).copy())
        res = gw.weighted_allreduce(t, weight=w[rank])
        want = sum(inputs(n, r).astype(np.float64) * w[r] for r in range(world)) / sum(w)
        err = float(np.abs(t.numpy() - want).max())
        check("weighted mean", err < 2e-5, f"max error {err}")
        check("applied", all(abs(a - w[r] / sum(w)) < 1e-15 for r, a in enumerate(res.applied)), res.applied)
        digests["weighted"] = digest(t.numpy())
        results["weighted"] = plain(res)

        # One bad participant (rank world-1 sends 50x): equal weights are hurt, robust is not.
        bad = world - 1
        def mine():
            x = inputs(n, rank)
            return torch.from_numpy(x * 50 if rank == bad else x.copy())
        others = sum(inputs(n, r).astype(np.float64) for r in range(world) if r != bad) / (world - 1)
        t = mine()
        gw.weighted_allreduce(t)
        check("equal weights hurt", float(np.abs(t.numpy() - others).max()) > 1.0)
        t = mine()
        res = gw.weighted_allreduce(t, robust="exclude")
        check("excluded", res.outliers == [bad] and res.excluded == [bad], res.outliers)
        err = float(np.abs(t.numpy() - others).max())
        check("robust mean", err < 2e-5, f"max error {err}")
        digests["robust"] = digest(t.numpy())
        results["robust"] = plain(res)

        # By reported loss, on a list of tensors (the torch helper).
        params = [torch.full((10, 10), float(rank)), torch.full((7,), float(rank))]
        res = gw.average_tensors_(params, loss=5.0 if rank == 0 else 0.5 + 0.01 * rank, robust="exclude",
                                  statistic="loss")
        check("loss outlier", res.outliers == [0], res.outliers)
        mean_others = sum(range(1, world)) / (world - 1)
        check("list mean", all(torch.allclose(p, torch.full_like(p, mean_others)) for p in params),
              [p.flatten()[0].item() for p in params])
        results["loss"] = plain(res)

        # Staleness: rank 1 computed its contribution 3 steps ago, the limit is 2.
        t = torch.from_numpy(inputs(n, rank).copy())
        res = gw.weighted_allreduce(t, step=7 if rank == 1 else 10, current_step=10, max_staleness=2)
        check("stale", res.stale == [1] and 1 not in res.included, res.stale)
        want = sum(inputs(n, r).astype(np.float64) for r in range(world) if r != 1) / (world - 1)
        check("stale mean", float(np.abs(t.numpy() - want).max()) < 2e-5)
        digests["stale"] = digest(t.numpy())
        results["stale"] = plain(res)

        # int8 between domains with error feedback, float64, and the Communicator (numpy).
        t = torch.from_numpy(inputs(n, rank).copy())
        gw.weighted_allreduce(t, weight=w[rank], compression="int8", feedback_key="w")
        want = sum(inputs(n, r).astype(np.float64) * w[r] for r in range(world)) / sum(w)
        rel = float(np.sqrt(((t.numpy() - want) ** 2).sum() / (want ** 2).sum()))
        # Between domains the codec's error shows; on one site nothing is compressed.
        check("int8", (1e-4 < rel < 3e-2) if domains > 1 else rel < 1e-6, f"relative error {rel}")
        digests["int8"] = digest(t.numpy())
        t64 = torch.from_numpy(inputs(n, rank).astype(np.float64))
        gw.weighted_allreduce(t64, weight=w[rank])
        want64 = sum(inputs(n, r).astype(np.float64) * w[r] for r in range(world)) / sum(w)
        check("float64", float(np.abs(t64.numpy() - want64).max()) < 1e-12)

        # Bad input on one rank: ValueError on every rank, quickly, and the group goes on.
        import time
        for name, kwargs, tensor in [
            ("negative weight", {"weight": -1.0 if rank == 1 else 1.0}, torch.ones(1000)),
            ("nan weight", {"weight": math.nan if rank == 0 else 1.0}, torch.ones(1000)),
            ("future step", {"step": 11 if rank == world - 1 else 10, "current_step": 10}, torch.ones(1000)),
            ("all stale", {"step": 1, "current_step": 10, "max_staleness": 2}, torch.ones(1000)),
            ("int dtype", {}, torch.ones(1000, dtype=torch.int64 if rank == 0 else torch.float32)),
            ("zero weights", {"weight": 0.0}, torch.ones(1000)),
        ]:
            t0 = time.monotonic()
            try:
                gw.weighted_allreduce(tensor, **kwargs)
                check(name, False, "no error")
            except ValueError as e:
                check(name, "weighted_allreduce" in str(e), str(e))
            check(name + " fast", time.monotonic() - t0 < 10)
        for name, kwargs in [("robust spelling", {"robust": "median"}), ("statistic", {"statistic": "mean"})]:
            try:
                gw.weighted_allreduce(torch.ones(10), **kwargs)
                check(name, False, "no error")
            except ValueError:
                check(name, True)
        t = torch.full((1000,), float(rank))
        gw.weighted_allreduce(t)
        check("after the errors", torch.allclose(t, torch.full_like(t, (world - 1) / 2)))

        port = [None]
        if rank == 0:
            import socket
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = [s.getsockname()[1]]
        dist.broadcast_object_list(port, 0)
        comm = geoccl.Communicator(rank, world, "127.0.0.1", port[0], session="weighted", timeout=60)
        a = inputs(n, rank)
        res = gw.weighted_allreduce(a, weight=w[rank], comm=comm)
        check("communicator", float(np.abs(a - sum(inputs(n, r).astype(np.float64) * w[r] for r in range(world)) / sum(w)).max()) < 2e-5)
        digests["communicator"] = digest(a)
        del comm
    except Exception:  # noqa: BLE001
        failures.append(traceback.format_exc())
    with open(f"{out}.{rank}", "w") as f:
        json.dump({"cases": len(checked), "failures": failures, "digests": digests, "results": results}, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
