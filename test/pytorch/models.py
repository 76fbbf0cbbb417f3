#!/usr/bin/env python3
"""The model suite: models with what real models have, each trained by its
own plain PyTorch loop through the local dssp node (test/models_test.go runs
them on a 3-node mesh), then checked as a user would use the export.

    models.py train MODEL [--eval-samples N]    attach to $DSSP_TRAINER_SOCKET and train
    models.py check MODEL FILE [--eval-samples N]  load FILE with strict=True, evaluate in eval(),
                                                 print {"accuracy", "reported", "names"} as JSON
    models.py local MODEL --steps N              one process, no mesh (a reference)

--lr overrides the model's learning rate (every param group's); --poison-after K makes every
step's loss NaN after K steps (a broken device: the mesh refuses its updates and stops it).

MODEL is one of:
    cnn-bn      a CNN with BatchNorm (running statistics and num_batches_tracked travel as buffers);
                SGD lr 0.05 momentum 0.9 (DDP's usual)
    tied-lm     a next-token model whose output layer shares the embedding's weight (one tensor,
                two state_dict names) on a synthetic language; SGD lr 0.1 momentum 0.9
    frozen      a linear head on frozen random features (a parameter with requires_grad=False);
                SGD lr 0.05 momentum 0.9
    bf16        an MLP whose parameters are bfloat16; SGD lr 0.05 momentum 0.9
    groups      an MLP with two param groups (the hidden layer at 0.05, the head at 0.02) under a
                StepLR scheduler; SGD momentum 0.9
    adamw       an MLP with AdamW (lr 1e-3, weight decay 0.01)
    cnn-bn-bf16 cnn-bn in bfloat16 (scripts/gpu-check runs it on CUDA; BatchNorm in bf16 needs a torch
                that has it on the device)

--device runs the model and its data on a torch device (cuda: the staged bridge, pinned copies).

MNIST comes from --data, $DSSP_DATA, or the Go module cache (examples/pytorch/mnist_mlp.py's
mnist_dir); the tied LM's language is generated from a fixed seed.
"""
import argparse
import json
import os
import sys

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

VOCAB, CONTEXT = 16, 8


class CNNBN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.conv2, self.bn2 = nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16)
        self.fc = nn.Linear(16 * 7 * 7, 10)

    def forward(self, x):
        x = x.reshape(-1, 1, 28, 28)
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        return self.fc(x.flatten(1))


class TiedLM(nn.Module):
    """Next token from the last CONTEXT tokens; the output layer is the
    embedding's transpose (out.weight is emb.weight)."""

    def __init__(self, dim=32):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, dim)
        self.mix = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim)
        self.out = nn.Linear(dim, VOCAB, bias=False)
        self.out.weight = self.emb.weight

    def forward(self, x):
        return self.out(self.norm(torch.tanh(self.mix(self.emb(x)))))


