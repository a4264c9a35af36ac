"""One rank of the compression tests of geoccl.Communicator (numpy), ranks labelled as argv[2]
domains in contiguous blocks (GEOCCL_DOMAIN d0, d1, ...). The group runs with
GEOCCL_WAN_COMPRESSION=int8 (the test sets it) and low small-message thresholds, so that both the
leaders' exchange and the hierarchical path carry compressed allreduces.

Writes {"cases", "failures", "digests", "stats", "errors", "encoded"} to argv[1].rank: digests of
every compressed result (the test compares them across ranks: bit-identical), measured errors
against the exact result, the elements this rank encoded per case, and compression_stats() at the
end.
"""

import hashlib
import json
import os
import sys
import traceback

import numpy as np

failures = []
cases = 0
digests = {}
errors = {}
encoded = {}


def check(name, ok, detail=""):
    global cases
    cases += 1
    if not ok:
        failures.append(f"{name}: {detail}")


def inputs(n, rank, seed):
    """Rank `rank`'s input: gaussian, with a per-rank scale so that partial sums differ."""
    return np.random.default_rng(1000 * seed + rank).standard_normal(n).astype(np.float32) * (1 + rank % 3)


def exact(n, world, seed, op):
    s = sum(inputs(n, r, seed).astype(np.float64) for r in range(world))
    return s / world if op == "avg" else s


