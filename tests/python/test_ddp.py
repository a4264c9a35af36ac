"""DDP on scikit-learn's digits: the same accuracy with geoccl as with gloo, and identical
parameters on every rank after training (examples/ddp_digits.py is the training script)."""

import os

import pytest

from conftest import REPO, format_outputs, read_json, run_ranks

SCRIPT = os.path.join(REPO, "examples", "ddp_digits.py")
STEPS = 300
WORLD = 2


def train(backend, tmp_path, extra=()):
    tmp_path.mkdir(parents=True, exist_ok=True)
    out = str(tmp_path / "result")
    argv = [SCRIPT, "--backend", backend, "--steps", str(STEPS), "--json", out, "--timeout", "60", *extra]
    results = run_ranks(WORLD, argv, timeout=150, tmp_path=tmp_path)
    assert all(rc == 0 for rc, _ in results), format_outputs(results)
    return [read_json(f"{out}.{r}") for r in range(WORLD)], results[0][1]


@pytest.fixture(scope="module")
def gloo_reference(tmp_path_factory):
    pytest.importorskip("sklearn")
    ref, _ = train("gloo", tmp_path_factory.mktemp("gloo"))
    assert len({r["param_sha256"] for r in ref}) == 1, ref
    assert ref[0]["accuracy"] > 0.9, ref
    return ref


@pytest.mark.parametrize("hook", ["allreduce", "none"])
def test_ddp_digits_geoccl_matches_gloo(tmp_path, hook, gloo_reference):
    geo, log = train("geoccl", tmp_path / "geoccl", ["--hook", hook])
    assert "epoch" in log and "steps/s" in log and "final:" in log, log
    assert len({r["param_sha256"] for r in geo}) == 1, geo  # identical on every rank
    assert all(r["steps"] == STEPS for r in geo)
    acc_geo, acc_ref = geo[0]["accuracy"], gloo_reference[0]["accuracy"]
    assert abs(acc_geo - acc_ref) <= 0.03, (acc_geo, acc_ref)
