#!/usr/bin/env python3
"""Side-by-side benchmarks: geoccl vs Gloo (and torch's Gloo backend), on loopback or on the
emulated WAN, against the physical limit of the scenario.

Every backend runs under the same launcher with the same flags and rank placement, and writes
the shared JSON schema (backend, op, dtype, bytes, count, world_size, iters,
time_us_median/min/max, algbw_gbps, busbw_gbps, correct). Backends are interleaved
(A B C A B C ... for --rounds rounds) so that slow drift of the machine, e.g. another job,
hits all of them alike instead of biasing whichever ran last.

Loopback (as before):

    compare.py --geoccl BUILD/tools/geoccl/geoccl --gloo BUILD/bench/gloo_bench \
        [--torch-gloo bench/torch_gloo_bench.py] -n 2,4 --sizes 1M,4M,16M,96M \
        --iters 10 --rounds 2 [--json FILE]

Emulated WAN (each run is `geoccl run --wan S --domains D --host-cc C -n N -- PROGRAM ...`):

    compare.py --geoccl BUILD/tools/geoccl/geoccl --gloo BUILD/bench/gloo_bench \
        --torch-gloo bench/torch_gloo_bench.py --wan bench/scenarios/seed.toml \
        --domains a:2,b:2,c:2 --host-cc bbr --sizes 4K,256K,4M,32M,96M --iters 3 --rounds 1 \
        [--backends geoccl,gloo,torch-gloo] [--algo ring] [--train resnet50] \
        [--json FILE] [--plot FILE.png]

With --wan the table also gives the physical limit of an allreduce of S bytes across the k
domains, limit = 2(k-1)/k * 8S / B + RTT, where B is the bottleneck rate (the smallest uplink
or per-pair rate among the domains used, bits/s; a pair whose direct rate is below the way
through a third domain used counts at that way's narrower leg, as two-hop paths can send it
round) and RTT the largest pair RTT of the scenario,
and each backend's time as a multiple of it. Beside it, the small-message bound: the largest
one-way delay between two of the domains used (a small allreduce needs one message from every
other domain, and all can be sent at once), and each backend's time as a multiple of that. --train resnet50 replays a ResNet-50 data-parallel
step (bench/train_step.cc, bench/train_step_torch.py) on each backend, alternately.

--compression CODEC (none|fp16|bf16|int8|int4|int2|int2-sr|topk[-int8|-int4|-int2]:RATIO
[@allgather|@ring]) compresses geoccl's
hops between domains (`geoccl bench --compression`, `train_step --compression`) and runs
torch-gloo through torch's closest built-in DDP comm hook (bench/torch_gloo_bench.py --hook):
fp16_compress_hook for fp16 and bf16 (torch 1.13's gloo has no bfloat16 allreduce), powerSGD_hook
(rank --powersgd-rank) for int8, int4, int2 and top-k, for which torch has no quantizing or
sparsifying hook: a low-rank approximation at another compression ratio stands in, and the table says so.
Gloo itself (gloo_bench, train_step --backend gloo) has no compression and stays fp32. Sizes,
placement, launcher and rounds are the same for every backend.

Exits nonzero if any run failed, timed out, wrote no or malformed JSON, or reported
correct=false. Standard library only (tomllib: python >= 3.11 for --wan); the plot uses gnuplot.
"""

import argparse
import datetime
import json
import os
import platform
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

REQUIRED_KEYS = {
    "backend": str, "op": str, "dtype": str, "bytes": int, "count": int, "world_size": int,
    "iters": int, "time_us_median": (int, float), "time_us_min": (int, float),
    "time_us_max": (int, float), "algbw_gbps": (int, float), "busbw_gbps": (int, float),
    "correct": bool,
}
TRAIN_KEYS = {
    "backend": str, "op": str, "world_size": int, "steps": int, "bytes": int,
    "step_ms_median": (int, float), "compute_ms_median": (int, float),
    "exposed_comm_share_median": (int, float), "correct": bool,
}
ALL_BACKENDS = ["geoccl", "geoccl-tcp", "geoccl-thresholds", "geoccl-direct", "geoccl-wide", "geoccl-fp32", "gloo",
                "torch-gloo", "torch-gloo-fp16"]
# Variants of geoccl: (name, environment the ranks get); their JSON says "geoccl".
# geoccl-thresholds: the planner's size thresholds instead of its cost model (no path probe).
# geoccl-direct: no two-hop paths for bulk data (every pair direct). geoccl-wide: every WAN peer's
# frames striped over all S streams even while several WAN peers are busy (stripe=wide).
# GEOCCL_EXPERIMENT keys (docs/configuration.md) are appended to the caller's GEOCCL_EXPERIMENT, so
# a script's own experiment settings apply to every variant too (a later key wins).
GEOCCL_VARIANTS = {"geoccl-tcp": ["GEOCCL_TRANSPORT=tcp"],
                   "geoccl-thresholds": ["GEOCCL_EXPERIMENT=plan_probe=0"],
                   "geoccl-direct": ["GEOCCL_EXPERIMENT=two_hop_gain=0"],
                   "geoccl-wide": ["GEOCCL_EXPERIMENT=stripe=wide"]}
# Baselines for --compression, run in the same interleaved rounds when --backends names them:
# geoccl-fp32 is geoccl without the codec, torch-gloo-fp16 torch-gloo with fp16_compress_hook
# whatever the codec. Their JSON says "geoccl" / "torch-gloo".
BASE_OF = {"geoccl-tcp": "geoccl", "geoccl-thresholds": "geoccl", "geoccl-direct": "geoccl", "geoccl-wide": "geoccl",
           "geoccl-fp32": "geoccl",
           "torch-gloo-fp16": "torch-gloo"}
HERE = os.path.dirname(os.path.abspath(__file__))


def parse_size(text):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:].upper(), 1)
    digits = text[:-1] if mult != 1 else text
    if not digits.isdigit() or int(digits) == 0:
        raise argparse.ArgumentTypeError("bad size '%s' (want e.g. 4096, 4K, 1M, 2G)" % text)
    return int(digits) * mult


def parse_sizes(text):
    # Keep the user's spelling to pass through unchanged; the byte values are for matching.
    specs = [s for s in text.split(",") if s]
    for s in specs:
        parse_size(s)
    return specs


