"""A model's state as the mesh carries it, and the copies between the model
and the node's shared memory.

The mesh carries every entry of the model's state_dict: its parameters
(named_parameters() order, frozen ones included) and then its persistent
buffers (a BatchNorm's running_mean, running_var and num_batches_tracked),
each in the model's own dtype on the trainer and in float32 in the shared
regions and on the shards. A tensor the state_dict holds under several names
(a tied weight: out.weight is emb.weight) travels once, under its first name,
with the others as its aliases; an export writes it under every name.

The copies (a _Bridge) per round: θ from the theta region into the model
(rounded to each tensor's dtype; the rounded start is written back into the
region, so θ_start − θ_end is the model's own change), then after the
round's steps Δ = θ_start − θ_end (or, for a job that combines gradients, the
gradients) into the update region. A model on the CPU copies straight
between its tensors and the regions; a model on an accelerator goes through
one float32 staging vector on the device: one copy in per round, Δ computed
on the device, one copy out, the copies on a side stream from pinned
(registered) host memory.
"""
import torch

from .errors import DsspError

# torch's dtypes the protocol names, as the protocol names them.
DTYPE_NAMES = {
    torch.float32: "float32", torch.float64: "float64", torch.bfloat16: "bfloat16", torch.float16: "float16",
    torch.int64: "int64", torch.int32: "int32", torch.int16: "int16", torch.int8: "int8", torch.uint8: "uint8",
    torch.bool: "bool",
}

# Integers are exact in float32 up to 2^24 in magnitude.
MAX_EXACT_INT = 1 << 24


class ModelTensor:
    """One tensor the mesh carries: its first name, the tensor, "param" or
    "buffer", its other names, and its place in the flat vector."""

    __slots__ = ("name", "t", "kind", "aliases", "off", "n")

    def __init__(self, name, t, kind):
        self.name, self.t, self.kind, self.aliases = name, t, kind, []
        self.off = self.n = 0

    @property
    def dtype(self):
        return DTYPE_NAMES[self.t.dtype]

    def wire(self):
        d = {"name": self.name, "shape": list(self.t.shape), "dtype": self.dtype, "kind": self.kind}
        if self.aliases:
            d["aliases"] = list(self.aliases)
        return d


def model_tensors(model):
    """The tensors of model's state_dict in the mesh's order (parameters,
    then persistent buffers), aliases attached. Raises DsspError naming an
    entry the mesh cannot carry."""
    out, first = [], {}
    for name, p in model.named_parameters():
        out.append(ModelTensor(name, p, "param"))
        first[id(p)] = out[-1]
    state = model.state_dict(keep_vars=True)
    for name, b in model.named_buffers():
        if name not in state or id(b) in first:
            continue  # not persistent (not in the state_dict), or one already listed
        out.append(ModelTensor(name, b, "buffer"))
        first[id(b)] = out[-1]
    listed = {m.name for m in out}
    for name, v in state.items():
        if name in listed:
            continue
        if torch.is_tensor(v) and id(v) in first:
            first[id(v)].aliases.append(name)
            continue
        raise DsspError("state_dict entry %s (%s) is neither a parameter nor a buffer of the model: the mesh carries only those"
                        % (name, type(v).__name__))
    if not out:
        raise DsspError("the model has no parameters")
    off, devices = 0, set()
    for m in out:
        t = m.t
        if t.dtype not in DTYPE_NAMES:
            raise DsspError("%s %s is %s; the mesh carries %s" % (m.kind, m.name, t.dtype, ", ".join(sorted(DTYPE_NAMES.values()))))
        if t.is_sparse or t.layout != torch.strided:
            raise DsspError("%s %s has layout %s; the mesh carries dense tensors" % (m.kind, m.name, t.layout))
        if t.dtype not in (torch.float32, torch.float64, torch.bfloat16, torch.float16) and t.numel() and \
                int(t.detach().abs().max()) > MAX_EXACT_INT:
            raise DsspError("%s %s holds an integer beyond 2^24 in magnitude, which float32 (the shards' master copy) "
                            "does not hold exactly" % (m.kind, m.name))
        devices.add(t.device)
        m.off, m.n = off, t.numel()
        off += m.n
    if len(devices) > 1:
        raise DsspError("the model's tensors are on several devices (%s); the mesh bridges one"
                        % ", ".join(sorted(str(d) for d in devices)))
    return out


def layout_of(model):
    """The hello layout of model (model_tensors, as the protocol writes it)."""
    return [m.wire() for m in model_tensors(model)]


def _load_into(t, src, write_back):
    """t ← src (float32) in t's dtype: rounded to nearest (integers),
    non-zero (bool), cast (floats); with write_back the value t holds is
    written back into src, so src is the exact start of the round."""
    if t.dtype == torch.float32:
        t.copy_(src)
        return
    if t.dtype == torch.bool:
        t.copy_(src != 0)
    elif t.dtype.is_floating_point:
        t.copy_(src)
    else:
        t.copy_(torch.round(src))
    if write_back:
        src.copy_(t)


