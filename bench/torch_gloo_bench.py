#!/usr/bin/python3
"""torch-gloo baseline: float32 SUM allreduce through torch.distributed's Gloo backend.

Same CLI and JSON as bench/gloo_bench and `geoccl bench` (backend "torch-gloo"), so that
bench/compare.py can put them side by side. Run it with Debian's interpreter, which has
python3-torch:

    geoccl run -n 4 -- /usr/bin/python3 bench/torch_gloo_bench.py --op allreduce \
        --sizes 1M,16M --iters 20 --json out.json

Environment (set by `geoccl run` or torchrun): RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT.
TORCH_GLOO_PORT, if set, replaces MASTER_PORT for torch's TCPStore (MASTER_PORT may already be
taken by geoccl's own store). GEOCCL_BIND_ADDR (default 127.0.0.1) is the address the Gloo
transport should use; torch only lets us choose an interface, so it is mapped to one and passed
as GLOO_SOCKET_IFNAME, unless GLOO_SOCKET_IFNAME is already set.

--hook fp16|powersgd runs each allreduce through torch's built-in DDP communication hook of that
name instead (fp16_compress_hook; powerSGD_hook with --powersgd-rank, error feedback on, from the
second warm-up iteration on), on a bucket that holds the buffer as one matrix (powerSGD compresses
matrices only; a row-major split as square as the size allows). A hook averages, so the result is
checked against the average, within what the hook loses: fp16 1e-2 relative, powerSGD (a low-rank
approximation, rank 1 by default) a relative Frobenius error below 1.5, reported as "rel_error".
"""

from __future__ import annotations

import argparse
import datetime
import fcntl
import json
import os
import socket
import statistics
import struct
import sys
import time

USAGE_EXIT = 2


def parse_size(text: str) -> int:
    """'4K' -> 4096; K/M/G are powers of 1024; must be a positive multiple of 4 (float32)."""
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:].upper(), 1)
    digits = text[:-1] if mult != 1 else text
    if not digits.isdigit() or int(digits) == 0:
        raise argparse.ArgumentTypeError(f"bad size '{text}' (want e.g. 4096, 4K, 1M, 2G)")
    size = int(digits) * mult
    if size % 4:
        raise argparse.ArgumentTypeError(f"size {text} is not a multiple of 4 bytes (float32)")
    return size


def parse_sizes(text: str) -> list[int]:
    return [parse_size(s) for s in text.split(",") if s]


def positive(text: str) -> int:
    v = int(text)
    if v < 1:
        raise argparse.ArgumentTypeError("must be >= 1")
    return v


def non_negative(text: str) -> int:
    v = int(text)
    if v < 0:
        raise argparse.ArgumentTypeError("must be >= 0")
    return v


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--op", default="allreduce", choices=["allreduce"])
    p.add_argument("--sizes", type=parse_sizes, required=True,
                   help="bytes per rank, comma separated; K/M/G = powers of 1024")
    p.add_argument("--iters", type=positive, default=20)
    p.add_argument("--warmup", type=non_negative, default=3)
    p.add_argument("--json", default="", help="rank 0 writes results here")
    p.add_argument("--timeout-s", type=positive, default=300)
    add_hook_args(p)
    args = p.parse_args(argv)
    if not args.sizes:
        p.error("--sizes is empty")
    if args.hook == "powersgd" and args.warmup < POWERSGD_START:
        p.error(f"--hook powersgd needs --warmup >= {POWERSGD_START} (powerSGD compresses from its "
                f"iteration {POWERSGD_START} on)")
    return args


# ---- torch's built-in DDP communication hooks, outside DDP ----

HOOKS = ["none", "fp16", "powersgd"]
POWERSGD_START = 2  # the smallest start_powerSGD_iter torch allows with error feedback
# What each hook loses, as the largest relative error of a result still called correct.
HOOK_TOLERANCE = {"none": 0.0, "fp16": 1e-2, "powersgd": 1.5}