def parse_world_sizes(text):
    try:
        sizes = [int(s) for s in text.split(",") if s]
    except ValueError:
        raise argparse.ArgumentTypeError("bad world size list '%s'" % text)
    if not sizes or any(n < 1 for n in sizes):
        raise argparse.ArgumentTypeError("world sizes must be >= 1")
    return sizes


def parse_domains(text):
    """'a:2,b:2,c:2' -> [('a', 2), ('b', 2), ('c', 2)]"""
    out = []
    for part in [p for p in text.split(",") if p]:
        name, _, count = part.partition(":")
        if not name or not count.isdigit() or int(count) < 1:
            raise argparse.ArgumentTypeError("bad --domains entry '%s' (want NAME:RANKS)" % part)
        out.append((name, int(count)))
    if not out:
        raise argparse.ArgumentTypeError("--domains is empty")
    return out


CODECS = ("none", "fp16", "bf16", "int8", "int4", "int2", "int2-sr")
TOPK_FORMS = ("topk", "topk-int8", "topk-int4", "topk-int2")


def parse_compression(text):
    """A codec spelling of geoccl's Compression::parse (checked here without importing geoccl)."""
    codec, _, algo = text.partition("@")
    ok = codec in CODECS
    form, colon, ratio_text = codec.partition(":")
    if form in TOPK_FORMS and colon:
        try:
            ratio = float(ratio_text)
            ok = 0 < ratio <= 1
        except ValueError:
            ok = False
    if not ok or (algo and algo not in ("allgather", "ring")):
        raise argparse.ArgumentTypeError(
            "bad compression '%s' (want none|fp16|bf16|int8|int4|int2|int2-sr|topk:RATIO|"
            "topk-int8:RATIO|topk-int4:RATIO|topk-int2:RATIO, optionally "
            "@allgather or @ring)" % text)
    return text


def torch_hook_for(codec, powersgd_rank):
    """(torch-gloo --hook name or None, note for the table) standing in for geoccl's `codec`."""
    base = codec.partition("@")[0]
    if base == "none":
        return None, None
    if base == "fp16":
        return "fp16", "torch-gloo: fp16_compress_hook (the same codec, on every hop)"
    if base == "bf16":
        return "fp16", ("torch-gloo: fp16_compress_hook stands in for bf16 (torch 1.13's gloo has "
                        "no bfloat16 allreduce, so bf16_compress_hook cannot run on it)")
    return "powersgd", ("torch-gloo: powerSGD_hook rank %d stands in for %s: torch has no "
                        "quantizing or sparsifying hook; a low-rank approximation (with its own "
                        "error feedback) at another compression ratio, see each result's "
                        "compression_ratio" % (powersgd_rank, base))


def positive(text):
    v = int(text)
    if v < 1:
        raise argparse.ArgumentTypeError("must be >= 1")
    return v


# ---------------------------------------------------------------------------------------------
# Scenario files (format: docs/testbed.md) -> physical limit

_RATE = {"bit": 1.0, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12}
_DUR = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0}


def _split_unit(text):
    text = str(text).strip().lower()
    i = len(text)
    while i > 0 and not (text[i - 1].isdigit() or text[i - 1] == "."):
        i -= 1
    return float(text[:i]), text[i:].strip()


def parse_rate(text):
    """bits/s; 0 (no limit) -> None."""
    value, unit = _split_unit(text)
    if unit == "" and value == 0:
        return None
    if unit not in _RATE:
        raise ValueError("bad rate '%s'" % text)
    return value * _RATE[unit] or None


def parse_duration(text):
    value, unit = _split_unit(text)
    if unit == "" and value == 0:
        return 0.0
    if unit not in _DUR:
        raise ValueError("bad duration '%s'" % text)
    return value * _DUR[unit]


class Scenario:
    """What the limit needs from a scenario file: domains, uplinks, pair rates, delays."""

    def __init__(self, path):
        try:
            import tomllib
        except ImportError:  # python < 3.11
            sys.exit("compare.py: --wan needs python >= 3.11 (tomllib)")
        with open(path, "rb") as f:
            self.doc = tomllib.load(f)
        self.path = path
        self.name = self.doc.get("name", os.path.basename(path))
        self.host_cc = self.doc.get("host_cc", "cubic")
        doms = self.doc.get("domains", {})
        self.domain_names = list(doms)
        default_ranks = int(self.doc.get("ranks_per_domain", 1))
        self.ranks = {d: int(doms[d].get("ranks", default_ranks)) for d in doms}
        default_up = self.doc.get("uplink", "0")
        self.uplink = {d: parse_rate(doms[d].get("uplink", default_up)) for d in doms}
        self.links = self.doc.get("links", {})

    def _link_param(self, src, dst, key):
        """Value of `key` for the directed link src>dst: default, then pair, then direction."""
        val = None
        for sect in ("default", "%s-%s" % (src, dst), "%s-%s" % (dst, src), "%s>%s" % (src, dst)):
            entry = self.links.get(sect, {})
            if key in entry:
                val = entry[key]
            elif key == "delay" and "rtt" in entry:
                val = "%.9fs" % (parse_duration(entry["rtt"]) / 2)
            elif key == "rtt" and "delay" in entry:
                val = "%.9fs" % (parse_duration(entry["delay"]) * 2)
        return val

    def one_way(self, src, dst):
        d = self._link_param(src, dst, "delay")
        return parse_duration(d) if d is not None else 0.0

    def pair_rate(self, src, dst):
        r = self._link_param(src, dst, "rate")
        return parse_rate(r) if r is not None else None

    def limit(self, domains):
        """(bottleneck bits/s or None, max pair RTT s) among `domains`."""
        used = [d for d in domains]
        for d in used:
            if d not in self.ranks:
                sys.exit("compare.py: domain '%s' is not in %s" % (d, self.path))
        rates = [self.uplink[d] for d in used if self.uplink[d]]
        inf = float("inf")
        pair = {(a, b): (self.pair_rate(a, b) or inf) for a in used for b in used if a != b}
        rtt = 0.0
        for a in used:
            for b in used:
                if a == b:
                    continue
                # The widest way from a to b: direct, or through one other domain used.
                r = max([pair[(a, b)]] + [min(pair[(a, m)], pair[(m, b)]) for m in used if m not in (a, b)])
                if r < inf:
                    rates.append(r)
                rtt = max(rtt, self.one_way(a, b) + self.one_way(b, a))
        return (min(rates) if rates else None), rtt

    def largest_one_way(self, domains):
        """The small-message bound (s): the largest one-way delay between two of `domains`.
        Each rank needs one message from every other domain, and all can send at once."""
        return max([self.one_way(a, b) for a in domains for b in domains if a != b] or [0.0])


