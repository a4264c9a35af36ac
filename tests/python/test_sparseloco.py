"""The sparse allgather from Python and DiLoCo's SparseLoCo recipe (geoccl.diloco,
recipe="sparseloco"), 3 ranks on loopback labelled as 3 domains, deterministic seeds:

- geoccl.sparse.sparse_allgather equals the dense reference for every value width, identical on
  every rank, with the bytes it reports;
- SparseLoCo trains a small regression model (the loss falls by 10x or more), the global
  parameters are identical on every rank, and the bytes the sparse allgathers reported are
  100x fewer than dense float32 pseudo-gradients; streaming fragments with overlap train too;
- error feedback is applied: under a constant pseudo-gradient, without it only the same top-k
  elements ever move; with it (no decay) every element does, and with the recipe's decay of
  0.95 (whose accumulators level off at 20 rounds' worth) many more than the top-k.
"""

import os

from conftest import HERE, format_outputs, read_json, run_ranks

WORKER = os.path.join(HERE, "_sparseloco_worker.py")
WORLD = 3


def run(tmp_path, case, *args):
    tmp_path.mkdir(exist_ok=True)
    out = str(tmp_path / "result")
    results = run_ranks(WORLD, [WORKER, out, "3", case, *args], timeout=180, tmp_path=tmp_path)
    assert all(rc == 0 for rc, _ in results), format_outputs(results)
    res = [read_json(f"{out}.{r}") for r in range(WORLD)]
    for r, x in enumerate(res):
        assert not x["failures"], f"rank {r}:\n" + "\n".join(x["failures"]) + "\n" + format_outputs(results)
    for r in range(1, WORLD):
        assert res[r]["digests"] == res[0]["digests"], f"rank {r} differs from rank 0"
    return res


def test_sparse_allgather(tmp_path):
    res = run(tmp_path, "collective")
    assert sorted(res[0]["digests"]) == ["2", "32", "4", "8"]


def test_sparseloco_trains_with_100x_fewer_bytes(tmp_path):
    res = run(tmp_path, "train", "ef")
    r0 = res[0]
    print("sparseloco losses", r0["losses"][0], r0["losses"][-1], "wire", r0["wire_bytes_sent"],
          "dense", r0["dense_bytes_equivalent"])
    assert r0["syncs"] == 30
    assert r0["losses"][-1] < r0["losses"][0] / 10, r0["losses"]
    for x in res:
        assert x["dense_bytes_equivalent"] >= 100 * x["wire_bytes_sent"], (x["wire_bytes_sent"],
                                                                             x["dense_bytes_equivalent"])


def test_sparseloco_streaming(tmp_path):
    res = run(tmp_path, "train", "ef", "frag2")
    r0 = res[0]
    assert r0["syncs"] == 60  # 2 fragments x 30 rounds
    assert r0["losses"][-1] < r0["losses"][0] / 10, r0["losses"]


def test_error_feedback_is_applied(tmp_path):
    plain = run(tmp_path / "ef1", "constant", "ef1")[0]["moved"]
    decayed = run(tmp_path / "ef", "constant", "ef")[0]["moved"]
    without = run(tmp_path / "noef", "constant", "noef")[0]["moved"]
    print("elements moved of 8192: error feedback", plain, "decayed", decayed, "none", without)
    assert without == 2 * 64  # the same top-k of each 4096-element chunk every round
    assert plain == 8192
    assert decayed > 20 * without
