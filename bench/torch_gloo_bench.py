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
    args = p.parse_args(argv)
    if not args.sizes:
        p.error("--sizes is empty")
    return args


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


def run_size(dist, torch, nbytes: int, args, rank: int, world: int) -> dict:
    count = nbytes // 4
    # Rank r contributes (r+1) + (i % 7); the sum n(n+1)/2 + n*(i % 7) is a small integer, exact
    # in float32 whatever order the ranks are added in.
    phase = torch.arange(count, dtype=torch.int64).remainder_(7).to(torch.float32)
    pattern = phase + float(rank + 1)
    expected = phase * float(world) + float(world * (world + 1) // 2)
    del phase
    buf = torch.empty(count, dtype=torch.float32)

    times_us: list[float] = []
    wrong = False
    for it in range(args.warmup + args.iters):
        buf.copy_(pattern)  # the allreduce is in place: restore the input outside the timer
        # No barrier between iterations: each rank times its own call and the max over ranks
        # per iteration is taken afterwards.
        t0 = time.perf_counter_ns()
        dist.all_reduce(buf, op=dist.ReduceOp.SUM)
        t1 = time.perf_counter_ns()
        if not torch.equal(buf, expected):
            if not wrong:
                bad = (buf != expected).nonzero()[0].item()
                print(f"torch_gloo_bench[rank {rank}]: element {bad} = {buf[bad].item()}, "
                      f"expected {expected[bad].item()}", file=sys.stderr)
            wrong = True
        if it >= args.warmup:
            times_us.append((t1 - t0) / 1e3)

    # One small collective gathers per-iteration max over ranks plus an "any rank wrong" flag.
    gathered = torch.tensor(times_us + [1.0 if wrong else 0.0], dtype=torch.float64)
    dist.all_reduce(gathered, op=dist.ReduceOp.MAX)
    values = gathered.tolist()
    correct = values.pop() == 0.0
    median = statistics.median(values)
    algbw = nbytes / (median * 1e-6) / 1e9  # nccl-tests conventions, GB = 1e9 B
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
    }


def print_header(world: int) -> None:
    print(f"# torch_gloo_bench: torch.distributed all_reduce (gloo), float32 sum, "
          f"world_size {world}")
    print("# {:>12} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12} {:>8}".format(
        "size(B)", "count", "time(us)", "min(us)", "max(us)", "algbw(GB/s)", "busbw(GB/s)",
        "correct"))


def print_row(r: dict) -> None:
    print("  {:>12} {:>12} {:>12.1f} {:>12.1f} {:>12.1f} {:>12.3f} {:>12.3f} {:>8}".format(
        r["bytes"], r["count"], r["time_us_median"], r["time_us_min"], r["time_us_max"],
        r["algbw_gbps"], r["busbw_gbps"], "yes" if r["correct"] else "NO"), flush=True)


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
            print_header(world)
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