def limit_us(nbytes, k, rate_bps, rtt_s):
    """Physical limit of an allreduce of nbytes across k domains (microseconds)."""
    if k < 2:
        return None
    wire = 0.0 if rate_bps is None else 2.0 * (k - 1) / k * nbytes * 8 / rate_bps
    return (wire + rtt_s) * 1e6


def fmt_rate(bps):
    if bps is None:
        return "unlimited"
    for unit, div in (("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if bps >= div:
            return "%g %s" % (bps / div, unit)
    return "%g bit/s" % bps


# ---------------------------------------------------------------------------------------------

def parse_args(argv):
    p = argparse.ArgumentParser(
        description="Compare geoccl against Gloo baselines under `geoccl run` "
                    "(loopback or --wan emulated regions).")
    p.add_argument("--geoccl", required=True, help="path to the geoccl binary (launcher + bench)")
    p.add_argument("--gloo", help="path to gloo_bench (bench/gloo_bench in the build tree)")
    p.add_argument("--torch-gloo", help="path to bench/torch_gloo_bench.py")
    p.add_argument("--python", default="/usr/bin/python3",
                   help="interpreter with torch for --torch-gloo (default: %(default)s)")
    p.add_argument("--backends", default=None,
                   help="comma-separated subset of geoccl,gloo,torch-gloo (default: geoccl and "
                        "every baseline whose path is given)")
    p.add_argument("-n", "--world-sizes", type=parse_world_sizes, default=None,
                   help="comma-separated world sizes (default: 2,4; with --wan the sum of "
                        "--domains)")
    p.add_argument("--op", default="allreduce", choices=["allreduce"])
    p.add_argument("--sizes", type=parse_sizes, default=None,
                   help="bytes per rank; K/M/G are powers of 1024 (default: 1M,4M,16M,96M; "
                        "none with --train unless given)")
    p.add_argument("--iters", type=positive, default=10)
    p.add_argument("--warmup", type=int, default=None,
                   help="passed through as --warmup (default: each program's own)")
    p.add_argument("--rounds", type=positive, default=2)
    p.add_argument("--algo", default=None, help="geoccl's --algo (auto|ring|rd); Gloo: its ring")
    p.add_argument("--timeout-s", type=positive, default=900, help="per run (default: 900)")
    p.add_argument("--launcher", default=None,
                   help="launcher prefix, called as `LAUNCHER [WAN OPTIONS] -n N -- CMD...` "
                        "(default: '<geoccl> run')")
    p.add_argument("--variant", action="append", default=[], metavar="NAME=VAR=VALUE[;VAR=VALUE...]",
                   help="an extra geoccl backend NAME (geoccl-...) whose ranks get these variables "
                        "(bench/defaults_matrix.py); may repeat")
    p.add_argument("--wan", help="scenario TOML: run every rank in its emulated region")
    p.add_argument("--domains", type=parse_domains, default=None,
                   help="rank placement with --wan, e.g. a:2,b:2,c:2 (default: the scenario's)")
    p.add_argument("--host-cc", choices=["cubic", "bbr", "reno"], default=None,
                   help="TCP congestion control of the emulated hosts (default: the scenario's)")
    p.add_argument("--train", choices=["resnet50"], default=None,
                   help="also replay a data-parallel training step of this model")
    p.add_argument("--train-step", default=None,
                   help="train_step binary (default: next to --gloo, else "
                        "<geoccl>/../../bench/train_step)")
    p.add_argument("--train-torch", default=os.path.join(HERE, "train_step_torch.py"),
                   help="torch-gloo train step script (default: %(default)s)")
    p.add_argument("--steps", type=positive, default=5, help="measured training steps per run")
    p.add_argument("--train-warmup", type=int, default=1, help="untimed training steps per run")
    p.add_argument("--compute-ms", type=float, default=200.0,
                   help="emulated backward compute per step (default: %(default)s)")
    p.add_argument("--bucket-mb", type=float, default=25.0)
    p.add_argument("--compression", type=parse_compression, default=None, metavar="CODEC",
                   help="geoccl compresses its hops between domains with CODEC; torch-gloo runs "
                        "torch's closest built-in comm hook; Gloo stays fp32")
    p.add_argument("--powersgd-rank", type=positive, default=1,
                   help="with --compression int8|int4|topk: torch-gloo's powerSGD rank (default 1)")
    p.add_argument("--json", help="write all results, records and the summary here")
    p.add_argument("--plot", help="write a log-log PNG of time vs size (needs gnuplot)")
    p.add_argument("-v", "--verbose", action="store_true", help="echo every run's output")
    args = p.parse_args(argv)
    if args.warmup is not None and args.warmup < 0:
        p.error("--warmup must be >= 0")
    if args.sizes is None and not args.train:
        args.sizes = parse_sizes("1M,4M,16M,96M")
    if args.sizes is None:
        args.sizes = []
    if (args.domains or args.host_cc) and not args.wan:
        p.error("--domains and --host-cc need --wan")
    if args.wan:
        args.scenario = Scenario(args.wan)
        if args.domains is None:
            args.domains = [(d, args.scenario.ranks[d]) for d in args.scenario.domain_names
                            if args.scenario.ranks[d] > 0]
        args.small_bound_s = args.scenario.largest_one_way([d for d, _ in args.domains])
        total = sum(c for _, c in args.domains)
        if args.world_sizes is None:
            args.world_sizes = [total]
        elif args.world_sizes != [total]:
            p.error("with --wan, -n must be the number of ranks in --domains (%d)" % total)
    else:
        args.scenario = None
        if args.world_sizes is None:
            args.world_sizes = [2, 4]
    for v in args.variant:
        name, _, assignments = v.partition("=")
        if not name.startswith("geoccl-") or not assignments or name in ALL_BACKENDS:
            p.error("--variant '%s': want geoccl-NAME=VAR=VALUE[;VAR=VALUE...] with a new name" % v)
        GEOCCL_VARIANTS[name] = assignments.split(";")
        BASE_OF[name] = "geoccl"
        ALL_BACKENDS.append(name)
    wanted = args.backends.split(",") if args.backends else None
    if wanted:
        for b in wanted:
            if b not in ALL_BACKENDS:
                p.error("unknown backend '%s' (want %s)" % (b, ",".join(ALL_BACKENDS)))
        if "gloo" in wanted and not args.gloo and not (args.train and not args.sizes):
            p.error("--backends gloo needs --gloo")
        if "torch-gloo" in wanted and not args.torch_gloo and args.sizes:
            p.error("--backends torch-gloo needs --torch-gloo")
    args.wanted = wanted
    args.torch_hook, args.hook_note = (torch_hook_for(args.compression, args.powersgd_rank)
                                       if args.compression else (None, None))
    if args.torch_hook == "powersgd" and (not wanted or "torch-gloo" in wanted):
        # powerSGD compresses from its second iteration on: the untimed steps must cover it, for
        # every backend alike.
        if args.warmup is not None and args.warmup < 2:
            p.error("--compression %s: torch-gloo's powerSGD_hook needs --warmup >= 2"
                    % args.compression)
        args.train_warmup = max(args.train_warmup, 2)
    if args.train and args.train_step is None:
        cands = []
        if args.gloo:
            cands.append(os.path.join(os.path.dirname(args.gloo), "train_step"))
        cands.append(os.path.join(os.path.dirname(os.path.abspath(args.geoccl)), "..", "..",
                                  "bench", "train_step"))
        args.train_step = next((c for c in cands if os.path.exists(c)), cands[-1])
    return args


def variant_env(assignments, environ=os.environ):
    """A variant's VAR=value list, its GEOCCL_EXPERIMENT keys after those of `environ`'s."""
    out = []
    for a in assignments:
        name, _, value = a.partition("=")
        inherited = environ.get("GEOCCL_EXPERIMENT", "")
        if name == "GEOCCL_EXPERIMENT" and inherited:
            a = "GEOCCL_EXPERIMENT=%s,%s" % (inherited, value)
        out.append(a)
    return out


def backends(args):
    """(name, argv prefix) of every allreduce program; geoccl first, it is the reference."""
    geo = [args.geoccl, "bench"] + (["--algo", args.algo] if args.algo else []) + compression_args(args)
    out = [("geoccl", geo)]
    if args.wanted:  # variants only when asked for
        out += [(v, ["env"] + variant_env(e) + geo) for v, e in GEOCCL_VARIANTS.items()
                if v in args.wanted]
        if "geoccl-fp32" in args.wanted:
            out.append(("geoccl-fp32", [args.geoccl, "bench"] + (["--algo", args.algo] if args.algo else [])))
    if args.gloo:
        out.append(("gloo", [args.gloo]))
    if args.torch_gloo:
        out.append(("torch-gloo", [args.python, args.torch_gloo] + hook_args(args)))
        if args.wanted and "torch-gloo-fp16" in args.wanted:
            out.append(("torch-gloo-fp16", [args.python, args.torch_gloo, "--hook", "fp16"]))
    if args.wanted:
        out = [(n, p) for n, p in out if n in args.wanted]
    return out


def compression_args(args):
    return ["--compression", args.compression] if args.compression else []


def hook_args(args):
    if not args.torch_hook:
        return []
    out = ["--hook", args.torch_hook]
    if args.torch_hook == "powersgd":
        out += ["--powersgd-rank", str(args.powersgd_rank)]
    return out


def compression_label(args, backend):
    """What each backend's traffic was compressed with, for tables and records."""
    if backend == "torch-gloo-fp16":
        return "fp16_compress_hook"
    if not args.compression or backend == "geoccl-fp32":
        return "none"
    if backend.startswith("geoccl"):
        return args.compression
    if backend == "torch-gloo" and args.torch_hook:
        return ("fp16_compress_hook" if args.torch_hook == "fp16"
                else "powerSGD_hook rank %d" % args.powersgd_rank)
    return "none"


def check_compressed(args, backend, results):
    """With --compression, each result must say it ran compressed (geoccl: "compression", the
    torch hooks: "hook"), so that a program that ignored the flag cannot pass for a compressed
    run. Returns an error or None."""
    if backend == "torch-gloo-fp16":
        return None if all(r.get("hook") for r in results) else "torch-gloo-fp16 result does not report its hook"
    if not args.compression or args.compression.partition("@")[0] == "none" or backend == "geoccl-fp32":
        return None
    for r in results:
        if backend.startswith("geoccl") and r.get("compression") in (None, "none"):
            return "geoccl result does not report compression %s" % args.compression
        if backend == "torch-gloo" and args.torch_hook and not r.get("hook"):
            return "torch-gloo result does not report its hook"
    return None


def train_programs(args):
    """(name, argv) of every training-step program."""
    common = ["--steps", str(args.steps), "--warmup", str(args.train_warmup),
              "--compute-ms", "%g" % args.compute_ms, "--bucket-mb", "%g" % args.bucket_mb]
    geo = [args.train_step, "--backend", "geoccl"] + (["--algo", args.algo] if args.algo else [])
    out = [("geoccl", geo + common + compression_args(args)),
           ("geoccl-fp32", geo + common),
           ("gloo", [args.train_step, "--backend", "gloo"] + common),
           ("torch-gloo", [args.python, args.train_torch, "--train-step", args.train_step]
            + common + hook_args(args)),
           ("torch-gloo-fp16", [args.python, args.train_torch, "--train-step", args.train_step]
            + common + ["--hook", "fp16"])]
    if args.wanted:
        return [(n, p) for n, p in out if n in args.wanted]
    # Default: geoccl plus the baselines the user named.
    return [(n, p) for n, p in out if n == "geoccl" or (n == "gloo" and args.gloo)
            or (n == "torch-gloo" and args.torch_gloo)]


def launcher_argv(args):
    base = shlex.split(args.launcher) if args.launcher else [args.geoccl, "run"]
    if args.wan:
        base += ["--wan", args.wan, "--domains",
                 ",".join("%s:%d" % dc for dc in args.domains)]
        if args.host_cc:
            base += ["--host-cc", args.host_cc]
    return base


def run_cmd(args, cmd):
    """Runs one launch. Returns (output text, error message or None)."""
    print("  $ %s" % " ".join(shlex.quote(c) for c in cmd), flush=True)
    start = time.monotonic()
    try:
        # A session of its own, so that a timeout can stop the launcher and all its ranks.
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True)
    except OSError as e:
        return "", "cannot start %s: %s" % (cmd[0], e)
    try:
        output, _ = proc.communicate(timeout=args.timeout_s)
    except subprocess.TimeoutExpired:
        # SIGTERM first so the launcher can stop ranks and tear down the WAN bed; then SIGKILL
        # whatever is left of the group.
        _signal_group(proc.pid, signal.SIGTERM)
        try:
            output, _ = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            _signal_group(proc.pid, signal.SIGKILL)
            output, _ = proc.communicate()
        _echo_tail(output)
        return "", "timed out after %d s" % args.timeout_s
    text = output.decode("utf-8", "replace")
    if args.verbose:
        sys.stdout.write(text)
    elapsed = time.monotonic() - start
    if proc.returncode != 0:
        if not args.verbose:
            _echo_tail(output)
        return text, "exit status %d after %.1f s" % (proc.returncode, elapsed)
    print("    (%.1f s)" % elapsed, flush=True)
    return text, None


def run_and_load(args, cmd, json_path, backend):
    """Runs one launcher command and reads the JSON its rank 0 wrote: (results, error or None)."""
    _, err = run_cmd(args, cmd)
    if err:
        return None, err
    return load_json(json_path, backend)


def load_json(path, backend):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f), None
    except (OSError, ValueError) as e:
        return None, "no usable JSON from %s: %s" % (backend, e)


