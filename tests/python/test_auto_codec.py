"""Compression "auto" on the WAN test bed (bench/scenarios/auto-codec.toml: three regions of one
rank, 200 Mbit/s; a-b drops to 10 Mbit/s at 8 s and recovers at 24 s): DDP through
geoccl.compression_hook with compression "auto" and exposed=1 (tests/python/_auto_codec_worker.py:
a 2 MiB MLP in two buckets, 0.4 s of stand-in compute per step). Re-planning (a check every 3
collectives) takes the drop and the recovery into the path figures; within a step of each, the
buckets move to a stronger codec, and back to a light one. Every rank chooses the same codecs at
every step (they agree on the timings; ranks that differ would fail with a mismatch) and ends with
the same parameters. The figures of a run are in docs/compression.md ("auto")."""

import json
import os
import subprocess

import pytest

from conftest import HERE, PKG, REPO

SCENARIO = os.path.join(REPO, "bench", "scenarios", "auto-codec.toml")
WORKER = os.path.join(HERE, "_auto_codec_worker.py")


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/net/tun"),
                    reason="the WAN test bed needs root and /dev/net/tun")
def test_buckets_follow_a_path_that_drops_and_recovers(tmp_path):
    import geoccl

    ladder = geoccl.auto_codec_ladder()
    cli = os.path.join(os.path.dirname(PKG), "tools", "geoccl", "geoccl")
    out = str(tmp_path / "auto")
    cmd = [cli, "run", "--wan", SCENARIO, "-n", "3", "--timeout", "150", "--",
           "/usr/bin/python3", WORKER, "--steps", "60", "--sleep", "0.4", "--exposed", "1", "--out", out]
    env = dict(os.environ, GEOCCL_EXPERIMENT="replan_ops=3", PYTHONPATH=PKG)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=210, env=env)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-4000:]
    ranks = []
    for r in range(3):
        with open(f"{out}.{r}") as f:
            ranks.append(json.load(f))
    assert len({x["param_sha256"] for x in ranks}) == 1, "parameters differ across ranks"
    steps = ranks[0]["steps"]
    for x in ranks[1:]:
        assert [s["codecs"] for s in x["steps"]] == [s["codecs"] for s in steps], "ranks chose differently"
    # Per step: the strongest codec chosen (ladder level) and a-b's rate in the figures in force
    # (the smaller direction; domains a, b, c are 0, 1, 2).
    levels = [max((ladder.index(c) for c in s["codecs"]), default=-1) for s in steps]
    ab = [min(s["rates"][1], s["rates"][3]) if s["rates"] else 0 for s in steps]
    trace = list(zip(levels, [round(x) for x in ab]))
    print(trace)
    check(levels, ab, ladder)


def check(levels, ab, ladder):
    """The choice follows the figures: stronger while a-b is planned low, lighter once the
    recovery is planned. A step's codecs were chosen at its first bucket, from the figures in
    force after the step before: level i+1 answers to rate i. Runs of 5 steps or more: re-planning
    on this 2-core bed now and then takes in a reading it takes back a few steps later, and the
    leaders' probe reads a recovered path below its rate at first (32-72 Mbit/s of 200 seen)."""
    trace = list(zip(levels, [round(x) for x in ab]))

    def first_run(pred, start=0, length=5):
        for i in range(start, len(ab) - length + 1):
            if all(pred(r) for r in ab[i:i + length]):
                return i
        return None

    def median(xs):
        return sorted(xs)[len(xs) // 2]

    base = median(ab[:3])  # the start-up figure, before the drop
    low = first_run(lambda r: 0 < r <= base / 4)
    assert low is not None, ("the drop was not re-planned", trace)
    during = median(levels[low + 1:low + 6])
    high = first_run(lambda r: r >= base / 3, low)
    assert high is not None, ("the recovery was not re-planned", trace)
    after = max(levels[high + 1:high + 4])
    final = median(levels[-10:])
    assert during >= ladder.index("fp16") and after < during and final < during, trace
    assert final <= ladder.index("fp16"), trace
