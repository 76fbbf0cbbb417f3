"""The Optimizer wrapper against the fake node: the first compute loads θ,
H = 1 writes the gradient, H > 1 the pseudo-gradient, evaluate is served
on the snapshot, stop ends the loop, a node that goes away is NodeGone and
wait_for_node carries on with the node that comes back."""
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


def data():
    g = np.random.default_rng(3)
    return torch.from_numpy(g.standard_normal((N, 4)).astype(np.float32)), torch.from_numpy(g.integers(0, 2, N))


def flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy().copy()


def load_flat(model, v):
    off = 0
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.from_numpy(v[off:off + p.numel()].copy()).view(p.shape))
            off += p.numel()


P = 4 * 3 + 3 + 3 * 2 + 2


@unittest.skipIf(torch is None, "torch is not installed (Debian: apt-get install python3-torch)")
class OptimizerTest(unittest.TestCase):
    def node(self, **kw):
        n = FakeNode(P, **kw)
        self.addCleanup(n.close)
        return n

    def test_h1_gradient_at_theta(self):
        node = self.node(batch=4, seed=2)
        theta = [np.linspace(-1, 1, P, dtype=np.float32), np.linspace(1, -1, P, dtype=np.float32)]
        got = []

        def script(n):
            got.append(n.compute(0, theta[0], pos=0, lo=1, hi=3))  # computes samples 1..2 of the batch
            got.append(n.compute(1, theta[1], pos=4))
            n.send({"op": "stop", "reason": "target reached"})
        node.serve(script)
        X, Y = data()
        model = make_model()
        mesh = dsspmesh.connect(node.path, timeout=5)
        opt = dsspmesh.Optimizer(mesh, model)
        seen, losses = [], []
        for idx in mesh.batches(N):
            np.testing.assert_array_equal(flat(model), theta[len(seen)])  # the model computes at θ
            seen.append(idx)
            opt.zero_grad()
            loss = F.cross_entropy(model(X[idx]), Y[idx])
            loss.backward()
            losses.append(loss.item())
            opt.step(loss)
        node.join()
        self.assertTrue(mesh.stopped)
        self.assertEqual(node.hello["layout"][0], {"name": "0.weight", "shape": [3, 4], "dtype": "float32"})
        order = dsspmesh.Order(N, 2)
        np.testing.assert_array_equal(seen[0], order.indices(1, 2))
        np.testing.assert_array_equal(seen[1], order.indices(4, 4))
        for k, ((msg, upd), idx) in enumerate(zip(got, seen)):
            ref = make_model()
            load_flat(ref, theta[k])
            F.cross_entropy(ref(X[idx]), Y[idx]).backward()
            want = torch.cat([p.grad.reshape(-1) for p in ref.parameters()]).numpy()
            np.testing.assert_allclose(upd, want, rtol=1e-6, atol=1e-7)
            self.assertEqual((msg["iter"], msg["samples"]), (k, len(idx)))
            self.assertAlmostEqual(msg["loss"], losses[k], places=6)
        self.assertEqual(opt.stats.rounds, 2)

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
        np.testing.assert_allclose(upd, theta - flat(ref), rtol=1e-5, atol=1e-7)
        self.assertEqual((msg["iter"], msg["samples"]), (7, H * B))

    def test_evaluate_served_on_snapshot_then_theta_reloaded(self):
        node = self.node(batch=2)
        snap = np.full(P, 0.25, np.float32)
        theta1 = np.full(P, -1.0, np.float32)
        got = {}

        def script(n):
            got["update"] = n.compute(0, np.zeros(P, np.float32), pos=-1)[0]
            got["eval"] = n.evaluate(11, snap)
            n.compute(1, theta1, pos=-1)
            n.send({"op": "stop", "reason": "done"})
        node.serve(script)
        X, Y = data()
        model = make_model()
        mesh = dsspmesh.connect(node.path, timeout=5)
        calls = []

        @mesh.on_evaluate
        def evaluate(m):
            calls.append((flat(m), m.training))
            return 0.875, 0.5, 100
        opt = dsspmesh.Optimizer(mesh, model)
        thetas = []
        for idx in mesh.batches(N):
            self.assertEqual(len(idx), 2)
            thetas.append(flat(model))
            opt.zero_grad()
            F.cross_entropy(model(X[idx]), Y[idx]).backward()
            opt.step()
        node.join()
        self.assertEqual(len(calls), 1)
        np.testing.assert_array_equal(calls[0][0], snap)
        self.assertFalse(calls[0][1])  # evaluated in eval mode
        self.assertTrue(model.training)  # and put back
        np.testing.assert_array_equal(thetas[1], theta1)
        self.assertEqual(got["eval"], {"op": "evaluated", "seq": 11, "accuracy": 0.875, "loss": 0.5, "samples": 100})
        # step() without a loss: the node's check wants a finite one
        self.assertEqual(got["update"]["loss"], 0.0)
        self.assertGreaterEqual(got["update"]["compute_s"], 0.0)

    def test_send_init_writes_the_models_parameters(self):
        node = self.node(send_init=True)
        got = {}

        def script(n):
            got["init"] = n.recv()
            got["theta"] = n.theta.copy()
            n.send({"op": "stop", "reason": "done"})
        node.serve(script)
        model = make_model()
        want = flat(model)
        dsspmesh.Optimizer(dsspmesh.connect(node.path, timeout=5), model)
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
        opt = dsspmesh.Optimizer(mesh, model)
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
        mesh.wait_for_node(timeout=5)
        np.testing.assert_array_equal(flat(model), theta)
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

    def test_layout_of_rejects_other_dtypes(self):
        m = torch.nn.Linear(2, 2).double()
        with self.assertRaisesRegex(dsspmesh.DsspError, "weight"):
            dsspmesh.layout_of(m)


if __name__ == "__main__":
    unittest.main()
