#!/usr/bin/env python3
"""One process, N simulated workers: the combine rules under staleness.

    stale.py RULE MODEL --speeds 1,1,2,4 --lr 0.05 --momentum 0.9 --pushes 800

Each worker reads θ, steps its own SGD (with momentum) on a batch of 64 MNIST
samples, and its change arrives after its compute time (speed × 1 ± 10 %,
plus a latency of 0.1); arrivals are applied in time order, so a change is
as stale as the arrivals that overtook it. RULE mean applies each change ÷ N
(docs/design.md, "The combine rule"), sum applies it whole (each push a step of
its own, the rule of earlier builds). MODEL is mlp (examples/pytorch's) or
cnn-bn (test/pytorch/models.py's). Prints the test accuracy (2000 samples)
at ten points of the run.
"""
import argparse
import heapq
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples", "pytorch"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from mnist_mlp import MLP, load_mnist, mnist_dir  # noqa: E402
from models import CNNBN  # noqa: E402


def run(args):
    torch.set_num_threads(1)
    X, Y, Xt, Yt = load_mnist(mnist_dir())
    speeds = [float(s) for s in args.speeds.split(",")]
    n = len(speeds)
    make = MLP if args.model == "mlp" else CNNBN
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    server = make()
    state = {k: v.detach().clone().float() for k, v in server.state_dict().items()}
    workers = [make() for _ in range(n)]
    opts = [torch.optim.SGD(w.parameters(), lr=args.lr, momentum=args.momentum) for w in workers]
    order = torch.randperm(len(X), generator=torch.Generator().manual_seed(args.seed))
    pos, applied, out = 0, 0, []
    events = [(0.0, i) for i in range(n)]
    pending = {}
    while applied < args.pushes:
        t, i = heapq.heappop(events)
        if i in pending:  # worker i's change arrives
            d = pending.pop(i)
            for k in state:
                state[k] -= d[k] / (n if args.rule == "mean" else 1)
            applied += 1
            if applied % (args.pushes // 10) == 0:
                server.load_state_dict({k: v.to(server.state_dict()[k].dtype) for k, v in state.items()})
                server.eval()
                with torch.no_grad():
                    out.append(round((server(Xt[:2000]).argmax(1) == Yt[:2000]).float().mean().item(), 3))
        w = workers[i]
        w.load_state_dict({k: v.to(w.state_dict()[k].dtype) for k, v in state.items()})
        start = {k: v.detach().clone().float() for k, v in w.state_dict().items()}
        idx = order[pos:pos + 64]
        pos = (pos + 64) % (len(X) - 64)
        w.train()
        opts[i].zero_grad()
        F.cross_entropy(w(X[idx]), Y[idx]).backward()
        opts[i].step()
        pending[i] = {k: start[k] - v.detach().float() for k, v in w.state_dict().items()}
        heapq.heappush(events, (t + speeds[i] * rng.uniform(0.9, 1.1) + 0.1, i))
    print(args.rule, args.model, args.speeds, "lr", args.lr, "momentum", args.momentum, out, flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("rule", choices=["mean", "sum"])
    ap.add_argument("model", choices=["mlp", "cnn-bn"])
    ap.add_argument("--speeds", default="1,1,1")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--pushes", type=int, default=600)
    ap.add_argument("--seed", type=int, default=0)
    run(ap.parse_args())


if __name__ == "__main__":
    main()
