"""geoccl.weighted: the weighted, robust and staleness-checked allreduce from Python (torch
process group and Communicator), 5 ranks in 3 domains and 3 ranks on one site: exact weighted
means, bit-identical on every rank, outliers and stale ranks left out and reported alike on every
rank, bad arguments a ValueError on every rank (docs/diloco.md)."""

import os

import pytest

from conftest import HERE, format_outputs, read_json, run_ranks

WORKER = os.path.join(HERE, "_weighted_worker.py")


@pytest.mark.parametrize("world,domains", [(5, 3), (3, 1)])
def test_weighted_allreduce(world, domains, tmp_path):
    out = str(tmp_path / "result")
    results = run_ranks(world, [WORKER, out, str(domains)], timeout=180, tmp_path=tmp_path)
    assert all(rc == 0 for rc, _ in results), format_outputs(results)
    res = [read_json(f"{out}.{r}") for r in range(world)]
    for r, x in enumerate(res):
        assert not x["failures"], f"rank {r}:\n" + "\n".join(x["failures"]) + "\n" + format_outputs(results)
        assert x["cases"] >= 25, x["cases"]
    assert len(res[0]["digests"]) == 5, res[0]["digests"]
    for r in range(1, world):
        assert res[r]["digests"] == res[0]["digests"], f"rank {r} differs from rank 0"
        assert res[r]["results"] == res[0]["results"], f"rank {r} decided otherwise than rank 0"
    robust = res[0]["results"]["robust"]
    assert robust["outliers"] == [world - 1] and robust["applied"][world - 1] == 0
    assert robust["median_norm"] > 0 and robust["norm_scale"] > 0
    assert res[0]["results"]["stale"]["stale"] == [1]
