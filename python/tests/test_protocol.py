"""Framing, attaching and refusals, against the fake node (numpy only)."""
import os
import socket
import struct
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))

import numpy as np  # noqa: E402

import dsspmesh  # noqa: E402
from dsspmesh import protocol  # noqa: E402
from fakenode import FakeNode  # noqa: E402

LAYOUT = [{"name": "fc1.weight", "shape": [3, 4], "dtype": "float32"},
          {"name": "fc1.bias", "shape": [3], "dtype": "float32"}]


class Framing(unittest.TestCase):
    def pair(self):
        a, b = socket.socketpair()
        self.addCleanup(a.close)
        self.addCleanup(b.close)
        return a, b

    def test_round_trip_split_frame(self):
        a, b = self.pair()
        data = protocol.encode({"op": "update", "iter": 7, "loss": 0.5, "samples": 64})
        self.assertEqual(struct.unpack("<I", data[:4])[0], len(data) - 4)
        for i in range(len(data)):  # one byte at a time: the reader reassembles
            a.sendall(data[i:i + 1])
        self.assertEqual(protocol.recv(b), {"op": "update", "iter": 7, "loss": 0.5, "samples": 64})

    def test_eof_is_node_gone(self):
        a, b = self.pair()
        a.close()
        with self.assertRaises(dsspmesh.NodeGone):
            protocol.recv(b)

    def test_eof_mid_frame_is_node_gone(self):
        a, b = self.pair()
        a.sendall(struct.pack("<I", 10) + b'{"op"')
        a.close()
        with self.assertRaisesRegex(dsspmesh.NodeGone, "middle"):
            protocol.recv(b)

    def test_oversized_frame(self):
        a, b = self.pair()
        a.sendall(struct.pack("<I", protocol.MAX_FRAME + 1))
        with self.assertRaisesRegex(dsspmesh.ProtocolError, "exceeds"):
            protocol.recv(b)

    def test_not_json_and_no_op(self):
        a, b = self.pair()
        for body, want in ((b"\xff\xfe", "not UTF-8 JSON"), (b"[1,2]", "op"), (b'{"op":3}', "op")):
            a.sendall(struct.pack("<I", len(body)) + body)
            with self.assertRaisesRegex(dsspmesh.ProtocolError, want):
                protocol.recv(b)

    def test_nan_never_sent(self):
        with self.assertRaises(ValueError):
            protocol.encode({"op": "update", "loss": float("nan")})

    def test_timeout(self):
        a, b = self.pair()
        b.settimeout(0.01)
        with self.assertRaises(dsspmesh.Timeout):
            protocol.recv(b)


