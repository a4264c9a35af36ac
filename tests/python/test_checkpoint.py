"""geoccl.checkpoint: a state_dict and a checkpoint file from rank 0 to every rank over a
"geoccl" process group spanning two domains; a missing file fails every rank alike."""

import os

from conftest import HERE, format_outputs, read_json, run_ranks

WORKER = os.path.join(HERE, "_checkpoint_worker.py")


def test_state_dict_and_checkpoint_reach_every_rank(tmp_path):
    world = 3
    out = str(tmp_path / "result")
    results = run_ranks(world, [WORKER, out, "a,b,b"], timeout=120, tmp_path=tmp_path)
    for rc, _ in results:
        assert rc == 0, format_outputs(results)
    res = [read_json(f"{out}.{r}") for r in range(world)]
    for r in res:
        assert r["state_dict"] == res[0]["state_dict"], res
        assert r["checkpoint"] == res[0]["state_dict"], res
        assert r["step"] == 7 and r["file_exists"], r
        assert r["reports"] >= 1 and r["done"] == r["total"] > 40_000_000, r
        assert r["missing"].startswith("invalid argument: blob: rank 0"), r
        assert "missing.pt" in r["missing"] or r is not res[0], r
