"""Compression "auto" on the WAN test bed (bench/scenarios/one-slow-pair.toml: three regions of one
rank, 20 ms RTT, 200 Mbit/s, a-b at 10 Mbit/s): DDP through geoccl.compression_hook with
compression "auto" and exposed=1 (tests/python/_auto_codec_worker.py: a 2 MiB MLP in two buckets,
0.4 s of stand-in compute per step), on the figures the start-up probe measured (re-planning off,
so the figures hold still). Regions a and c alone: every bucket goes uncompressed; a and b: int8 or
stronger for both buckets (which of the two is stronger depends on their measured ready times and
sizes, so the test does not fix it; CodecChoice.* covers the order). The first three
iterations, without timings of DDP's rebuilt buckets, take the strongest codec. Every rank chooses
the same codecs at every step (they agree on the timings; ranks that differ would fail with a
mismatch) and ends with the same parameters. A run where the path drops and recovers while the job
trains (re-planning on) is in docs/compression.md ("auto")."""

import json
import os
import subprocess

import pytest

from conftest import HERE, PKG, REPO

SCENARIO = os.path.join(REPO, "bench", "scenarios", "one-slow-pair.toml")
WORKER = os.path.join(HERE, "_auto_codec_worker.py")


def run_job(tmp_path, domains):
    """Per step, the codecs rank 0's hook chose (every rank's being the same)."""
    cli = os.path.join(os.path.dirname(PKG), "tools", "geoccl", "geoccl")
    out = str(tmp_path / domains.replace(",", "_").replace(":", ""))
    n = len(domains.split(","))
    cmd = [cli, "run", "--wan", SCENARIO, "--domains", domains, "-n", str(n), "--timeout", "90", "--",
           "/usr/bin/python3", WORKER, "--steps", "9", "--sleep", "0.4", "--exposed", "1", "--out", out]
    env = dict(os.environ, GEOCCL_EXPERIMENT="replan_ops=0", PYTHONPATH=PKG)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=150, env=env)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-4000:]
    ranks = []
    for r in range(n):
        with open(f"{out}.{r}") as f:
            ranks.append(json.load(f))
    assert len({x["param_sha256"] for x in ranks}) == 1, "parameters differ across ranks"
    codecs = [s["codecs"] for s in ranks[0]["steps"]]
    for x in ranks[1:]:
        assert [s["codecs"] for s in x["steps"]] == codecs, "ranks chose differently"
    return codecs


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/net/tun"),
                    reason="the WAN test bed needs root and /dev/net/tun")
def test_each_bucket_takes_the_least_lossy_codec_that_fits_its_path(tmp_path):
    import geoccl

    ladder = geoccl.auto_codec_ladder()
    fast = run_job(tmp_path, "a:1,c:1")
    slow = run_job(tmp_path, "a:1,b:1")
    print("fast", fast)
    print("slow", slow)
    for codecs in (fast, slow):
        assert all(c == ladder[-1] for step in codecs[1:3] for c in step), codecs  # no timings yet
    assert all(step == ["none", "none"] for step in fast[3:]), fast
    for step in slow[3:]:
        levels = [ladder.index(c) for c in step]
        assert len(levels) == 2 and min(levels) >= ladder.index("int8"), slow