class Frozen(nn.Module):
    """Random features (a frozen projection) and a trained head."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(7)
        self.proj = nn.Parameter(torch.randn(784, 512, generator=g) / 28.0, requires_grad=False)
        self.head = nn.Linear(512, 10)

    def forward(self, x):
        return self.head(F.relu(x.reshape(-1, 784) @ self.proj))


class MLP2(nn.Module):
    def __init__(self, hidden=128):
        super().__init__()
        self.hidden = nn.Linear(784, hidden)
        self.head = nn.Linear(hidden, 10)

    def forward(self, x):
        return self.head(F.relu(self.hidden(x.reshape(x.shape[0], -1))))


def language(n, seed):
    """n windows of CONTEXT + 1 tokens of a synthetic language: each token
    follows the one before by a fixed successor table 90 % of the time."""
    g = np.random.default_rng(1234)
    succ = g.permutation(VOCAB)
    r = np.random.default_rng(seed)
    seq = np.empty((n, CONTEXT + 1), dtype=np.int64)
    seq[:, 0] = r.integers(0, VOCAB, n)
    for k in range(1, CONTEXT + 1):
        noise = r.random(n) < 0.1
        seq[:, k] = np.where(noise, r.integers(0, VOCAB, n), succ[seq[:, k - 1]])
    return torch.from_numpy(seq)


class Suite:
    """A model of the suite: its model, optimizer (and scheduler), data and
    evaluation."""

    def __init__(self, name, data=None, lr=None, device="cpu"):
        self.name = name
        self.device = torch.device(device)
        torch.manual_seed(1)
        self.sched = None
        if name == "tied-lm":
            self.X, self.Xt = language(60000, 1), language(2000, 2)
            self.Y = self.Yt = None
        else:
            self.X, self.Y, self.Xt, self.Yt = load_mnist(mnist_dir(data))
        if name in ("cnn-bn", "cnn-bn-bf16"):
            self.model = CNNBN().to(self.device)
            if name == "cnn-bn-bf16":
                self.model = self.model.to(torch.bfloat16)
            self.opt = torch.optim.SGD(self.model.parameters(), lr=0.05, momentum=0.9)
        elif name == "tied-lm":
            self.model = TiedLM()
            self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1, momentum=0.9)
        elif name == "frozen":
            self.model = Frozen()
            self.opt = torch.optim.SGD([p for p in self.model.parameters() if p.requires_grad], lr=0.05, momentum=0.9)
        elif name == "bf16":
            self.model = MLP2().to(torch.bfloat16)
            self.opt = torch.optim.SGD(self.model.parameters(), lr=0.05, momentum=0.9)
        elif name == "groups":
            self.model = MLP2(256)
            self.opt = torch.optim.SGD([{"params": self.model.hidden.parameters(), "lr": 0.05},
                                        {"params": self.model.head.parameters(), "lr": 0.02}], lr=0.05, momentum=0.9)
            self.sched = torch.optim.lr_scheduler.StepLR(self.opt, step_size=300, gamma=0.7)
        elif name == "adamw":
            self.model = MLP2()
            self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-3, weight_decay=0.01)
        else:
            sys.exit("unknown model %r" % name)
        self.model = self.model.to(self.device)
        self.X, self.Xt = self.X.to(self.device), self.Xt.to(self.device)
        if self.Y is not None:
            self.Y, self.Yt = self.Y.to(self.device), self.Yt.to(self.device)
        self.dtype = next(self.model.parameters()).dtype
        if lr:
            for g in self.opt.param_groups:
                g["lr"] = lr

    def loss(self, model, idx):
        if self.name == "tied-lm":
            w = self.X[idx]
            return F.cross_entropy(model(w[:, :-1]).reshape(-1, VOCAB), w[:, 1:].reshape(-1))
        return F.cross_entropy(model(self.X[idx].to(self.dtype)).float(), self.Y[idx])

    def evaluate(self, model, n):
        """(accuracy, mean loss, samples) on the first n test samples."""
        with torch.no_grad():
            if self.name == "tied-lm":
                w = self.Xt[:n]
                out = model(w[:, :-1]).reshape(-1, VOCAB)
                y = w[:, 1:].reshape(-1)
            else:
                out = model(self.Xt[:n].to(self.dtype)).float()
                y = self.Yt[:n]
            return (out.argmax(1) == y).float().mean().item(), F.cross_entropy(out, y).item(), n


def train(s, args):
    mesh = dsspmesh.connect()
    mesh.on_evaluate(lambda m: s.evaluate(m, args.eval_samples or mesh.eval_samples or len(s.Xt)))
    opt = dsspmesh.Optimizer(mesh, s.model, s.opt)
    print("models.py %s: attached to %s, %d tensors, batch %d, device %s, staged copies %s, pinned %s"
          % (s.name, mesh.node, len(opt.tensors), mesh.batch, s.device, opt._bridge.staged, opt._bridge.pinned), flush=True)
    steps = 0
    for idx in mesh.batches(len(s.X)):
        opt.zero_grad()
        loss = s.loss(s.model, torch.from_numpy(idx).to(s.device))
        steps += 1
        if args.poison_after and steps > args.poison_after:
            loss = loss * float("nan")
        loss.backward()
        opt.step()
        if s.sched is not None:
            s.sched.step()
    print("models.py %s: stopped (%s); %s" % (s.name, mesh.stop_reason, opt.stats), flush=True)


def check(s, args):
    state, meta = dsspmesh.safetensors.load(args.file, metadata=True)
    s.model.load_state_dict({k: v.to(s.device) for k, v in dsspmesh.load_state_dict(args.file).items()}, strict=True)
    s.model.eval()
    n = args.eval_samples or int(meta.get("eval_samples", 0)) or len(s.Xt)
    acc, loss, n = s.evaluate(s.model, n)
    dtypes = sorted({str(v.dtype) for v in dsspmesh.load_state_dict(args.file).values()})
    print(json.dumps({"accuracy": acc, "loss": loss, "samples": n, "reported": float(meta["accuracy"]) if "accuracy" in meta else None,
                      "names": sorted(state), "dtypes": dtypes}))


def local(s, args):
    g = torch.Generator().manual_seed(3)
    for step in range(args.steps):
        idx = torch.randint(0, len(s.X), (64,), generator=g).to(s.device)
        s.opt.zero_grad()
        s.loss(s.model, idx).backward()
        s.opt.step()
        if s.sched is not None:
            s.sched.step()
    s.model.eval()
    print(json.dumps(dict(zip(("accuracy", "loss", "samples"), s.evaluate(s.model, 2000)))))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("command", choices=["train", "check", "local"])
    ap.add_argument("model")
    ap.add_argument("file", nargs="?")
    ap.add_argument("--data")
    ap.add_argument("--eval-samples", type=int, default=0)
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--lr", type=float, help="every param group's learning rate")
    ap.add_argument("--poison-after", type=int, default=0, help="make every loss NaN after this many steps")
    ap.add_argument("--device", default="cpu", help="torch device of the model and its data")
    args = ap.parse_args()
    torch.set_num_threads(1)
    s = Suite(args.model, args.data, args.lr, args.device)
    {"train": train, "check": check, "local": local}[args.command](s, args)


if __name__ == "__main__":
    main()