def run_once(args, launcher, backend, program, n, json_path):
    """Runs one backend's allreduce at one world size. Returns (results, error or None)."""
    cmd = list(launcher) + ["-n", str(n), "--"] + program + [
        "--op", args.op, "--sizes", ",".join(args.sizes), "--iters", str(args.iters),
        "--json", json_path]
    if args.warmup is not None:
        cmd += ["--warmup", str(args.warmup)]
    results, err = run_and_load(args, cmd, json_path, backend)
    if err:
        return None, err
    if backend in BASE_OF:
        for r in results:
            if r.get("backend") == BASE_OF[backend]:
                r["backend"] = backend
    err = validate(results, backend, n, [parse_size(s) for s in args.sizes]) or check_compressed(
        args, backend, results)
    if err:
        return None, err
    return results, None


def run_train_once(args, launcher, backend, program, n, json_path):
    cmd = list(launcher) + ["-n", str(n), "--"] + program + ["--json", json_path]
    results, err = run_and_load(args, cmd, json_path, backend)
    if err:
        return None, err
    if not isinstance(results, list) or len(results) != 1 or not isinstance(results[0], dict):
        return None, "train JSON is not a one-element array"
    if backend in BASE_OF and results[0].get("backend") == BASE_OF[backend]:
        results[0]["backend"] = backend
    for key, typ in TRAIN_KEYS.items():
        if key not in results[0] or not isinstance(results[0][key], typ) or (
                typ is not bool and isinstance(results[0][key], bool)):
            return None, "train result lacks or mistypes '%s'" % key
    if results[0]["backend"] != backend or results[0]["world_size"] != n:
        return None, "train result is for %s n=%d" % (results[0]["backend"],
                                                      results[0]["world_size"])
    err = check_compressed(args, backend, results)
    if err:
        return None, err
    return results, None


