"""The Optimizer against the fake node: each step is the user's optimizer's,
the update holds the change θ_start − θ_end of every tensor of the model's
state (buffers included, in the model's dtypes), evaluate is served on the
snapshot and its function's answer is checked, stop ends the loop or raises,
a node that goes away is NodeGone and wait_for_node carries on. Every test of
the copies runs on both bridges (the CPU's, and the staged one an
accelerator uses, here on the CPU)."""
import copy
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))

import numpy as np  # noqa: E402

import dsspmesh  # noqa: E402
from fakenode import FakeNode  # noqa: E402

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # torch is optional; these tests need it
    torch = None

N = 20  # dataset size


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))


class BNNet(torch.nn.Module if torch else object):
    """A linear layer, a BatchNorm (buffers: running_mean, running_var,
    num_batches_tracked) and a frozen scale."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc = torch.nn.Linear(4, 3)
        self.bn = torch.nn.BatchNorm1d(3)
        self.out = torch.nn.Linear(3, 2)
        self.scale = torch.nn.Parameter(torch.tensor(2.0), requires_grad=False)

    def forward(self, x):
        return self.out(F.relu(self.bn(self.fc(x)))) * self.scale


class Tied(torch.nn.Module if torch else object):
    """An embedding whose weight the output layer shares."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.emb = torch.nn.Embedding(6, 4)
        self.out = torch.nn.Linear(4, 6, bias=False)
        self.out.weight = self.emb.weight

    def forward(self, x):
        return self.out(self.emb(x))


def data():
    g = np.random.default_rng(3)
    return torch.from_numpy(g.standard_normal((N, 4)).astype(np.float32)), torch.from_numpy(g.integers(0, 2, N))


def state_flat(model):
    """The model's state in the mesh's order (parameters, then buffers) as
    float32."""
    return torch.cat([m.t.detach().reshape(-1).to(torch.float32) for m in dsspmesh.model_tensors(model)]).numpy().copy()


def load_flat(model, v):
    off = 0
    with torch.no_grad():
        for m in dsspmesh.model_tensors(model):
            n = m.t.numel()
            m.t.copy_(torch.from_numpy(v[off:off + n].copy()).view(m.t.shape))
            off += n


def count(model):
    return sum(m.t.numel() for m in dsspmesh.model_tensors(model))


P = 4 * 3 + 3 + 3 * 2 + 2