def add_hook_args(p):
    p.add_argument("--hook", choices=HOOKS, default="none",
                   help="run every allreduce through this built-in torch DDP comm hook "
                        "(fp16_compress_hook, powerSGD_hook); default: plain all_reduce")
    p.add_argument("--powersgd-rank", type=positive, default=1,
                   help="--hook powersgd: matrix_approximation_rank (default: torch's 1)")


class FlatBucket:
    """What a DDP comm hook reads of a torch GradBucket (which Python cannot construct): the flat
    buffer, views of it with the gradients' shapes, index and is_last."""

    def __init__(self, index, buffer, shapes, last):
        self._index, self._buffer, self._last = index, buffer, last
        self._views, off = [], 0
        for shape in shapes:
            n = 1
            for d in shape:
                n *= d
            self._views.append(buffer[off:off + n].view(shape))
            off += n
        if off != buffer.numel():
            raise ValueError(f"bucket {index}: shapes hold {off} elements, the buffer {buffer.numel()}")

    def buffer(self):
        return self._buffer

    def gradients(self):
        return self._views

    def parameters(self):
        return self._views

    def index(self):
        return self._index

    def is_last(self):
        return self._last

    def set_buffer(self, tensor):
        self._buffer = tensor


def make_hook(args):
    """(hook, state) for --hook; the hook takes (state, bucket) and returns a Future[Tensor] of
    the bucket's average."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd

    if args.hook == "fp16":
        return default_hooks.fp16_compress_hook, None
    if args.hook == "powersgd":
        state = psgd.PowerSGDState(process_group=None, matrix_approximation_rank=args.powersgd_rank,
                                   start_powerSGD_iter=POWERSGD_START, random_seed=0)
        return psgd.powerSGD_hook, state
    raise ValueError(f"no hook {args.hook!r}")


def hook_description(args):
    if args.hook == "fp16":
        return "fp16_compress_hook"
    if args.hook == "powersgd":
        return f"powerSGD_hook rank {args.powersgd_rank}"
    return "none"


def matrix_shape(count: int) -> tuple[int, int]:
    """(rows, cols), rows * cols == count, rows the largest divisor <= sqrt(count)."""
    rows = max(1, int(count ** 0.5))
    while count % rows:
        rows -= 1
    return rows, count // rows


def wire_elements(args, shapes) -> int:
    """Elements each rank sends per allreduce of these gradients with the hook (fp32 units for
    powerSGD's P and Q, fp16 units for fp16): what the hook reduces the traffic to."""
    total = 0
    for shape in shapes:
        n = 1
        for d in shape:
            n *= d
        if args.hook == "powersgd" and len(shape) > 1:
            rows, cols = shape[0], n // shape[0]
            r = min(rows, cols, args.powersgd_rank)
            # torch's _should_compress: compressed only where it saves at least 2x
            total += (rows + cols) * r if (rows + cols) * r * 2 <= n else n
        else:
            total += n
    return total


def require_env(name: str) -> str:
    v = os.environ.get(name, "")
    if not v:
        raise SystemExit(f"torch_gloo_bench: environment variable {name} is not set")
    return v


def interface_for_address(addr: str) -> str | None:
    """Name of the interface whose IPv4 address is `addr` (Linux SIOCGIFADDR), or None."""
    try:
        wanted = socket.inet_aton(socket.gethostbyname(addr))
    except OSError:
        return None
    SIOCGIFADDR = 0x8915
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _, name in socket.if_nameindex():
            req = struct.pack("256s", name.encode()[:15])
            try:
                res = fcntl.ioctl(s.fileno(), SIOCGIFADDR, req)
            except OSError:
                continue  # interface without an IPv4 address
            if res[20:24] == wanted:
                return name
    return None


def choose_gloo_interface(rank: int) -> None:
    """Make torch's Gloo device use GEOCCL_BIND_ADDR (default loopback), as gloo_bench does.

    Without GLOO_SOCKET_IFNAME torch resolves the hostname, which may pick a non-loopback
    address (or a wrong one inside a network namespace).
    """
    if os.environ.get("GLOO_SOCKET_IFNAME"):
        return
    addr = os.environ.get("GEOCCL_BIND_ADDR") or "127.0.0.1"
    iface = interface_for_address(addr)
    if iface is None:
        print(f"torch_gloo_bench[rank {rank}]: warning: no interface has address {addr}; "
              "leaving the choice to torch", file=sys.stderr)
        return
    os.environ["GLOO_SOCKET_IFNAME"] = iface


def emulator_cpu_s() -> float:
    """Seconds of CPU the test bed's emulator (GEOCCL_WAN_EMULATOR_PID, set by `geoccl run --wan`)
    has used, every thread; -1 off the test bed."""
    pid = os.environ.get("GEOCCL_WAN_EMULATOR_PID")
    if not pid:
        return -1.0
    total, seen = 0.0, False
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat", encoding="ascii") as f:
                    total += int(f.read().split()[0]) * 1e-9
                    seen = True
            except (OSError, ValueError, IndexError):
                pass
    except OSError:
        return -1.0
    return total if seen else -1.0


def run_size(dist, torch, nbytes: int, args, rank: int, world: int) -> dict:
    count = nbytes // 4
    # A fresh hook state per size: powerSGD keeps per-bucket state (error, P and Q) of one shape.
    hook = make_hook(args) if args.hook != "none" else None
    # Rank r contributes (r+1) + (i % 7); the sum n(n+1)/2 + n*(i % 7) is a small integer, exact
    # in float32 whatever order the ranks are added in.
    phase = torch.arange(count, dtype=torch.int64).remainder_(7).to(torch.float32)
    pattern = phase + float(rank + 1)
    expected = phase * float(world) + float(world * (world + 1) // 2)
    del phase
    buf = torch.empty(count, dtype=torch.float32)
    shape = matrix_shape(count)
    if hook is not None:
        expected = expected / world  # the hooks average

    times_us: list[float] = []
    wrong = False
    rel_error = 0.0
    cpu_s = 0.0  # this process's CPU (every thread) in the timed calls
    emulator_s = -1.0
    for it in range(args.warmup + args.iters):
        buf.copy_(pattern)  # the allreduce is in place: restore the input outside the timer
        if it == args.warmup and rank == 0:
            emulator_s = emulator_cpu_s()
        c0 = time.process_time()
        # No barrier between iterations: each rank times its own call and the max over ranks
        # per iteration is taken afterwards.
        t0 = time.perf_counter_ns()
        if hook is None:
            dist.all_reduce(buf, op=dist.ReduceOp.SUM)
            out = buf
        else:
            out = hook[0](hook[1], FlatBucket(0, buf, [shape], True)).wait()
        t1 = time.perf_counter_ns()
        c1 = time.process_time()
        if hook is None:
            if not torch.equal(out, expected):
                if not wrong:
                    bad = (out != expected).nonzero()[0].item()
                    print(f"torch_gloo_bench[rank {rank}]: element {bad} = {out[bad].item()}, "
                          f"expected {expected[bad].item()}", file=sys.stderr)
                wrong = True
        elif it >= args.warmup:
            err = ((out.double() - expected).norm() / expected.double().norm()).item()
            rel_error = max(rel_error, err)
            if not err <= HOOK_TOLERANCE[args.hook]:  # NaN fails too
                if not wrong:
                    print(f"torch_gloo_bench[rank {rank}]: {hook_description(args)}: relative error "
                          f"{err:.3g} > {HOOK_TOLERANCE[args.hook]}", file=sys.stderr)
                wrong = True
        if it >= args.warmup:
            times_us.append((t1 - t0) / 1e3)
            cpu_s += c1 - c0
    if emulator_s >= 0:
        emulator_s = emulator_cpu_s() - emulator_s

    # One small collective gathers per-iteration max over ranks plus an "any rank wrong" flag.
    gathered = torch.tensor(times_us + [rel_error, 1.0 if wrong else 0.0], dtype=torch.float64)
    dist.all_reduce(gathered, op=dist.ReduceOp.MAX)
    cpu = torch.tensor([cpu_s], dtype=torch.float64)
    dist.all_reduce(cpu, op=dist.ReduceOp.SUM)
    # As geoccl bench counts it: every rank's CPU over the bytes all ranks passed, timed calls.
    user_bytes = nbytes * world * max(args.iters, 1)
    extra_cpu = {"cpu_ns_per_byte": cpu.item() * 1e9 / user_bytes}
    if emulator_s >= 0:
        extra_cpu["emulator_cpu_ns_per_byte"] = emulator_s * 1e9 / user_bytes
    values = gathered.tolist()
    correct = values.pop() == 0.0
    rel_error = values.pop()
    median = statistics.median(values)
    algbw = nbytes / (median * 1e-6) / 1e9  # nccl-tests conventions, GB = 1e9 B
    extra = {}
    if hook is not None:
        wire = wire_elements(args, [shape]) * (2 if args.hook == "fp16" else 4)
        extra = {"hook": hook_description(args), "rel_error": rel_error,
                 "compression_ratio": nbytes / wire}
    return {
        "backend": "torch-gloo",
        "op": "allreduce",
        "dtype": "f32",
        "bytes": nbytes,
        "count": count,
        "world_size": world,
        "iters": args.iters,
        "time_us_median": median,
        "time_us_min": min(values),
        "time_us_max": max(values),
        "algbw_gbps": algbw,
        "busbw_gbps": algbw * 2 * (world - 1) / world,
        "correct": correct,
        **extra_cpu,
        **extra,
    }


def print_header(world: int, args) -> None:
    how = "float32 sum" if args.hook == "none" else f"float32 average through {hook_description(args)}"
    print(f"# torch_gloo_bench: torch.distributed all_reduce (gloo), {how}, "
          f"world_size {world}")
    print("# {:>12} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12} {:>9} {:>8}".format(
        "size(B)", "count", "time(us)", "min(us)", "max(us)", "algbw(GB/s)", "busbw(GB/s)",
        "cpu_ns/B", "correct"))


def print_row(r: dict) -> None:
    emu = r.get("emulator_cpu_ns_per_byte")
    print("  {:>12} {:>12} {:>12.1f} {:>12.1f} {:>12.1f} {:>12.3f} {:>12.3f} {:>9.3f} {:>8}{}".format(
        r["bytes"], r["count"], r["time_us_median"], r["time_us_min"], r["time_us_max"],
        r["algbw_gbps"], r["busbw_gbps"], r["cpu_ns_per_byte"], "yes" if r["correct"] else "NO",
        "" if emu is None else "  emulator_cpu_ns/B %.3f" % emu), flush=True)


def write_json(path: str, results: list[dict]) -> None:
    tmp = path + ".tmp"  # write then rename: a reader never sees a truncated file
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(results, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    rank = int(require_env("RANK"))
    world = int(require_env("WORLD_SIZE"))
    addr = os.environ.get("MASTER_ADDR") or "127.0.0.1"
    port = os.environ.get("TORCH_GLOO_PORT") or require_env("MASTER_PORT")
    choose_gloo_interface(rank)

    # Imported late so that --help and argument errors do not pay for importing torch.
    import torch
    import torch.distributed as dist

    # One intra-op thread: the timed work runs on Gloo's own threads, and with several ranks per
    # host, idle OpenMP workers spinning after the (untimed) copy/verify would steal CPU from
    # the other ranks' transfers.
    torch.set_num_threads(1)
    timeout = datetime.timedelta(seconds=args.timeout_s)
    dist.init_process_group("gloo", init_method=f"tcp://{addr}:{port}", rank=rank,
                            world_size=world, timeout=timeout)
    try:
        if rank == 0:
            print_header(world, args)
        results = []
        for nbytes in args.sizes:
            results.append(run_size(dist, torch, nbytes, args, rank, world))
            if rank == 0:
                print_row(results[-1])
        if rank == 0 and args.json:
            write_json(args.json, results)
    finally:
        dist.destroy_process_group()
    if not all(r["correct"] for r in results):
        print(f"torch_gloo_bench[rank {rank}]: allreduce produced wrong results", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
