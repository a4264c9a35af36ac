#!/usr/bin/python3
"""DDP against DiLoCo (geoccl.diloco) on scikit-learn's digits: time to accuracy, accuracy, wall
time; with one deliberately bad participant, equal weighting against geoccl's weighted and
robust averaging.

    geoccl run --wan bench/scenarios/seed.toml --domains a:2,b:2,c:2 -n 6 -- \\
        /usr/bin/python3 examples/diloco_digits.py --mode diloco --sync-every 20 --compression int8
    geoccl run -n 6 -- /usr/bin/python3 examples/diloco_digits.py --mode ddp --label-domains 3

--mode ddp: DistributedDataParallel (geoccl.allreduce_hook, or geoccl.compression_hook with
--compression), one optimizer step per global batch. --mode diloco: every rank runs the inner
optimizer on its own shard of each global batch and geoccl.diloco.DiLoCo averages the
pseudo-gradients every --sync-every steps (--compression on the hops between domains, with error
feedback), --fragments / --overlap for streaming, --hierarchical for DDP inside each domain.
--bad-rank R --bad-scale S multiplies rank R's pseudo-gradient by S (a faulty participant);
--weights w0,w1,... and --robust exclude|downweight choose the averaging. --quorum Q (--grace,
--max-staleness) runs the decoupled sync; --stop-rank R --stop-at STEP --stop-seconds T stops rank
R (SIGSTOP, a child sends SIGCONT after T s) at that step, to see the others go on without it:

    geoccl run -n 3 -- /usr/bin/python3 examples/diloco_digits.py --sync-every 5 --quorum 2 \
        --grace 0.2 --stop-rank 2 --stop-at 40 --stop-seconds 4

Both modes use the same inner optimizer (Adam, --lr) and batches. Rank 0 evaluates its model every
--eval-every steps (DiLoCo without streaming: at every sync, the model all ranks share), and the
time spent evaluating is left out of the clock. --json writes rank 0's curve and result.
"""