def _signal_group(pgid, sig):
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass  # already gone


def _echo_tail(output, lines=30):
    text = output.decode("utf-8", "replace").splitlines()
    for line in text[-lines:]:
        print("    | " + line)


def validate(results, backend, n, sizes):
    if not isinstance(results, list):
        return "JSON is not an array"
    for r in results:
        if not isinstance(r, dict):
            return "JSON array element is not an object"
        for key, typ in REQUIRED_KEYS.items():
            if key not in r:
                return "result lacks key '%s'" % key
            # bool is an int in Python; do not let true pass as a count, or 1 as a bool.
            if not isinstance(r[key], typ) or (typ is not bool and isinstance(r[key], bool)):
                return "result key '%s' has the wrong type: %r" % (key, r[key])
        if r["backend"] != backend:
            return "backend is '%s', expected '%s'" % (r["backend"], backend)
        if r["world_size"] != n:
            return "world_size is %d, expected %d" % (r["world_size"], n)
    got = sorted(r["bytes"] for r in results)
    if got != sorted(sizes):
        return "sizes in JSON %s do not match the requested %s" % (got, sorted(sizes))
    return None


def fmt_us(v):
    return "-" if v is None else "%.1f" % v


def fmt_ms(v):
    if v is None:
        return "-"
    return "%.3f" % v if v < 10 else "%.1f" % v


def fmt_ratio(num, den):
    return "-" if num is None or den is None or den <= 0 else "%.2f" % (num / den)


def summarize(args, n, names, rows, k, rate, rtt):
    """Per (backend, size) over rounds: median of medians, min of mins, max of maxes."""
    summary = []
    for spec in args.sizes:
        nbytes = parse_size(spec)
        lim = limit_us(nbytes, k, rate, rtt) if args.wan else None
        bound = args.small_bound_s * 1e6 if args.wan else None
        entry = {"world_size": n, "bytes": nbytes, "size": spec, "limit_us": lim,
                 "small_bound_us": bound}
        for name in names:
            rs = [r for r in rows if r["backend"] == name and r["bytes"] == nbytes]
            med = statistics.median(r["time_us_median"] for r in rs) if rs else None
            entry[name] = {
                "time_us_median": med,
                "time_us_min": min(r["time_us_min"] for r in rs) if rs else None,
                "time_us_max": max(r["time_us_max"] for r in rs) if rs else None,
                "rounds": len(rs),
                "algbw_gbps": (nbytes / (med * 1e-6) / 1e9) if med else None,
                "busbw_gbps": (statistics.median(r["busbw_gbps"] for r in rs) if rs else None),
                "correct": bool(rs) and all(r["correct"] for r in rs),
                "ratio_to_limit": (med / lim) if (med and lim) else None,
                "ratio_to_small_bound": (med / bound) if (med and bound) else None,
            }
            for key in ("cpu_ns_per_byte", "emulator_cpu_ns_per_byte"):
                vals = [r[key] for r in rs if isinstance(r.get(key), (int, float))]
                entry[name][key] = statistics.median(vals) if vals else None
            enc = [r["encoded_bytes_per_call"] for r in rs if "encoded_bytes_per_call" in r]
            if enc:  # geoccl with --compression: what all ranks encoded per call
                entry[name]["encoded_bytes_per_call"] = statistics.median(enc)
        ref = entry.get("geoccl", {}).get("time_us_median")
        for name in names:
            t = entry[name]["time_us_median"]
            entry[name]["ratio_vs_geoccl"] = (t / ref) if (t is not None and ref) else None
        summary.append(entry)
    return summary


