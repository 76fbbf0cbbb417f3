#!/usr/bin/env python3
"""A small character-level transformer language model trained through the
local dssp node, on a corpus every machine with Go has: the .go files under
$(go env GOROOT)/src (or any text file with --text).

The training loop is a plain PyTorch loop; three lines change to train
through the mesh:

    mesh = dsspmesh.connect()                        # 1: $DSSP_TRAINER_SOCKET
    opt = dsspmesh.Optimizer(mesh, model, inner=sgd)  # 2: replaces opt = torch.optim.SGD(...)
    for idx in mesh.batches(corpus.samples):          # 3: the node's batch size and data order
        x, y = corpus.batch(idx)
        opt.zero_grad()
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        loss.backward()
        opt.step(loss)

Commands:
    char_lm.py train                    through the node ($DSSP_TRAINER_SOCKET)
    char_lm.py local --time 60          one plain PyTorch process (the samples/s baseline)
    char_lm.py generate --model m.safetensors --prompt 'func main() {'
                                        loads `dssp export`'s file and writes text

The vocabulary is the 256 byte values, so every trainer has the same layout
whatever its corpus; a sample is the window of --context bytes starting at
a position of the corpus (the last 5 % is held out for evaluation). All the
trainers of one job must read the same corpus: the same Go version, or the
same --text file. A node's job for this model: `--model external` with a
learning rate for the mesh's SGD with momentum such as --lr 0.1 --momentum 0.5 (each
worker's push is applied on its own: four workers step four times per batch time).
"""
import argparse
import math
import os
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import dsspmesh  # noqa: E402


