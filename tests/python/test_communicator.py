"""geoccl.Communicator from Python: numpy arrays and torch CPU tensors, in place, no copies."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from conftest import PKG, format_outputs, run_ranks


def test_single_rank_in_place():
    import geoccl
    import torch

    srv = geoccl.StoreServer("127.0.0.1", 0)
    comm = geoccl.Communicator(0, 1, "127.0.0.1", srv.port, session="t1", timeout=10)
    assert (comm.rank, comm.size) == (0, 1)
    a = np.arange(6, dtype=np.float32)
    ptr = a.ctypes.data
    comm.allreduce(a, op="sum").wait()
    assert a.ctypes.data == ptr and a.tolist() == list(range(6))
    t = torch.arange(4, dtype=torch.bfloat16)
    w = comm.allreduce(t, op="max")
    w.wait(timeout=5)
    assert w.test() and w.is_success()
    with pytest.raises(ValueError, match="contiguous"):
        comm.allreduce(np.zeros((4, 4), dtype=np.float32)[:, 1])
    with pytest.raises(ValueError, match="contiguous"):
        comm.allreduce(torch.zeros(4, 4).t())
    with pytest.raises(ValueError, match="unsupported"):
        comm.allreduce(np.zeros(3, dtype=np.complex64))
    with pytest.raises(ValueError, match="unknown reduce op"):
        comm.allreduce(a, op="xor")
    # The library's own refusals before anything is sent are ValueErrors too.
    with pytest.raises(ValueError, match="root 5"):
        comm.broadcast(a, root=5)
    with pytest.raises(ValueError, match="peer 7"):
        comm.send(a, 7)


WORKER = textwrap.dedent("""
    import numpy as np, torch, geoccl
    comm = geoccl.Communicator.from_env()
    r, n = comm.rank, comm.size
    a = np.full(1000, r + 1, dtype=np.float64)
    comm.allreduce(a, op="sum").wait()
    assert (a == n * (n + 1) / 2).all(), a[:4]
    t = torch.full((7,), float(r), dtype=torch.float16)
    g = torch.empty(7 * n, dtype=torch.float16)
    comm.allgather(t, g).wait()
    assert g.view(n, 7)[:, 0].tolist() == [float(i) for i in range(n)]
    b = np.arange(5, dtype=np.int32) * (r + 1)
    comm.broadcast(b, root=1).wait()
    assert b.tolist() == [0, 2, 4, 6, 8]
    rs = np.empty(3, dtype=np.int64)
    comm.reduce_scatter(np.arange(3 * n, dtype=np.int64), rs, op="max").wait()
    assert rs.tolist() == list(range(3 * r, 3 * r + 3))
    x = np.full(4, r, dtype=np.uint8)
    if r == 0:
        comm.send(x + 10, 1, tag=5).wait()
    elif r == 1:
        comm.recv(x, 0, tag=5).wait()
        assert x.tolist() == [10] * 4
    comm.barrier().wait()
    print("ok", r)
""")


def test_communicator_two_ranks(tmp_path):
    script = tmp_path / "w.py"
    script.write_text(WORKER)
    results = run_ranks(2, [str(script)], timeout=60, tmp_path=tmp_path)
    assert all(rc == 0 and "ok" in out for rc, out in results), format_outputs(results)


def test_import_from_build_tree_only():
    """`import geoccl` needs nothing but PYTHONPATH=<build>/python (what the launcher sets)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = PKG
    code = "import torch.distributed as d, geoccl; assert 'GEOCCL' in d.Backend._plugins; print(geoccl.__file__)"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(PKG), out.stdout
