"""torchrun's elastic agents across regions of the WAN test bed: one agent per region of
seed.toml (a, b, c; tests/python/_torchrun_agent.py gives each region a host name, as machines
have), `torchrun --nnodes 3 --rdzv_backend c10d --max_restarts 2`, one worker each
(tests/python/_torchrun_worker.py: DDP over backend "geoccl", a checkpoint every 20 steps). The
worker in region b kills itself (SIGKILL) after step 30: the other workers' collectives fail with
peer-lost, the agents restart the group, and every worker resumes from the step-20 checkpoint and
ends at step 60 with the same parameters as the others."""

import json
import os
import signal
import subprocess

import pytest

from conftest import HERE, PKG, REPO

AGENT = os.path.join(HERE, "_torchrun_agent.py")
WORKER = os.path.join(HERE, "_torchrun_worker.py")


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/net/tun"),
                    reason="the WAN test bed needs root and /dev/net/tun")
def test_agents_restart_the_group_after_a_worker_in_one_region_dies(tmp_path):
    cli = os.path.join(os.path.dirname(PKG), "tools", "geoccl", "geoccl")
    d = str(tmp_path)
    cmd = [cli, "run", "--wan", os.path.join(REPO, "bench", "scenarios", "seed.toml"), "--domains", "a:1,b:1,c:1",
           "-n", "3", "--timeout", "150", "--", "/usr/bin/python3", AGENT, d, "--", WORKER, "--dir", d,
           "--steps", "60", "--every", "20", "--kill-domain", "b", "--kill-at", "30"]
    env = dict(os.environ, PYTHONPATH=PKG, OMP_NUM_THREADS="1")
    # A session of its own: on a timeout the agents and workers go with `geoccl run`.
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=200)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
    assert proc.returncode == 0, stdout[-6000:] + stderr[-3000:]
    outs = []
    for r in range(3):
        with open(os.path.join(d, f"out.{r}")) as f:
            outs.append(json.load(f))
    print(outs)
    assert sorted(o["domain"] for o in outs) == ["a", "b", "c"], outs
    # Every worker of the final round resumed from the checkpoint; region b's agent restarted its
    # worker (the others may restart theirs without counting it, when b's agent is back first).
    assert all(o["start"] == 20 for o in outs), outs
    assert all(o["restart"] >= 1 for o in outs if o["domain"] == "b"), outs
    assert len({s for o in outs for s in o["shas"]}) == 1, "parameters differ across ranks"
