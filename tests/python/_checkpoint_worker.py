"""One rank of the checkpoint tests: a torchvision ResNet-18 after one SGD step on random data at
rank 0, broadcast as a state_dict and as a checkpoint file over the default "geoccl" group (ranks
labelled into two domains). Writes a digest of what it ended up with to argv[1].rank."""

import hashlib
import json
import os
import sys

out, domains = sys.argv[1], sys.argv[2].split(",")
rank = int(os.environ["RANK"])
os.environ["GEOCCL_DOMAIN"] = domains[rank]

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torchvision  # noqa: E402

import geoccl  # noqa: E402,F401
import geoccl.checkpoint as ckpt  # noqa: E402


def digest(sd):
    h = hashlib.sha256()
    for k in sorted(sd):
        h.update(k.encode())
        h.update(sd[k].detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


dist.init_process_group("geoccl")
world = dist.get_world_size()
torch.manual_seed(0)
sd = None
if rank == 0:
    model = torchvision.models.resnet18(num_classes=10)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loss = torch.nn.functional.cross_entropy(model(torch.randn(4, 3, 64, 64)), torch.randint(0, 10, (4,)))
    loss.backward()
    opt.step()
    sd = model.state_dict()

reports = []
got = ckpt.broadcast_state_dict(sd, src=0, progress=reports.append)
result = {"state_dict": digest(got), "reports": len(reports), "done": reports[-1]["bytes_done"] if reports else 0,
          "total": reports[-1]["bytes_total"] if reports else -1}

mine = os.path.join(os.path.dirname(out), f"rank{rank}")
os.makedirs(mine, exist_ok=True)
path = os.path.join(mine, "ckpt.pt")
if rank == 0:
    torch.save({"model": sd, "step": 7}, path)
loaded = ckpt.broadcast_checkpoint(path, src=0, load=True)
result["checkpoint"] = digest(loaded["model"])
result["step"] = loaded["step"]
result["file_exists"] = os.path.exists(path)

try:
    ckpt.broadcast_checkpoint(os.path.join(mine, "missing.pt"), src=0)
    result["missing"] = "no error"
except geoccl.GeocclError as e:
    result["missing"] = str(e)

with open(f"{out}.{rank}", "w") as f:
    json.dump(result, f)
dist.destroy_process_group()
