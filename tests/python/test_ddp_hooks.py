"""Every torch built-in DDP communication hook under DDP on "geoccl" (examples/ddp_digits.py's
training, 2 ranks): parameters identical on every rank, accuracy equal to gloo's running the same
hook. powerSGD's hooks wait, inside a future's then-callback, on another allreduce's future: that
needs callbacks off the collective thread.
"""

import os

import pytest

from conftest import HERE, format_outputs, read_json, run_ranks

WORKER = os.path.join(HERE, "_ddp_hooks_worker.py")
STEPS = 60  # powerSGD compresses from step 2: almost every step takes the compressed path
WORLD = 2
HOOKS = ["torch-allreduce", "fp16", "bf16", "powersgd", "batched-powersgd"]
# Hooks gloo cannot run, with the reason; they are compared with gloo's run without a hook.
GLOO_CANNOT = {"bf16": "Invalid scalar type"}  # torch 1.13's gloo has no bfloat16 allreduce
TOLERANCE = 0.03


def run(backend, hooks, tmp_path):
    out = str(tmp_path / f"{backend}")
    results = run_ranks(WORLD, [WORKER, out, backend, *hooks], timeout=240, tmp_path=tmp_path,
                        extra_env={"HOOK_STEPS": str(STEPS)})
    assert all(rc == 0 for rc, _ in results), format_outputs(results)
    return [read_json(f"{out}.{r}") for r in range(WORLD)]


@pytest.fixture(scope="module")
def gloo(tmp_path_factory):
    pytest.importorskip("sklearn")
    return run("gloo", ["none"] + [h for h in HOOKS if h not in GLOO_CANNOT], tmp_path_factory.mktemp("gloo"))


@pytest.fixture(scope="module")
def gloo_cannot(tmp_path_factory):
    """What gloo says to each hook it cannot run, in a run of its own: gloo raises in its worker
    thread, which may end that rank's process (std::terminate) instead of the hook's step."""
    said = {}
    for hook in GLOO_CANNOT:
        tmp = tmp_path_factory.mktemp(f"gloo-{hook}")
        out = str(tmp / "gloo")
        results = run_ranks(WORLD, [WORKER, out, "gloo", hook], timeout=240, tmp_path=tmp,
                            extra_env={"HOOK_STEPS": str(STEPS)})
        text = format_outputs(results)
        for r in range(WORLD):
            try:
                text += read_json(f"{out}.{r}").get(hook, {}).get("error", "")
            except (OSError, ValueError):  # that rank ended before it wrote its result
                pass
        said[hook] = text
    return said


@pytest.fixture(scope="module")
def geoccl(tmp_path_factory):
    pytest.importorskip("sklearn")
    return run("geoccl", HOOKS, tmp_path_factory.mktemp("geoccl"))


@pytest.mark.parametrize("hook", HOOKS)
def test_torch_ddp_hook_on_geoccl_matches_gloo(hook, geoccl, gloo, gloo_cannot):
    runs = [rank[hook] for rank in geoccl]
    assert all("error" not in r for r in runs), runs
    assert len({r["param_sha256"] for r in runs}) == 1, runs  # identical on every rank
    assert all(r["steps"] == STEPS and r["hook"] == hook for r in runs), runs
    if hook in GLOO_CANNOT:
        # gloo fails this hook (checked here, so the reason is kept true); its oracle is gloo
        # without a hook
        assert GLOO_CANNOT[hook] in gloo_cannot[hook], gloo_cannot[hook]
        ref = gloo[0]["none"]
    else:
        ref = gloo[0][hook]
        assert len({rank[hook]["param_sha256"] for rank in gloo}) == 1
    assert abs(runs[0]["accuracy"] - ref["accuracy"]) <= TOLERANCE, (hook, runs[0]["accuracy"], ref["accuracy"])
    assert runs[0]["accuracy"] > 0.5, runs[0]  # it learned (rank-1 powerSGD learns slowest)
