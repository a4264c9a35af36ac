#!/usr/bin/python3
"""Data-parallel training of a small MLP on scikit-learn's bundled digits data set (no download),
with torch DistributedDataParallel over the "geoccl" backend (or "gloo", for comparison).

Run it under any launcher that sets RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT:

    geoccl run -n 3 -- /usr/bin/python3 examples/ddp_digits.py --backend geoccl
    geoccl run -n 4 -- /usr/bin/python3 examples/ddp_digits.py --label-domains 2 --compression int8
    geoccl run --wan bench/scenarios/seed.toml -n 6 -- /usr/bin/python3 examples/ddp_digits.py
    torchrun --nproc_per_node 2 --redirects 1 --tee 1 --log_dir /tmp/tr examples/ddp_digits.py

(PYTHONPATH must reach the built package: PYTHONPATH=<build>/python.) Rank 0 prints one line per
epoch (loss, test accuracy, steps/s, mean step time) and a final summary; --json writes every
rank's result (accuracy, parameter checksum, timings) for tests and the demo.

--compression CODEC (int8, int4, fp16, bf16, topk:0.01, ...) averages the gradients with
geoccl.compression_hook: the codec on the hops between domains (ranks in more than one
GEOCCL_DOMAIN; within one domain nothing is compressed), with error feedback unless
--no-error-feedback.
"""

import argparse
import datetime
import hashlib
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


# torch's built-in DDP communication hooks, by the name --hook takes.
TORCH_HOOKS = ["torch-allreduce", "fp16", "bf16", "powersgd", "batched-powersgd"]


