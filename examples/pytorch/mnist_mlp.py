#!/usr/bin/env python3
"""The MNIST MLP trained through the local dssp node.

The same architecture as dssp's built-in `mlp` (784 → fc1 256 → ReLU → fc2
128 → ReLU → fc3 10, He-normal weights, zero biases, parameter names
fc1.weight ... fc3.bias), so the two can be compared and `dssp export`'s file
loads into either. The training loop is a plain PyTorch loop with the
optimizer a DDP user picks for it (SGD, lr 0.05, momentum 0.9); three lines
change to train through the mesh:

    mesh = dsspmesh.connect()                          # 1: $DSSP_TRAINER_SOCKET
    opt = dsspmesh.Optimizer(mesh, model, sgd)         # 2: was opt = sgd; sgd is what steps
    for idx in mesh.batches(len(X)):                   # 3: the node's batch size and data order
        opt.zero_grad()
        loss = F.cross_entropy(model(X[idx]), Y[idx])
        loss.backward()
        opt.step()

Start a node first (dssp node --trainer external --model external ...),
or let `dssp up --trainer 'python3 examples/pytorch/mnist_mlp.py'` start one
per node. The node chosen as evaluator calls evaluate() on the test set;
the accuracy it reports is what /status and the dashboard show.
`mnist_mlp.py --evaluate model.safetensors` loads an exported file into the
PyTorch model and prints its test accuracy beside the one the mesh reported.

MNIST comes from --data, else $DSSP_DATA, else the GoMNIST module's data
folder in the Go module cache (where `go build` of dssp puts it).
Run from the repository (PYTHONPATH=python) or after `pip install ./python`.
"""
import argparse
import gzip
import json
import os
import struct
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import dsspmesh  # noqa: E402

GOMNIST = os.path.join("github.com", "petar", "!go!m!n!i!s!t@v0.0.0-20150320212226-2fbe10d0fa63", "data")


class MLP(torch.nn.Module):
    """dssp's built-in mlp."""

    def __init__(self, hidden=(256, 128)):
        super().__init__()
        self.fc1 = torch.nn.Linear(784, hidden[0])
        self.fc2 = torch.nn.Linear(hidden[0], hidden[1])
        self.fc3 = torch.nn.Linear(hidden[1], 10)
        for layer in (self.fc1, self.fc2, self.fc3):
            torch.nn.init.normal_(layer.weight, 0.0, (2.0 / layer.in_features) ** 0.5)
            torch.nn.init.zeros_(layer.bias)

    def forward(self, x):
        x = x.reshape(x.shape[0], -1)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


def mnist_dir(flag=None):
    """The folder of the MNIST IDX files: flag, $DSSP_DATA, or GoMNIST's data
    folder in the module cache ($GOMODCACHE, $GOPATH/pkg/mod, ~/go/pkg/mod,
    `go env GOMODCACHE`)."""
    for d in (flag, os.environ.get("DSSP_DATA")):
        if d:
            return d
    caches = [os.environ.get("GOMODCACHE")]
    caches += [os.path.join(p, "pkg", "mod") for p in os.environ.get("GOPATH", "").split(os.pathsep) if p]
    caches.append(os.path.join(os.path.expanduser("~"), "go", "pkg", "mod"))
    tried = []
    for c in caches + [None]:
        if c is None:
            try:
                c = subprocess.run(["go", "env", "GOMODCACHE"], capture_output=True, text=True).stdout.strip()
            except OSError:
                c = ""
        if not c:
            continue
        d = os.path.join(c, GOMNIST)
        tried.append(d)
        if os.path.exists(os.path.join(d, "train-images-idx3-ubyte.gz")) or os.path.exists(os.path.join(d, "train-images-idx3-ubyte")):
            return d
    sys.exit("no MNIST (tried %s); give the folder of the IDX files with --data or DSSP_DATA" % ", ".join(tried))


