#!/usr/bin/python3
"""Convergence with compressed gradients: the same DDP training once per configuration, every
run from the same seeds over the same steps, on one "geoccl" process group whose ranks are
labelled as --domains domains, so that the codec runs on the hops between them. Tasks: "digits"
(examples/ddp_digits.py), "cnn" (its small CNN on shifted, noisy digits), "charlm"
(examples/ddp_charlm.py). Prints a table against fp32: the final test accuracy (digits, cnn) or
held-out loss (charlm), what the codec sent per fp32 value, the residual memory.

Configurations: "fp32" (geoccl.allreduce_hook: nothing compressed), CODEC (geoccl.compression_hook
with error feedback) or CODEC-noef (without). On one host it starts the ranks itself:

    PYTHONPATH=build/python /usr/bin/python3 examples/compression_convergence.py --task charlm \\
        --world 4 --domains 2 --configs fp32,int8,topk:0.01,int8-noef,topk:0.01-noef \\
        --json charlm.json -- --steps 2000 --d-model 64 --context 64 --eval-every 250

Arguments after "--" go to the training script (its --help). `--show FILE.json` prints the table
of an earlier run again. Under a launcher that sets RANK,
WORLD_SIZE, MASTER_ADDR and MASTER_PORT (`geoccl run`, the tests' run_ranks) it is one rank and
writes {config: result} to --out.RANK.
"""

import argparse
import datetime
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

METRIC = {"digits": ("accuracy", "test accuracy", +1), "cnn": ("accuracy", "test accuracy", +1),
          "charlm": ("val_loss", "held-out loss", -1)}
# Each task's training script and the arguments that make it that task (the command line's come
# after them and win).
TASKS = {"digits": ("ddp_digits", []),
         "cnn": ("ddp_digits", ["--model", "cnn", "--hidden", "240", "--augment"]),
         "charlm": ("ddp_charlm", [])}


def parse_args(argv):
    if "--" in argv:
        i = argv.index("--")
        argv, train_argv = argv[:i], argv[i + 1:]
    else:
        train_argv = []
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", choices=sorted(METRIC), default="digits")
    p.add_argument("--configs", default="fp32,int8,topk:0.01,int8-noef,topk:0.01-noef",
                   help="comma-separated: fp32, CODEC or CODEC-noef")
    p.add_argument("--domains", type=int, default=2, help="the ranks as this many domains")
    p.add_argument("--world", type=int, default=4, help="ranks to start (launcher mode)")
    p.add_argument("--timeout-s", type=float, default=7200, help="launcher mode: for all runs together")
    p.add_argument("--json", help="launcher mode: write every rank's results here")
    p.add_argument("--out", help="rank mode: write this rank's results to OUT.RANK")
    args = p.parse_args(argv)
    args.train_argv = train_argv
    args.configs = [c for c in args.configs.split(",") if c]
    if not args.configs:
        p.error("--configs is empty")
    for c in args.configs:
        codec = c[:-5] if c.endswith("-noef") else c
        if c != "fp32":
            import geoccl
            try:
                geoccl.compression_name(codec)
            except ValueError as e:
                p.error(f"configuration {c!r}: {e}")
    if args.domains < 1:
        p.error("--domains must be >= 1")
    return args


def training_args(task, config, train_argv, domains):
    """The training script's module and its parsed arguments for one configuration."""
    import importlib

    name, task_argv = TASKS[task]
    mod = importlib.import_module(name)
    argv = ["--backend", "geoccl", "--quiet", *task_argv, *train_argv]
    if name == "ddp_digits" and "--compute-probe" not in train_argv:
        argv += ["--compute-probe", "0"]
    if config != "fp32":
        codec, noef = (config[:-5], True) if config.endswith("-noef") else (config, False)
        argv += ["--compression", codec] + (["--no-error-feedback"] if noef else [])
    return mod, mod.parse_args(argv)


def rank_main(args):
    """One rank: every configuration in turn on one process group."""
    import torch
    import torch.distributed as dist

    import geoccl  # noqa: F401  (registers the backend "geoccl")

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    os.environ["GEOCCL_DOMAIN"] = f"d{rank * args.domains // world}"
    torch.set_num_threads(1)
    dist.init_process_group("geoccl", timeout=datetime.timedelta(seconds=600))
    results = {}
    for config in args.configs:
        mod, targs = training_args(args.task, config, args.train_argv, args.domains)
        try:
            results[config] = mod.train(targs)
        except RuntimeError:
            results[config] = {"error": traceback.format_exc()}
            break  # the group may be unusable now
        if rank == 0:
            print(f"{config}: {describe(args.task, results[config])}", flush=True)
    if args.out:
        with open(f"{args.out}.{rank}", "w") as f:
            json.dump(results, f)
    dist.barrier()
    dist.destroy_process_group()
    return 0 if all("error" not in r for r in results.values()) else 1