def register_torch_hook(model, name, start_iter):
    """Registers torch's built-in hook `name` on the DDP `model` (default process group)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd

    if name in ("powersgd", "batched-powersgd"):
        if name == "batched-powersgd":
            _fix_batched_powersgd(psgd)
        state = psgd.PowerSGDState(process_group=None, matrix_approximation_rank=1,
                                   start_powerSGD_iter=start_iter, random_seed=0)
        hook = psgd.powerSGD_hook if name == "powersgd" else psgd.batched_powerSGD_hook
        model.register_comm_hook(state, hook)
        return
    if name == "bf16":
        # torch 1.13's DDP refuses a hook *named* bf16_compress_hook unless CUDA 11+ and NCCL 2.10+
        # are present (NCCL's bf16 support); the same function runs here under another name.
        def bf16_hook(state, bucket):
            return default_hooks.bf16_compress_hook(state, bucket)
        model.register_comm_hook(None, bf16_hook)
        return
    hook = {"torch-allreduce": default_hooks.allreduce_hook, "fp16": default_hooks.fp16_compress_hook}[name]
    model.register_comm_hook(None, hook)


def _fix_batched_powersgd(psgd):
    """torch 1.13's batched_powerSGD_hook passes a 2-D matrix to _orthogonalize, which asserts a
    batch of matrices (3-D), so the hook fails on every backend. Where that is so, a 2-D matrix is
    orthogonalized as a batch of one (a view: in place, as the hook expects)."""
    orig = psgd._orthogonalize
    try:
        orig(torch.ones(4, 1))
        return
    except AssertionError:
        pass

    def orthogonalize(matrices, epsilon=0):
        return orig(matrices.unsqueeze(0) if matrices.dim() == 2 else matrices, epsilon)

    psgd._orthogonalize = orthogonalize


def add_ddp_args(p, bucket_mb):
    """The DDP, hook and compression flags (shared with examples/ddp_charlm.py)."""
    p.add_argument("--bucket-mb", type=float, default=bucket_mb, help="DDP bucket_cap_mb")
    p.add_argument("--first-bucket-mb", type=float, default=None,
                   help="cap of DDP's first bucket after its rebuild (torch's "
                        "dist._DEFAULT_FIRST_BUCKET_BYTES, 1 MiB by default)")
    p.add_argument("--timeout", type=float, default=300.0, help="process-group timeout, seconds")
    p.add_argument("--json", default=None, help="write this rank's result to JSON (rank suffix added)")
    p.add_argument("--quiet", action="store_true", help="only the final line")
    p.add_argument("--hook", choices=["none", "allreduce", *TORCH_HOOKS], default="allreduce",
                   help="DDP comm hook: geoccl.allreduce_hook (--backend geoccl only), DDP's default "
                        "(none), or one of torch's built-in hooks (any backend)")
    p.add_argument("--compression", default=None, metavar="CODEC",
                   help="geoccl.compression_hook with this codec on the hops between domains "
                        "(none|fp16|bf16|int8|int4|topk:RATIO[@allgather|@ring], or auto: per bucket, the "
                        "least lossy that fits its compute window; --backend geoccl)")
    p.add_argument("--no-error-feedback", dest="error_feedback", action="store_false",
                   help="with --compression: drop what the codec loses instead of carrying it "
                        "into the next step")
    p.add_argument("--powersgd-start", type=int, default=2,
                   help="powerSGD hooks: the step from which gradients are compressed")
    p.add_argument("--label-domains", type=int, default=0, metavar="D",
                   help="on one host: label the ranks as D domains (GEOCCL_DOMAIN d0, d1, ... in "
                        "contiguous blocks of ranks), so that geoccl treats them as regions; "
                        "0 = leave GEOCCL_DOMAIN as it is")


def label_domains(args):
    """--label-domains D: GEOCCL_DOMAIN of this rank, before the process group reads it."""
    if args.label_domains <= 0:
        return
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if args.label_domains > world:
        raise SystemExit(f"--label-domains {args.label_domains} exceeds the world size {world}")
    os.environ["GEOCCL_DOMAIN"] = f"d{rank * args.label_domains // world}"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", default="geoccl", choices=["geoccl", "gloo"])
    p.add_argument("--steps", type=int, default=300, help="optimizer steps in total")
    p.add_argument("--batch-size", type=int, default=32, help="per-rank batch size")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--model", choices=["mlp", "cnn"], default="mlp",
                   help="an MLP (64-hidden-hidden-10) or a small CNN (2 convolutions, fc to hidden)")
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--augment", action="store_true",
                   help="train on shifted (+-1 pixel), noisy (sigma 0.1) images, test on 4 such copies "
                        "of the held-out ones: harder")
    p.add_argument("--seed", type=int, default=0)
    add_ddp_args(p, bucket_mb=25.0)
    p.add_argument("--compute-probe", type=int, default=50,
                   help="steps timed without any communication first, to split step time into "
                        "compute and exposed communication (0 = skip)")
    args = p.parse_args(argv)
    check_compression_args(p, args)
    return args


def check_compression_args(parser, args):
    """--compression needs geoccl's own hook; a bad codec spelling is an argument error."""
    if args.compression is None:
        if not args.error_feedback:
            parser.error("--no-error-feedback needs --compression")
        return
    if args.backend != "geoccl":
        parser.error("--compression needs --backend geoccl")
    if args.hook != "allreduce":
        parser.error("--compression replaces the hook: leave --hook at its default")
    import geoccl
    if args.compression == "auto":
        return
    try:
        args.compression = geoccl.compression_name(args.compression)
    except ValueError as e:
        parser.error(str(e))


def set_first_bucket(args):
    """--first-bucket-mb: torch reads the first bucket's cap from this module attribute."""
    if args.first_bucket_mb is not None:
        dist._DEFAULT_FIRST_BUCKET_BYTES = int(args.first_bucket_mb * 2**20)


def register_hook(model, args):
    """Registers the DDP comm hook `args` ask for; returns the geoccl hook state, or None."""
    if args.compression is not None:
        import geoccl
        state = geoccl.GeocclHookState(compression=args.compression,
                                       error_feedback=args.error_feedback)
        model.register_comm_hook(state, geoccl.compression_hook)
        return state
    if args.backend == "geoccl" and args.hook == "allreduce":
        import geoccl
        state = geoccl.GeocclHookState()
        model.register_comm_hook(state, geoccl.allreduce_hook)
        return state
    if args.hook in TORCH_HOOKS:
        register_torch_hook(model, args.hook, args.powersgd_start)
    return None