import argparse
import datetime
import json
import os
import signal
import subprocess
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ddp_digits as dd  # noqa: E402  (data, models, --label-domains)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", choices=["ddp", "diloco"], default="diloco")
    p.add_argument("--steps", type=int, default=600, help="inner (DDP: optimizer) steps")
    p.add_argument("--batch-size", type=int, default=32, help="per-rank batch size")
    p.add_argument("--lr", type=float, default=1e-3, help="Adam learning rate (DDP and DiLoCo's inner)")
    p.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--augment", action="store_true", help="shifted, noisy digits (ddp_digits.py)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sync-every", type=int, default=20, help="DiLoCo's H")
    p.add_argument("--outer-lr", type=float, default=None, help="default 0.7 (diloco), 1.0 (sparseloco)")
    p.add_argument("--outer-momentum", type=float, default=0.9)
    p.add_argument("--recipe", choices=["diloco", "sparseloco"], default="diloco",
                   help="sparseloco: top-k 2-bit pseudo-gradients with error feedback (geoccl.diloco)")
    p.add_argument("--no-error-feedback", action="store_true", help="sparseloco without its accumulator")
    p.add_argument("--sparse-k", type=int, default=64, help="sparseloco: kept per 4096-element chunk")
    p.add_argument("--compression", default=None, help="codec between domains (int8, int4, fp16, ...)")
    p.add_argument("--fragments", type=int, default=1, help="streaming DiLoCo: fragments")
    p.add_argument("--overlap", type=int, default=0, help="streaming DiLoCo: overlap steps")
    p.add_argument("--hierarchical", action="store_true", help="DDP inside each domain, DiLoCo across")
    p.add_argument("--weights", default=None, help="comma-separated weight per rank (default all 1)")
    p.add_argument("--robust", choices=["none", "exclude", "downweight"], default="none")
    p.add_argument("--bad-rank", type=int, default=-1)
    p.add_argument("--bad-scale", type=float, default=-8.0)
    p.add_argument("--quorum", type=int, default=None, help="decoupled sync: the syncer's minimum quorum")
    p.add_argument("--grace", type=float, default=1.0, help="decoupled sync: seconds waited after the quorum")
    p.add_argument("--max-staleness", type=int, default=4, help="decoupled sync: outer steps a contribution may miss")
    p.add_argument("--stop-rank", type=int, default=-1, help="rank stopped (SIGSTOP) at --stop-at")
    p.add_argument("--stop-at", type=int, default=0)
    p.add_argument("--stop-seconds", type=float, default=4.0)
    p.add_argument("--eval-every", type=int, default=10)
    p.add_argument("--target", type=float, default=0.95, help="accuracy for time-to-accuracy")
    p.add_argument("--label-domains", type=int, default=0, help="on one host: D domains (ddp_digits.py)")
    p.add_argument("--timeout", type=float, default=300.0)
    p.add_argument("--json", default=None, help="rank 0 writes its result here")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    dd.label_domains(args)
    import geoccl
    import geoccl.diloco

    torch.set_num_threads(1)
    dist.init_process_group("geoccl", timeout=datetime.timedelta(seconds=args.timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    x_train, y_train, x_test, y_test = dd.load_data(args.seed)
    aug = None
    if args.augment:
        x_test = dd.augment(x_test.repeat(4, 1), torch.Generator().manual_seed(12345))
        y_test = y_test.repeat(4)
        aug = torch.Generator().manual_seed(args.seed + 1 + rank)
    torch.manual_seed(args.seed)
    model = dd.make_model(args)
    inner_group, diloco, state = None, None, None
    if args.mode == "ddp":
        net = DDP(model)
        if args.compression:
            state = geoccl.GeocclHookState(compression=args.compression)
            net.register_comm_hook(state, geoccl.compression_hook)
        else:
            net.register_comm_hook(geoccl.GeocclHookState(), geoccl.allreduce_hook)
    else:
        net = model
        if args.hierarchical:
            inner_group, _ = geoccl.diloco.domain_group()
            net = DDP(model, process_group=inner_group)
    opt = torch.optim.Adam(net.parameters(), lr=args.lr)
    if args.mode == "diloco":
        weights = [float(w) for w in args.weights.split(",")] if args.weights else [1.0] * world
        hook = None
        if rank == args.bad_rank:
            def hook(_fragment, delta):
                delta.mul_(args.bad_scale)
        diloco = geoccl.diloco.DiLoCo(net, opt, sync_every=args.sync_every, outer_lr=args.outer_lr,
                                      outer_momentum=args.outer_momentum, compression=args.compression,
                                      weight=weights[rank], robust=args.robust, fragments=args.fragments,
                                      overlap_steps=args.overlap, pseudo_gradient_hook=hook,
                                      recipe=args.recipe, error_feedback=not args.no_error_feedback,
                                      sparse_k=args.sparse_k, quorum=args.quorum, grace=args.grace,
                                      max_staleness=args.max_staleness)
    eval_every = args.eval_every
    if diloco is not None and args.fragments == 1:
        eval_every = args.sync_every  # the synced model, the same on every rank
    g = torch.Generator().manual_seed(args.seed)
    per_epoch = max(1, len(y_train) // (args.batch_size * world))
    curve, reached, stopped = [], None, None
    clock, step = 0.0, 0
    dist.barrier()
    t0 = time.perf_counter()
    while step < args.steps:
        perm = torch.randperm(len(y_train), generator=g)
        for b in range(per_epoch):
            if step >= args.steps:
                break
            base = b * args.batch_size * world + rank * args.batch_size
            idx = perm[base:base + args.batch_size]
            xb = x_train[idx] if aug is None else dd.augment(x_train[idx], aug)
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(net(xb), y_train[idx])
            loss.backward()
            if diloco is not None:
                diloco.step()
            else:
                opt.step()
            step += 1
            if rank == args.stop_rank and step == args.stop_at:
                stopped = [time.time()]
                waker = subprocess.Popen(["/bin/sh", "-c", f"sleep {args.stop_seconds}; kill -CONT {os.getpid()}"])
                os.kill(os.getpid(), signal.SIGSTOP)
                stopped.append(time.time())
                waker.wait()
            if step % eval_every == 0 or step == args.steps:
                if diloco is not None and step == args.steps:
                    diloco.sync_now()
                clock += time.perf_counter() - t0
                if rank == 0:
                    acc = dd.accuracy(model, x_test, y_test)
                    curve.append([step, round(clock, 3), acc])
                    if reached is None and acc >= args.target:
                        reached = [step, round(clock, 3)]
                t0 = time.perf_counter()
    clock += time.perf_counter() - t0
    acc = dd.accuracy(model, x_test, y_test)
    sha = dd.param_checksum(model)
    shas = [None] * world
    dist.all_gather_object(shas, sha)
    stops = [None] * world
    dist.all_gather_object(stops, stopped)
    result = {
        "mode": args.mode, "sync_every": args.sync_every if diloco else 1, "compression": args.compression or "fp32",
        "fragments": args.fragments, "overlap": args.overlap, "hierarchical": args.hierarchical,
        "robust": args.robust, "weights": args.weights, "bad_rank": args.bad_rank, "bad_scale": args.bad_scale,
        "world_size": world, "steps": step, "accuracy": acc, "seconds": round(clock, 3),
        "time_to_target": reached, "target": args.target, "curve": curve,
        "identical_params": len(set(shas)) == 1,
        "syncs": diloco.syncs if diloco else None,
        "excluded": {str(k): v for k, v in diloco.excluded.items()} if diloco else None,
        "downweighted": {str(k): v for k, v in diloco.downweighted.items()} if diloco else None,
        "outer_bytes_per_rank": diloco.bytes_reduced if diloco else None,
        "recipe": args.recipe if diloco else None, "error_feedback": not args.no_error_feedback,
        "wire_bytes_sent": diloco.wire_bytes_sent if diloco else None,
        "dense_bytes_equivalent": diloco.dense_bytes_equivalent if diloco else None,
        "quorum": args.quorum, "rounds": diloco.rounds if diloco else [],
        "stopped": next((s for s in stops if s), None),
    }
    if rank == 0:
        tt = f"{reached[1]:.1f} s (step {reached[0]})" if reached else "not reached"
        print(f"final: {args.mode} H={result['sync_every']} {result['compression']} fragments {args.fragments} "
              f"overlap {args.overlap}{' hierarchical' if args.hierarchical else ''} robust {args.robust}: "
              f"test acc {acc:.4f}  time to {args.target:.2f}: {tt}  wall {clock:.1f} s  "
              f"params identical {result['identical_params']}  excluded {result['excluded']}", flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(result, f)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