def domain_partials(n, world, domains, seed):
    """The fp64 sum of each domain's inputs (what a domain's owners encode for the WAN)."""
    per = [[] for _ in range(domains)]
    for r in range(world):
        per[r * domains // world].append(inputs(n, r, seed).astype(np.float64))
    return [sum(p) for p in per]


def digest(a):
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


def main():
    domains = int(sys.argv[2])
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    os.environ["GEOCCL_DOMAIN"] = f"d{rank * domains // world}"
    import geoccl

    comm = geoccl.Communicator.from_env()
    cross = domains > 1
    stats0 = comm.compression_stats()
    check("stats keys", set(stats0) == {"calls", "elements_encoded", "bytes_encoded", "feedback_keys",
                                        "feedback_bytes"}, stats0)
    check("stats start at zero", all(v == 0 for v in stats0.values()), stats0)

    # Bad input: ValueError before anything is sent, on every rank alike (so the group stays in
    # step).
    for bad in ["int9", "topk", "topk:0", "topk:1.5", "int8@tree", "INT8 "]:
        try:
            comm.allreduce(np.ones(4, dtype=np.float32), compression=bad)
            check(f"bad spelling {bad!r}", False, "no ValueError")
        except ValueError as e:
            check(f"bad spelling {bad!r} names it", "compression" in str(e) or bad in str(e), str(e))
    for what, call in [("int32", lambda: comm.allreduce(np.ones(64, dtype=np.int32), compression="int8")),
                       ("float64", lambda: comm.allreduce(np.ones(64, dtype=np.float64), compression="fp16")),
                       ("max", lambda: comm.allreduce(np.ones(64, dtype=np.float32), op="max", compression="int8"))]:
        try:
            call().wait(timeout=30)
            check(f"explicit codec on {what}", False, "no ValueError")
        except ValueError:
            check(f"explicit codec on {what}", True)

    # Exact reference: compression="none" is never compressed, whatever the config says.
    n_large, n_small = 1 << 18, 1 << 10
    for n, label in [(n_large, "large"), (n_small, "small")]:
        a = inputs(n, rank, 1)
        comm.allreduce(a, op="sum", compression="none").wait(timeout=60)
        err = np.abs(a - exact(n, world, 1, "sum")).max()
        check(f"none is exact ({label})", err < 1e-4 * world, err)
    check("none compresses nothing", comm.compression_stats()["calls"] == 0, comm.compression_stats())

    # One compressed call per codec and path: error within the codec's bound, bit-identical digests
    # (compared by the test), counters that grow by the encoded size.
    parts_large = domain_partials(n_large, world, domains, 2)
    parts_small = domain_partials(n_small, world, domains, 2)
    for codec, rel in [("fp16", 2.0 ** -10), ("bf16", 2.0 ** -7), ("int8", None), ("int8@allgather", None),
                       ("int8@ring", None), ("int4", None), ("topk:0.01", None)]:
        for n, parts, label in [(n_large, parts_large, "large"), (n_small, parts_small, "small")]:
            a = inputs(n, rank, 2)
            before = comm.compression_stats()
            w = comm.allreduce(a, op="sum", compression=codec)
            w.wait(timeout=60)
            after = comm.compression_stats()
            ref = exact(n, world, 2, "sum")
            err = np.abs(a.astype(np.float64) - ref)
            name = f"{codec} {label}"
            digests[name] = digest(a)
            errors[name] = {"max": float(err.max()), "rms": float(np.sqrt((err ** 2).mean()))}
            if not cross:
                check(f"{name}: one domain is uncompressed", err.max() < 1e-4 * world, err.max())
                check(f"{name}: one domain counts nothing", after["calls"] == before["calls"], after)
                continue
            check(f"{name}: counted", after["calls"] > before["calls"], (before, after))
            grew = after["bytes_encoded"] - before["bytes_encoded"]
            elems = after["elements_encoded"] - before["elements_encoded"]
            encoded[name] = elems
            # The hierarchical path: every rank encodes its piece. The leaders' exchange: only a
            # domain's leader encodes (the test checks that each domain has one that did).
            if label == "large":
                check(f"{name}: encoded its piece", elems > 0 and grew > 0, (before, after))
            if elems == 0:
                check(f"{name}: nothing encoded, nothing counted", grew == 0, (before, after))
            # fp32 sums inside the domains differ from the fp64 reference by a few ulps.
            slack = sum(np.abs(p) for p in parts) * 1e-6 + 1e-6
            if codec.startswith("topk"):
                if label == "large":
                    # Each domain sends k = 656 values per chunk of 65536 of each owner's piece
                    # (about 1 %, more for short pieces): far fewer nonzeros than dense.
                    nnz = np.count_nonzero(a)
                    check(f"{name}: sparse", nnz <= 0.1 * n, nnz)
                    check(f"{name}: encoding is small", 0 < grew < elems * 4 * 0.1, (grew, elems))
                # Every output entry is a sum of some domains' entries (each kept in fp16 or
                # dropped): never further from the truth than the dropped parts.
                bound = sum(np.abs(p) for p in parts) * (1 + 2.0 ** -10) + slack
                check(f"{name}: within the dropped parts", bool((err <= bound).all()),
                      float((err - bound).max()))
                continue
            if rel is not None:
                # fp16/bf16 round each domain's partial sum once (the ring rounds the partial sums
                # of each hop).
                bound = sum(np.abs(p) for p in parts) * rel * max(1, domains - 1) + slack
                check(f"{name}: within the rounding bound", bool((err <= bound).all()),
                      float((err - bound).max()))
                if elems:
                    check(f"{name}: encoding is half", abs(grew - elems * 2) <= 64 * 1024, (grew, elems))
                continue
            # int8/int4 affine blocks: per element at most half a step of its block, a step being
            # the block's range / L; the range of a block is at most the piece's, whose own range
            # is at most the domain partial's. The ring re-quantizes partial sums once per hop.
            levels = 255 if codec.startswith("int8") else 15
            hops = max(1, domains - 1) if codec.endswith("@ring") else 1
            bound = sum((p.max() - p.min()) for p in parts) / levels * hops + slack.max()
            check(f"{name}: within the block bound", err.max() <= bound, (err.max(), bound))
            check(f"{name}: not exact", err.max() > 0, err.max())
            ratio = 3.5 if codec.startswith("int8") else 6.5
            if elems:
                check(f"{name}: encoding ratio", 0 < grew * ratio <= elems * 4, (grew, elems))

    # The config default (GEOCCL_WAN_COMPRESSION=int8): float32 sum/avg from the compression_min
    # threshold (64 KiB) up; smaller buffers, other dtypes and ops exact.
    for n, dtype, op, want in [(16384, np.float32, "avg", True), (4096, np.float32, "sum", False),
                               (16384, np.int32, "sum", False), (16384, np.float32, "max", False),
                               (16384, np.float64, "sum", False)]:
        a = (inputs(n, rank, 3) * 100).astype(dtype)
        before = comm.compression_stats()["calls"]
        comm.allreduce(a, op=op).wait(timeout=60)
        compressed = comm.compression_stats()["calls"] > before
        label = f"default {np.dtype(dtype).name} {op} {n * np.dtype(dtype).itemsize} B"
        check(f"{label}: compressed={want and cross}", compressed == (want and cross), compressed)
        digests[label] = digest(a)

    # Error feedback: the same input T times. With feedback what the codec drops is carried into
    # the next call, so the mean of the outputs converges to the exact sum (error ~ 1/T); without
    # it every call drops the same and the mean keeps the one-call error.
    # On the hierarchical ring (algo="hier-ring") every rank encodes its piece and holds a residual;
    # the leaders' exchange, which the cost model may choose for this size, keeps them on the
    # leaders only.
    n, T = 1 << 16, 16
    x = inputs(n, rank, 4)
    ref = exact(n, world, 4, "sum")
    mean_err = {}
    for key in ["", "ef-a"]:
        acc = np.zeros(n, dtype=np.float64)
        for _ in range(T):
            a = x.copy()
            comm.allreduce(a, op="sum", algo="hier-ring", compression="int8@allgather", feedback_key=key).wait(timeout=60)
            acc += a
        mean_err[key or "none"] = float(np.sqrt(((acc / T - ref) ** 2).mean()))
    errors["feedback mean rms"] = mean_err
    st = comm.compression_stats()
    if cross:
        check("feedback: the mean converges", mean_err["ef-a"] < 0.25 * mean_err["none"], mean_err)
        check("feedback: one key held", st["feedback_keys"] == 1, st)
        check("feedback: residual memory reported", st["feedback_bytes"] >= 4 * n // world, st)
        a = x.copy()
        comm.allreduce(a, op="sum", algo="hier-ring", compression="topk:0.01", feedback_key="ef-b").wait(timeout=60)
        st2 = comm.compression_stats()
        check("feedback: a second key", st2["feedback_keys"] == 2, st2)
        check("feedback: more memory", st2["feedback_bytes"] > st["feedback_bytes"], (st, st2))
        comm.forget_feedback("ef-a")
        st3 = comm.compression_stats()
        check("forget one key", st3["feedback_keys"] == 1 and st3["feedback_bytes"] < st2["feedback_bytes"], st3)
        comm.forget_feedback()
        st4 = comm.compression_stats()
        check("forget all", st4["feedback_keys"] == 0 and st4["feedback_bytes"] == 0, st4)
        # A forgotten key starts afresh: the first call after forgetting equals a call without one.
        a, b = x.copy(), x.copy()
        comm.allreduce(a, op="sum", algo="hier-ring", compression="int8@allgather", feedback_key="ef-a").wait(timeout=60)
        comm.allreduce(b, op="sum", algo="hier-ring", compression="int8@allgather").wait(timeout=60)
        check("forgotten key starts afresh", np.array_equal(a, b), float(np.abs(a - b).max()))
        comm.forget_feedback()
    else:
        check("one domain: no residuals", st["feedback_keys"] == 0 and st["feedback_bytes"] == 0, st)
        check("one domain: feedback changes nothing", abs(mean_err["ef-a"] - mean_err["none"]) < 1e-9, mean_err)

    comm.barrier().wait(timeout=60)
    if cross:
        # Ranks that disagree on the codec: every rank fails with a mismatch (the last case: the
        # group is not used afterwards).
        a = inputs(n_large, rank, 5)
        try:
            comm.allreduce(a, op="sum", compression="int8" if rank == 0 else "fp16").wait(timeout=60)
            check("codec mismatch fails", False, "no error")
        except geoccl.GeocclError as e:
            check("codec mismatch fails as a mismatch", "mismatch" in str(e), str(e))
    return comm


if __name__ == "__main__":
    comm = None
    try:
        comm = main()
    except Exception:  # noqa: BLE001  (recorded; the test fails with it)
        failures.append("exception: " + traceback.format_exc())
    result = {"cases": cases, "failures": failures, "digests": digests, "errors": errors, "encoded": encoded,
              "stats": comm.compression_stats() if comm is not None else None}
    with open(f"{sys.argv[1]}.{os.environ['RANK']}", "w") as f:
        json.dump(result, f)
    sys.stdout.flush()
    os._exit(0)  # after a mismatch the group is failed: do not wait on peers at exit
