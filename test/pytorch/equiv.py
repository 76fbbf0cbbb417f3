#!/usr/bin/env python3
"""The mesh against DDP, step for step (test/equivalence_test.go).

    equiv.py mesh RANK --opt OPT --steps K --barrier DIR   a trainer of a 4-node bsp mesh
    equiv.py ddp --opt OPT --steps K --out FILE            4 DDP ranks over gloo, rank 0 saves the state
    equiv.py compare A B [C]                               {"max_abs", "rel"}: A against B (C: θ₀ for rel)

Both sides train the same model from the same initial parameters on the same
batches: rank r's step k reads the samples table(r, k) of MNIST, so the mesh's
worker r and DDP's rank r see the same data in the same order. OPT is sgd (lr
0.05), momentum (lr 0.05, momentum 0.9, weight decay 1e-4) or adam (lr 1e-3).
The mesh's trainers start together (a file barrier in DIR after each has its
first compute: every worker is in the gate at clock 0 before the first step).
"""
import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "examples", "pytorch"))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import dsspmesh  # noqa: E402
from mnist_mlp import load_mnist, mnist_dir  # noqa: E402

WORLD, BATCH = 4, 16


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc1 = nn.Linear(784, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


def optimizer(name, params):
    if name == "sgd":
        return torch.optim.SGD(params, lr=0.05)
    if name == "momentum":
        return torch.optim.SGD(params, lr=0.05, momentum=0.9, weight_decay=1e-4)
    return torch.optim.Adam(params, lr=1e-3)


def table(n, rank, k):
    perm = np.random.default_rng([7, k]).permutation(n)
    return torch.from_numpy(perm[rank * BATCH:(rank + 1) * BATCH])


def data():
    X, Y, _, _ = load_mnist(mnist_dir())
    return X, Y


def mesh(args):
    X, Y = data()
    model = Net()
    m = dsspmesh.connect(timeout=60)
    opt = dsspmesh.Optimizer(m, model, optimizer(args.opt, model.parameters()))
    open(os.path.join(args.barrier, "ready-%d" % args.rank), "w").close()
    deadline = time.monotonic() + 120
    while len([f for f in os.listdir(args.barrier) if f.startswith("ready-")]) < WORLD:
        if time.monotonic() > deadline:
            sys.exit("equiv.py: the other trainers did not attach within 120 s")
        time.sleep(0.05)
    for k in range(args.steps):
        idx = table(len(X), args.rank, k)
        opt.zero_grad()
        F.cross_entropy(model(X[idx]), Y[idx]).backward()
        opt.step()
    print("equiv.py mesh %d: %d steps" % (args.rank, args.steps), flush=True)
    m.close()


def ddp_rank(rank, args, X, Y):
    import torch.distributed as dist
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(args.port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    model = nn.parallel.DistributedDataParallel(Net())
    opt = optimizer(args.opt, model.parameters())
    for k in range(args.steps):
        idx = table(len(X), rank, k)
        opt.zero_grad()
        F.cross_entropy(model(X[idx]), Y[idx]).backward()
        opt.step()
    if rank == 0:
        dsspmesh.safetensors.save(model.module.state_dict(), args.out)
        dsspmesh.safetensors.save(Net().state_dict(), args.out + ".theta0")
    dist.destroy_process_group()


def ddp(args):
    import torch.multiprocessing as mp
    X, Y = data()
    mp.spawn(ddp_rank, args=(args, X, Y), nprocs=WORLD, join=True)


def compare(args):
    a = dsspmesh.safetensors.load(args.a)
    b = dsspmesh.safetensors.load(args.b)
    z = dsspmesh.safetensors.load(args.c) if args.c else None
    if sorted(a) != sorted(b):
        sys.exit("tensors %s against %s" % (sorted(a), sorted(b)))
    diff = np.concatenate([(a[k].astype(np.float64) - b[k]).ravel() for k in sorted(a)])
    out = {"max_abs": float(np.abs(diff).max()), "max_b": float(max(np.abs(b[k]).max() for k in b))}
    if z is not None:
        moved = np.concatenate([(b[k].astype(np.float64) - z[k]).ravel() for k in sorted(b)])
        out["rel"] = float(np.linalg.norm(diff) / np.linalg.norm(moved))
    print(json.dumps(out))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("mesh")
    m.add_argument("rank", type=int)
    m.add_argument("--opt", default="sgd")
    m.add_argument("--steps", type=int, default=50)
    m.add_argument("--barrier", required=True)
    d = sub.add_parser("ddp")
    d.add_argument("--opt", default="sgd")
    d.add_argument("--steps", type=int, default=50)
    d.add_argument("--out", required=True)
    d.add_argument("--port", type=int, default=29561)
    c = sub.add_parser("compare")
    c.add_argument("a")
    c.add_argument("b")
    c.add_argument("c", nargs="?")
    args = ap.parse_args()
    torch.set_num_threads(1)
    {"mesh": mesh, "ddp": ddp, "compare": compare}[args.cmd](args)


if __name__ == "__main__":
    main()