def compression_result(args, state):
    """What a result records of the codec: its name, error feedback, and this rank's counters
    (residual memory included); the residuals are dropped afterwards."""
    out = {"compression": args.compression, "error_feedback": args.error_feedback if args.compression else None}
    if args.compression is not None and state is not None:
        out.update({"feedback_keys": state.feedback_keys, "feedback_bytes": state.feedback_bytes,
                    "forgotten_keys": state.forgotten_keys, "compression_stats": state.compression_stats})
        state.forget()
    return out


def load_data(seed):
    from sklearn.datasets import load_digits

    d = load_digits()
    x = torch.tensor(d.data, dtype=torch.float32) / 16.0
    y = torch.tensor(d.target, dtype=torch.int64)
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(len(y), generator=g)
    x, y = x[perm], y[perm]
    n_train = 1500
    return x[:n_train], y[:n_train], x[n_train:], y[n_train:]


def augment(x, g, shift=1, noise=0.1):
    """Each 8x8 image moved by up to `shift` pixels in each direction (zeros shifted in) plus
    gaussian noise, drawn from generator g: a harder, unbounded version of the data."""
    n = x.shape[0]
    img = F.pad(x.view(n, 1, 8, 8), (shift, shift, shift, shift))
    off = torch.randint(0, 2 * shift + 1, (n, 2), generator=g)
    out = torch.empty(n, 1, 8, 8)
    for dy in range(2 * shift + 1):
        for dx in range(2 * shift + 1):
            sel = (off[:, 0] == dy) & (off[:, 1] == dx)
            out[sel] = img[sel, :, dy:dy + 8, dx:dx + 8]
    return (out + noise * torch.randn(out.shape, generator=g)).view(n, 64)


class CNN(nn.Module):
    """Two 3x3 convolutions (16, 32 channels), a 2x2 max-pool and two linear layers (130,330
    parameters with hidden 240, most of them in fc1)."""

    def __init__(self, hidden):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc1 = nn.Linear(32 * 4 * 4, hidden)
        self.fc2 = nn.Linear(hidden, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x.view(-1, 1, 8, 8)))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def make_model(args):
    return CNN(args.hidden) if args.model == "cnn" else MLP(args.hidden)


