"""Helpers of the geoccl Python tests: the built package on sys.path, free ports, multi-rank runs.

The package is imported from the build tree: PYTHONPATH=<build>/python (scripts/test.sh sets it),
or GEOCCL_BUILD_DIR=<build>; otherwise ./build/python relative to the repository.
"""

import json
import os
import random
import socket
import subprocess
import sys
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.dirname(os.path.abspath(__file__))


def package_dir():
    for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        if entry and os.path.isfile(os.path.join(entry, "geoccl", "__init__.py")):
            return entry
    build = os.environ.get("GEOCCL_BUILD_DIR", os.path.join(REPO, "build"))
    return os.path.join(build, "python")


PKG = package_dir()
if PKG not in sys.path:
    sys.path.insert(0, PKG)


def free_port():
    """A port free on 127.0.0.1 a moment ago, below the kernel's ephemeral range: a port from
    inside it can be taken, before the rank binds it, as the source port of any process's
    outgoing connection (ctest and pytest run beside each other)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    rng = random.SystemRandom()
    for _ in range(64 if low > 12000 else 0):
        port = rng.randrange(10000, low)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_env(rank, world, port, extra=None):
    env = dict(os.environ)
    env.update({
        "RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank),
        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
        "PYTHONPATH": os.pathsep.join(p for p in [PKG, env.get("PYTHONPATH", "")] if p),
        "OMP_NUM_THREADS": "1",
    })
    env.pop("GEOCCL_DOMAIN", None)
    if extra:
        env.update(extra)
    return env


def run_ranks(world, argv, timeout, tmp_path, extra_env=None):
    """Runs `python argv...` as `world` ranks (env:// variables set); returns [(rc, output)].

    Every rank is killed once `timeout` seconds have passed; the test then fails with the
    outputs. Output goes to files, so a chatty rank never blocks on a full pipe.
    """
    port = free_port()
    procs, logs = [], []
    for r in range(world):
        log = open(tmp_path / f"rank{r}.log", "w+")
        logs.append(log)
        procs.append(subprocess.Popen([sys.executable] + argv, env=rank_env(r, world, port, extra_env),
                                      stdout=log, stderr=subprocess.STDOUT, cwd=REPO))
    deadline = time.monotonic() + timeout
    timed_out = False
    for p in procs:
        left = deadline - time.monotonic()
        try:
            p.wait(timeout=max(left, 0.1))
        except subprocess.TimeoutExpired:
            timed_out = True
            break
    if timed_out:
        for p in procs:
            if p.poll() is None:
                p.kill()
        for p in procs:
            p.wait()
    results = []
    for p, log in zip(procs, logs):
        log.seek(0)
        results.append((p.returncode, log.read()))
        log.close()
    if timed_out:
        pytest.fail(f"ranks did not finish within {timeout} s:\n" + format_outputs(results))
    return results


def format_outputs(results):
    return "\n".join(f"--- rank {r} (rc {rc}) ---\n{out[-4000:]}" for r, (rc, out) in enumerate(results))


def read_json(path):
    with open(path) as f:
        return json.load(f)
