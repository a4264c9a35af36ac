"""One rank of tests/python/test_sparseloco.py: geoccl.sparse.sparse_allgather and DiLoCo's
SparseLoCo recipe on the default "geoccl" process group, ranks labelled as argv[2] domains in
contiguous blocks. argv[3] picks the case:

  collective  sparse allgathers of every value width against a dense reference (all_gather of
              each rank's decoded contribution, summed in rank order), and digests of the result
  train       a small regression model trained by SparseLoCo, DiLoCo-style arguments in argv[4:]
              ("ef"/"noef", "frag2" for 2 fragments with 2 overlap steps); writes the loss curve,
              the wire bytes, the global parameters' digest and the count of parameters that moved
  constant    a constant pseudo-gradient on one 8192-element parameter for 200 rounds (64 of
              4096 sent per round), argv[4] "ef1" (error feedback, no decay), "ef" (decay 0.95)
              or "noef": the number of elements that moved

Writes {"failures", "digests", ...} to argv[1].rank.
"""

import datetime
import hashlib
import json
import os
import sys
import traceback

failures = []


def check(name, ok, detail=""):
    ok or failures.append(f"{name}: {detail}")


def digest(t):
    return hashlib.sha256(t.detach().contiguous().numpy().tobytes()).hexdigest()


def collective(out, _args):
    import torch
    import torch.distributed as dist
    import geoccl.sparse as gs

    rank, world = dist.get_rank(), dist.get_world_size()
    n = 50000
    for bits in (32, 8, 4, 2):
        g = torch.Generator().manual_seed(1000 * bits + rank)
        m = 0 if rank == 1 else 700 * (rank + 1)
        idx = torch.randperm(n, generator=g)[:m]
        val = torch.randn(m, generator=g) * (1 + rank)
        given = val.clone()
        got, info = gs.sparse_allgather(idx, val, n, value_bits=bits)
        if bits == 32:
            check("32-bit values kept", torch.equal(val, given))
        mine = torch.zeros(n)
        mine[idx] = val
        parts = [torch.zeros(n) for _ in range(world)]
        dist.all_gather(parts, mine)
        want = torch.zeros(n)
        for p in parts:
            want += p
        check(f"{bits} bits equal the dense reference", torch.equal(got, want),
              f"max diff {(got - want).abs().max().item()}")
        check(f"{bits} bits: bytes sent", info["bytes_sent"] == (world - 1) * (8 + info["piece_bytes"]), info)
        out["digests"][str(bits)] = digest(got)
    try:
        gs.sparse_allgather(torch.tensor([5, 5]), torch.ones(2), 10)
        check("repeated index refused", False)
    except ValueError:
        pass


def regression_data(seed):
    import torch
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(64, 1, generator=g)
    x = torch.randn(2048, 64, generator=g)
    return x, x @ w + 0.01 * torch.randn(2048, 1, generator=g)


def train(out, args):
    import torch
    import torch.distributed as dist
    import geoccl.diloco as gd

    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.Tanh(), torch.nn.Linear(128, 1))
    inner = torch.optim.AdamW(model.parameters(), lr=3e-3)
    frag = "frag2" in args
    d = gd.DiLoCo(model, inner, sync_every=10, recipe="sparseloco", error_feedback="noef" not in args,
                  fragments=2 if frag else 1, overlap_steps=2 if frag else 0)
    x, y = regression_data(0)
    g = torch.Generator().manual_seed(100 + rank)
    losses = []
    for step in range(300):
        i = torch.randint(0, 2048, (64,), generator=g)
        loss = torch.nn.functional.mse_loss(model(x[i]), y[i])
        inner.zero_grad()
        loss.backward()
        d.step()
        if step % 10 == 9:
            with torch.no_grad():
                losses.append(torch.nn.functional.mse_loss(model(x), y).item())
    d.sync_now()
    out["losses"] = losses
    out["wire_bytes_sent"] = d.wire_bytes_sent
    out["dense_bytes_equivalent"] = d.dense_bytes_equivalent
    out["syncs"] = d.syncs
    out["digests"]["global"] = digest(torch.cat([g.reshape(-1) for f in d.fragments for g in f.global_params]))


def constant(out, args):
    import torch
    import geoccl.diloco as gd

    w = torch.nn.Parameter(torch.zeros(8192))
    c = torch.linspace(0.5, 1.0, 8192)[torch.randperm(8192, generator=torch.Generator().manual_seed(3))]
    inner = torch.optim.SGD([w], lr=0.01)
    d = gd.DiLoCo(torch.nn.ParameterList([w]), inner, sync_every=1, recipe="sparseloco",
                  error_feedback=args[0] != "noef", ef_decay=1.0 if args[0] == "ef1" else 0.95, sparse_bits=32)
    for _ in range(200):
        inner.zero_grad()
        (w * c).sum().backward()
        d.step()
    out["moved"] = int((d.fragments[0].global_params[0] != 0).sum())


def main():
    path, domains, case = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    os.environ["GEOCCL_DOMAIN"] = f"d{rank * domains // world}"
    import torch.distributed as dist
    import geoccl  # noqa: F401  (registers the backend)

    dist.init_process_group("geoccl", timeout=datetime.timedelta(seconds=60))
    out = {"digests": {}}
    try:
        {"collective": collective, "train": train, "constant": constant}[case](out, sys.argv[4:])
    except Exception:  # noqa: BLE001
        failures.append(traceback.format_exc())
    out["failures"] = failures
    with open(f"{path}.{rank}", "w") as f:
        json.dump(out, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
