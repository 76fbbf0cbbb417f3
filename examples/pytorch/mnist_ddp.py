#!/usr/bin/env python3
"""The baselines the mesh is measured against: the MNIST MLP of
mnist_mlp.py (the same model and batch) trained by one plain process
(--procs 1) or by PyTorch DistributedDataParallel over gloo (--procs N, one
process per rank via torch.multiprocessing.spawn, each rank a
DistributedSampler-style part of every epoch), with the optimizer a DDP user
picks: SGD at lr 0.05 with momentum 0.9 by default (--optimizer adamw: AdamW
at --lr, weight decay 0.01), constant unless --lr-decay.

    python3 examples/pytorch/mnist_ddp.py --procs 4 --target 0.97
    python3 examples/pytorch/mnist_ddp.py --procs 4 --slowdowns 4,4,2,1   # speeds 1,1,2,4

With --rank, the process is that one rank of --procs, on its own host: run
one a host, each with --master naming rank 0's address (the link lab's
hosts: dssp-lab bench pytorch --link).

The clock starts with the process (imports, data, the process group's
forming and the evaluations included), as a mesh's starts with its nodes.
Rank 0 evaluates on the test set (its first --eval-samples, as a mesh's
evaluator does) every --eval-every seconds of that clock, the other ranks
waiting for it at the next step, and all ranks stop at --target accuracy or
after --time seconds. The last line is a JSON summary: time to target,
samples/s (all ranks), final accuracy, the evaluations' share of the time.
--slowdowns stretches each rank's compute (forward and backward) by its
factor, as `dssp node --slowdown` does, so a mixed mesh and DDP are compared
on the same emulated speeds; under DDP a communication hook stretches the
compute before the gradients' allreduce starts, so the wait for other ranks
and the allreduce itself are never stretched.

Unlike the mesh, a DDP step waits for its slowest rank, and a rank that dies
stops the job.
"""
import time

T0 = time.monotonic()  # the process's start: the clock of every figure

import argparse
import json
import os
import sys

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mnist_mlp import MLP, evaluate, load_mnist, mnist_dir  # noqa: E402