def records_from(args, summary, names):
    """One flat record per backend and size (the documented JSON output)."""
    out = []
    for e in summary:
        for name in names:
            b = e[name]
            out.append({
                "backend": name, "op": args.op, "bytes": e["bytes"], "size": e["size"],
                "world_size": e["world_size"], "rounds": b["rounds"],
                "time_us_median": b["time_us_median"], "time_us_min": b["time_us_min"],
                "time_us_max": b["time_us_max"], "algbw_gbps": b["algbw_gbps"],
                "busbw_gbps": b["busbw_gbps"], "ratio_vs_geoccl": b["ratio_vs_geoccl"],
                "limit_us": e["limit_us"], "ratio_to_limit": b["ratio_to_limit"],
                "small_bound_us": e["small_bound_us"],
                "ratio_to_small_bound": b["ratio_to_small_bound"],
                "correct": b["correct"], "compression": compression_label(args, name),
                "encoded_bytes_per_call": b.get("encoded_bytes_per_call"),
                "cpu_ns_per_byte": b.get("cpu_ns_per_byte"),
                "emulator_cpu_ns_per_byte": b.get("emulator_cpu_ns_per_byte"),
            })
    return out


def machine_description():
    cpu = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = ""
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            kb = int(f.readline().split()[1])
            mem = ", %.0f GiB RAM" % (kb / 2**20)
    except (OSError, ValueError, IndexError):
        pass
    return "%d CPU(s) %s%s, Linux %s" % (os.cpu_count() or 0, cpu, mem, platform.release())


def print_header(args, n, k, rate, rtt, title):
    print("\n### %s, world size %d\n" % (title, n))
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    if args.wan:
        sc = args.scenario
        cc = args.host_cc or sc.host_cc
        print("- scenario: `%s` (%s): %s" % (args.wan, sc.name, sc.doc.get("description", "")))
        print("- placement: %s (%d domains); host cc: **%s**" % (
            ",".join("%s:%d" % dc for dc in args.domains), k, cc))
        print("- limit = 2(k-1)/k * 8S/B + RTT with B = %s (bottleneck), RTT = %.1f ms "
              "(largest pair), k = %d" % (fmt_rate(rate), rtt * 1e3, k))
        print("- small-message bound = the largest one-way delay between two domains used: "
              "%.1f ms" % (args.small_bound_s * 1e3))
    else:
        print("- loopback (no emulated WAN): no physical limit")
    print("- date: %s; machine: %s" % (now, machine_description()))
    if args.compression:
        print("- compression: %s" % "; ".join(
            "%s %s" % (b, compression_label(args, b)) for b in ("geoccl", "gloo", "torch-gloo")))
        print("  - geoccl: %s on the hops between domains only (inside a domain fp32)"
              % args.compression)
        print("  - gloo: fp32 (Gloo has no compression)")
        if args.hook_note:
            print("  - " + args.hook_note)
        if args.wan:
            print("  - the limit is that of the fp32 bytes: a compressed run moves fewer and can "
                  "go below it (x limit < 1)")
    print("- rounds: %d (backends alternate per round)%s" % (
        args.rounds, "" if not args.algo else "; geoccl --algo %s" % args.algo))
    print()


def print_table(args, n, names, summary, k, rate, rtt):
    print_header(args, n, k, rate, rtt, "%s f32, %d iters/run" % (args.op, args.iters))
    head = ["size"]
    if args.wan:
        head += ["limit ms", "small bound ms"]
    for name in names:
        head += ["%s ms (min-max)" % name, "%s algbw GB/s" % name]
        if name != "geoccl":
            head += ["%s/geoccl" % name]
        if args.wan:
            head += ["%s x limit" % name, "%s x bound" % name]
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join("---:" for _ in head) + "|")
    for e in summary:
        cells = [e["size"]]
        if args.wan:
            cells.append(fmt_ms(e["limit_us"] / 1e3 if e["limit_us"] else None))
            cells.append(fmt_ms(e["small_bound_us"] / 1e3 if e["small_bound_us"] else None))
        for name in names:
            b = e[name]
            if b["time_us_median"] is None:
                cells += ["-", "-"]
            else:
                cells.append("%s (%s-%s)" % (fmt_ms(b["time_us_median"] / 1e3),
                                             fmt_ms(b["time_us_min"] / 1e3),
                                             fmt_ms(b["time_us_max"] / 1e3)))
                cells.append("%.4f" % b["algbw_gbps"])
            if name != "geoccl":
                cells.append(fmt_ratio(b["time_us_median"], e.get("geoccl", {}).get(
                    "time_us_median")))
            if args.wan:
                cells.append("-" if b["ratio_to_limit"] is None else "%.1f" % b["ratio_to_limit"])
                cells.append("-" if b["ratio_to_small_bound"] is None
                             else "%.2f" % b["ratio_to_small_bound"])
        print("| " + " | ".join(cells) + " |")
    print("\nX/geoccl > 1: geoccl is faster. x limit: time / physical limit (1 = at the limit).",
          flush=True)
    print_cpu_table(args, names, summary)
    if args.compression:
        for e in summary:
            for name in names:
                enc = e[name].get("encoded_bytes_per_call")
                if enc is None:
                    continue
                if enc == 0:
                    print("warning: %s compressed nothing at %s: its ranks are in one domain, so no "
                          "hop crosses one (label them: --wan, GEOCCL_DOMAIN)" % (name, e["size"]))
                else:
                    print("%s at %s: %.2f MB encoded per call, all ranks together"
                          % (name, e["size"], enc / 1e6))