def read_idx(path):
    """An IDX file (plain or .gz) as a numpy array."""
    if not os.path.exists(path):
        path += ".gz"
    with (gzip.open if path.endswith(".gz") else open)(path, "rb") as f:
        blob = f.read()
    zero, kind, ndim = struct.unpack(">HBB", blob[:4])
    if zero != 0 or kind != 0x08:
        raise ValueError("%s: not an unsigned-byte IDX file" % path)
    dims = struct.unpack(">%dI" % ndim, blob[4:4 + 4 * ndim])
    return np.frombuffer(blob, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load_mnist(d):
    """(X, Y, Xtest, Ytest): pixels scaled to [0, 1] as float32 [n 784],
    labels int64."""
    def pair(images, labels):
        x = torch.from_numpy(read_idx(os.path.join(d, images)).reshape(-1, 784).astype(np.float32) / 255.0)
        y = torch.from_numpy(read_idx(os.path.join(d, labels)).astype(np.int64))
        return x, y
    return pair("train-images-idx3-ubyte", "train-labels-idx1-ubyte") + pair("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


def evaluate(model, X, Y, batch=2000):
    """(accuracy, mean loss, samples) of model on X, Y."""
    correct, loss = 0, 0.0
    with torch.no_grad():
        for i in range(0, len(X), batch):
            out = model(X[i:i + batch])
            loss += F.cross_entropy(out, Y[i:i + batch], reduction="sum").item()
            correct += (out.argmax(1) == Y[i:i + batch]).sum().item()
    return correct / len(X), loss / len(X), len(X)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--socket", help="the node's trainer socket (default $DSSP_TRAINER_SOCKET)")
    ap.add_argument("--data", help="folder of the MNIST IDX files (default $DSSP_DATA, else the Go module cache)")
    ap.add_argument("--optimizer", choices=["sgd", "adamw"], default="sgd", help="sgd (with --momentum) or adamw (weight decay 0.01)")
    ap.add_argument("--lr", type=float, default=0.05, help="the optimizer's learning rate")
    ap.add_argument("--momentum", type=float, default=0.9, help="SGD's momentum")
    ap.add_argument("--inner-lr", type=float, help=argparse.SUPPRESS)  # the flag's earlier name
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    ap.add_argument("--device", default="cpu", help="torch device (cpu, cuda)")
    ap.add_argument("--reconnect", type=float, default=0, help="seconds to wait for the node to come back after it died (0: exit)")
    ap.add_argument("--log-every", type=float, default=10, help="seconds between progress lines")
    ap.add_argument("--eval-samples", type=int, default=0, help="evaluate on the first N test samples (0: the number the node's evaluate asks for, else all 10000); the evaluating trainer stalls its own training meanwhile")
    ap.add_argument("--evaluate", metavar="FILE", help="load FILE (dssp export's safetensors) into the model, print its test accuracy and the accuracy in its metadata as JSON, and exit")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    dev = torch.device(args.device)
    if args.evaluate:
        _, meta = dsspmesh.safetensors.load(args.evaluate, metadata=True)
        model = MLP()
        model.load_state_dict(dsspmesh.load_state_dict(args.evaluate), strict=True)
        model.eval()
        _, _, Xt, Yt = load_mnist(mnist_dir(args.data))
        n = args.eval_samples or len(Xt)
        acc, loss, n = evaluate(model, Xt[:n], Yt[:n])
        print(json.dumps({"accuracy": acc, "loss": loss, "samples": n, "reported": float(meta["accuracy"]) if "accuracy" in meta else None}))
        return

    X, Y, Xt, Yt = (t.to(dev) for t in load_mnist(mnist_dir(args.data)))
    model = MLP().to(dev)
    if args.optimizer == "adamw":
        sgd = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    else:
        sgd = torch.optim.SGD(model.parameters(), lr=args.inner_lr or args.lr, momentum=args.momentum)

    mesh = dsspmesh.connect(args.socket)
    def on_evaluate(m):
        n = args.eval_samples or mesh.eval_samples or len(Xt)
        return evaluate(m, Xt[:n], Yt[:n])
    mesh.on_evaluate(on_evaluate)
    opt = dsspmesh.Optimizer(mesh, model, sgd)
    print("mnist_mlp: attached to %s (%s), %d parameters, batch %d, local steps %d"
          % (mesh.node, mesh.path, mesh.params, mesh.batch, mesh.local_steps), flush=True)
    t0 = last = time.monotonic()
    while True:
        try:
            for idx in mesh.batches(len(X)):
                idx = torch.from_numpy(idx).to(dev)
                opt.zero_grad()
                loss = F.cross_entropy(model(X[idx]), Y[idx])
                loss.backward()
                opt.step()
                if time.monotonic() - last >= args.log_every:
                    last = time.monotonic()
                    print("mnist_mlp: %d samples, %.0f samples/s, loss %.4f; %s"
                          % (opt.stats.samples, opt.stats.samples / (last - t0), loss.item(), opt.stats), flush=True)
            break
        except dsspmesh.NodeGone as e:
            if args.reconnect <= 0:
                raise
            print("mnist_mlp: %s; waiting up to %.0f s for the node" % (e, args.reconnect), flush=True)
            mesh.wait_for_node(args.reconnect)
    el = time.monotonic() - t0
    print("mnist_mlp: stopped (%s) after %d samples in %.1f s, %.0f samples/s; bridge %.1f µs/round (%d bytes copied/round), wait %.2f ms/round over %d rounds, %d evaluations (%.1f s)"
          % (mesh.stop_reason, opt.stats.samples, el, opt.stats.samples / max(el, 1e-9), opt.stats.per_round_us(),
             opt.stats.bytes_copied // max(1, opt.stats.rounds), 1e3 * opt.stats.wait_s / max(1, opt.stats.rounds),
             opt.stats.rounds, mesh.evaluations, mesh.eval_s), flush=True)


if __name__ == "__main__":
    main()
