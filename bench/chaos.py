#!/usr/bin/python3
"""Chaos harness: elastic data-parallel training on the emulated WAN while a seeded schedule of
faults hits it, and the goodput that is left.

    python3 bench/chaos.py --scenario bench/scenarios/seed.toml --steps 3000 --fault-every 120 \\
        --faults kill,stop,cut5,cut60,partition,loss,kill0 --seed 1 --baseline --out /tmp/chaos

The job is `geoccl run --wan SCENARIO` with one supervisor per rank (this file, --supervise), each
running a training worker (this file, --worker: the digits MLP of examples/ddp_digits.py through
geoccl.elastic.Manager, --step-sleep seconds of stand-in compute per step) and restarting it
whenever it dies. --mode ddp averages the gradients every step; --mode diloco runs DiLoCo through
the same Manager: --sync-every (H) local SGD steps without communication, then the
pseudo-gradients (the global parameters minus the local ones) averaged over the epoch's members
and an outer Nesterov step (lr 0.7, momentum 0.9) on the global parameters; a step is then one
outer step (H inner steps), and a failed average drops that round's local steps everywhere. Rank 0's supervisor hosts the rendezvous store, so the death of any worker,
rank 0's included, leaves it up. The harness applies the faults while the job runs:

    kill       SIGKILL of a random worker other than rank 0's; its supervisor restarts it
    kill0      SIGKILL of rank 0's worker
    stop       SIGSTOP of a random worker for --stop-seconds (20), then SIGCONT
    cut5       a random pair of regions cut for 5 s (the emulator's `cut a-b 5s`)
    cut60      the same for 60 s
    partition  one region cut from every other for --partition-seconds (10)
    loss       one pair at 5 % loss for 10 s, then back to the scenario's loss
    store      SIGKILL of the etcd server (--store etcd); rank 0's supervisor restarts it on the
               same data directory after --restart-delay

With --store etcd the rendezvous store is an etcd server that rank 0's supervisor runs in its
region (GEOCCL_STORE=etcd://MASTER_ADDR:MASTER_PORT/chaos, keys under leases) instead of a
geoccl.StoreServer.

and logs each with its time. Every worker appends one line per committed step (time, step, epoch,
members) and, at the end, its accuracy and parameter checksum. The report (stdout, and
OUT/report.json):

    goodput    committed steps per second under faults over the same without faults: with
               --baseline, a fault-free run of the same job measured first; without it, the
               job's own steady rate (the median step interval at full size away from faults)
    lost       steps committed and then rolled back (a rank's step count going down)
    per fault  its kind, target and time; `resumed`: seconds until a rank other than the target
               committed a step; `full`: until a step at full size after the last smaller one in
               the fault's window (the target restarted and admitted again); `gap`: the longest
               wait between two consecutive steps of the job in the window; the failures the
               workers reported in it (a kill or a stop is reported once on each survivor; a cut
               or a partition shorter than the deadline and a loss burst are ridden out and not
               reported at all)
    end        steps, accuracy, and whether every rank that finished holds identical parameters

A short version runs in CI (tests/python/test_chaos.py); docs/benchmarks.md has the long run.
"""

