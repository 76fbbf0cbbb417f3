"""The job-wide data order and safetensors, numpy only."""
import os
import sys
import json
import struct
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import numpy as np  # noqa: E402

import dsspmesh  # noqa: E402
from dsspmesh import safetensors  # noqa: E402


class OrderTest(unittest.TestCase):
    def test_protocol_definition(self):
        o = dsspmesh.Order(10, 7)
        e0 = np.random.default_rng([7, 0]).permutation(10)
        e1 = np.random.default_rng([7, 1]).permutation(10)
        np.testing.assert_array_equal(o.indices(0, 10), e0)
        # straddling the epoch boundary: positions 8..13
        np.testing.assert_array_equal(o.indices(8, 6), np.concatenate([e0[8:], e1[:4]]))
        # far positions, two epochs per batch
        e5 = np.random.default_rng([7, 5]).permutation(10)
        np.testing.assert_array_equal(o.indices(53, 3), e5[3:6])
        self.assertEqual(o.indices(0, 4).dtype, np.int64)

    def test_each_epoch_once(self):
        o = dsspmesh.Order(100, 1)
        seen = np.concatenate([o.indices(p, b) for p, b in ((0, 30), (30, 17), (47, 53))])
        self.assertEqual(sorted(seen.tolist()), list(range(100)))


def _with_header(h):
    return len(h).to_bytes(8, "little") + h


class SafetensorsTest(unittest.TestCase):
    def test_round_trip(self):
        d = tempfile.mkdtemp()
        path = os.path.join(d, "m.safetensors")
        ts = {"fc1.weight": np.arange(12, dtype=np.float32).reshape(3, 4), "fc1.bias": np.ones(3, np.float32),
              "steps": np.array([5], np.int64)}
        safetensors.save(ts, path, metadata={"format": "pt", "accuracy": 0.97})
        got, meta = safetensors.load(path, metadata=True)
        self.assertEqual(list(got), ["fc1.weight", "fc1.bias", "steps"])
        for k in ts:
            np.testing.assert_array_equal(got[k], ts[k])
            self.assertEqual(got[k].dtype, ts[k].dtype)
        self.assertTrue(got["fc1.bias"].flags.writeable)
        self.assertEqual(meta, {"format": "pt", "accuracy": "0.97"})
        with open(path, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
        self.assertEqual(n % 8, 0)

    def test_bf16_read_as_float32(self):
        d = tempfile.mkdtemp()
        path = os.path.join(d, "b.safetensors")
        x = np.array([1.5, -2.0, 3.25], np.float32)
        raw = (x.view(np.uint32) >> 16).astype("<u2")
        header = json.dumps({"w": {"dtype": "BF16", "shape": [3], "data_offsets": [0, 6]}}).encode()
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", len(header)) + header + raw.tobytes())
        np.testing.assert_array_equal(safetensors.load(path)["w"], x)

    def test_malformed_named(self):
        d = tempfile.mkdtemp()
        path = os.path.join(d, "bad.safetensors")
        for blob, want in ((b"\x01", "shorter"), (b"\xff" * 8, "beyond"),
                           (b"\x02\0\0\0\0\0\0\0{]", "JSON"),
                           (_with_header(b'{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}'), "outside")):
            with self.subTest(want=want):
                with open(path, "wb") as f:
                    f.write(blob)
                with self.assertRaisesRegex(safetensors.FormatError, want):
                    safetensors.load(path)


if __name__ == "__main__":
    unittest.main()
