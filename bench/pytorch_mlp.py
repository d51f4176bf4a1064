#!/usr/bin/env python3
"""PyTorch peer of `troupe train` for bench/mlp_vs_pytorch.py: the same MLP, data, normalization,
optimizer, batch, epochs and thread count. Prints one JSON line: samples_per_s, test_accuracy,
train_seconds. Training time excludes evaluation, as troupe's does.

Under `python -m torch.distributed.run --nproc_per_node N` (WORLD_SIZE > 1) it is the peer of
`troupe train --dp N`: DistributedDataParallel over gloo, each rank taking 1/N of every global
batch of --batch-size; samples/s counts the global batch, and rank 0 prints the line."""
import argparse
import gzip
import json
import os
import time

import numpy as np
import torch


def read_idx(path, offset):
    with gzip.open(path, "rb") as f:
        return np.frombuffer(f.read(), dtype=np.uint8, offset=offset)


def load(data_dir, split):
    x = read_idx(f"{data_dir}/{split}-images-idx3-ubyte.gz", 16).reshape(-1, 784).astype(np.float32)
    y = read_idx(f"{data_dir}/{split}-labels-idx1-ubyte.gz", 8).astype(np.int64)
    x = (x / 255.0 - 0.2860) / 0.3530
    return torch.from_numpy(x), torch.from_numpy(y)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--hidden", default="256,256")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=42)
    a = p.parse_args()

    torch.set_num_threads(a.threads)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world > 1:
        import torch.distributed as dist
        dist.init_process_group("gloo")
    torch.manual_seed(a.seed)  # every rank the same parameters and the same shuffle
    xtr, ytr = load(a.data, "train")
    xte, yte = load(a.data, "t10k")
    widths = [784] + [int(w) for w in a.hidden.split(",")]
    layers = []
    for i, o in zip(widths, widths[1:]):
        layers += [torch.nn.Linear(i, o), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(widths[-1], 10))
    net = model
    if world > 1:
        net = torch.nn.parallel.DistributedDataParallel(model)
    share = a.batch_size // world
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=a.weight_decay)
    loss_fn = torch.nn.CrossEntropyLoss()
    steps_per_epoch = len(xtr) // a.batch_size  # drop_last, as troupe's sampler
    train_seconds = 0.0
    acc = 0.0
    for epoch in range(a.epochs):
        perm = torch.randperm(len(xtr))
        t0 = time.perf_counter()
        for s in range(steps_per_epoch):
            idx = perm[s * a.batch_size + rank * share:s * a.batch_size + (rank + 1) * share]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(net(xtr[idx]), ytr[idx])
            loss.backward()
            opt.step()
        train_seconds += time.perf_counter() - t0
        with torch.no_grad():
            acc = (model(xte).argmax(1) == yte).float().mean().item()
    samples = steps_per_epoch * a.batch_size * a.epochs
    if world > 1:
        dist.destroy_process_group()
        if rank != 0:
            return
    print(json.dumps({"samples_per_s": samples / train_seconds, "test_accuracy": acc,
                      "train_seconds": train_seconds, "torch": torch.__version__,
                      "threads": torch.get_num_threads(), "ranks": world}))


if __name__ == "__main__":
    main()
