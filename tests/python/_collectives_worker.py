"""One rank of the collectives comparison: every collective on a "geoccl" group (dist.new_group)
against torch's own gloo backend (the default group) as the oracle, for every dtype, on random
shapes. Inputs are small integers so that every reduction is exact in every dtype; results must
then be identical (AVG: within rounding). Writes {"cases": N, "failures": [...]} to argv[1].rank.
"""

import datetime
import json
import sys
import traceback
import warnings

import torch
import torch.distributed as dist

import geoccl  # registers the backend

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64, torch.uint8]
FLOATS = {torch.float32, torch.float64, torch.float16, torch.bfloat16}
OPS = {"sum": dist.ReduceOp.SUM, "prod": dist.ReduceOp.PRODUCT, "min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX}

rank = world = None
geo = None
failures = []
cases = 0


def values(shape, dtype, gen):
    lo, hi = (0, 4) if dtype == torch.uint8 else (-3, 4)
    return torch.randint(lo, hi, shape, generator=gen).to(dtype)


def shape_for(case_gen, max_elems=200):
    ndim = int(torch.randint(1, 4, (1,), generator=case_gen))
    shape = [int(torch.randint(1, 8, (1,), generator=case_gen)) for _ in range(ndim)]
    while torch.Size(shape).numel() > max_elems:
        shape[0] = max(1, shape[0] // 2)
    return shape


def gloo_safe(fn, tensors):
    """Runs fn(tensors) on gloo; if gloo cannot handle the dtype, on a wider copy cast back."""
    try:
        clones = [t.clone() for t in tensors]
        fn(clones)
        return clones
    except RuntimeError:
        wide = torch.float64 if tensors[0].is_floating_point() else torch.int64
        clones = [t.to(wide) for t in tensors]
        fn(clones)
        return [c.to(tensors[0].dtype) for c in clones]


def check(name, got, want, approx=False):
    global cases
    cases += 1
    if isinstance(got, torch.Tensor):
        got, want = [got], [want]
    for g, w in zip(got, want):
        ok = g.dtype == w.dtype and g.shape == w.shape
        if ok:
            if approx:
                ok = torch.allclose(g.double(), w.double(), rtol=1e-2 if g.element_size() == 2 else 1e-6, atol=1e-6)
            else:
                ok = torch.equal(g, w)
        if not ok:
            failures.append(f"rank {rank}: {name}: got {g.flatten()[:8].tolist()} {g.dtype} {tuple(g.shape)}, "
                            f"want {w.flatten()[:8].tolist()} {w.dtype} {tuple(w.shape)}")
            return


def cases_for(dtype, idx):
    cg = torch.Generator().manual_seed(1000 * idx + world)  # same on every rank: shapes, roots
    dg = torch.Generator().manual_seed(7919 * idx + rank)  # this rank's data
    dn = str(dtype).replace("torch.", "")

    # allreduce, every op; the same numbers through gloo.
    for opname, op in OPS.items():
        x = values(shape_for(cg), dtype, dg)
        g = x.clone()
        dist.all_reduce(g, op=op, group=geo)
        want = gloo_safe(lambda ts: dist.all_reduce(ts[0], op=op), [x])[0]
        check(f"allreduce {opname} {dn}", g, want)
    # AVG: gloo has none; the oracle is gloo's SUM divided by the world size.
    x = values(shape_for(cg), dtype, dg)
    g = x.clone()
    dist.all_reduce(g, op=dist.ReduceOp.AVG, group=geo)
    s = gloo_safe(lambda ts: dist.all_reduce(ts[0]), [x])[0]
    want = (s / world).to(dtype) if dtype in FLOATS else torch.div(s, world, rounding_mode="trunc")
    check(f"allreduce avg {dn}", g, want, approx=dtype in FLOATS)
    # non-contiguous tensor: staged and copied back
    x = values([6, 5], dtype, dg).t()
    g = x.clone().t().contiguous().t()  # same values, transposed strides
    assert not g.is_contiguous()
    dist.all_reduce(g, group=geo)
    want = gloo_safe(lambda ts: dist.all_reduce(ts[0]), [x.contiguous()])[0]
    check(f"allreduce non-contiguous {dn}", g, want)

    # allreduce_coalesced
    xs = [values(shape_for(cg, 50), dtype, dg) for _ in range(3)]
    gs = [t.clone() for t in xs]
    dist.all_reduce_coalesced(gs, group=geo)
    want = [gloo_safe(lambda ts: dist.all_reduce(ts[0]), [t])[0] for t in xs]
    check(f"allreduce_coalesced {dn}", gs, want)

    # broadcast from a random root
    root = int(torch.randint(0, world, (1,), generator=cg))
    x = values(shape_for(cg), dtype, dg)
    g = x.clone()
    dist.broadcast(g, root, group=geo)
    want = gloo_safe(lambda ts: dist.broadcast(ts[0], root), [x])[0]
    check(f"broadcast root {root} {dn}", g, want)

    # all_gather (list) and _all_gather_base
    x = values(shape_for(cg), dtype, dg)
    outs = [torch.empty_like(x) for _ in range(world)]
    dist.all_gather(outs, x, group=geo)
    want = [torch.empty_like(x) for _ in range(world)]
    gloo_safe(lambda ts: dist.all_gather(want, ts[0]) if ts[0].dtype == dtype else
              _wide_allgather(want, ts[0]), [x])
    check(f"all_gather {dn}", outs, want)
    out = torch.empty([world * x.shape[0]] + list(x.shape[1:]), dtype=dtype)
    dist._all_gather_base(out, x, group=geo)
    check(f"_all_gather_base {dn}", out, torch.cat(want))

    # all_gather_coalesced: tensors of assorted shapes (one transposed), every rank's list
    xs = [values(shape_for(cg, 50), dtype, dg) for _ in range(2)] + [values([3, 4], dtype, dg).t()]
    outs = [[torch.full_like(t, 9) for t in xs] for _ in range(world)]
    dist.all_gather_coalesced(outs, xs, group=geo)
    want = _gloo_all_gather_coalesced(xs)
    check(f"all_gather_coalesced {dn}", [t for l in outs for t in l], [t for l in want for t in l])

    # reduce_scatter (list) and _reduce_scatter_base; gloo 1.13 has no reduce_scatter: the oracle
    # is gloo's allreduce of the concatenation, block `rank` of it.
    for opname in ("sum", "max"):
        op = OPS[opname]
        shape = shape_for(cg, 60)
        ins = [values(shape, dtype, dg) for _ in range(world)]
        out = torch.empty(shape, dtype=dtype)
        dist.reduce_scatter(out, [t.clone() for t in ins], op=op, group=geo)
        full = gloo_safe(lambda ts: dist.all_reduce(ts[0], op=op), [torch.stack(ins)])[0]
        check(f"reduce_scatter {opname} {dn}", out, full[rank])
        out2 = torch.empty(shape, dtype=dtype)
        dist._reduce_scatter_base(out2, torch.cat(ins), op=op, group=geo)
        check(f"_reduce_scatter_base {opname} {dn}", out2, full[rank])

    # reduce to a random root
    root = int(torch.randint(0, world, (1,), generator=cg))
    x = values(shape_for(cg), dtype, dg)
    g = x.clone()
    dist.reduce(g, root, op=dist.ReduceOp.SUM, group=geo)
    want = gloo_safe(lambda ts: dist.reduce(ts[0], root), [x])[0]
    if rank == root:
        check(f"reduce root {root} {dn}", g, want)

    # gather and scatter
    root = int(torch.randint(0, world, (1,), generator=cg))
    x = values(shape_for(cg), dtype, dg)
    # group ranks of the geoccl group equal global ranks (it spans the world)
    outs = [torch.empty_like(x) for _ in range(world)] if rank == root else None
    dist.gather(x, outs, dst=root, group=geo)
    wants = [torch.empty_like(x) for _ in range(world)] if rank == root else None
    all_x = [torch.empty_like(x) for _ in range(world)]
    gloo_safe(lambda ts: dist.all_gather(all_x, ts[0]) if ts[0].dtype == dtype else
              _wide_allgather(all_x, ts[0]), [x])
    if rank == root:
        wants = all_x
        check(f"gather root {root} {dn}", outs, wants)
    shape = shape_for(cg)
    chunks = [values(shape, dtype, torch.Generator().manual_seed(idx * 31 + j)) for j in range(world)]
    out = torch.empty(shape, dtype=dtype)
    dist.scatter(out, chunks if rank == root else None, src=root, group=geo)
    check(f"scatter root {root} {dn}", out, chunks[rank])

    # all_to_all_single: equal splits, then uneven splits; gloo is the oracle for both.
    rows = world * int(torch.randint(1, 4, (1,), generator=cg))
    x = values([rows, 3], dtype, dg)
    g = torch.empty_like(x)
    dist.all_to_all_single(g, x, group=geo)
    want = gloo_safe(lambda ts: _a2a_single(ts[0], None, None), [x])[0]
    check(f"all_to_all_single {dn}", g, want)
    # uneven: rank r sends (r + j) % 3 rows to rank j
    in_splits = [(rank + j) % 3 for j in range(world)]
    out_splits = [(j + rank) % 3 for j in range(world)]
    x = values([sum(in_splits), 2], dtype, dg)
    g = torch.empty([sum(out_splits), 2], dtype=dtype)
    dist.all_to_all_single(g, x, out_splits, in_splits, group=geo)
    want = gloo_safe(lambda ts: _a2a_single(ts[0], out_splits, in_splits), [x])[0]
    check(f"all_to_all_single uneven {dn}", g, want)
    # all_to_all (lists of tensors of per-pair sizes)
    ins = [values([in_splits[j] + 1], dtype, dg) for j in range(world)]
    outs = [torch.empty([out_splits[j] + 1], dtype=dtype) for j in range(world)]
    dist.all_to_all(outs, ins, group=geo)
    flat = gloo_safe(lambda ts: _a2a_single(ts[0], [s + 1 for s in out_splits], [s + 1 for s in in_splits]),
                     [torch.cat(ins)])[0]
    check(f"all_to_all {dn}", outs, list(torch.split(flat, [s + 1 for s in out_splits])))

    # send/recv around the ring
    x = values(shape_for(cg), dtype, dg)
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    got = torch.empty_like(x)
    reqs = [dist.isend(x, nxt, group=geo, tag=idx), dist.irecv(got, prv, group=geo, tag=idx)]
    for r in reqs:
        r.wait()
    want = torch.empty_like(x)
    wide = gloo_safe(lambda ts: [w.wait() for w in (dist.isend(ts[0], nxt), dist.irecv(ts[1], prv))],
                     [x, want])
    check(f"send/recv {dn}", got, wide[1])


def _wide_allgather(want, t):
    tmp = [torch.empty_like(t) for _ in want]
    dist.all_gather(tmp, t)
    for w, s in zip(want, tmp):
        w.copy_(s.to(w.dtype))


def _gloo_all_gather_coalesced(xs):
    """gloo's all_gather_coalesced of xs; on a wider copy, cast back, where gloo lacks the dtype."""
    def run(ins):
        outs = [[torch.empty_like(t) for t in ins] for _ in range(world)]
        dist.all_gather_coalesced(outs, ins)
        return outs
    try:
        return run([t.clone() for t in xs])
    except RuntimeError:
        wide = torch.float64 if xs[0].is_floating_point() else torch.int64
        return [[t.to(xs[0].dtype) for t in l] for l in run([t.to(wide) for t in xs])]


def _a2a_single(x, out_splits, in_splits):
    rows = sum(out_splits) if out_splits else x.shape[0]
    out = torch.empty([rows] + list(x.shape[1:]), dtype=x.dtype)
    dist.all_to_all_single(out, x, out_splits, in_splits)
    x.resize_(out.shape).copy_(out)


def subgroup():
    """A geoccl group of some ranks only (every rank calls new_group; others are not members)."""
    members = [0, world - 1]
    sub = dist.new_group(members, backend="geoccl")
    if rank in members:
        x = torch.full((5,), float(rank + 1))
        dist.all_reduce(x, group=sub)
        check("subgroup allreduce", x, torch.full((5,), float(1 + world)))
        y = torch.full((3,), float(rank))
        dist.broadcast(y, src=world - 1, group=sub)  # src is a global rank
        check("subgroup broadcast", y, torch.full((3,), float(world - 1)))


def recv_anysource():
    """dist.recv without a source (ProcessGroup recvAnysource): rank 0 gets one message from
    every other rank, in whatever order they arrive, and learns each sender; gloo is the oracle
    for what arrives from whom."""
    global cases
    for pg, name in ((geo, "geoccl"), (None, "gloo")):
        if rank == 0:
            got = {}
            for _ in range(world - 1):
                t = torch.empty(17, dtype=torch.int64)
                src = dist.recv(t, group=pg, tag=33)
                got[src] = t
            cases += 1
            if sorted(got) != list(range(1, world)):
                failures.append(f"{name} recv from any source: senders {sorted(got)}")
            for src, t in got.items():
                check(f"recv any source from {src} ({name})", t, torch.arange(17, dtype=torch.int64) * (src + 1))
        else:
            dist.send(torch.arange(17, dtype=torch.int64) * (rank + 1), 0, group=pg, tag=33)


def bulk_group():
    """A group whose operations all run on the bulk priority class gives gloo's results."""
    global cases
    bulk = geoccl.new_bulk_group(timeout=datetime.timedelta(seconds=60))
    cases += 1
    if bulk.priority != "bulk" or geo.priority != "gradient":
        failures.append(f"rank {rank}: group priorities {bulk.priority}, {geo.priority}")
    gen = torch.Generator().manual_seed(rank + 77)
    for dtype in (torch.float32, torch.int64):
        x = values([301, 7], dtype, gen)
        g = x.clone()
        dist.all_reduce(g, group=bulk)
        check(f"bulk allreduce {dtype}", g, gloo_safe(lambda ts: dist.all_reduce(ts[0]), [x])[0])
        g = x.clone()
        dist.broadcast(g, world - 1, group=bulk)
        check(f"bulk broadcast {dtype}", g, gloo_safe(lambda ts: dist.broadcast(ts[0], world - 1), [x])[0])
    # gradient and bulk operations interleaved on their two groups
    a, b = torch.full((1000,), float(rank)), torch.full((10,), float(rank + 1))
    wa = dist.all_reduce(a, group=bulk, async_op=True)
    wb = dist.all_reduce(b, group=geo, async_op=True)
    wb.wait()
    wa.wait()
    check("bulk and gradient interleaved", [a, b],
          [torch.full((1000,), float(world * (world - 1) // 2)), torch.full((10,), float(world * (world + 1) // 2))])
    cases += 1
    try:
        geoccl.ProcessGroupOptions("urgent")
        failures.append(f"rank {rank}: ProcessGroupOptions('urgent') did not raise")
    except ValueError:
        pass


def local_errors():
    """Wrong device / dtype / op: a clear error raised by the call, before anything is sent."""
    global cases
    # (a meta tensor stands for a wrong device: torch's dispatcher itself rejects it, with its
    # own message; complex SUM is legal: torch passes it as float pairs)
    cases += 1
    try:
        dist.all_reduce(torch.empty(4, device="meta"), group=geo)
        failures.append(f"rank {rank}: meta device: no error")
    except (ValueError, RuntimeError):
        pass
    c = torch.full((4,), 1 + 2j, dtype=torch.complex64)
    dist.all_reduce(c, group=geo)
    check("allreduce complex64 sum", c, torch.full((4,), world * (1 + 2j), dtype=torch.complex64))
    bad = [
        ("int16 dtype reduction", lambda: dist.all_reduce(torch.zeros(4, dtype=torch.int16), group=geo)),
        ("reduce_scatter size", lambda: dist._reduce_scatter_base(torch.zeros(3), torch.zeros(3 * world + 1), group=geo)),
        ("bool dtype reduction", lambda: dist.all_reduce(torch.zeros(4, dtype=torch.bool), group=geo)),
        ("BAND op", lambda: dist.all_reduce(torch.zeros(4, dtype=torch.int32), op=dist.ReduceOp.BAND, group=geo)),
        ("all_gather_coalesced list count", lambda: dist.all_gather_coalesced(
            [[torch.zeros(2)] for _ in range(world + 1)], [torch.zeros(2)], group=geo)),
        ("all_gather_coalesced sizes", lambda: dist.all_gather_coalesced(
            [[torch.zeros(3)] for _ in range(world)], [torch.zeros(2)], group=geo)),
    ]
    for name, fn in bad:
        cases += 1
        try:
            fn()
        except (ValueError, RuntimeError) as e:
            if "geoccl" not in str(e):
                failures.append(f"rank {rank}: {name}: error does not name geoccl: {e}")
        else:
            failures.append(f"rank {rank}: {name}: no error")


def main():
    global rank, world, geo, cases
    warnings.filterwarnings("ignore", category=UserWarning)  # torch's deprecation notices
    out = sys.argv[1]
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    geo = dist.new_group(backend="geoccl", timeout=datetime.timedelta(seconds=60))
    assert geo._get_backend_name() == "geoccl", geo._get_backend_name()
    for i, dtype in enumerate(DTYPES):
        try:
            cases_for(dtype, i)
        except Exception:  # noqa: BLE001  (the ranks may now be out of step: stop here)
            failures.append(f"rank {rank}: {dtype}: raised\n{traceback.format_exc()}")
            break
    if not failures:
        # a bigger float32 allreduce takes the bandwidth (ring) path
        x = values([300, 257], torch.float32, torch.Generator().manual_seed(rank))
        g = x.clone()
        dist.all_reduce(g, group=geo)
        check("allreduce f32 large", g, gloo_safe(lambda ts: dist.all_reduce(ts[0]), [x])[0])
        # a dtype geoccl moves as bytes: bool/int16 broadcast
        b = (torch.arange(10) % (rank + 2) == 0)
        gb = b.clone()
        dist.broadcast(gb, 0, group=geo)
        want = b.to(torch.uint8)  # gloo cannot move bool
        dist.broadcast(want, 0)
        check("broadcast bool", gb, want.bool())
        dist.barrier(group=geo)
        cases += 1
        subgroup()
        recv_anysource()
        bulk_group()
        local_errors()
        dist.barrier(group=geo)
    with open(f"{out}.{rank}", "w") as f:
        json.dump({"cases": cases, "failures": failures}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
