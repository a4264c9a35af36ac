"""geoccl.abort(pg): every pending torch Work on every rank fails within a second (1.5 s allows for
a loaded 2-core box), naming the aborting rank and the reason; later calls fail at once and
destroy_process_group() does not hang on the failed group."""

import os

from conftest import HERE, format_outputs, read_json, run_ranks

WORKER = os.path.join(HERE, "_abort_worker.py")
WORLD = 3


def test_abort_ends_pending_work_on_every_rank(tmp_path):
    out = str(tmp_path / "abort")
    results = run_ranks(WORLD, [WORKER, out], timeout=90, tmp_path=tmp_path)
    assert all(rc == 0 for rc, _ in results), format_outputs(results)
    for r in range(WORLD):
        res = read_json(f"{out}.{r}")
        assert res["errors"] and all(e is not None for e in res["errors"]), res
        for e in res["errors"]:
            assert "aborted" in e and f"rank {WORLD - 1}" in e and "pytest abort" in e, e
        assert 0 <= res["latency_s"] < 1.5, res
        assert res["later"] is not None and "aborted" in res["later"], res
        assert res["later_s"] < 0.5, res
        assert res["destroy_s"] < 1.5, res
