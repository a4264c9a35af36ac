"""geoccl.diloco on examples/diloco_digits.py (the digits MLP), 6 ranks on loopback labelled as 3
domains (so the outer allreduce runs the hierarchical path and int8 is applied between the
domains), every configuration from the same seeds over the same steps:

- DDP (geoccl.allreduce_hook), the reference accuracy;
- DiLoCo H=10 fp32: within 0.03 of DDP's accuracy, parameters identical on every rank, the number
  of syncs and the bytes they moved as H says (int8 with error feedback: the WAN test below);
- streaming (2 fragments, 2 overlap steps) and hierarchical (DDP inside each domain): they train;
- SparseLoCo (recipe="sparseloco"), flat and hierarchical: it trains with 100x fewer bytes, and
  far worse without its error feedback;
- one bad participant (its pseudo-gradient times -8): robust="exclude" drops it at every sync and
  trains like the others (within 0.04 of DDP). What equal weighting does with it (0.1 or more
  below DDP's accuracy) is the example's contrast run, measured in docs/benchmarks.md; CI time
  keeps it out of here.

The full measurements on the WAN test bed are in docs/benchmarks.md ("DiLoCo").
"""

import os

import pytest

from conftest import PKG, REPO, format_outputs, read_json, run_ranks

SCRIPT = os.path.join(REPO, "examples", "diloco_digits.py")
WORLD = 6
COMMON = ["--steps", "200", "--label-domains", "3", "--target", "0.9"]


def train(tmp_path, name, *args):
    out = str(tmp_path / f"{name}.json")
    results = run_ranks(WORLD, [SCRIPT, *COMMON, "--json", out, *args], timeout=240, tmp_path=tmp_path)
    assert all(rc == 0 for rc, _ in results), format_outputs(results)
    res = read_json(out)
    print(name, "accuracy", res["accuracy"], "syncs", res["syncs"], "excluded", res["excluded"],
          "seconds", res["seconds"])
    return res


@pytest.fixture(scope="module")
def ddp(tmp_path_factory):
    return train(tmp_path_factory.mktemp("ddp"), "ddp", "--mode", "ddp")


def test_diloco_matches_ddp(ddp, tmp_path):
    assert ddp["accuracy"] > 0.9 and ddp["identical_params"]
    fp32 = train(tmp_path, "h10", "--mode", "diloco", "--sync-every", "10")
    assert fp32["identical_params"] and fp32["syncs"] == 20
    assert fp32["accuracy"] >= ddp["accuracy"] - 0.03, (fp32["accuracy"], ddp["accuracy"])
    n_params = fp32["outer_bytes_per_rank"] // 4 // 20
    assert n_params == 64 * 128 + 128 + 128 * 128 + 128 + 128 * 10 + 10


def test_streaming_and_hierarchical(ddp, tmp_path):
    st = train(tmp_path, "streaming", "--mode", "diloco", "--sync-every", "20", "--fragments", "2",
               "--overlap", "2")
    assert st["syncs"] == 20  # 2 fragments x 10 rounds
    assert st["accuracy"] >= ddp["accuracy"] - 0.05, (st["accuracy"], ddp["accuracy"])
    hi = train(tmp_path, "hierarchical", "--mode", "diloco", "--sync-every", "20", "--hierarchical")
    assert hi["identical_params"] and hi["syncs"] == 10
    assert hi["accuracy"] >= ddp["accuracy"] - 0.03, (hi["accuracy"], ddp["accuracy"])


def test_sparseloco_flat_and_hierarchical(ddp, tmp_path):
    """SparseLoCo (1.6 % top-k, 2-bit values, error feedback) on the digits, 20 outer steps: it
    trains (0.909 against DDP's 0.963 when measured) with over 100x fewer bytes than dense
    float32 pseudo-gradients (170x), far better than without its error feedback (0.731), and
    with DDP inside each domain too."""
    sp = train(tmp_path, "sparseloco", "--mode", "diloco", "--recipe", "sparseloco", "--sync-every", "10")
    print("sparseloco wire bytes", sp["wire_bytes_sent"], "dense", sp["dense_bytes_equivalent"])
    assert sp["identical_params"] and sp["syncs"] == 20
    assert sp["accuracy"] >= ddp["accuracy"] - 0.08, (sp["accuracy"], ddp["accuracy"])
    assert sp["dense_bytes_equivalent"] >= 100 * sp["wire_bytes_sent"]
    no_ef = train(tmp_path, "sparseloco-no-ef", "--mode", "diloco", "--recipe", "sparseloco", "--sync-every", "10",
                  "--no-error-feedback")
    assert no_ef["accuracy"] < sp["accuracy"] - 0.1, (no_ef["accuracy"], sp["accuracy"])
    hi = train(tmp_path, "sparseloco-hier", "--mode", "diloco", "--recipe", "sparseloco", "--sync-every", "10",
               "--hierarchical")
    assert hi["identical_params"] and hi["syncs"] == 20
    assert hi["accuracy"] >= ddp["accuracy"] - 0.08, (hi["accuracy"], ddp["accuracy"])


def test_bad_participant(ddp, tmp_path):
    bad = ["--mode", "diloco", "--sync-every", "10", "--bad-rank", "5", "--bad-scale", "-8"]
    robust = train(tmp_path, "bad-robust", *bad, "--robust", "exclude")
    assert robust["excluded"] == {"5": 20}, robust["excluded"]
    # 5 participants instead of 6 (0.9394 against DDP's 0.9630 when measured)
    assert robust["accuracy"] >= ddp["accuracy"] - 0.04, (robust["accuracy"], ddp["accuracy"])


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/net/tun"),
                    reason="the WAN test bed needs root and /dev/net/tun")
def test_on_the_wan_test_bed():
    """The shortened evidence of docs/benchmarks.md ("DiLoCo"): DDP and DiLoCo H=50 int8 on the
    three regions of seed.toml (bench/diloco_wan.py, 300 steps): both reach 0.93, and DiLoCo's
    bytes across the WAN (the emulator's link counters) are under a tenth of DDP's. Without the
    start-up path probe in both (plan_probe=0): its 48 MiB of bursts (4 MiB, twice, each way of
    three pairs of domains) are the same in both jobs and would outweigh what 300 steps of
    DiLoCo send, which is what this compares."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("diloco_wan", os.path.join(REPO, "bench", "diloco_wan.py"))
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    geoccl_cli = os.path.join(os.path.dirname(PKG), "tools", "geoccl", "geoccl")  # PKG: <build>/python
    no_probe = {"GEOCCL_EXPERIMENT": "plan_probe=0"}
    runs = {name: bench.run_one(geoccl_cli, "seed", name, 300, 0.93, 400, env=no_probe) for name in ["ddp", "h50-int8"]}
    print(runs)
    for name, r in runs.items():
        assert "error" not in r, (name, r)
        assert r["identical_params"] and r["accuracy"] >= 0.93 and r["time_to_target"], (name, r)
        assert r["wan_bytes"] > 0, (name, r)
    assert runs["h50-int8"]["syncs"] == 6
    assert runs["h50-int8"]["wan_bytes"] * 10 < runs["ddp"]["wan_bytes"], runs