def memcpy_ns_per_byte(nbytes=64 << 20, rounds=5):
    """This machine's floor: CPU ns to copy one byte once (memoryview copy, a large buffer, the
    fastest of a few rounds)."""
    src = bytearray(os.urandom(1 << 20)) * (nbytes >> 20)
    dst = bytearray(len(src))
    best = None
    for _ in range(rounds):
        t0 = time.process_time_ns()
        dst[:] = src
        t = (time.process_time_ns() - t0) / len(src)
        best = t if best is None else min(best, t)
    return best


def print_cpu_table(args, names, summary):
    """CPU per byte of user data: every rank's CPU (user + system, every thread) in the timed
    calls over the bytes all ranks passed, beside one memcpy of each byte on this machine; on the
    test bed the emulator's CPU over the same span is a column of its own."""
    if not any(e[name].get("cpu_ns_per_byte") is not None for e in summary for name in names):
        return
    floor = memcpy_ns_per_byte()
    head = ["size", "memcpy ns/B"]
    for name in names:
        head.append("%s cpu ns/B" % name)
        if name != "geoccl":
            head.append("%s/geoccl" % name)
        if args.wan:
            head.append("%s emulator ns/B" % name)
    print("\nCPU per byte (all ranks' CPU in the timed calls / bytes all ranks passed):\n")
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join("---:" for _ in head) + "|")
    for e in summary:
        cells = [e["size"], "%.3f" % floor]
        ref = e.get("geoccl", {}).get("cpu_ns_per_byte")
        for name in names:
            c = e[name].get("cpu_ns_per_byte")
            cells.append("-" if c is None else "%.3f" % c)
            if name != "geoccl":
                cells.append(fmt_ratio(c, ref))
            if args.wan:
                emu = e[name].get("emulator_cpu_ns_per_byte")
                cells.append("-" if emu is None else "%.3f" % emu)
        print("| " + " | ".join(cells) + " |")
    print("\nX/geoccl > 1: X spends more CPU per byte than geoccl.", flush=True)


def summarize_train(args, n, names, rows, k, rate, rtt):
    out = []
    ref = None
    for name in names:
        rs = [r for r in rows if r["backend"] == name]
        e = {"backend": name, "op": "train_step", "model": args.train, "world_size": n,
             "rounds": len(rs), "compression": compression_label(args, name)}
        if rs:
            e["bytes"] = rs[0]["bytes"]
            e["buckets"] = rs[0].get("buckets")
            steps = [x for r in rs for x in r.get("step_ms", [r["step_ms_median"]])]
            e["step_ms_median"] = statistics.median(r["step_ms_median"] for r in rs)
            e["step_ms_min"] = min(steps)
            e["step_ms_max"] = max(steps)
            e["compute_ms_median"] = statistics.median(r["compute_ms_median"] for r in rs)
            e["exposed_comm_share_median"] = statistics.median(
                r["exposed_comm_share_median"] for r in rs)
            e["correct"] = all(r["correct"] for r in rs)
            lim = limit_us(e["bytes"], k, rate, rtt) if args.wan else None
            # A step can finish no sooner than its compute, nor than the allreduce of all
            # gradients at the physical limit.
            e["comm_limit_ms"] = lim / 1e3 if lim else None
            e["step_limit_ms"] = max(e["compute_ms_median"], lim / 1e3) if lim else None
            e["ratio_to_limit"] = (e["step_ms_median"] / e["step_limit_ms"]
                                   if e["step_limit_ms"] else None)
            if name == "geoccl":
                ref = e["step_ms_median"]
        out.append(e)
    for e in out:
        e["ratio_vs_geoccl"] = (e["step_ms_median"] / ref
                                if ref and e.get("step_ms_median") else None)
    return out


def print_train_table(args, n, summary, k, rate, rtt):
    print_header(args, n, k, rate, rtt,
                 "training step replay: %s, DDP buckets %g MiB, backward compute %g ms, "
                 "%d steps/run" % (args.train, args.bucket_mb, args.compute_ms, args.steps))
    lim = next((e.get("comm_limit_ms") for e in summary if e.get("comm_limit_ms")), None)
    if lim:
        print("Allreduce of all gradients (%.1f MiB) at the limit: %.1f ms; step limit = "
              "max(compute, that).\n" % (summary[0].get("bytes", 0) / 2**20, lim))
    head = ["backend", "step ms (min-max)", "compute ms", "exposed comm", "X/geoccl"]
    if args.wan:
        head.append("x step limit")
    print("| " + " | ".join(head) + " |")
    print("|---|" + "|".join("---:" for _ in head[1:]) + "|")
    for e in summary:
        if "step_ms_median" not in e:
            print("| %s | " % e["backend"] + " | ".join("-" for _ in head[1:]) + " |")
            continue
        cells = [e["backend"], "%s (%s-%s)" % (fmt_ms(e["step_ms_median"]),
                                               fmt_ms(e["step_ms_min"]), fmt_ms(e["step_ms_max"])),
                 fmt_ms(e["compute_ms_median"]), "%.0f %%" % (e["exposed_comm_share_median"] * 100),
                 fmt_ratio(e["step_ms_median"], next((x["step_ms_median"] for x in summary
                                                      if x["backend"] == "geoccl"
                                                      and "step_ms_median" in x), None))]
        if args.wan:
            cells.append("-" if e["ratio_to_limit"] is None else "%.1f" % e["ratio_to_limit"])
        print("| " + " | ".join(cells) + " |")
    print("\nexposed comm = (step - compute) / step: the communication compute did not hide.",
          flush=True)