class Attach(unittest.TestCase):
    def node(self, **kw):
        n = FakeNode(15, **kw)
        self.addCleanup(n.close)
        return n

    def test_welcome_maps_the_regions(self):
        node = self.node(layout=LAYOUT, batch=8, local_steps=2, seed=5)
        got = {}

        def script(n):
            n.theta[:] = np.arange(15)
            got["hello"] = n.hello
            n.recv()  # the trainer's close ends the script with EOF
        node.serve(script)
        mesh = dsspmesh.connect(node.path, timeout=5)
        mesh.hello(LAYOUT)
        self.assertEqual((mesh.params, mesh.batch, mesh.local_steps, mesh.seed, mesh.node), (15, 8, 2, 5, "node-fake"))
        mesh.update[:] = 2.5  # written straight into the file the node reads
        mesh.close()
        with self.assertRaises(EOFError):
            node.join()
        self.assertEqual(got["hello"], {"op": "hello", "version": protocol.VERSION, "role": "train", "layout": LAYOUT})
        self.assertEqual((mesh.update_kind, mesh.wire), ("delta", "fp32"))
        np.testing.assert_array_equal(node.update, np.full(15, 2.5, np.float32))

    def test_layout_refused_names_the_tensor(self):
        node = self.node(layout=LAYOUT)
        node.serve(lambda n: None)
        mine = [dict(LAYOUT[0], shape=[4, 4]), LAYOUT[1]]
        mesh = dsspmesh.connect(node.path, timeout=5)
        with self.assertRaises(dsspmesh.LayoutRefused) as cm:
            mesh.hello(mine)
        node.join()
        self.assertEqual(cm.exception.tensor, "fc1.weight")
        self.assertIn("fc1.weight", str(cm.exception))

    def test_tensor_named_in_the_nodes_messages(self):
        from dsspmesh.mesh import _tensor_named
        for text, want in (
                ("layout mismatch at tensor 2 fc2.weight: shape [2 4] in the job, [3 4] in the trainer", "fc2.weight"),
                ("layout mismatch at tensor 1: fc1.bias [256] in the job, fc9.w [3] in the trainer", "fc1.bias"),
                ("layout mismatch at tensor 6: the job has 6 tensors, the trainer has more (extra.w [3])", "extra.w"),
                ("layout mismatch at tensor 5: fc3.bias [10] in the job, missing in the trainer (it has 5 tensors)", "fc3.bias"),
                ('tensor "a.b" differs', "a.b")):
            self.assertEqual(_tensor_named(text), want, text)

    def test_refusal_codes_are_typed(self):
        for code, cls in (("job-mismatch", dsspmesh.JobMismatch), ("not-external", dsspmesh.JobMismatch),
                          ("version", dsspmesh.JobMismatch), ("busy", dsspmesh.Busy),
                          ("other", dsspmesh.ProtocolError)):
            with self.subTest(code=code):
                node = self.node(code=code)
                node.serve(lambda n: None)
                mesh = dsspmesh.connect(node.path, timeout=5)
                with self.assertRaises(cls) as cm:
                    mesh.hello(LAYOUT)
                node.join()
                self.assertIn(code, str(cm.exception))

    def test_no_node(self):
        path = os.path.join(self.node().dir, "absent.sock")
        with self.assertRaises(dsspmesh.NodeGone):
            dsspmesh.connect(path, timeout=0.05)

    def test_no_path(self):
        old = os.environ.pop(dsspmesh.ENV_SOCKET, None)
        try:
            with self.assertRaisesRegex(dsspmesh.DsspError, dsspmesh.ENV_SOCKET):
                dsspmesh.connect()
        finally:
            if old is not None:
                os.environ[dsspmesh.ENV_SOCKET] = old

    def test_evaluate_without_function_says_so(self):
        node = self.node(layout=LAYOUT)
        got = {}

        def script(n):
            got["reply"] = n.evaluate(3, np.ones(15))
            n.send({"op": "stop", "reason": "target reached"})
        node.serve(script)
        mesh = dsspmesh.connect(node.path, timeout=5)
        mesh.hello(LAYOUT)
        self.assertIsNone(mesh.next_compute())
        node.join()
        self.assertTrue(mesh.stopped)
        self.assertEqual(mesh.stop_reason, "target reached")
        self.assertEqual((got["reply"]["seq"], got["reply"]["samples"]), (3, 0))
        self.assertIn("on_evaluate", got["reply"]["error"])

    def test_evaluate_on_the_eval_region(self):
        node = self.node(layout=LAYOUT)
        got = {}

        def script(n):
            got["reply"] = n.evaluate(9, np.arange(15))
            n.send({"op": "stop", "reason": "done"})
        node.serve(script)
        mesh = dsspmesh.connect(node.path, timeout=5)
        mesh.hello(LAYOUT)
        mesh.on_evaluate(lambda view: {"accuracy": float(view.sum()) / 1000, "loss": 0.25, "samples": 10})
        mesh.next_compute()
        node.join()
        self.assertEqual(got["reply"], {"op": "evaluated", "seq": 9, "accuracy": 0.105, "loss": 0.25, "samples": 10})


if __name__ == "__main__":
    unittest.main()
