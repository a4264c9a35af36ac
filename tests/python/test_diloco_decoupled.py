"""geoccl.diloco's decoupled mode (quorum=Q, geoccl.decoupled): the syncer's pure rules, and on
3 ranks on loopback (examples/diloco_digits.py) that a rank stopped for 4 s does not stop the
others: the syncer closes rounds with the other two while it is stopped, merges its late
contribution with a staleness weight when it comes back (answering it at once), and every rank
ends with the same parameters after the full sync."""

import os

import pytest
import torch

from conftest import REPO, format_outputs, read_json, run_ranks

SCRIPT = os.path.join(REPO, "examples", "diloco_digits.py")


def test_staleness_weight_and_round_rule():
    from geoccl.decoupled import round_closes, staleness_weight

    assert staleness_weight(0, 4) == 1.0 and staleness_weight(3, 4) == 0.25 and staleness_weight(5, 4) == 0.0
    with pytest.raises(ValueError):
        staleness_weight(-1, 4)
    assert round_closes(3, 3, 2, None, 1.0, 0.0)  # all in: no grace
    assert not round_closes(1, 3, 2, None, 1.0, 9.0)  # below the quorum: never
    assert not round_closes(2, 3, 2, 10.0, 1.0, 10.5)  # quorum, grace running
    assert round_closes(2, 3, 2, 10.0, 1.0, 11.0)


def test_merge_weights_by_weight_and_staleness():
    from geoccl.decoupled import merge

    pool = [(0, 5, 1.0, torch.full((4,), 1.0)), (1, 5, 3.0, torch.full((4,), 2.0)),
            (2, 3, 2.0, torch.full((4,), 7.0)), (3, 0, 1.0, torch.full((4,), 100.0))]
    merged, rows = merge(pool, 5, max_staleness=4)
    # rank 2 is 2 steps behind: 2 / 3 of its weight, over the weights without that factor; rank
    # 3 is 5 behind: left out, its weight not counted
    assert rows == [(0, 0, 1.0), (1, 0, 3.0), (2, 2, 2.0 / 3.0), (3, 5, 0.0)]
    assert torch.allclose(merged, torch.full((4,), (1.0 + 3.0 * 2.0 + 2.0 / 3.0 * 7.0) / 6.0))
    # a stale contribution alone moves the parameters by less than it would fresh
    lone, _ = merge([(2, 3, 1.0, torch.full((2,), 4.0))], 4, max_staleness=4)
    assert torch.equal(lone, torch.full((2,), 2.0))
    assert merge([(0, 0, 1.0, torch.ones(2))], 9, max_staleness=4) == (None, [(0, 9, 0.0)])


def test_a_stopped_rank_does_not_stop_the_others(tmp_path):
    out = str(tmp_path / "decoupled.json")
    args = [SCRIPT, "--mode", "diloco", "--steps", "150", "--sync-every", "5", "--quorum", "2", "--grace", "0.2",
            "--stop-rank", "2", "--stop-at", "40", "--stop-seconds", "4", "--max-staleness", "1000", "--json", out]
    results = run_ranks(3, args, timeout=120, tmp_path=tmp_path)
    assert all(rc == 0 for rc, _ in results), format_outputs(results)
    res = read_json(out)
    t0, t1 = res["stopped"]
    assert t1 - t0 >= 3.5, res["stopped"]
    rounds = res["rounds"]
    print("accuracy", res["accuracy"], "rounds", len(rounds))
    during = [r for r in rounds if t0 < r["closed_at"] < t1]
    assert len(during) >= 3 and all(2 not in r["contributors"] for r in during), during
    # rank 2's first sync after the stop missed rounds: answered at once, merged with its staleness
    late = [(r["staleness"][i], r["weights"][i]) for r in rounds if r["closed_at"] > t1
            for i, c in enumerate(r["contributors"]) if c == 2 and r["staleness"][i] >= 1]
    assert late and late[0][1] == pytest.approx(1.0 / (1 + late[0][0])), rounds[-4:]
    assert rounds[-1]["full"], rounds[-1]
    assert res["identical_params"] and res["syncs"] == 150 // 5 + 1, res
    assert res["accuracy"] >= 0.8, res["accuracy"]


def test_a_quorum_of_every_rank_is_lock_step_diloco(tmp_path):
    """With quorum = world and nobody late, the decoupled sync computes what the allreduce does."""
    acc = {}
    for name, extra in (("lock-step", []), ("quorum", ["--quorum", "3"])):
        out = str(tmp_path / f"{name}.json")
        results = run_ranks(3, [SCRIPT, "--mode", "diloco", "--steps", "30", "--sync-every", "5", "--json", out,
                                *extra], timeout=90, tmp_path=tmp_path)
        assert all(rc == 0 for rc, _ in results), format_outputs(results)
        res = read_json(out)
        assert res["identical_params"], name
        acc[name] = res["accuracy"]
    assert abs(acc["quorum"] - acc["lock-step"]) <= 0.01, acc