import argparse
import ctypes
import json
import os
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAULTS = ["kill", "kill0", "stop", "cut5", "cut60", "partition", "loss", "store"]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scenario", default=os.path.join(REPO, "bench", "scenarios", "seed.toml"))
    p.add_argument("--domains", default="", help="rank placement for geoccl run (default: the scenario's)")
    p.add_argument("--steps", type=int, default=600, help="committed optimizer steps of the job")
    p.add_argument("--step-sleep", type=float, default=0.1, help="seconds of stand-in compute per step")
    p.add_argument("--mode", choices=["ddp", "diloco"], default="ddp",
                   help="ddp: gradients averaged every step; diloco: pseudo-gradients every --sync-every steps")
    p.add_argument("--sync-every", type=int, default=10, help="diloco: inner steps per outer step (H)")
    p.add_argument("--fault-every", type=float, default=120.0, help="seconds between faults")
    p.add_argument("--first-fault", type=float, default=0.0,
                   help="seconds of training before the first fault (default: --fault-every)")
    p.add_argument("--faults", default="",
                   help="the kinds to draw from, comma-separated (default: every kind; store only with --store etcd)")
    p.add_argument("--store", choices=["tcp", "etcd"], default="tcp",
                   help="the rendezvous store: a geoccl.StoreServer in rank 0's supervisor, or an etcd server there")
    p.add_argument("--seed", type=int, default=1, help="seed of the schedule (kinds and targets)")
    p.add_argument("--stop-seconds", type=float, default=20.0)
    p.add_argument("--partition-seconds", type=float, default=10.0)
    p.add_argument("--restart-delay", type=float, default=2.0, help="seconds before a supervisor restarts a worker")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per operation (outlives a 60 s cut)")
    p.add_argument("--join-window", type=float, default=3.0)
    p.add_argument("--baseline", action="store_true", help="run the job without faults first, for the goodput")
    p.add_argument("--deadline", type=float, default=3600.0, help="seconds the job may take in all")
    p.add_argument("--out", default="/tmp/geoccl-chaos", help="directory for logs and the report")
    p.add_argument("--build", default=os.path.join(REPO, "build"), help="build tree (geoccl binary, Python package)")
    p.add_argument("--supervise", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args(argv)


# ---- one rank: the supervisor and its worker ----

def free_local_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def etcd_dir(session):
    """etcd's data directory: on tmpfs, as a production etcd's is on a disk whose fsync takes
    a millisecond (on this VM's disk etcd's fsyncs queue its writes for seconds)."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") else "/tmp"
    return os.path.join(base, f"geoccl-{session}-etcd")


def die_with_parent():
    """In a child before exec: SIGKILL when the supervisor dies (prctl PR_SET_PDEATHSIG)."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)


class EtcdServer:
    """The job's etcd, run by rank 0's supervisor at MASTER_ADDR:MASTER_PORT: restarted on the same
    data directory (its keys and leases survive) --restart-delay after it dies, until stop()."""

    def __init__(self, args, addr, port):
        self.args, self.stopped = args, threading.Event()
        client, peer = f"http://{addr}:{port}", f"http://127.0.0.1:{free_local_port()}"
        self.cmd = ["etcd", "--name=chaos", f"--data-dir={etcd_dir(os.environ['GEOCCL_SESSION'])}",
                    f"--listen-client-urls={client}", f"--advertise-client-urls={client}",
                    f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
                    f"--initial-cluster=chaos={peer}", "--initial-cluster-state=new", "--logger=zap",
                    "--log-level=warn"]
        self.proc = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        with open(os.path.join(self.args.out, "etcd.log"), "a") as log:
            while not self.stopped.is_set():
                self.proc = subprocess.Popen(self.cmd, stdout=log, stderr=subprocess.STDOUT, preexec_fn=die_with_parent)
                with open(os.path.join(self.args.out, "etcd.pid"), "w") as f:
                    f.write(str(self.proc.pid))
                rc = self.proc.wait()
                if self.stopped.is_set():
                    break
                print(f"[supervisor 0] etcd exited with {rc}; restarting it", flush=True)
                time.sleep(self.args.restart_delay)

    def stop(self):
        self.stopped.set()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
        self.thread.join(timeout=10)


def supervise(args):
    """Restarts the worker whenever it dies, until one worker has finished the job."""
    rank = int(os.environ.get("RANK", "0"))
    addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    store = None
    if args.store == "etcd":
        os.environ["GEOCCL_STORE"] = f"etcd://{addr}:{port}/chaos"
        if rank == 0:
            store = EtcdServer(args, addr, port)
    elif rank == 0:
        import geoccl

        store = geoccl.StoreServer(addr, port)
    incarnation = 0
    argv = [a for a in sys.argv[1:] if a != "--supervise"]
    while True:
        env = dict(os.environ, GEOCCL_ELASTIC_INCARNATION=str(incarnation))
        proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", *argv], env=env)
        with open(os.path.join(args.out, f"rank{rank}.pid"), "w") as f:
            f.write(str(proc.pid))
        rc = proc.wait()
        if rc == 0 or os.path.exists(os.path.join(args.out, "done")):
            break
        print(f"[supervisor {rank}] worker {incarnation} exited with {rc}; restarting it", flush=True)
        incarnation += 1
        time.sleep(args.restart_delay)
    if store is not None:
        time.sleep(5.0)  # the others may still be finishing their last steps
        if isinstance(store, EtcdServer):
            store.stop()
    return 0 if rc == 0 else 1


def work(args):
    import torch
    import torch.nn.functional as F

    import geoccl

    sys.path.insert(0, os.path.join(REPO, "examples"))
    from ddp_digits import MLP, accuracy, load_data, param_checksum  # noqa: E402

    rank0 = int(os.environ.get("RANK", "0"))
    incarnation = int(os.environ.get("GEOCCL_ELASTIC_INCARNATION", "0"))
    torch.manual_seed(0)
    x_train, y_train, x_test, y_test = load_data(0)
    model = MLP(128)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    diloco = args.mode == "diloco"
    if diloco:
        # The Manager carries the outer optimizer (its state goes to joiners); the inner one is
        # each rank's own.
        inner, opt = opt, torch.optim.SGD(model.parameters(), lr=0.7, momentum=0.9, nesterov=True)
    params = list(model.parameters())
    steps_log = open(os.path.join(args.out, f"rank{rank0}.{incarnation}.steps"), "w", buffering=1)
    failures_log = open(os.path.join(args.out, f"rank{rank0}.{incarnation}.failures"), "w", buffering=1)

    def log(line):
        print(f"[rank {rank0}.{incarnation}] {line}", flush=True)
        m = re.search(r"step \d+: (?:allreduce|step boundary) failed: (.*)", line)
        if m:
            failures_log.write(json.dumps({"t": time.time(), "error": m.group(1)}) + "\n")

    mgr = geoccl.elastic.Manager(model, opt, timeout=args.timeout, join_window=args.join_window,
                                 join_timeout=600.0, log=log)
    def batch(k):
        base = (k * 32 * mgr.size + mgr.rank * 32) % len(y_train)
        idx = (torch.arange(32) + base) % len(y_train)
        return x_train[idx], y_train[idx]

    while mgr.step < args.steps:
        mgr.start_step()
        if diloco:
            global_params = [p.detach().clone() for p in params]
            for h in range(args.sync_every):
                x, y = batch(mgr.step * args.sync_every + h)
                F.cross_entropy(model(x), y).backward()
                inner.step()
                inner.zero_grad(set_to_none=True)
                time.sleep(args.step_sleep)
            with torch.no_grad():
                for p, g in zip(params, global_params):
                    p.grad = g - p  # the pseudo-gradient; the parameters go back to the global ones
                    p.copy_(g)
        else:
            x, y = batch(mgr.step)
            F.cross_entropy(model(x), y).backward()
            time.sleep(args.step_sleep)
        mgr.allreduce_gradients()
        if mgr.should_commit():
            opt.step()
            steps_log.write(f"{time.time():.4f} {mgr.step} {mgr.epoch} {mgr.size}\n")
        opt.zero_grad(set_to_none=True)
    open(os.path.join(args.out, "done"), "w").close()
    with open(os.path.join(args.out, f"rank{rank0}.json"), "w") as f:
        json.dump({"rank": rank0, "incarnation": incarnation, "steps": mgr.step, "size": mgr.size,
                   "accuracy": accuracy(model, x_test, y_test), "param_sha256": param_checksum(model),
                   "transitions": mgr.transitions, "end": time.time()}, f)
    return 0


# ---- the harness ----

def scenario_pairs(path):
    import tomllib

    with open(path, "rb") as f:
        sc = tomllib.load(f)
    doms = [d["name"] for d in sc.get("domains", [])] if isinstance(sc.get("domains"), list) else list(sc["domains"])
    loss = sc.get("links", {}).get("default", {}).get("loss", "0")
    return doms, str(loss)


class Job:
    """One `geoccl run --wan` of the supervisors; the emulator's control socket."""

    def __init__(self, args, out, faults_on):
        self.args, self.out = args, out
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        geoccl = os.path.join(args.build, "tools", "geoccl", "geoccl")
        cmd = [geoccl, "run", "--wan", args.scenario]
        if args.domains:
            cmd += ["--domains", args.domains]
        worker = [sys.executable, os.path.abspath(__file__), "--supervise", "--out", out,
                  "--steps", str(args.steps), "--step-sleep", str(args.step_sleep), "--timeout", str(args.timeout),
                  "--mode", args.mode, "--sync-every", str(args.sync_every),
                  "--join-window", str(args.join_window), "--restart-delay", str(args.restart_delay),
                  "--store", args.store]
        self.session = f"chaos-{os.getpid()}-{int(faults_on)}"
        env = dict(os.environ, GEOCCL_SESSION=self.session, OMP_NUM_THREADS="1")
        pkg = os.path.join(args.build, "python")
        env["PYTHONPATH"] = os.pathsep.join(p for p in [pkg, env.get("PYTHONPATH", "")] if p)
        self.log = open(os.path.join(out, "job.log"), "w+")
        self.proc = subprocess.Popen(cmd + ["--"] + worker, env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        self.control = None
        self.start = time.time()

    def control_socket(self):
        while self.control is None and self.proc.poll() is None:
            with open(os.path.join(self.out, "job.log")) as f:
                m = re.search(r"emulator control (\S+)", f.read())
            if m:
                self.control = m.group(1)
            else:
                time.sleep(0.2)
        return self.control

    def ctl(self, command):
        geoccl = os.path.join(self.args.build, "tools", "geoccl", "geoccl")
        r = subprocess.run([geoccl, "wanem", "ctl", self.control_socket(), command], capture_output=True, text=True,
                           timeout=30)
        if r.returncode != 0:
            raise RuntimeError(f"wanem ctl {command!r}: {r.stderr.strip()}")

    def worker_pid(self, rank):
        with open(os.path.join(self.out, f"rank{rank}.pid")) as f:
            return int(f.read())

    def nranks(self):
        return len([f for f in os.listdir(self.out) if re.fullmatch(r"rank\d+\.pid", f)])

    def steps_of(self, rank):
        """(time, step, epoch, size) lines of every incarnation of the rank, in time order."""
        rows = []
        for f in os.listdir(self.out):
            if re.fullmatch(rf"rank{rank}\.\d+\.steps", f):
                with open(os.path.join(self.out, f)) as fh:
                    for line in fh:
                        parts = line.split()
                        if len(parts) == 4:
                            rows.append((float(parts[0]), int(parts[1]), int(parts[2]), int(parts[3])))
        return sorted(rows)

    def failures_of(self, rank):
        """What every incarnation of the rank reported failing: [{t, error}]."""
        out = []
        for f in os.listdir(self.out):
            if re.fullmatch(rf"rank{rank}\.\d+\.failures", f):
                with open(os.path.join(self.out, f)) as fh:
                    out += [json.loads(line) for line in fh if line.strip()]
        return sorted(out, key=lambda x: x["t"])

    def max_step(self):
        """The highest step any worker has committed (the last line of each steps file)."""
        best = 0
        for f in os.listdir(self.out):
            if f.endswith(".steps"):
                with open(os.path.join(self.out, f), "rb") as fh:
                    fh.seek(0, os.SEEK_END)
                    fh.seek(max(0, fh.tell() - 200))
                    lines = fh.read().decode(errors="replace").split("\n")
                for line in reversed(lines):
                    parts = line.split()
                    if len(parts) == 4:
                        best = max(best, int(parts[1]))
                        break
        return best

    def wait(self, deadline):
        try:
            return self.proc.wait(timeout=max(1.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            print("chaos: the job passed its deadline; stopping it", flush=True)
            os.killpg(self.proc.pid, signal.SIGTERM)  # the launcher takes the emulator down
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
            return None


def apply_fault(job, kind, rng, domains, loss, events, pending):
    n = job.nranks()
    now = time.time()
    ev = {"t": now, "kind": kind}
    if kind in ("kill", "kill0", "stop"):
        rank = 0 if kind == "kill0" else rng.randrange(1, n)
        pid = job.worker_pid(rank)
        ev["target"] = f"rank {rank}"
        os.kill(pid, signal.SIGSTOP if kind == "stop" else signal.SIGKILL)
        if kind == "stop":
            pending.append((now + job.args.stop_seconds, lambda: os.kill(pid, signal.SIGCONT)))
    elif kind in ("cut5", "cut60"):
        a, b = rng.sample(domains, 2)
        secs = 5 if kind == "cut5" else 60
        ev["target"] = f"{a}-{b}"
        job.ctl(f"cut {a}-{b} {secs}s")
    elif kind == "partition":
        a = rng.choice(domains)
        ev["target"] = a
        for b in domains:
            if b != a:
                job.ctl(f"cut {a}-{b} {int(job.args.partition_seconds)}s")
    elif kind == "store":
        ev["target"] = "etcd"
        with open(os.path.join(job.out, "etcd.pid")) as f:
            os.kill(int(f.read()), signal.SIGKILL)
    elif kind == "loss":
        a, b = rng.sample(domains, 2)
        ev["target"] = f"{a}-{b}"
        job.ctl(f"set {a}-{b} loss 5%")
        pending.append((now + 10.0, lambda: job.ctl(f"set {a}-{b} loss {loss}")))
    else:
        raise ValueError(f"unknown fault {kind!r}")
    events.append(ev)
    print(f"chaos: t+{now - job.start:7.1f} s  {kind:9s} {ev['target']}", flush=True)


def run_job(args, out, faults):
    job = Job(args, out, bool(faults))
    deadline = job.start + args.deadline
    domains, loss = scenario_pairs(args.scenario)
    rng = random.Random(args.seed)
    kinds = []
    events, pending = [], []
    first = None
    next_fault = None
    while job.proc.poll() is None and time.time() < deadline:
        time.sleep(0.2)
        for item in [p for p in pending if p[0] <= time.time()]:
            pending.remove(item)
            try:
                item[1]()
            except (OSError, RuntimeError) as e:
                print(f"chaos: undoing a fault: {e}", flush=True)
        if not faults:
            continue
        if first is None:
            if job.nranks() and job.max_step() >= 1:
                first = time.time()
                next_fault = first + (args.first_fault or args.fault_every)
            continue
        # No fault in the last stretch, so that a restarted worker can rejoin before the end.
        rate = job.max_step() / max(time.time() - first, 1e-3)
        left = (args.steps - job.max_step()) / max(rate, 1e-3)
        if not kinds:
            kinds = list(faults)
            rng.shuffle(kinds)
        margin = 15.0 + (args.stop_seconds if kinds[-1] == "stop" else 0.0)
        if time.time() >= next_fault and left > margin:
            apply_fault(job, kinds.pop(), rng, domains, loss, events, pending)
            next_fault += args.fault_every
    for _, undo in pending:
        try:
            undo()
        except (OSError, RuntimeError):
            pass
    try:
        rc = job.wait(deadline)
    finally:
        shutil.rmtree(etcd_dir(job.session), ignore_errors=True)
    return job, events, rc


def analyse(job, events, rc, steps):
    n = job.nranks()
    results = {}
    for r in range(n):
        p = os.path.join(job.out, f"rank{r}.json")
        if os.path.exists(p):
            with open(p) as f:
                results[r] = json.load(f)
    rows = {r: job.steps_of(r) for r in range(n)}
    all_rows = sorted(x for r in rows for x in rows[r])
    t_first = all_rows[0][0] if all_rows else job.start
    t_end = max((res["end"] for res in results.values()), default=time.time())
    # Steps rolled back: a rank's step count going down between consecutive lines.
    lost = 0
    for r in range(n):
        for a, b in zip(rows[r], rows[r][1:]):
            if b[1] <= a[1]:
                lost = max(lost, a[1] - b[1] + 1)
    # The steady interval: rank 0's step gaps at full size, at least 10 s from any fault.
    full = [x for x in rows.get(0, []) if x[3] == n]
    gaps = [b[0] - a[0] for a, b in zip(full, full[1:])
            if b[1] == a[1] + 1 and all(abs(a[0] - e["t"]) > 10.0 for e in events)]
    steady = statistics.median(gaps) if gaps else None
    per_fault = []
    for i, ev in enumerate(events):
        until = events[i + 1]["t"] if i + 1 < len(events) else t_end
        target = ev.get("target", "")
        victim = int(target.split()[1]) if target.startswith("rank ") else -1
        after = [x for x in all_rows if x[0] > ev["t"]]
        others = [x for r in rows if r != victim for x in rows[r] if x[0] > ev["t"]]
        resumed = min((x[0] for x in others), default=None)
        # Back at full size: the first step at full size after the window's last smaller one.
        window = [x for x in after if x[0] < until]
        smaller = [x[0] for x in window if x[3] < n]
        since = max(smaller) if smaller else ev["t"]
        back = min((x[0] for x in window if x[3] == n and x[0] > since), default=None)
        reported = {}
        for r in range(n):
            for f in job.failures_of(r):
                if ev["t"] <= f["t"] < until:
                    reported.setdefault(r, []).append(f["error"][:200])
        # The longest wait between two steps of the job (any rank's first commit of each step).
        firsts = {}
        for x in window:
            firsts.setdefault(x[1], x[0])
        times = [ev["t"]] + sorted(firsts.values())
        gap = max((b - a for a, b in zip(times, times[1:])), default=None)
        per_fault.append({**ev, "resumed_s": None if resumed is None else round(resumed - ev["t"], 2),
                          "full_size_s": None if back is None else round(back - ev["t"], 2),
                          "longest_gap_s": None if gap is None else round(gap, 2),
                          "reported_by": {str(k): len(v) for k, v in reported.items()},
                          "errors": sorted({e.split(":")[0] for v in reported.values() for e in v}),
                          "t_rel": round(ev["t"] - t_first, 1)})
    digests = {res["param_sha256"] for res in results.values()}
    report = {
        "rc": rc, "mode": job.args.mode, "ranks": n, "finished": sorted(results), "steps": steps,
        "seconds": round(t_end - t_first, 2), "steps_per_s": round(steps / max(t_end - t_first, 1e-6), 3),
        "steady_step_s": None if steady is None else round(steady, 4), "lost_steps": lost,
        "identical_parameters": len(digests) == 1 and len(results) == n,
        "accuracy": {str(r): round(res["accuracy"], 4) for r, res in results.items()},
        "faults": per_fault,
    }
    if steady:
        report["goodput_steady"] = round(steady * steps / max(t_end - t_first, 1e-6), 3)
    return report


def harness(args):
    faults = [f for f in args.faults.split(",") if f] or [f for f in FAULTS if f != "store" or args.store == "etcd"]
    bad = [f for f in faults if f not in FAULTS]
    if bad:
        sys.exit(f"chaos: unknown fault kinds {bad}; known: {FAULTS}")
    if "store" in faults and args.store != "etcd":
        sys.exit("chaos: the store fault restarts an etcd server: it needs --store etcd")
    report = {"command": " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:])}
    if args.baseline:
        job, events, rc = run_job(args, os.path.join(args.out, "baseline"), [])
        report["baseline"] = analyse(job, events, rc, args.steps)
        print(f"chaos: baseline {report['baseline']['seconds']} s, {report['baseline']['steps_per_s']} steps/s",
              flush=True)
    job, events, rc = run_job(args, os.path.join(args.out, "faults"), faults)
    report["chaos"] = analyse(job, events, rc, args.steps)
    c = report["chaos"]
    if args.baseline and report["baseline"]["steps_per_s"]:
        report["goodput"] = round(c["steps_per_s"] / report["baseline"]["steps_per_s"], 3)
    with open(os.path.join(args.out, "report.json"), "w") as f:
        json.dump(report, f, indent=1)
    print(f"chaos: {len(c['faults'])} faults over {c['seconds']} s; {c['steps_per_s']} steps/s; "
          f"goodput {report.get('goodput', '-')} (against the baseline run), "
          f"{c.get('goodput_steady', '-')} (against the steady rate); lost steps {c['lost_steps']}; "
          f"identical parameters {c['identical_parameters']}; accuracy {c['accuracy']}")
    print(f"{'t (s)':>7} {'fault':9} {'target':8} {'resumed':>8} {'full':>8} {'gap':>6}  reported by (failures)")
    for f in c["faults"]:
        print(f"{f['t_rel']:7.1f} {f['kind']:9} {f['target']:8} {str(f['resumed_s']):>8} {str(f['full_size_s']):>8} "
              f"{str(f['longest_gap_s']):>6}  {f['reported_by']} {f['errors']}")
    return 0 if c["identical_parameters"] and c["rc"] == 0 else 1


def main():
    args = parse_args()
    if args.worker:
        return work(args)
    if args.supervise:
        return supervise(args)
    return harness(args)


if __name__ == "__main__":
    sys.exit(main())
