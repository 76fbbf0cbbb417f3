#!/usr/bin/env python3
"""An independent safetensors reader: only the standard library and numpy.

Usage: read_safetensors.py MODEL.safetensors EXPECT.json

Parses the 8-byte header length, the JSON header and the byte buffer by the
format's definition, loads every tensor with numpy, and checks it against
EXPECT.json: {"metadata": {key: value}, "tensors": {name: {"dtype", "shape",
"sha256", "first": [...], "sum"}}}. Exits non-zero naming the first
difference; prints one line per tensor otherwise.
"""
import hashlib
import json
import struct
import sys

import numpy as np

DTYPES = {"F32": "<f4", "F64": "<f8", "F16": "<f2", "I64": "<i8", "I32": "<i4", "U8": "u1"}


def fail(msg):
    print("read_safetensors: " + msg, file=sys.stderr)
    sys.exit(1)


def main(path, expect_path):
    with open(path, "rb") as f:
        blob = f.read()
    with open(expect_path) as f:
        expect = json.load(f)
    if len(blob) < 8:
        fail("file shorter than the header length")
    (n,) = struct.unpack("<Q", blob[:8])
    if 8 + n > len(blob):
        fail("header length %d beyond the file" % n)
    header = json.loads(blob[8 : 8 + n].decode("utf-8"))
    data = blob[8 + n :]
    meta = header.pop("__metadata__", {})
    for k, v in expect.get("metadata", {}).items():
        if meta.get(k) != v:
            fail("metadata %r is %r, want %r" % (k, meta.get(k), v))
    if sorted(header) != sorted(expect["tensors"]):
        fail("tensors %s, want %s" % (sorted(header), sorted(expect["tensors"])))
    covered = 0
    for name, info in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        want = expect["tensors"][name]
        begin, end = info["data_offsets"]
        if begin != covered:
            fail("%s starts at %d, the previous tensor ended at %d" % (name, begin, covered))
        covered = end
        if info["dtype"] != want["dtype"]:
            fail("%s dtype %s, want %s" % (name, info["dtype"], want["dtype"]))
        if info["shape"] != want["shape"]:
            fail("%s shape %s, want %s" % (name, info["shape"], want["shape"]))
        raw = data[begin:end]
        arr = np.frombuffer(raw, dtype=DTYPES[info["dtype"]]).reshape(info["shape"])
        if hashlib.sha256(raw).hexdigest() != want["sha256"]:
            fail("%s: the bytes differ (sha256)" % name)
        first = arr.reshape(-1)[: len(want["first"])].tolist()
        if first != want["first"]:
            fail("%s first values %s, want %s" % (name, first, want["first"]))
        total = float(arr.astype(np.float64).sum())
        if abs(total - want["sum"]) > 1e-6 * max(1.0, abs(want["sum"])):
            fail("%s sum %r, want %r" % (name, total, want["sum"]))
        print("%s %s %s sum=%.6g" % (name, info["dtype"], list(arr.shape), total))
    if covered != len(data):
        fail("tensors cover %d of %d data bytes" % (covered, len(data)))
    print("ok: %d tensors, %d bytes, metadata %d keys" % (len(header), len(data), len(meta)))


if __name__ == "__main__":
    if len(sys.argv) != 3:
        fail("usage: read_safetensors.py MODEL.safetensors EXPECT.json")
    main(sys.argv[1], sys.argv[2])
