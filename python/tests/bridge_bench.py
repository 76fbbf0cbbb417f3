#!/usr/bin/env python3
"""The trainer-side cost of the bridge, against the fake node: the MNIST
MLP (235 146 parameters) trained through a fake node for --rounds rounds;
prints the Optimizer's bridge time per round (θ loaded into the model, the
gradient copied into the update region, the update framed and sent) beside
the round's own compute (forward, backward at batch 64), in µs.

    /usr/bin/python3 python/tests/bridge_bench.py --rounds 500
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "pytorch"))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import dsspmesh  # noqa: E402
from fakenode import FakeNode  # noqa: E402
from mnist_mlp import MLP  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=500)
    ap.add_argument("--batch", type=int, default=64)
    args = ap.parse_args()
    torch.set_num_threads(1)
    model = MLP()
    p = sum(x.numel() for x in model.parameters())
    node = FakeNode(p, batch=args.batch)
    theta = np.zeros(p, np.float32)

    def script(n):
        for it in range(args.rounds):
            n.compute(it, theta, pos=it * args.batch)
        n.send({"op": "stop", "reason": "done"})
    node.serve(script)
    X = torch.rand(6400, 784)
    Y = torch.randint(0, 10, (6400,))
    mesh = dsspmesh.connect(node.path, timeout=5)
    opt = dsspmesh.Optimizer(mesh, model)
    opt.stats = dsspmesh.Stats()  # the rounds only
    compute = 0.0
    t0 = time.perf_counter()
    for idx in mesh.batches(len(X)):
        c0 = time.perf_counter()
        opt.zero_grad()
        loss = F.cross_entropy(model(X[idx]), Y[idx])
        loss.backward()
        compute += time.perf_counter() - c0
        opt.step(loss)
    wall = time.perf_counter() - t0
    node.join()
    s = opt.stats
    print("params %d, rounds %d: bridge %.1f µs/round (%d bytes copied/round), compute %.1f µs/round, "
          "bridge/compute %.1f %%, wall %.1f µs/round (the fake node's side included)"
          % (p, s.rounds, s.per_round_us(), s.bytes_copied // s.rounds, 1e6 * compute / s.rounds,
             100 * s.bridge_s / compute, 1e6 * wall / s.rounds))


if __name__ == "__main__":
    main()
