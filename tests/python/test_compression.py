"""Compression of the hops that cross domains, from Python: geoccl.Communicator.allreduce's
compression= and feedback_key=, compression_stats(), forget_feedback(), the config default
GEOCCL_WAN_COMPRESSION, and the typed errors (docs/compression.md)."""

import os

import numpy as np
import pytest

from conftest import HERE, format_outputs, read_json, run_ranks

WORKER = os.path.join(HERE, "_compression_worker.py")
# Leaders' exchange up to 64 KiB across domains, the hierarchical path above: the worker's small
# buffers (4 KiB, 64 KiB) take the first, its large ones (256 KiB, 1 MiB) the second. Without the
# start-up path probe (plan_probe=0) the plan follows these thresholds: with it, the cost model
# plans on rates measured on loopback, which a loaded machine can bend towards the leaders'
# exchange for the large buffers too (where only a domain's leader encodes).
ENV = {"GEOCCL_WAN_COMPRESSION": "int8", "GEOCCL_EXPERIMENT": "wan_small_msg=64K,small_msg=16K,plan_probe=0"}


def test_compression_spellings():
    import geoccl

    assert geoccl.compression_name("topk:0.010") == "topk:0.01"
    for name in ["none", "fp16", "bf16", "int8", "int4", "topk:0.01", "int8@ring", "topk:0.1@allgather",
                 "int2", "int2-sr@ring", "topk-int8:0.01", "topk-int4:0.1", "topk-int2:0.05@allgather"]:
        assert geoccl.compression_name(geoccl.compression_name(name)) == geoccl.compression_name(name)
    for bad in ["int9", "topk", "topk:0", "topk:2", "fp16@tree", "topk-int8", "topk-int3:0.1", "int2-sr:0.1"]:
        with pytest.raises(ValueError, match="compression"):
            geoccl.compression_name(bad)
    with pytest.raises(ValueError):
        geoccl.GeocclHookState(compression="int3")


def test_single_rank_compression_arguments():
    import geoccl
    import torch

    srv = geoccl.StoreServer("127.0.0.1", 0)
    comm = geoccl.Communicator(0, 1, "127.0.0.1", srv.port, session="c1", timeout=10)
    a = np.arange(8, dtype=np.float32)
    comm.allreduce(a, op="avg", compression="int8", feedback_key="k").wait(timeout=10)
    assert a.tolist() == list(range(8))  # one rank, one domain: nothing to compress
    assert comm.compression_stats() == {"calls": 0, "elements_encoded": 0, "bytes_encoded": 0,
                                        "feedback_keys": 0, "feedback_bytes": 0}
    comm.forget_feedback("k")
    comm.forget_feedback()
    with pytest.raises(ValueError, match="compression"):
        comm.allreduce(a, compression="fp8")
    with pytest.raises(ValueError):
        comm.allreduce(torch.ones(4, dtype=torch.int64), compression="int8").wait(timeout=10)
    with pytest.raises(TypeError):
        comm.allreduce(a, compression=8)


@pytest.mark.parametrize("world,domains", [(6, 3), (2, 1)])
def test_compressed_allreduce_across_domains(world, domains, tmp_path):
    out = str(tmp_path / "result")
    results = run_ranks(world, [WORKER, out, str(domains)], timeout=180, tmp_path=tmp_path, extra_env=ENV)
    assert all(rc == 0 for rc, _ in results), format_outputs(results)
    res = [read_json(f"{out}.{r}") for r in range(world)]
    for r, x in enumerate(res):
        assert not x["failures"], f"rank {r}:\n" + "\n".join(x["failures"]) + "\n" + format_outputs(results)
        assert x["cases"] >= 45, x["cases"]
    # Same answer on every rank: every compressed result bit-identical.
    assert len(res[0]["digests"]) >= 19, res[0]["digests"]
    for r in range(1, world):
        assert res[r]["digests"] == res[0]["digests"], f"rank {r} differs from rank 0"
    print("errors (rank 0):", res[0]["errors"])
    if domains > 1:
        # Each domain had a rank that encoded (every rank on the hierarchical path, the leader on
        # the leaders' exchange).
        for name in res[0]["encoded"]:
            for d in range(domains):
                members = [r for r in range(world) if r * domains // world == d]
                assert any(res[r]["encoded"][name] > 0 for r in members), (name, d)
        assert res[0]["stats"]["calls"] >= 30, res[0]["stats"]
        assert res[0]["errors"]["int8 large"]["max"] > 0
    else:
        assert res[0]["stats"]["calls"] == 0, res[0]["stats"]
