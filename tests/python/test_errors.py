"""Failures end in errors, not hangs: a rank that dies, and a rank that never joins."""

import os

from conftest import HERE, format_outputs, read_json, run_ranks

WORKER = os.path.join(HERE, "_error_worker.py")


def run(mode, world, timeout_s, tmp_path):
    out = str(tmp_path / "result")
    results = run_ranks(world, [WORKER, out, mode, str(timeout_s)], timeout=90, tmp_path=tmp_path)
    assert results[world - 1][0] == 3, format_outputs(results)
    survivors = []
    for r in range(world - 1):
        assert results[r][0] == 0, format_outputs(results)
        res = read_json(f"{out}.{r}")
        assert res["wait"] != "no error", res
        assert res["wait_is_runtime_error"], res
        assert res["future"] != "no error", res
        assert res["completed"], res
        survivors.append(res)
    return survivors


def test_dead_rank_raises_from_wait_and_future(tmp_path):
    timeout_s = 20.0
    for res in run("die", 3, timeout_s, tmp_path):
        assert "peer lost" in res["wait"], res
        # Through torch's Work.wait too, the error is a GeocclError naming its kind and the rank.
        assert res["wait"].startswith("GeocclError"), res
        assert res["wait_code"] == "peer_lost" and res["wait_ranks"] == [2], res
        assert res["seconds"] < timeout_s, res  # seen on the connection, not by the deadline


def test_group_timeout_is_respected(tmp_path):
    timeout_s = 3.0
    survivors = run("hang", 3, timeout_s, tmp_path)
    for res in survivors:
        assert "timeout" in res["wait"].lower(), res
        assert res["wait_code"] in ("timeout", "aborted") and res["wait_ranks"] == [], res
        assert res["seconds"] < timeout_s + 5, res
    # The first rank to time out tells the others, who may have issued the op a little later:
    # the deadline holds for the earliest, not necessarily for each.
    assert max(r["seconds"] for r in survivors) >= timeout_s - 0.5, survivors
