#!/usr/bin/env python3
"""Lossless ratio and speed of geoccl's chunk codecs on a real checkpoint.

Trains a torchvision model (no pretrained weights: nothing is downloaded) for a few SGD steps on
random data, serializes its state_dict with torch.save, and runs `geoccl blob codecs` on the file:
the same codec code, chunking and settings as a blob transfer (4 MiB chunks, one core).

    /usr/bin/python3 bench/checkpoint_compress.py --model resnet50 --steps 3 --geoccl build/tools/geoccl/geoccl
"""

import argparse
import os
import subprocess
import tempfile
import time

import torch
import torchvision


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="resnet50", help="torchvision model name (resnet18, resnet50, ...)")
    ap.add_argument("--steps", type=int, default=3, help="SGD steps on random data before saving")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--image", type=int, default=64, help="side of the random input images")
    ap.add_argument("--chunk", default="4M")
    ap.add_argument("--geoccl", default=os.path.join(os.path.dirname(__file__), "..", "build", "tools", "geoccl", "geoccl"))
    ap.add_argument("--keep", help="also write the checkpoint here")
    args = ap.parse_args()

    torch.manual_seed(0)
    model = getattr(torchvision.models, args.model)(num_classes=1000)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    t0 = time.monotonic()
    for _ in range(args.steps):
        x = torch.randn(args.batch, 3, args.image, args.image)
        y = torch.randint(0, 1000, (args.batch,))
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    train_s = time.monotonic() - t0
    with tempfile.TemporaryDirectory() as d:
        path = args.keep or os.path.join(d, f"{args.model}.pt")
        torch.save(model.state_dict(), path)
        size = os.path.getsize(path)
        print(f"{args.model}: {args.steps} SGD steps in {train_s:.1f} s; state_dict {size / 2**20:.1f} MiB "
              f"({sum(p.numel() for p in model.state_dict().values())} elements, torch.save)")
        out = subprocess.run([args.geoccl, "blob", "codecs", path, "--chunk", args.chunk], check=True,
                             capture_output=True, text=True).stdout
        print(out, end="")


if __name__ == "__main__":
    main()
