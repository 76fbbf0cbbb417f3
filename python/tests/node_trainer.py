#!/usr/bin/env python3
"""A trainer for node/trainer's cross-language test (python_test.go): it
attaches to $DSSP_TRAINER_SOCKET with dsspmesh and, per round, prints one
JSON line with what it computed, so the Go side checks that what the node
sent is what the model computed at and what it received is what the
trainer wrote.

    node_trainer.py tiny     fc1 Linear(3, 4), fc2 Linear(4, 2) on 32 fixed samples
    node_trainer.py wrong    the same with fc1 Linear(3, 5): expects a refusal
    node_trainer.py mlp      the MNIST MLP on random pixels (the bridge's cost)
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples", "pytorch"))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import dsspmesh  # noqa: E402


class Tiny(torch.nn.Module):
    def __init__(self, hidden=4):
        super().__init__()
        self.fc1 = torch.nn.Linear(3, hidden)
        self.fc2 = torch.nn.Linear(hidden, 2)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


def flat(t):
    return torch.cat([x.detach().reshape(-1) for x in t]).tolist()


def main():
    torch.set_num_threads(1)
    torch.manual_seed(0)
    kind = sys.argv[1]
    if kind == "mlp":
        from mnist_mlp import MLP
        model = MLP()
        g = np.random.default_rng(0)
        X = torch.from_numpy(g.random((1024, 784), dtype=np.float32))
        Y = torch.from_numpy(g.integers(0, 10, 1024))
    else:
        model = Tiny(5 if kind == "wrong" else 4)
        g = np.random.default_rng(0)
        X = torch.from_numpy(g.standard_normal((32, 3)).astype(np.float32))
        Y = torch.from_numpy(g.integers(0, 2, 32))
    mesh = dsspmesh.connect(timeout=10)
    mesh.on_evaluate(lambda m: (0.25, float(sum(p.double().sum() for p in m.parameters())), len(X)))
    try:
        opt = dsspmesh.Optimizer(mesh, model)
    except dsspmesh.LayoutRefused as e:
        print(json.dumps({"refused": e.tensor, "message": str(e)}), flush=True)
        return
    for idx in mesh.batches(len(X)):
        theta_sum = float(sum(p.double().sum() for p in model.parameters()))
        opt.zero_grad()
        loss = F.cross_entropy(model(X[idx]), Y[idx])
        loss.backward()
        line = {"iter": mesh.current.iter, "theta_sum": theta_sum, "loss": loss.item(), "idx": idx.tolist()}
        if kind != "mlp":
            line["grad"] = flat(p.grad for p in model.parameters())
        print(json.dumps(line), flush=True)
        opt.step(loss)
    print(json.dumps({"stopped": mesh.stop_reason, "bridge_us": opt.stats.per_round_us(),
                      "bytes_per_round": opt.stats.bytes_copied // max(1, opt.stats.rounds),
                      "rounds": opt.stats.rounds, "evaluations": mesh.evaluations}), flush=True)


if __name__ == "__main__":
    main()