def describe(task, r):
    key, name, _ = METRIC[task]
    return f"{name} {r[key]:.4f}, {r['seconds']:.1f} s"


def launcher_main(args):
    """Starts --world ranks of this script on loopback, waits, prints the table."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    tmp = tempfile.mkdtemp(prefix="geoccl-convergence-")
    out = os.path.join(tmp, "result")
    procs, logs = [], []
    argv = [sys.executable, os.path.abspath(__file__), "--task", args.task, "--configs", ",".join(args.configs),
            "--domains", str(args.domains), "--out", out, "--", *args.train_argv]
    t0 = time.monotonic()
    # SIGTERM ends the launcher through the finally below, which ends the ranks too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        for r in range(args.world):
            env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(args.world), LOCAL_RANK=str(r),
                       MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
            logs.append(open(os.path.join(tmp, f"rank{r}.log"), "w+"))
            procs.append(subprocess.Popen(argv, env=env, stdout=logs[-1], stderr=subprocess.STDOUT))
        deadline = t0 + args.timeout_s
        for p in procs:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
    except (subprocess.TimeoutExpired, KeyboardInterrupt):
        print(f"compression_convergence: stopped after {time.monotonic() - t0:.0f} s; logs in {tmp}",
              file=sys.stderr)
        return 1
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for f in logs:
            f.close()
    if any(p.returncode for p in procs):
        for r in range(args.world):
            with open(os.path.join(tmp, f"rank{r}.log")) as f:
                print(f"--- rank {r} (rc {procs[r].returncode}) ---\n" + f.read()[-3000:], file=sys.stderr)
        return 1
    ranks = []
    for r in range(args.world):
        with open(f"{out}.{r}") as f:
            ranks.append(json.load(f))
    print_table(args.task, args.configs, ranks,
                f"{args.task}: {args.world} ranks in {args.domains} domains, training args "
                f"{' '.join(args.train_argv) or '(defaults)'}; {time.monotonic() - t0:.0f} s in all")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"task": args.task, "world": args.world, "domains": args.domains,
                       "train_argv": args.train_argv, "ranks": ranks}, f, indent=1)
    return 0


def print_table(task, configs, ranks, header):
    """The comparison with fp32 as a Markdown table (rank 0's results; parameters compared across
    ranks)."""
    key, name, sign = METRIC[task]
    r0 = ranks[0]
    ref = r0["fp32"] if "fp32" in r0 else None
    classify = key == "accuracy"
    print(f"\n{header}\n")
    cols = [name, "vs fp32"] + (["test loss", "vs fp32"] if classify else []) + [
        "bytes sent per fp32 value", "residuals (rank 0)", "identical on all ranks"]
    print("| configuration | " + " | ".join(cols) + " |")
    print("|---|" + "---:|" * (len(cols) - 1) + "---|")
    for c in configs:
        r = r0[c]
        cells = [f"{r[key]:.4f}"]
        if ref is None or c == "fp32":
            cells.append("-")
        elif classify:  # accuracy: points (0.01 = 1 %)
            cells.append(f"{r[key] - ref[key]:+.4f}")
        else:  # loss: relative, + is better
            cells.append(f"{(r[key] - ref[key]) / abs(ref[key]) * sign:+.2%}")
        if classify:
            cells.append(f"{r['test_loss']:.4f}")
            cells.append("-" if ref is None or c == "fp32" else
                         f"{(r['test_loss'] - ref['test_loss']) / ref['test_loss']:+.1%}")
        st = r.get("compression_stats") or {}
        cells.append(f"{st['bytes_encoded'] / st['elements_encoded']:.3f}" if st.get("elements_encoded")
                     else "4 (fp32)")
        cells.append(f"{r.get('feedback_keys', 0)} keys, {r.get('feedback_bytes', 0) / 2**10:.0f} KiB")
        cells.append("yes" if len({x[c]["param_sha256"] for x in ranks}) == 1 else "NO")
        print(f"| {c} | " + " | ".join(cells) + " |")
    print(f"\nvs fp32: {'accuracy in points (0.01 = 1 %), loss relative' if classify else 'relative, + is better'}. "
          "Bytes sent per fp32 value: what rank 0's encodings took per value it encoded for the WAN "
          "(fp32 = 4).")


def show(path):
    with open(path) as f:
        doc = json.load(f)
    configs = list(doc["ranks"][0])
    print_table(doc["task"], configs, doc["ranks"],
                f"{doc['task']}: {doc['world']} ranks in {doc['domains']} domains, training args "
                f"{' '.join(doc['train_argv']) or '(defaults)'}")


def main(argv):
    if argv[:1] == ["--show"] and len(argv) == 2:
        show(argv[1])  # the table again, from a --json file
        return 0
    args = parse_args(argv)
    if "RANK" in os.environ:
        return rank_main(args)
    return launcher_main(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
