#!/usr/bin/python3
"""Data-parallel training of a small character-level transformer language model with torch
DistributedDataParallel over "geoccl" (or "gloo"), on text every Debian system ships: the licence
texts of /usr/share/common-licenses (package base-files, about 265 KB). No download.

The last tenth of the text is held out; the result is the held-out loss (nats per character)
and its perplexity. Run it under any launcher that sets RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT (PYTHONPATH=<build>/python):

    geoccl run -n 4 -- /usr/bin/python3 examples/ddp_charlm.py --label-domains 2 --compression int8
    geoccl run --wan bench/scenarios/seed.toml -n 6 -- /usr/bin/python3 examples/ddp_charlm.py \\
        --compression topk:0.01

--compression, --no-error-feedback, --label-domains, --hook, --bucket-mb, --json and --quiet are
those of examples/ddp_digits.py. Rank 0 prints the held-out loss every --eval-every steps and a final line.

--recipe diloco|sparseloco trains with geoccl.diloco instead of DDP: the same inner optimizer,
schedule, seeds and steps on each rank's own batches, synchronised every --sync-every steps
(sparseloco: top-k --sparse-k of 4096 with 2-bit values and error feedback, --sparse-no-ef
without it; the result records the bytes its sparse allgathers reported).
"""

import argparse
import glob
import math
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ddp_digits  # noqa: E402  (hook selection, compression flags, checksums)

LICENSES = "/usr/share/common-licenses"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", default="geoccl", choices=["geoccl", "gloo"])
    p.add_argument("--steps", type=int, default=300, help="optimizer steps in total")
    p.add_argument("--batch-size", type=int, default=16, help="sequences per rank and step")
    p.add_argument("--context", type=int, default=64, help="characters per sequence")
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--lr", type=float, default=0.2, help="SGD learning rate (momentum 0.9)")
    p.add_argument("--warmup-steps", type=int, default=30, help="linear learning-rate warm-up")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--eval-every", type=int, default=100, help="held-out loss every N steps (rank 0 prints)")
    p.add_argument("--eval-batches", type=int, default=16, help="held-out batches of 64 sequences")
    p.add_argument("--recipe", choices=["ddp", "diloco", "sparseloco"], default="ddp")
    p.add_argument("--sync-every", type=int, default=10, help="diloco/sparseloco: H")
    p.add_argument("--outer-lr", type=float, default=None, help="diloco/sparseloco outer lr (their default)")
    p.add_argument("--sparse-k", type=int, default=64, help="sparseloco: kept per 4096-element chunk")
    p.add_argument("--sparse-no-ef", action="store_true", help="sparseloco without error feedback")
    ddp_digits.add_ddp_args(p, bucket_mb=0.25)
    args = p.parse_args(argv)
    ddp_digits.check_compression_args(p, args)
    return args


def load_text():
    """The licence texts, sorted by name, symlinks skipped; (train bytes, held-out bytes, vocab)."""
    files = sorted(f for f in glob.glob(os.path.join(LICENSES, "*"))
                   if os.path.isfile(f) and not os.path.islink(f))
    if not files:
        raise SystemExit(f"ddp_charlm: no text in {LICENSES} (Debian's base-files ships it)")
    data = b"\n".join(open(f, "rb").read() for f in files)
    vocab = sorted(set(data))
    lut = torch.zeros(256, dtype=torch.int64)
    lut[torch.tensor(vocab)] = torch.arange(len(vocab))
    ids = lut[torch.frombuffer(bytearray(data), dtype=torch.uint8).long()]
    split = len(ids) * 9 // 10
    return ids[:split], ids[split:], len(vocab)


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.ln2 = nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x, mask):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.ff(self.ln2(x))


class CharLM(nn.Module):
    def __init__(self, vocab, context, d, layers, heads):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.zeros(context, d))
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)
        self.register_buffer("mask", torch.triu(torch.full((context, context), float("-inf")), 1))
        nn.init.normal_(self.pos, std=0.02)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos[:t]
        for b in self.blocks:
            x = b(x, self.mask[:t, :t])
        return self.head(self.ln(x))


def batch(ids, starts, context):
    offs = torch.arange(context + 1)
    seq = ids[starts[:, None] + offs[None, :]]
    return seq[:, :-1], seq[:, 1:]