def run(rank, args, data, result):
    torch.set_num_threads(args.threads)
    world = args.procs
    if world > 1:
        os.environ.setdefault("MASTER_ADDR", args.master)
        os.environ.setdefault("MASTER_PORT", str(args.port))
        dist.init_process_group("gloo", rank=rank, world_size=world)
    X, Y, Xt, Yt = data
    torch.manual_seed(args.seed)
    model = MLP()
    slow = float(args.slowdowns.split(",")[rank]) if args.slowdowns else 1.0
    mark = [0.0]  # where the compute not yet stretched began
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model)
        if slow > 1:
            # Stretch only compute, never the wait for the other ranks: the
            # hook runs when a bucket's gradients are ready, before its
            # allreduce starts, and stretches the compute since the last
            # mark (one bucket for this model: forward and backward).
            def stretched_allreduce(state, bucket):
                time.sleep((slow - 1) * (time.monotonic() - mark[0]))
                mark[0] = time.monotonic()
                return default_hooks.allreduce_hook(None, bucket)
            model.register_comm_hook(None, stretched_allreduce)
    if args.optimizer == "adamw":
        opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    n, b = len(X), args.batch
    steps_per_epoch = n // (b * world)
    t0 = args.t0  # the parent process's start (time.monotonic is the system's)
    eval_s = 0.0
    next_eval = time.monotonic() + args.eval_every
    step, samples, acc, reached = 0, 0, 0.0, None
    stop = torch.zeros(1)
    while True:
        epoch, k = divmod(step, steps_per_epoch)
        perm = np.random.default_rng([args.seed, epoch]).permutation(n)
        start = (k * world + rank) * b
        idx = torch.from_numpy(perm[start:start + b])
        global_samples = step * b * world
        if args.lr_decay_samples > 0:
            for g in opt.param_groups:
                g["lr"] = args.lr * args.lr_decay ** (global_samples // args.lr_decay_samples)
        mark[0] = time.monotonic()
        opt.zero_grad()
        loss = F.cross_entropy(model(X[idx]), Y[idx])
        loss.backward()  # DDP: the gradients' allreduce overlaps the backward pass
        if slow > 1 and world == 1:
            time.sleep((slow - 1) * (time.monotonic() - mark[0]))
        opt.step()
        step += 1
        samples += b
        due = torch.zeros(1)
        if rank == 0 and time.monotonic() >= next_eval:
            due[0] = 1.0
        if world > 1:
            dist.broadcast(due, 0)  # every rank learns that rank 0 evaluates now
        if due[0] > 0:
            e0 = time.monotonic()
            if rank == 0:
                net = model.module if world > 1 else model
                net.eval()
                ne = args.eval_samples or len(Xt)
                acc = evaluate(net, Xt[:ne], Yt[:ne])[0]
                net.train()
                el = time.monotonic() - t0
                print("mnist_ddp: %.1f s, step %d, accuracy %.4f, loss %.4f" % (el, step, acc, loss.item()), flush=True)
                if reached is None and acc >= args.target:
                    reached = el
                stop[0] = 1.0 if (reached is not None or el >= args.time) else 0.0
                next_eval = time.monotonic() + args.eval_every
            if world > 1:
                dist.broadcast(stop, 0)
            eval_s += time.monotonic() - e0
            if stop[0] > 0:
                break
    el = time.monotonic() - t0
    if rank == 0:
        result.update(procs=world, batch=b, optimizer=args.optimizer, lr=args.lr, momentum=args.momentum,
                      slowdowns=args.slowdowns or "", target=args.target,
                      time_to_target_s=reached, accuracy=acc, seconds=round(el, 2),
                      samples_per_s=round(samples * world / el, 1), steps=step, eval_share=round(eval_s / el, 3))
        print(json.dumps(result), flush=True)
    if world > 1:
        dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--procs", type=int, default=1, help="ranks (1: one plain process, no DDP)")
    ap.add_argument("--data", help="folder of the MNIST IDX files (default $DSSP_DATA, else the Go module cache)")
    ap.add_argument("--batch", type=int, default=64, help="batch per rank")
    ap.add_argument("--optimizer", choices=["sgd", "adamw"], default="sgd")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--lr-decay", type=float, default=1.0, help="multiply the rate by this every --lr-decay-samples global samples")
    ap.add_argument("--lr-decay-samples", type=int, default=0, help="0: a constant rate")
    ap.add_argument("--target", type=float, default=0.97, help="stop at this test accuracy")
    ap.add_argument("--time", type=float, default=120, help="stop after this many seconds")
    ap.add_argument("--eval-every", type=float, default=2.0, help="seconds between evaluations (of the process's clock, as a node's --eval-every)")
    ap.add_argument("--eval-samples", type=int, default=0, help="evaluate on the first N test samples, as a node's --eval-samples (0: all 10000)")
    ap.add_argument("--slowdowns", help="per-rank compute slowdown factors, e.g. 4,4,2,1")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--port", type=int, default=29517)
    ap.add_argument("--rank", type=int, default=-1, help="run only this rank of --procs, one process a host (-1: every rank here)")
    ap.add_argument("--master", default="127.0.0.1", help="rank 0's address (with --rank)")
    args = ap.parse_args()
    args.t0 = T0
    if args.slowdowns and len(args.slowdowns.split(",")) != args.procs:
        sys.exit("--slowdowns %s: want %d factors, one per rank" % (args.slowdowns, args.procs))
    if args.rank >= args.procs:
        sys.exit("--rank %d: want a rank below --procs %d" % (args.rank, args.procs))
    data = load_mnist(mnist_dir(args.data))
    if args.procs == 1:
        run(0, args, data, {})
        return
    if args.rank >= 0:
        run(args.rank, args, data, {})
        return
    mp.spawn(run, args=(args, data, {}), nprocs=args.procs, join=True)


if __name__ == "__main__":
    main()
