"""A numpy reader and writer of the safetensors format, so a PyTorch model
takes `dssp export`'s file without the safetensors package:

    model.load_state_dict(dsspmesh.load_state_dict("model.safetensors"))   # strict, every dtype as written

or with numpy alone (BF16 widened to float32):

    state = dsspmesh.safetensors.load("model.safetensors")

Format: an 8-byte little-endian header length N, N bytes of JSON
({name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__":
{str: str}}), then the byte buffer; offsets are relative to the buffer.
"""
import json
import struct

import numpy as np

_DTYPES = {
    "F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4",
    "I16": "<i2", "I8": "i1", "U8": "u1", "BOOL": "?",
}
_NAMES = {np.dtype(v): k for k, v in _DTYPES.items()}

# MAX_HEADER bounds the JSON header (the format's reference reader uses 100 MB).
MAX_HEADER = 100 << 20


class FormatError(ValueError):
    """The file is not a well-formed safetensors file; the message names the
    file and what is wrong."""


def _parse(blob, name):
    if len(blob) < 8:
        raise FormatError("%s: %d bytes, shorter than the 8-byte header length" % (name, len(blob)))
    (n,) = struct.unpack_from("<Q", blob, 0)
    if n > MAX_HEADER or 8 + n > len(blob):
        raise FormatError("%s: header length %d beyond the file's %d bytes" % (name, n, len(blob)))
    try:
        header = json.loads(bytes(blob[8:8 + n]).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise FormatError("%s: header is not UTF-8 JSON: %s" % (name, e)) from None
    if not isinstance(header, dict):
        raise FormatError("%s: header is not a JSON object" % name)
    meta = header.pop("__metadata__", None) or {}
    return header, meta, 8 + n


def load(path, metadata=False):
    """Reads the safetensors file at path: {name: ndarray} (writable, in the
    file's order; BF16 tensors become float32). With metadata=True returns
    (tensors, metadata dict)."""
    with open(path, "rb") as f:
        blob = bytearray(f.read())
    header, meta, start = _parse(blob, path)
    size = len(blob) - start
    out = {}
    for name, info in sorted(header.items(), key=lambda kv: kv[1].get("data_offsets", [0])[0] if isinstance(kv[1], dict) else 0):
        try:
            dtype, shape, (b, e) = info["dtype"], [int(d) for d in info["shape"]], info["data_offsets"]
        except (KeyError, TypeError, ValueError) as ex:
            raise FormatError("%s: tensor %r has a malformed entry %r: %s" % (path, name, info, ex)) from None
        if not (0 <= b <= e <= size):
            raise FormatError("%s: tensor %r's data_offsets [%d, %d] outside the %d-byte buffer" % (path, name, b, e, size))
        count = int(np.prod(shape, dtype=np.int64))
        if dtype == "BF16":
            if e - b != 2 * count:
                raise FormatError("%s: tensor %r: %d bytes for %s BF16" % (path, name, e - b, shape))
            raw = np.frombuffer(blob, dtype="<u2", count=count, offset=start + b).astype(np.uint32) << 16
            out[name] = raw.view(np.float32).reshape(shape)
            continue
        if dtype not in _DTYPES:
            raise FormatError("%s: tensor %r has dtype %r (known: %s)" % (path, name, dtype, ", ".join(sorted(_DTYPES) + ["BF16"])))
        dt = np.dtype(_DTYPES[dtype])
        if e - b != dt.itemsize * count:
            raise FormatError("%s: tensor %r: %d bytes for shape %s of %s" % (path, name, e - b, shape, dtype))
        out[name] = np.frombuffer(blob, dtype=dt, count=count, offset=start + b).reshape(shape)
    if metadata:
        return out, meta
    return out


def load_state_dict(path):
    """Reads the safetensors file at path as a PyTorch state_dict: {name:
    torch.Tensor} in the file's order and dtypes (BF16 as torch.bfloat16,
    exactly), for model.load_state_dict(..., strict=True). A tensor the
    file holds under several names (a tied weight) is one tensor object
    under each."""
    import torch
    with open(path, "rb") as f:
        blob = bytearray(f.read())
    header, _, start = _parse(blob, path)
    raw = {}
    for name, info in header.items():
        if isinstance(info, dict) and info.get("dtype") == "BF16":
            b, e = info["data_offsets"]
            n = int(np.prod(info["shape"], dtype=np.int64))
            if e - b != 2 * n:
                raise FormatError("%s: tensor %r: %d bytes for %s BF16" % (path, name, e - b, info["shape"]))
            bits = np.frombuffer(blob, dtype="<i2", count=n, offset=start + b).copy()
            raw[name] = torch.from_numpy(bits).view(torch.bfloat16).reshape(info["shape"])
    arrays = load(path)
    out, seen = {}, {}
    for name, a in arrays.items():
        t = raw.get(name)
        if t is None:
            t = torch.from_numpy(np.ascontiguousarray(a).copy())
        info = header[name]
        key = (tuple(info["data_offsets"]), info["dtype"])
        out[name] = seen.setdefault(key, t)
    return out


def save(tensors, path, metadata=None):
    """Writes tensors ({name: array-like}, in the dict's order) to path in
    the safetensors format, with optional metadata ({str: str}). Torch
    tensors are accepted (moved to the CPU)."""
    header = {}
    arrays = []
    off = 0
    for name, v in tensors.items():
        dt = None
        if hasattr(v, "detach"):
            v = v.detach().cpu()
            if str(v.dtype) == "torch.bfloat16":
                import torch
                v, dt = v.contiguous().view(torch.int16), "BF16"
            v = v.numpy()
        a = np.ascontiguousarray(v)
        a = a.astype(a.dtype.newbyteorder("<"), copy=False)
        dt = dt or _NAMES.get(np.dtype(a.dtype.str.replace(">", "<")))
        if dt is None:
            raise ValueError("tensor %r: dtype %s has no safetensors name" % (name, a.dtype))
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + a.nbytes]}
        arrays.append(a)
        off += a.nbytes
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * (-len(h) % 8)  # the buffer starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for a in arrays:
            f.write(a.tobytes())