def held_out_loss(model, ids, args):
    """Mean loss over fixed held-out windows (the same on every rank and every run)."""
    g = torch.Generator().manual_seed(12345)
    total, n = 0.0, 0
    with torch.no_grad():
        for _ in range(args.eval_batches):
            starts = torch.randint(0, len(ids) - args.context - 1, (64,), generator=g)
            x, y = batch(ids, starts, args.context)
            total += F.cross_entropy(model(x).flatten(0, 1), y.flatten(), reduction="sum").item()
            n += y.numel()
    return total / n


def main(argv=None):
    return ddp_digits.run(parse_args(argv), train)


def train(args):
    """Trains on the default process group (initialized by the caller); returns this rank's
    result (what --json writes)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    train_ids, val_ids, vocab = load_text()
    torch.manual_seed(args.seed)
    ddp_digits.set_first_bucket(args)
    net = CharLM(vocab, args.context, args.d_model, args.layers, args.heads)
    diloco, state = None, None
    if args.recipe == "ddp":
        model = DDP(net, bucket_cap_mb=args.bucket_mb)
        state = ddp_digits.register_hook(model, args)
    else:
        model = net
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    if args.recipe != "ddp":
        import geoccl.diloco
        diloco = geoccl.diloco.DiLoCo(net, opt, sync_every=args.sync_every, recipe=args.recipe,
                                      outer_lr=args.outer_lr, error_feedback=not args.sparse_no_ef,
                                      sparse_k=args.sparse_k, timeout=args.timeout)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / args.warmup_steps) * 0.5 * (1 + math.cos(math.pi * s / args.steps)))
    # Each rank draws its own sequences of every global batch.
    g = torch.Generator().manual_seed(args.seed + 1 + rank)
    curve = []
    t_start = time.perf_counter()
    loss_sum, n_sum = 0.0, 0
    for step in range(1, args.steps + 1):
        starts = torch.randint(0, len(train_ids) - args.context - 1, (args.batch_size,), generator=g)
        x, y = batch(train_ids, starts, args.context)
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        loss.backward()  # DDP allreduces the gradient buckets here
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        if diloco is not None:
            diloco.step()  # opt.step(), and every H steps the outer sync
        else:
            opt.step()
        sched.step()
        loss_sum += loss.item()
        n_sum += 1
        if step % args.eval_every == 0 or step == args.steps:
            if diloco is not None and step == args.steps:
                diloco.sync_now()
            val = held_out_loss(net, val_ids, args)
            curve.append({"step": step, "train_loss": loss_sum / n_sum, "val_loss": val})
            if rank == 0 and not args.quiet:
                print(f"step {step:5d}  train loss {loss_sum / n_sum:.4f}  held-out loss {val:.4f}  "
                      f"({time.perf_counter() - t_start:.1f} s)", flush=True)
            loss_sum, n_sum = 0.0, 0
    total = time.perf_counter() - t_start
    val = curve[-1]["val_loss"]
    result = {
        "task": "charlm",
        "backend": args.backend,
        "hook": args.hook,
        "rank": rank,
        "world_size": world,
        "domain": os.environ.get("GEOCCL_DOMAIN", ""),
        "steps": args.steps,
        "params": sum(p.numel() for p in model.parameters()),
        "val_loss": val,
        "val_ppl": math.exp(val),
        "curve": curve,
        "param_sha256": ddp_digits.param_checksum(net),
        "recipe": args.recipe,
        "sync_every": args.sync_every if diloco else 1,
        "sparse_error_feedback": not args.sparse_no_ef if args.recipe == "sparseloco" else None,
        "outer_syncs": diloco.syncs if diloco else None,
        "outer_wire_bytes_sent": diloco.wire_bytes_sent if diloco else None,
        "outer_dense_bytes_equivalent": diloco.dense_bytes_equivalent if diloco else None,
        "seconds": total,
    }
    result.update(ddp_digits.compression_result(args, state))
    if rank == 0:
        print(f"final: charlm backend {args.backend}{ddp_digits.codec_label(args)}  recipe {args.recipe}  "
              f"world {world}  "
              f"steps {args.steps}  held-out loss {val:.4f} (ppl {math.exp(val):.2f})  "
              f"{result['params']} params  total {total:.1f} s", flush=True)
    return result


if __name__ == "__main__":
    sys.exit(main())