class Block(torch.nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = torch.nn.LayerNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.proj = torch.nn.Linear(d, d)
        self.ln2 = torch.nn.LayerNorm(d)
        self.fc = torch.nn.Linear(d, 4 * d)
        self.out = torch.nn.Linear(4 * d, d)

    def forward(self, x, mask):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        att = att.masked_fill(mask[:t, :t], float("-inf")).softmax(-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class CharLM(torch.nn.Module):
    """A GPT-style decoder over bytes: token and position embeddings,
    `layers` pre-norm blocks, a tied-free output head."""

    def __init__(self, context=64, d=128, layers=2, heads=4):
        super().__init__()
        self.context = context
        self.tok = torch.nn.Embedding(256, d)
        self.pos = torch.nn.Embedding(context, d)
        self.blocks = torch.nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = torch.nn.LayerNorm(d)
        self.head = torch.nn.Linear(d, 256)
        self.register_buffer("mask", torch.triu(torch.ones(context, context, dtype=torch.bool), 1), persistent=False)
        for m in self.modules():
            if isinstance(m, (torch.nn.Linear, torch.nn.Embedding)):
                torch.nn.init.normal_(m.weight, 0.0, 0.02)
                if getattr(m, "bias", None) is not None:
                    torch.nn.init.zeros_(m.bias)

    def forward(self, x):
        t = x.shape[1]
        h = self.tok(x) + self.pos(torch.arange(t, device=x.device))
        for blk in self.blocks:
            h = blk(h, self.mask)
        return self.head(self.ln(h))


def go_corpus(max_bytes):
    """The .go files under $(go env GOROOT)/src, sorted by path, joined, up
    to max_bytes."""
    root = subprocess.run(["go", "env", "GOROOT"], capture_output=True, text=True, check=True).stdout.strip()
    parts, total = [], 0
    for d, dirs, files in os.walk(os.path.join(root, "src")):
        dirs.sort()
        for f in sorted(files):
            if f.endswith(".go") and total < max_bytes:
                with open(os.path.join(d, f), "rb") as fh:
                    b = fh.read()
                parts.append(b)
                total += len(b)
    return b"".join(parts)[:max_bytes]


class Corpus:
    """A byte corpus split into training windows and held-out windows."""

    def __init__(self, data, context):
        self.data = torch.from_numpy(np.frombuffer(data, dtype=np.uint8).astype(np.int64))
        self.context = context
        cut = int(len(data) * 0.95)
        self.samples = cut - context - 1  # training windows start in [0, samples)
        self.held = self.data[cut:]
        self._off = torch.arange(context + 1)

    def batch(self, idx, data=None):
        w = (self.data if data is None else data)[torch.as_tensor(idx)[:, None] + self._off]
        return w[:, :-1], w[:, 1:]

    def evaluate(self, model, windows=64):
        """(next-byte accuracy, mean loss, bytes) on fixed held-out windows."""
        n = min(windows, (len(self.held) - 1) // (self.context + 1))
        idx = torch.arange(n) * (self.context + 1)
        x, y = self.batch(idx, self.held)
        with torch.no_grad():
            out = model(x)
            loss = F.cross_entropy(out.flatten(0, 1), y.flatten()).item()
            acc = (out.argmax(-1) == y).float().mean().item()
        return acc, loss, int(y.numel())


def load_corpus(args):
    if args.text:
        with open(args.text, "rb") as f:
            data = f.read()[:args.max_bytes]
    else:
        data = go_corpus(args.max_bytes)
    if len(data) < 20 * (args.context + 1):
        sys.exit("corpus of %d bytes is too small for windows of %d" % (len(data), args.context))
    return Corpus(data, args.context)


def generate(args):
    state = dsspmesh.safetensors.load(args.model)
    model = CharLM(args.context, args.dim, args.layers, args.heads)
    model.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})
    model.eval()
    torch.manual_seed(args.seed)
    x = torch.tensor([list(args.prompt.encode("utf-8"))], dtype=torch.int64)
    with torch.no_grad():
        for _ in range(args.length):
            logits = model(x[:, -args.context:])[0, -1] / args.temperature
            x = torch.cat([x, torch.multinomial(logits.softmax(-1), 1)[None]], dim=1)
    sys.stdout.write(bytes(x[0].tolist()).decode("utf-8", errors="replace") + "\n")


def train_local(args, corpus, model):
    """One plain process: the samples/s baseline."""
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    rng = np.random.default_rng(args.seed)
    t0, step, samples = time.monotonic(), 0, 0
    while time.monotonic() - t0 < args.time:
        idx = rng.integers(0, corpus.samples, args.batch)
        x, y = corpus.batch(idx)
        opt.zero_grad()
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        opt.step()
        step += 1
        samples += len(idx)
        if step % args.log_steps == 0:
            acc, vloss, _ = corpus.evaluate(model)
            print("char_lm local: %.1f s, %d samples, %.1f samples/s, loss %.4f, held-out loss %.4f, accuracy %.4f"
                  % (time.monotonic() - t0, samples, samples / (time.monotonic() - t0), loss.item(), vloss, acc), flush=True)
    el = time.monotonic() - t0
    print("char_lm local: %d samples in %.1f s, %.1f samples/s" % (samples, el, samples / el), flush=True)
    if args.out:
        dsspmesh.safetensors.save(model.state_dict(), args.out, metadata={"model": "char_lm"})
        print("char_lm local: wrote %s" % args.out, flush=True)


def train_mesh(args, corpus, model):
    sgd = torch.optim.SGD(model.parameters(), lr=args.inner_lr)
    mesh = dsspmesh.connect(args.socket)
    mesh.on_evaluate(corpus.evaluate)
    opt = dsspmesh.Optimizer(mesh, model, inner=sgd)
    print("char_lm: attached to %s, %d parameters, batch %d, local steps %d, %d training windows"
          % (mesh.node, mesh.params, mesh.batch, mesh.local_steps, corpus.samples), flush=True)
    t0 = last = time.monotonic()
    while True:
        try:
            for idx in mesh.batches(corpus.samples):
                x, y = corpus.batch(idx)
                opt.zero_grad()
                loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)  # the gradient the node gets
                opt.step(loss)
                if time.monotonic() - last >= args.log_every:
                    last = time.monotonic()
                    print("char_lm: %.1f s, %d samples, %.1f samples/s, loss %.4f; %s"
                          % (last - t0, opt.stats.samples, opt.stats.samples / (last - t0), loss.item(), opt.stats), flush=True)
            break
        except dsspmesh.NodeGone as e:
            if args.reconnect <= 0:
                raise
            print("char_lm: %s; waiting up to %.0f s for the node" % (e, args.reconnect), flush=True)
            mesh.wait_for_node(args.reconnect)
    el = time.monotonic() - t0
    print("char_lm: stopped (%s) after %d samples in %.1f s, %.1f samples/s; %s"
          % (mesh.stop_reason, opt.stats.samples, el, opt.stats.samples / max(el, 1e-9), opt.stats), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("command", choices=["train", "local", "generate"])
    ap.add_argument("--text", help="train on this file instead of the Go source tree")
    ap.add_argument("--max-bytes", type=int, default=2 << 20, help="corpus size cap")
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--socket", help="the node's trainer socket (default $DSSP_TRAINER_SOCKET)")
    ap.add_argument("--inner-lr", type=float, default=0.1, help="local SGD learning rate when the job has --local-steps > 1")
    ap.add_argument("--reconnect", type=float, default=0, help="seconds to wait for the node to come back after it died")
    ap.add_argument("--log-every", type=float, default=10)
    ap.add_argument("--clip", type=float, default=1.0, help="clip the gradient's norm to this before each step")
    ap.add_argument("--threads", type=int, default=1)
    # local
    ap.add_argument("--time", type=float, default=60, help="local: seconds to train")
    ap.add_argument("--batch", type=int, default=32, help="local: batch")
    ap.add_argument("--lr", type=float, default=0.2, help="local: learning rate")
    ap.add_argument("--momentum", type=float, default=0.9, help="local: momentum")
    ap.add_argument("--log-steps", type=int, default=100, help="local: steps between progress lines")
    ap.add_argument("--out", help="local: save the trained parameters to this safetensors file")
    # generate
    ap.add_argument("--model", help="generate: the safetensors file `dssp export` wrote")
    ap.add_argument("--prompt", default="func ")
    ap.add_argument("--length", type=int, default=400)
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.command == "generate":
        if not args.model:
            sys.exit("generate needs --model FILE.safetensors")
        return generate(args)
    torch.manual_seed(args.seed)
    model = CharLM(args.context, args.dim, args.layers, args.heads)
    corpus = load_corpus(args)
    if args.command == "local":
        return train_local(args, corpus, model)
    return train_mesh(args, corpus, model)


if __name__ == "__main__":
    main()