@unittest.skipIf(torch is None, "torch is not installed (Debian: apt-get install python3-torch)")
class OptimizerTest(unittest.TestCase):
    def node(self, params=P, **kw):
        n = FakeNode(params, **kw)
        self.addCleanup(n.close)
        return n

    def both(self, fn):
        for staged in (False, True):
            with self.subTest(staged=staged):
                fn(staged)

    def test_h1_update_is_the_users_momentum_step(self):
        self.both(self._h1_momentum)

    def _h1_momentum(self, staged):
        node = self.node(batch=4, seed=2)
        theta = [np.linspace(-1, 1, P, dtype=np.float32), np.linspace(1, -1, P, dtype=np.float32)]
        got = []

        def script(n):
            got.append(n.compute(0, theta[0], pos=0, lo=1, hi=3))  # computes samples 1..2 of the batch
            got.append(n.compute(1, theta[1], pos=4))
            n.send({"op": "stop", "code": "end", "reason": "target reached"})
        node.serve(script)
        X, Y = data()
        model = make_model()
        sgd = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=0.01)
        mesh = dsspmesh.connect(node.path, timeout=5)
        opt = dsspmesh.Optimizer(mesh, model, sgd, staged=staged)
        self.assertIsInstance(opt, torch.optim.Optimizer)
        seen, losses = [], []
        for idx in mesh.batches(N):
            np.testing.assert_array_equal(state_flat(model), theta[len(seen)])  # the model computes at θ
            seen.append(idx)
            opt.zero_grad()
            loss = F.cross_entropy(model(X[idx]), Y[idx])
            loss.backward()
            losses.append(loss.item())
            opt.step(loss)
        node.join()
        self.assertTrue(mesh.stopped)
        self.assertEqual(node.hello["layout"][0], {"name": "0.weight", "shape": [3, 4], "dtype": "float32", "kind": "param"})
        order = dsspmesh.Order(N, 2)
        np.testing.assert_array_equal(seen[0], order.indices(1, 2))
        np.testing.assert_array_equal(seen[1], order.indices(4, 4))
        # The reference: the same optimizer, its momentum carried from
        # round to round, each round from the θ the node gave.
        ref = make_model()
        ref_sgd = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9, weight_decay=0.01)
        for k, ((msg, upd), idx) in enumerate(zip(got, seen)):
            load_flat(ref, theta[k])
            ref_sgd.zero_grad()
            F.cross_entropy(ref(X[idx]), Y[idx]).backward()
            ref_sgd.step()
            np.testing.assert_allclose(upd, theta[k] - state_flat(ref), rtol=1e-5, atol=1e-7)
            self.assertEqual((msg["iter"], msg["samples"], msg["lr"]), (k, len(idx), 0.1))
            self.assertAlmostEqual(msg["loss"], losses[k], places=6)
        self.assertEqual(opt.stats.rounds, 2)

    def test_gradient_update_of_a_sum_job(self):
        node = self.node(batch=4, update="gradient")
        theta = np.linspace(-1, 1, P, dtype=np.float32)
        got = []

        def script(n):
            got.append(n.compute(0, theta, pos=0))
            n.send({"op": "stop", "reason": "done"})
        node.serve(script)
        X, Y = data()
        model = make_model()
        mesh = dsspmesh.connect(node.path, timeout=5)
        with self.assertWarnsRegex(UserWarning, "combines gradients"):
            opt = dsspmesh.Optimizer(mesh, model, torch.optim.SGD(model.parameters(), lr=0.5))
        seen = []
        for idx in mesh.batches(N):
            seen.append(idx)
            opt.zero_grad()
            F.cross_entropy(model(X[idx]), Y[idx]).backward()
            opt.step()
        node.join()
        ref = make_model()
        load_flat(ref, theta)
        F.cross_entropy(ref(X[seen[0]]), Y[seen[0]]).backward()
        want = torch.cat([p.grad.reshape(-1) for p in ref.parameters()]).numpy()
        np.testing.assert_allclose(got[0][1], want, rtol=1e-6, atol=1e-7)

    def test_h_local_steps_pseudo_gradient(self):
        H, B, lr = 3, 5, 0.1
        node = self.node(batch=B, local_steps=H, seed=4)
        theta = np.linspace(-0.5, 0.5, P, dtype=np.float32)
        got = []

        def script(n):
            got.append(n.compute(7, theta, pos=3, local_steps=H))
            n.send({"op": "stop", "reason": "job stopped"})
        node.serve(script)
        X, Y = data()
        model = make_model()
        mesh = dsspmesh.connect(node.path, timeout=5)
        opt = dsspmesh.Optimizer(mesh, model, inner=torch.optim.SGD(model.parameters(), lr=lr))
        seen = []
        for idx in mesh.batches(N):
            seen.append(idx)
            opt.zero_grad()
            loss = F.cross_entropy(model(X[idx]), Y[idx])
            loss.backward()
            opt.step(loss)
        node.join()
        order = dsspmesh.Order(N, 4)
        self.assertEqual(len(seen), H)
        for k in range(H):  # step k reads positions pos + k·B, wrapping into epoch 1
            np.testing.assert_array_equal(seen[k], order.indices(3 + k * B, B))
        ref = make_model()
        load_flat(ref, theta)
        sgd = torch.optim.SGD(ref.parameters(), lr=lr)
        for idx in seen:
            sgd.zero_grad()
            F.cross_entropy(ref(X[idx]), Y[idx]).backward()
            sgd.step()
        msg, upd = got[0]
        np.testing.assert_allclose(upd, theta - state_flat(ref), rtol=1e-5, atol=1e-7)
        self.assertEqual((msg["iter"], msg["samples"]), (7, H * B))

    def test_buffers_travel_and_frozen_parameters_stay(self):
        self.both(self._buffers)

    def _buffers(self, staged):
        model = BNNet()
        p = count(model)
        node = self.node(params=p, batch=6)
        theta = state_flat(model)
        theta[-1] = 5.0  # num_batches_tracked as the mesh has it
        got = []

        def script(n):
            got.append(n.compute(0, theta, pos=0))
            n.send({"op": "stop", "reason": "done"})
        node.serve(script)
        X, Y = data()
        mesh = dsspmesh.connect(node.path, timeout=5)
        opt = dsspmesh.Optimizer(mesh, model, torch.optim.SGD([q for q in model.parameters() if q.requires_grad], lr=0.1),
                                 staged=staged)
        self.assertEqual(int(model.bn.num_batches_tracked), 5)  # loaded into the int64 buffer
        for idx in mesh.batches(N):
            opt.zero_grad()
            F.cross_entropy(model(X[idx]), Y[idx]).backward()
            opt.step()
        node.join()
        layout = {t["name"]: t for t in node.hello["layout"]}
        self.assertEqual(layout["bn.running_mean"]["kind"], "buffer")
        self.assertEqual(layout["bn.num_batches_tracked"]["dtype"], "int64")
        self.assertEqual(layout["scale"]["kind"], "param")
        names = [t["name"] for t in node.hello["layout"]]
        self.assertEqual(set(names), set(BNNet().state_dict()))
        ref = BNNet()
        load_flat(ref, theta)
        ref_sgd = torch.optim.SGD([q for q in ref.parameters() if q.requires_grad], lr=0.1)
        ref_sgd.zero_grad()
        idx = dsspmesh.Order(N, 1).indices(0, 6)
        F.cross_entropy(ref(X[idx]), Y[idx]).backward()
        ref_sgd.step()
        upd = got[0][1]
        np.testing.assert_allclose(upd, theta - state_flat(ref), rtol=1e-5, atol=1e-6)
        off = {t["name"]: i for i, t in enumerate(node.hello["layout"])}
        flat_names = [m.name for m in dsspmesh.model_tensors(ref) for _ in range(m.t.numel())]
        self.assertEqual(upd[flat_names.index("bn.num_batches_tracked")], -1.0)  # one batch tracked this round
        self.assertEqual(upd[flat_names.index("scale")], 0.0)  # frozen
        self.assertIn("bn.running_var", off)

    def test_tied_weight_travels_once_with_its_alias(self):
        model = Tied()
        p = count(model)
        node = self.node(params=p, batch=4)
        node.serve(lambda n: (n.compute(0, state_flat(model), pos=0), n.send({"op": "stop", "reason": "done"})))
        mesh = dsspmesh.connect(node.path, timeout=5)
        opt = dsspmesh.Optimizer(mesh, model, torch.optim.SGD(model.parameters(), lr=0.1))
        x = torch.arange(N) % 6
        for idx in mesh.batches(N):
            opt.zero_grad()
            F.cross_entropy(model(x[idx]), x[idx]).backward()
            opt.step()
        node.join()
        self.assertEqual(node.hello["layout"], [{"name": "emb.weight", "shape": [6, 4], "dtype": "float32", "kind": "param",
                                                 "aliases": ["out.weight"]}])
        self.assertEqual(p, 24)

    def test_bf16_model_starts_from_the_rounded_theta(self):
        self.both(self._bf16)

    def _bf16(self, staged):
        model = make_model().to(torch.bfloat16)
        node = self.node(batch=4)
        theta = np.linspace(-1, 1, P, dtype=np.float32) + np.float32(1e-4)  # not bf16 values
        got = []

        def script(n):
            got.append(n.compute(0, theta, pos=0))
            got.append(n.theta.copy())
            n.send({"op": "stop", "reason": "done"})
        node.serve(script)
        X, Y = data()
        mesh = dsspmesh.connect(node.path, timeout=5)
        opt = dsspmesh.Optimizer(mesh, model, torch.optim.SGD(model.parameters(), lr=0.1), staged=staged)
        self.assertEqual(node.hello["layout"][0]["dtype"], "bfloat16")
        rounded = torch.from_numpy(theta).to(torch.bfloat16).to(torch.float32).numpy()
        np.testing.assert_array_equal(state_flat(model), rounded)
        for idx in mesh.batches(N):
            opt.zero_grad()
            F.cross_entropy(model(X[idx].to(torch.bfloat16)), Y[idx]).backward()
            opt.step()
        node.join()
        (_, upd), region = got
        if not staged:  # the start written back as the model held it (the staged copy keeps it on the device)
            np.testing.assert_array_equal(region, rounded)
        np.testing.assert_array_equal(upd, rounded - state_flat(model))  # exact: bf16 differences in float32

    def test_scheduler_and_state_dict(self):
        node = self.node(batch=2)

        def script(n):
            for it in range(3):
                n.compute(it, np.full(P, 0.1, np.float32), pos=-1)
            n.send({"op": "stop", "reason": "done"})
        node.serve(script)
        X, Y = data()
        model = make_model()
        adamw = torch.optim.AdamW([{"params": model[0].parameters(), "lr": 0.01}, {"params": model[2].parameters()}], lr=0.02)
        mesh = dsspmesh.connect(node.path, timeout=5)
        opt = dsspmesh.Optimizer(mesh, model, adamw)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
        lrs = []
        for idx in mesh.batches(N):
            opt.zero_grad()
            F.cross_entropy(model(X[idx]), Y[idx]).backward()
            lrs.append([g["lr"] for g in adamw.param_groups])
            opt.step()
            sched.step()
        node.join()
        self.assertEqual(lrs, [[0.01, 0.02], [0.005, 0.01], [0.0025, 0.005]])  # the scheduler reaches the user's optimizer
        sd = opt.state_dict()
        self.assertEqual(len(sd["param_groups"]), 2)
        self.assertEqual(sd["state"][0]["step"] if not torch.is_tensor(sd["state"][0]["step"]) else int(sd["state"][0]["step"]), 3)
        other = copy.deepcopy(sd)
        opt.load_state_dict(other)
        self.assertIs(opt.param_groups, adamw.param_groups)

    def test_step_takes_a_closure(self):
        node = self.node(batch=2)
        got = []
        node.serve(lambda n: (got.append(n.compute(0, np.zeros(P, np.float32), pos=-1)), n.send({"op": "stop", "reason": "done"})))
        X, Y = data()
        model = make_model()
        mesh = dsspmesh.connect(node.path, timeout=5)
        opt = dsspmesh.Optimizer(mesh, model, torch.optim.SGD(model.parameters(), lr=0.1))
        for idx in mesh.batches(N):
            def closure():
                opt.zero_grad()
                loss = F.cross_entropy(model(X[idx]), Y[idx])
                loss.backward()
                return loss
            loss = opt.step(closure)
            self.assertTrue(torch.is_tensor(loss))
        node.join()
        self.assertAlmostEqual(got[0][0]["loss"], loss.item(), places=6)

    def test_default_optimizer_is_the_jobs(self):
        node = self.node(batch=2, optimizer={"kind": "momentum", "lr": 0.07, "momentum": 0.8})
        node.serve(lambda n: n.send({"op": "stop", "reason": "done"}))
        mesh = dsspmesh.connect(node.path, timeout=5)
        opt = dsspmesh.Optimizer(mesh, make_model())
        node.join()
        self.assertEqual((type(opt.inner), opt.param_groups[0]["lr"], opt.param_groups[0]["momentum"]), (torch.optim.SGD, 0.07, 0.8))

    def test_stop_with_a_reason_raises_from_step(self):
        node = self.node(batch=2)

        def script(n):
            n.compute(0, np.zeros(P, np.float32), pos=-1)
            n.send({"op": "stop", "code": "stopped", "reason": "20 updates in a row refused: value 3 is NaN"})
        node.serve(script)
        X, Y = data()
        model = make_model()
        mesh = dsspmesh.connect(node.path, timeout=5)
        opt = dsspmesh.Optimizer(mesh, model, torch.optim.SGD(model.parameters(), lr=0.1))
        with self.assertRaisesRegex(dsspmesh.Stopped, "NaN") as cm:
            for idx in mesh.batches(N):
                opt.zero_grad()
                F.cross_entropy(model(X[idx]), Y[idx]).backward()
                opt.step()
        node.join()
        self.assertEqual(cm.exception.code, "stopped")

    def test_evaluate_served_on_snapshot_then_theta_reloaded(self):
        node = self.node(batch=2)
        snap = np.full(P, 0.25, np.float32)
        theta1 = np.full(P, -1.0, np.float32)
        got = {}

        def script(n):
            got["update"] = n.compute(0, np.zeros(P, np.float32), pos=-1)[0]
            got["eval"] = n.evaluate(11, snap)
            got["eval2"] = n.evaluate(12, snap)
            n.compute(1, theta1, pos=-1)
            n.send({"op": "stop", "reason": "done"})
        node.serve(script)
        X, Y = data()
        model = make_model()
        mesh = dsspmesh.connect(node.path, timeout=5)
        calls = []
        answers = iter([(0.875, 0.5, 100), {"accuracy": torch.tensor(0.5)}])

        @mesh.on_evaluate
        def evaluate(m):
            calls.append((state_flat(m), m.training))
            return next(answers)
        opt = dsspmesh.Optimizer(mesh, model, torch.optim.SGD(model.parameters(), lr=0.1))
        thetas = []
        for idx in mesh.batches(N):
            self.assertEqual(len(idx), 2)
            thetas.append(state_flat(model))
            opt.zero_grad()
            F.cross_entropy(model(X[idx]), Y[idx]).backward()
            opt.step()
        node.join()
        self.assertEqual(len(calls), 2)
        np.testing.assert_array_equal(calls[0][0], snap)
        self.assertFalse(calls[0][1])  # evaluated in eval mode
        self.assertTrue(model.training)  # and put back
        np.testing.assert_array_equal(thetas[1], theta1)
        self.assertEqual(got["eval"], {"op": "evaluated", "seq": 11, "accuracy": 0.875, "loss": 0.5, "samples": 100})
        self.assertEqual(got["eval2"], {"op": "evaluated", "seq": 12, "accuracy": 0.5, "loss": 0.0, "samples": 0})
        # step() without a loss: the node's check wants a finite one
        self.assertEqual(got["update"]["loss"], 0.0)
        self.assertGreaterEqual(got["update"]["compute_s"], 0.0)

    def test_evaluation_runs_off_the_training_path(self):
        """The evaluator's trainer acks evaluate and trains on while its
        evaluation, on a copy of the model, runs: the evaluation function
        here waits for the training loop's next step before it answers."""
        import threading
        node = self.node(batch=2)
        snap = np.full(P, 0.25, np.float32)
        stepped = threading.Event()
        got = {}

        def script(n):
            n.compute(0, np.zeros(P, np.float32), pos=-1)
            n.eval[:] = snap
            n.send({"op": "evaluate", "seq": 3})
            got["ack"] = n.recv()
            n.theta[:] = np.full(P, -1.0, np.float32)
            n.send({"op": "compute", "iter": 1, "batch": 2, "pos": -1, "local_steps": 1, "lo": 0, "hi": 2})
            got["next"] = [n.recv(), n.recv()]  # the update and the evaluated, in either order
            n.send({"op": "stop", "reason": "done"})
        node.serve(script)
        X, Y = data()
        model = make_model()
        mesh = dsspmesh.connect(node.path, timeout=5)
        seen = []

        @mesh.on_evaluate
        def evaluate(m):
            seen.append(state_flat(m))
            if not stepped.wait(10):
                raise RuntimeError("the training loop did not step while the evaluation ran")
            return 0.5, 1.0, 10
        opt = dsspmesh.Optimizer(mesh, model, torch.optim.SGD(model.parameters(), lr=0.1))
        for k, idx in enumerate(mesh.batches(N)):
            opt.zero_grad()
            F.cross_entropy(model(X[idx]), Y[idx]).backward()
            if k == 1:
                stepped.set()
            opt.step()
        node.join()
        self.assertEqual(got["ack"], {"op": "evaluating", "seq": 3})
        ops = sorted(m["op"] for m in got["next"])
        self.assertEqual(ops, ["evaluated", "update"])
        ev = next(m for m in got["next"] if m["op"] == "evaluated")
        self.assertEqual((ev["seq"], ev["accuracy"], ev["samples"]), (3, 0.5, 10))
        np.testing.assert_array_equal(seen[0], snap)  # the copy held the snapshot while the model trained

    def test_a_wrong_evaluation_is_an_exception_naming_it(self):
        for bad, want in (("97%", "returned '97%'"), ((0.9,), r"\(0\.9,\)"), ((97.0, 0.1), "outside"), ({"acc": 1}, "without")):
            with self.subTest(bad=bad):
                node = self.node(batch=2)
                got = {}

                def script(n):
                    n.compute(0, np.zeros(P, np.float32), pos=-1)
                    got["eval"] = n.evaluate(1, np.zeros(P, np.float32))
                node.serve(script)
                X, Y = data()
                model = make_model()
                mesh = dsspmesh.connect(node.path, timeout=5)
                mesh.on_evaluate(lambda m, bad=bad: bad)
                opt = dsspmesh.Optimizer(mesh, model, torch.optim.SGD(model.parameters(), lr=0.1))
                with self.assertRaisesRegex((TypeError, ValueError), want):
                    for idx in mesh.batches(N):
                        opt.zero_grad()
                        F.cross_entropy(model(X[idx]), Y[idx]).backward()
                        opt.step()
                node.join()
                self.assertIn("error", got["eval"])  # the node hears it before the trainer raises
                mesh.close()

    def test_send_init_writes_the_models_state(self):
        self.both(self._send_init)

    def _send_init(self, staged):
        model = BNNet()
        node = self.node(params=count(model), send_init=True)
        got = {}

        def script(n):
            got["init"] = n.recv()
            got["theta"] = n.theta.copy()
            n.send({"op": "stop", "reason": "done"})
        node.serve(script)
        want = state_flat(model)
        dsspmesh.Optimizer(dsspmesh.connect(node.path, timeout=5), model, staged=staged)
        node.join()
        self.assertEqual(got["init"], {"op": "init"})
        np.testing.assert_array_equal(got["theta"], want)

    def test_node_gone_then_back(self):
        node = self.node(batch=2)

        def dies(n):
            n.compute(0, np.zeros(P, np.float32), pos=0)
            n.conn.close()  # the node is killed while the trainer waits
            n.lsock.close()
            os.unlink(n.path)
        node.serve(dies)
        X, Y = data()
        model = make_model()
        mesh = dsspmesh.connect(node.path, timeout=5)
        opt = dsspmesh.Optimizer(mesh, model, torch.optim.SGD(model.parameters(), lr=0.1))
        with self.assertRaises(dsspmesh.NodeGone):
            for idx in mesh.batches(N):
                opt.zero_grad()
                F.cross_entropy(model(X[idx]), Y[idx]).backward()
                opt.step()
        node.join()
        # The node restarts on the same data dir (a new shared-memory file).
        back = FakeNode(P, batch=2, dir=node.dir)
        self.addCleanup(back.close)
        theta = np.full(P, 0.5, np.float32)
        got = {}

        def script(n):
            got["upd"] = n.compute(1, theta, pos=2)
            n.send({"op": "stop", "reason": "done"})
        back.serve(script)
        # The evaluation's copy as an earlier restart left it (its bridge
        # closed, rebound at the next evaluation): this restart keeps it so.
        opt._eval_copy = (make_model(), None)
        mesh.wait_for_node(timeout=5)
        self.assertIsNone(opt._eval_copy[1])
        np.testing.assert_array_equal(state_flat(model), theta)
        steps = 0
        for idx in mesh.batches(N):
            steps += 1
            opt.zero_grad()
            F.cross_entropy(model(X[idx]), Y[idx]).backward()
            opt.step()
        back.join()
        self.assertEqual(steps, 1)
        self.assertEqual(got["upd"][0]["iter"], 1)

    def test_step_skipped_is_named(self):
        node = self.node(batch=2)
        node.serve(lambda n: n.compute(0, np.zeros(P, np.float32)))
        mesh = dsspmesh.connect(node.path, timeout=5)
        dsspmesh.Optimizer(mesh, make_model())
        gen = mesh.batches(N)
        next(gen)
        with self.assertRaisesRegex(dsspmesh.ProtocolError, "step"):
            next(gen)
        mesh.close()
        with self.assertRaises(EOFError):
            node.join()

    def test_batch_sampler_feeds_a_dataloader(self):
        node = self.node(batch=3, seed=9)

        def script(n):
            n.compute(0, np.zeros(P, np.float32), pos=5)
            n.compute(1, np.zeros(P, np.float32), pos=8)
            n.send({"op": "stop", "reason": "done"})
        node.serve(script)
        X, Y = data()
        model = make_model()
        mesh = dsspmesh.connect(node.path, timeout=5)
        opt = dsspmesh.Optimizer(mesh, model)
        loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(X, Y), batch_sampler=mesh.batch_sampler(N))
        seen = []
        for x, y in loader:
            seen.append(y.tolist())
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
        node.join()
        order = dsspmesh.Order(N, 9)
        self.assertEqual(seen, [Y[order.indices(5, 3)].tolist(), Y[order.indices(8, 3)].tolist()])

    def test_layout_names_what_the_mesh_cannot_carry(self):
        m = torch.nn.Linear(2, 2).to(torch.complex64)
        with self.assertRaisesRegex(dsspmesh.DsspError, "weight"):
            dsspmesh.layout_of(m)
        b = torch.nn.Module()
        b.register_buffer("ids", torch.tensor([1 << 30]))
        b.w = torch.nn.Parameter(torch.zeros(1))
        with self.assertRaisesRegex(dsspmesh.DsspError, "ids.*2\\^24"):
            dsspmesh.layout_of(b)

    def test_exported_state_loads_strictly(self):
        """A file with every state_dict name (tied aliases included) in the
        model's dtypes loads with load_state_dict(strict=True)."""
        import tempfile
        for model in (Tied(), BNNet(), make_model().to(torch.bfloat16)):
            with self.subTest(model=type(model).__name__):
                path = os.path.join(tempfile.mkdtemp(), "m.safetensors")
                dsspmesh.safetensors.save(model.state_dict(), path)
                other = copy.deepcopy(model)
                with torch.no_grad():
                    for p in other.parameters():
                        p.zero_()
                other.load_state_dict(dsspmesh.load_state_dict(path), strict=True)
                for k, v in model.state_dict().items():
                    self.assertTrue(torch.equal(v, other.state_dict()[k]), k)


if __name__ == "__main__":
    unittest.main()