def write_plot(args, path, summaries, names, title):
    """Log-log time vs size, one line per backend (median, min-max bars) plus the limit."""
    gnuplot = shutil.which("gnuplot")
    if not gnuplot:
        print("compare.py: gnuplot not found (apt-get install gnuplot-nox); no plot",
              file=sys.stderr)
        return False
    with tempfile.TemporaryDirectory(prefix="geoccl-plot-") as tmp:
        plots = []
        colors = {"geoccl": "#1f77b4", "gloo": "#d62728", "torch-gloo": "#2ca02c"}
        for name in names:
            dat = os.path.join(tmp, "%s.dat" % name)
            with open(dat, "w", encoding="utf-8") as f:
                for e in summaries:
                    b = e[name]
                    if b["time_us_median"] is not None:
                        f.write("%d %g %g %g\n" % (e["bytes"], b["time_us_median"] / 1e3,
                                                   b["time_us_min"] / 1e3,
                                                   b["time_us_max"] / 1e3))
            plots.append("'%s' using 1:2:3:4 with yerrorlines lw 2 pt 7 lc rgb '%s' title '%s'"
                         % (dat, colors.get(name, "black"), name))
        if any(e["limit_us"] for e in summaries):
            dat = os.path.join(tmp, "limit.dat")
            with open(dat, "w", encoding="utf-8") as f:
                for e in summaries:
                    if e["limit_us"]:
                        f.write("%d %g\n" % (e["bytes"], e["limit_us"] / 1e3))
            plots.append("'%s' using 1:2 with lines dt 2 lw 2 lc rgb 'black' "
                         "title 'physical limit'" % dat)
        script = "\n".join([
            "set terminal pngcairo size 900,600 enhanced font 'sans,10'",
            "set output '%s'" % os.path.abspath(path).replace("'", "''"),
            "set logscale xy",
            "set grid",
            "set key top left",
            "set title '%s' noenhanced" % title.replace("'", "''"),
            "set xlabel 'allreduce size per rank (bytes, f32)'",
            "set ylabel 'time (ms), median of medians, bars: min-max'",
            "set format x '%.0s%cB'",
            "plot " + ", \\\n  ".join(plots),
        ])
        proc = subprocess.run([gnuplot], input=script, text=True, capture_output=True)
        if proc.returncode != 0:
            print("compare.py: gnuplot failed: %s" % proc.stderr.strip(), file=sys.stderr)
            return False
    print("plot: %s" % path)
    return True


def main(argv):
    args = parse_args(argv)
    launcher = launcher_argv(args)
    progs = backends(args) if args.sizes else []
    names = [name for name, _ in progs]
    tprogs = train_programs(args) if args.train else []
    tnames = [name for name, _ in tprogs]
    if args.wan:
        k = len(args.domains)
        rate, rtt = args.scenario.limit([d for d, _ in args.domains])
    else:
        k, rate, rtt = 0, None, 0.0
    all_results, failures, summaries, records, train_rows, train_summaries = [], [], [], [], [], []
    with tempfile.TemporaryDirectory(prefix="geoccl-compare-") as tmp:
        os.chmod(tmp, 0o755)
        for n in args.world_sizes:
            rows, trows = [], []
            for rnd in range(args.rounds):
                for name, program in progs:
                    print("[n=%d round %d/%d] %s" % (n, rnd + 1, args.rounds, name), flush=True)
                    path = os.path.join(tmp, "%s-n%d-r%d.json" % (name, n, rnd))
                    results, err = run_once(args, launcher, name, program, n, path)
                    if err:
                        print("  FAILED: %s" % err, flush=True)
                        failures.append({"backend": name, "world_size": n, "round": rnd,
                                         "error": err})
                        continue
                    for r in results:
                        r["round"] = rnd
                        if not r["correct"]:
                            failures.append({"backend": name, "world_size": n, "round": rnd,
                                             "error": "correct=false at %d bytes" % r["bytes"]})
                    rows += results
                for name, program in tprogs:
                    print("[n=%d round %d/%d] train %s %s" % (n, rnd + 1, args.rounds,
                                                              args.train, name), flush=True)
                    path = os.path.join(tmp, "train-%s-n%d-r%d.json" % (name, n, rnd))
                    results, err = run_train_once(args, launcher, name, program, n, path)
                    if err:
                        print("  FAILED: %s" % err, flush=True)
                        failures.append({"backend": name, "world_size": n, "round": rnd,
                                         "error": "train: " + err})
                        continue
                    for r in results:
                        r["round"] = rnd
                        if not r["correct"]:
                            failures.append({"backend": name, "world_size": n, "round": rnd,
                                             "error": "train: correct=false"})
                    trows += results
            all_results += rows
            train_rows += trows
            if progs:
                summary = summarize(args, n, names, rows, k, rate, rtt)
                summaries += summary
                records += records_from(args, summary, names)
                print_table(args, n, names, summary, k, rate, rtt)
            if tprogs:
                ts = summarize_train(args, n, tnames, trows, k, rate, rtt)
                train_summaries += ts
                print_train_table(args, n, ts, k, rate, rtt)

    if args.plot and summaries:
        if args.wan:
            title = "%s f32 on %s (%s, host cc %s), %d ranks" % (
                args.op, args.scenario.name, ",".join("%s:%d" % dc for dc in args.domains),
                args.host_cc or args.scenario.host_cc, args.world_sizes[0])
        else:
            title = "%s f32 on loopback, %s ranks" % (
                args.op, ",".join(map(str, args.world_sizes)))
        for n in args.world_sizes:
            path = args.plot if len(args.world_sizes) == 1 else "%s-n%d.png" % (
                args.plot[:-4] if args.plot.endswith(".png") else args.plot, n)
            write_plot(args, path, [e for e in summaries if e["world_size"] == n], names, title)

    if args.json:
        cfg = {"compression": args.compression, "torch_hook": compression_label(args, "torch-gloo"),
               "baseline_notes": [x for x in (args.hook_note,) if x],
               "world_sizes": args.world_sizes, "sizes": args.sizes, "op": args.op,
               "iters": args.iters, "warmup": args.warmup, "rounds": args.rounds,
               "backends": names, "algo": args.algo,
               "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               "machine": machine_description()}
        if args.wan:
            cfg.update({"scenario": args.wan, "scenario_name": args.scenario.name,
                        "domains": ",".join("%s:%d" % dc for dc in args.domains),
                        "host_cc": args.host_cc or args.scenario.host_cc,
                        "bottleneck_bps": rate, "rtt_s": rtt, "k": k})
        if args.train:
            cfg.update({"train": args.train, "steps": args.steps, "compute_ms": args.compute_ms,
                        "bucket_mb": args.bucket_mb, "train_backends": tnames})
        merged = {
            "config": cfg,
            "records": records + train_summaries,
            "results": all_results,
            "summary": summaries,
            "train_results": train_rows,
            "failures": failures,
        }
        tmp_path = args.json + ".tmp"
        with open(tmp_path, "w", encoding="utf-8") as f:
            json.dump(merged, f, indent=1)
            f.write("\n")
        os.replace(tmp_path, args.json)
    if failures:
        print("\n%d failure(s):" % len(failures), file=sys.stderr)
        for fl in failures:
            print("  %(backend)s n=%(world_size)d round %(round)d: %(error)s" % fl,
                  file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
