"""The torch backend with GEOCCL_STORE: every group meets at the store outside the ranks and no
rank hosts one of its own (a rank that tries fails, see _external_store_worker.py)."""

import os

from conftest import HERE, format_outputs, read_json, run_ranks

from geoccl import _C

WORKER = os.path.join(HERE, "_external_store_worker.py")
WORLD = 3


def test_torch_backend_meets_at_the_external_store(tmp_path):
    store = _C.StoreServer("127.0.0.1", 0)  # a standalone store, as `geoccl store` runs one
    out = str(tmp_path / "store")
    results = run_ranks(WORLD, [WORKER, out], timeout=90, tmp_path=tmp_path,
                        extra_env={"GEOCCL_STORE": f"tcp://127.0.0.1:{store.port}"})
    assert all(rc == 0 for rc, _ in results), format_outputs(results)
    total = sum(range(1, WORLD + 1))
    for r in range(WORLD):
        res = read_json(f"{out}.{r}")
        assert res["sum"] == total, res
        expect_pair = 1 + WORLD if r in (0, WORLD - 1) else r + 1
        assert res["pair_sum"] == expect_pair, res