class _HostBridge:
    """Copies for a model on the CPU: its tensors and the regions' views."""

    staged = False
    pinned = False

    def __init__(self, tensors, mesh):
        self.tensors = tensors
        self.views = []
        for m in tensors:
            shape = m.t.shape
            self.views.append(tuple(torch.from_numpy(r[m.off:m.off + m.n]).view(shape)
                                    for r in (mesh.theta, mesh.update, mesh.eval)))

    def write_init(self):
        with torch.no_grad():
            for m, (th, _, _) in zip(self.tensors, self.views):
                th.copy_(m.t)

    def load(self):
        with torch.no_grad():
            for m, (th, _, _) in zip(self.tensors, self.views):
                _load_into(m.t, th, True)

    def load_eval(self):
        with torch.no_grad():
            for m, (_, _, ev) in zip(self.tensors, self.views):
                _load_into(m.t, ev, False)

    def write_delta(self):
        with torch.no_grad():
            for m, (th, up, _) in zip(self.tensors, self.views):
                up.copy_(m.t)
                torch.sub(th, up, out=up)

    def write_gradient(self):
        with torch.no_grad():
            for m, (_, up, _) in zip(self.tensors, self.views):
                g = m.t.grad if m.kind == "param" else None
                if g is None:
                    up.zero_()
                else:
                    up.copy_(g)

    def close(self):
        pass


class _StagedBridge:
    """Copies for a model on an accelerator (or, for tests, on the CPU):
    one float32 vector of P values on the model's device holds θ_start, Δ
    is computed there, one copy each way per round, on a side stream from
    host memory registered with CUDA (pinned) where the runtime allows."""

    staged = True

    def __init__(self, tensors, mesh, device):
        self.tensors = tensors
        self.device = device
        self.host = [torch.from_numpy(r) for r in (mesh.theta, mesh.update, mesh.eval)]
        self.stage = torch.empty(mesh.params, dtype=torch.float32, device=device)
        self.cuda = device.type == "cuda"
        self.stream = torch.cuda.Stream(device) if self.cuda else None
        self.pinned = False
        self._registered = None
        if self.cuda:
            self._pin(mesh)

    def _pin(self, mesh):
        """Registers the shared regions with CUDA (page-locked), so the
        copies are asynchronous DMA; unpinned copies work, slower."""
        try:
            cudart = torch.cuda.cudart()
            ptr, size = mesh.theta.ctypes.data, 3 * 4 * mesh.params
            if int(cudart.cudaHostRegister(ptr, size, 0)) == 0:
                self._registered = (cudart, ptr)
                self.pinned = True
        except (AttributeError, RuntimeError, TypeError):
            self.pinned = False

    def _slice(self, m):
        return self.stage[m.off:m.off + m.n].view(m.t.shape)

    def _to_stage(self, host):
        if self.stream is None:
            self.stage.copy_(host)
            return
        with torch.cuda.stream(self.stream):
            self.stage.copy_(host, non_blocking=self.pinned)
        torch.cuda.current_stream(self.device).wait_stream(self.stream)

    def _from_stage(self, host):
        if self.stream is None:
            host.copy_(self.stage)
            return
        self.stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(self.stream):
            host.copy_(self.stage, non_blocking=self.pinned)
        self.stream.synchronize()

    def write_init(self):
        with torch.no_grad():
            for m in self.tensors:
                self._slice(m).copy_(m.t)
            self._from_stage(self.host[0])

    def load(self):
        with torch.no_grad():
            self._to_stage(self.host[0])
            for m in self.tensors:
                _load_into(m.t, self._slice(m), True)

    def load_eval(self):
        with torch.no_grad():
            self._to_stage(self.host[2])
            for m in self.tensors:
                _load_into(m.t, self._slice(m), False)

    def write_delta(self):
        with torch.no_grad():
            for m in self.tensors:
                t = m.t if m.t.dtype != torch.bool else m.t.to(torch.float32)
                self._slice(m).sub_(t)
            self._from_stage(self.host[1])

    def write_gradient(self):
        with torch.no_grad():
            for m in self.tensors:
                g = m.t.grad if m.kind == "param" else None
                if g is None:
                    self._slice(m).zero_()
                else:
                    self._slice(m).copy_(g)
            self._from_stage(self.host[1])

    def close(self):
        if self._registered is not None:
            cudart, ptr = self._registered
            self._registered = None
            try:
                cudart.cudaHostUnregister(ptr)
            except (AttributeError, RuntimeError, TypeError):
                pass


def bridge(tensors, mesh, staged=None):
    """The copies between tensors and mesh's regions: staged on the
    tensors' device unless it is the CPU (staged=True forces the staged
    path, as the tests do on the CPU)."""
    device = tensors[0].t.device
    if staged is None:
        staged = device.type != "cpu"
    if staged:
        return _StagedBridge(tensors, mesh, device)
    return _HostBridge(tensors, mesh)