class MLP(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.fc1 = nn.Linear(64, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, 10)

    def forward(self, x):
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


def accuracy(model, x, y):
    with torch.no_grad():
        return (model(x).argmax(dim=1) == y).float().mean().item()


def param_checksum(model):
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def codec_label(args):
    if args.compression is None:
        return ""
    return f"  compression {args.compression}{'+EF' if args.error_feedback else ' (no EF)'}"


def measure_compute_ms(args, x, y):
    """Median time of the same training step (forward, backward, optimizer) on a local copy of the
    model, with no communication at all: the step's compute floor."""
    model = make_model(args)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    times = []
    for i in range(args.compute_probe):
        idx = torch.arange(i * args.batch_size, (i + 1) * args.batch_size) % len(y)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x[idx]), y[idx]).backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    times.sort()
    return 1000 * times[len(times) // 2]


def main(argv=None):
    return run(parse_args(argv), train)


def run(args, train_fn):
    """A launched rank's life (shared with examples/ddp_charlm.py): the default process group,
    train_fn(args), its result as JSON when --json, and an orderly end."""
    label_domains(args)
    if args.backend == "geoccl":
        import geoccl  # noqa: F401  (registers the backend "geoccl")
    torch.set_num_threads(1)
    dist.init_process_group(args.backend, timeout=datetime.timedelta(seconds=args.timeout))
    result = train_fn(args)
    if args.json:
        with open(f"{args.json}.{result['rank']}", "w") as f:
            json.dump(result, f)
    dist.barrier()
    dist.destroy_process_group()
    return 0


def train(args):
    """Trains on the default process group (initialized by the caller); returns this rank's
    result (what --json writes)."""
    torch.manual_seed(args.seed)
    rank, world = dist.get_rank(), dist.get_world_size()

    x_train, y_train, x_test, y_test = load_data(args.seed)
    aug = None
    if args.augment:
        # Four perturbed copies of the held-out images, the same in every run.
        x_test = augment(x_test.repeat(4, 1), torch.Generator().manual_seed(12345))
        y_test = y_test.repeat(4)
        aug = torch.Generator().manual_seed(args.seed + 1 + rank)
    compute_ms = measure_compute_ms(args, x_train, y_train) if args.compute_probe > 0 else 0.0
    # Every rank starts from different weights on purpose: DDP's broadcast must align them.
    torch.manual_seed(args.seed + 1000 * rank)
    set_first_bucket(args)
    model = DDP(make_model(args), bucket_cap_mb=args.bucket_mb)
    state = register_hook(model, args)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    # Each rank draws its own shard of every global batch.
    g = torch.Generator().manual_seed(args.seed)
    per_epoch = max(1, len(y_train) // (args.batch_size * world))
    epochs = (args.steps + per_epoch - 1) // per_epoch
    step = 0
    step_times = []
    t_start = time.perf_counter()
    for epoch in range(epochs):
        perm = torch.randperm(len(y_train), generator=g)
        t_epoch = time.perf_counter()
        n_epoch, loss_sum = 0, 0.0
        for b in range(per_epoch):
            if step >= args.steps:
                break
            base = b * args.batch_size * world + rank * args.batch_size
            idx = perm[base:base + args.batch_size]
            xb = x_train[idx] if aug is None else augment(x_train[idx], aug)
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(xb), y_train[idx])
            loss.backward()  # DDP allreduces the gradient buckets here
            opt.step()
            step_times.append(time.perf_counter() - t0)
            loss_sum += loss.item()
            n_epoch += 1
            step += 1
        dt = time.perf_counter() - t_epoch
        if rank == 0 and not args.quiet:
            acc = accuracy(model.module, x_test, y_test)
            line = (f"epoch {epoch + 1:3d}/{epochs}  step {step:5d}  loss {loss_sum / max(n_epoch, 1):.4f}  "
                    f"test acc {acc:.4f}  {n_epoch / dt:8.1f} steps/s  "
                    f"step {1000 * dt / max(n_epoch, 1):7.2f} ms")
            print(line, flush=True)
    total = time.perf_counter() - t_start
    acc = accuracy(model.module, x_test, y_test)
    with torch.no_grad():
        test_loss = F.cross_entropy(model.module(x_test), y_test).item()
    step_times.sort()
    result = {
        "backend": args.backend,
        "hook": args.hook,
        "model": args.model,
        "augment": args.augment,
        "rank": rank,
        "world_size": world,
        "steps": step,
        "accuracy": acc,
        "test_loss": test_loss,
        "param_sha256": param_checksum(model.module),
        "seconds": total,
        "steps_per_s": step / total if total > 0 else 0.0,
        "step_ms_median": 1000 * step_times[len(step_times) // 2] if step_times else 0.0,
        "step_ms_mean": 1000 * sum(step_times) / len(step_times) if step_times else 0.0,
        "compute_ms": compute_ms,
    }
    med = result["step_ms_median"]
    result["exposed_comm_share"] = max(0.0, med - compute_ms) / med if med > 0 and compute_ms > 0 else None
    result.update(compression_result(args, state))
    if rank == 0:
        print(f"final: backend {args.backend}{codec_label(args)}  world {world}  steps {step}  test acc {acc:.4f}  "
              f"{result['steps_per_s']:.1f} steps/s  step median {result['step_ms_median']:.2f} ms  "
              f"mean {result['step_ms_mean']:.2f} ms  compute {compute_ms:.2f} ms  total {total:.1f} s",
              flush=True)
    return result


if __name__ == "__main__":
    sys.exit(main())
