"""One rank of the DDP hook comparison: examples/ddp_digits.py's training, once per hook, on one
process group of backend argv[2] ("geoccl" or "gloo"). Writes {hook: result or {"error": ...}}
to argv[1].rank. argv[3:]: the hooks, in order; a hook that fails is recorded and ends the run.
"""

import datetime
import json
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                "examples"))
import ddp_digits  # noqa: E402


def main():
    out, backend, hooks = sys.argv[1], sys.argv[2], sys.argv[3:]
    if backend == "geoccl":
        import geoccl  # noqa: F401  (registers the backend)
    torch.set_num_threads(1)
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=60))
    results = {}
    for hook in hooks:
        args = ddp_digits.parse_args(["--backend", backend, "--hook", hook, "--steps", os.environ["HOOK_STEPS"],
                                      "--compute-probe", "0", "--quiet", "--timeout", "60"])
        try:
            results[hook] = ddp_digits.train(args)
            dist.barrier()  # a hook's failure may surface only here (gloo)
        except RuntimeError as e:
            results[hook] = {"error": str(e)}
            break  # the group may be unusable now
    with open(f"{out}.{dist.get_rank()}", "w") as f:
        json.dump(results, f)
    if all("error" not in r for r in results.values()):
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
