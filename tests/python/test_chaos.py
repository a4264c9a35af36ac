"""The chaos harness (bench/chaos.py), short: elastic training of 3 regions x 2 ranks on
seed.toml, its rendezvous store an etcd server in region a, while a rank's worker is killed, rank
0's worker is killed, a pair of regions is cut for 5 s and etcd is killed and restarted. The job
finishes every step with the accuracy target, every rank holds the same parameters, a kill is
reported as a lost peer on every survivor and training resumes and comes back to full size after
it, and the cut and the store's restart are ridden out without any failure reported. The long run
(a fault every 2 minutes for 30 minutes, every kind) is a benchmark: docs/benchmarks.md "Goodput
under faults"."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import PKG, REPO

STEPS = 480


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/net/tun"),
                    reason="the WAN test bed needs root and /dev/net/tun")
@pytest.mark.skipif(shutil.which("etcd") is None, reason="etcd-server is not installed (scripts/install-deps.sh)")
def test_training_survives_kills_a_cut_and_a_store_restart(tmp_path):
    pytest.importorskip("sklearn")
    out = tmp_path / "chaos"
    cmd = [sys.executable, os.path.join(REPO, "bench", "chaos.py"), "--scenario",
           os.path.join(REPO, "bench", "scenarios", "seed.toml"), "--steps", str(STEPS), "--step-sleep", "0.05",
           "--first-fault", "5", "--fault-every", "10", "--faults", "kill,kill0,cut5,store", "--store", "etcd",
           "--seed", "3",
           "--out", str(out), "--build", os.path.dirname(PKG), "--deadline", "240"]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    log = run.stdout + run.stderr
    job_log = (out / "faults" / "job.log").read_text() if (out / "faults" / "job.log").exists() else ""
    assert run.returncode == 0, log + job_log[-6000:]
    c = json.loads((out / "report.json").read_text())["chaos"]
    assert c["finished"] == list(range(6)) and c["identical_parameters"], (c, job_log[-6000:])
    assert all(a >= 0.9 for a in c["accuracy"].values()), c
    assert {f["kind"] for f in c["faults"]} == {"cut5", "kill", "kill0", "store"}, c
    for f in c["faults"]:
        victim = f["target"].split()[1] if f["target"].startswith("rank ") else None
        if victim is None:
            assert f["reported_by"] == {}, (f, job_log[-6000:])  # a 5 s cut, a store restart: ridden out
        else:
            # every survivor saw the death, as a lost peer; training went on and came back to
            # full size
            survivors = {str(r) for r in range(6)} - {victim}
            assert set(f["reported_by"]) >= survivors and f["errors"] == ["peer lost"], f
            assert f["resumed_s"] is not None and f["full_size_s"] is not None, f
