"""Callbacks off the collective thread, from Python: geoccl.Communicator's Work.on_complete and
torch futures of a "geoccl" group (a callback that issues a collective and waits on it, nested
three deep, and a 2 s callback that later collectives do not wait for)."""

import os

import pytest

from conftest import HERE, format_outputs, read_json, run_ranks

WORKER = os.path.join(HERE, "_completion_worker.py")


@pytest.mark.parametrize("api", ["communicator", "torch"])
def test_callbacks_issue_collectives_and_do_not_stall(api, tmp_path):
    out = str(tmp_path / "result")
    results = run_ranks(2, [WORKER, out, api], timeout=120, tmp_path=tmp_path)
    assert all(rc == 0 for rc, _ in results), format_outputs(results)
    for r in range(2):
        res = read_json(f"{out}.{r}")
        assert not res["failures"], "\n".join(res["failures"]) + "\n" + format_outputs(results)
        assert res["cases"] >= (10 if api == "communicator" else 6), res
