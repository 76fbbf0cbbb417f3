"""The torch.optim-style wrapper: a training loop keeps zero_grad /
backward / step, and step() goes through the node."""
import time

import torch

from .errors import DsspError, ProtocolError


def layout_of(model):
    """The hello layout of model: its named_parameters in order, each
    float32 and flattened row-major."""
    out = []
    for name, p in model.named_parameters():
        if p.dtype != torch.float32:
            raise DsspError("parameter %s is %s; the mesh trains float32 parameters" % (name, p.dtype))
        out.append({"name": name, "shape": list(p.shape), "dtype": "float32"})
    if not out:
        raise DsspError("the model has no parameters")
    return out


class Stats:
    """What the bridge cost this trainer: rounds, seconds in the bridge's
    own work (copies between the model and the shared memory, framing),
    seconds waiting for the node, and bytes copied."""

    def __init__(self):
        self.rounds = 0
        self.bridge_s = 0.0
        self.wait_s = 0.0
        self.bytes_copied = 0
        self.samples = 0

    def per_round_us(self):
        return 1e6 * self.bridge_s / self.rounds if self.rounds else 0.0

    def __repr__(self):
        return "rounds %d, bridge %.1f µs/round, wait %.1f ms/round, %d bytes copied/round" % (
            self.rounds, self.per_round_us(), 1e3 * self.wait_s / max(1, self.rounds),
            self.bytes_copied // max(1, self.rounds))


class Optimizer:
    """Wraps a model (and optionally the user's own optimizer, `inner`) so
    that step() trains through the node attached by mesh.

    At construction it sends hello (unless connect(model=...) did), writes
    the model's own parameters as θ₀ when the node asks (send_init), and
    waits for the first compute: the model starts from the mesh's θ.

    step(loss) after backward(): with local_steps H = 1 it writes the
    gradients into the update region (one copy per tensor), sends update,
    serves evaluate requests while it waits, and on the next compute loads θ
    into the parameters in place. With H > 1 the inner optimizer steps
    locally; after the round's H-th step the wrapper writes θ_start − θ_end
    (the pseudo-gradient) into update and sends it.
    """

    def __init__(self, mesh, model, inner=None):
        self.mesh = mesh
        self.model = model
        self.inner = inner
        self.params = [p for _, p in model.named_parameters()]
        self.layout = layout_of(model)
        self.stats = Stats()
        self._loss_sum = 0.0
        self._loss_n = 0
        self._bridge_at_compute = 0.0
        if mesh._trainer is not None and mesh._trainer is not self:
            raise DsspError("the mesh already has an Optimizer")
        if mesh.welcome is None:
            mesh.hello(self.layout)
        elif [(t["name"], list(t["shape"])) for t in mesh._layout] != [(t["name"], t["shape"]) for t in self.layout]:
            raise DsspError("the mesh said hello with another model's layout")
        mesh._trainer = self
        self._attached()
        self._wait()

    @property
    def param_groups(self):
        return self.inner.param_groups if self.inner is not None else []

    # -- called by the mesh -------------------------------------------------

    def _attached(self):
        """Binds torch views on the shared memory (no copies), and sends the
        model's parameters as θ₀ when the node asks for them."""
        m = self.mesh
        self._theta, self._update, self._eval = [], [], []
        off = 0
        for p in self.params:
            n = p.numel()
            for views, region in ((self._theta, m.theta), (self._update, m.update), (self._eval, m.eval)):
                views.append(torch.from_numpy(region[off:off + n]).view(p.shape))
            off += n
        if m.send_init:
            with torch.no_grad():
                for p, t in zip(self.params, self._theta):
                    t.copy_(p.detach())
            m.send_init_params()

    def _load_theta(self):
        self._bridge_at_compute = self.stats.bridge_s
        t0 = time.perf_counter()
        with torch.no_grad():
            for p, t in zip(self.params, self._theta):
                p.copy_(t)
        self.stats.bytes_copied += 4 * self.mesh.params
        self.stats.bridge_s += time.perf_counter() - t0

    def _evaluate(self, fn):
        with torch.no_grad():
            for p, t in zip(self.params, self._eval):
                p.copy_(t)
        was = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                return fn(self.model)
        finally:
            self.model.train(was)

    # -- the training loop's calls -----------------------------------------

    def zero_grad(self, set_to_none=False):
        if self.inner is not None:
            self.inner.zero_grad()
            return
        for p in self.params:
            if p.grad is not None:
                if set_to_none:
                    p.grad = None
                else:
                    p.grad.zero_()

    def step(self, loss=None):
        """One step of the current round (see the class doc). Returns True
        while training goes on, False once the node sent stop."""
        m = self.mesh
        c = m.current
        if c is None:
            if m.stopped:
                return False
            raise ProtocolError("step() with no compute in progress")
        if loss is not None:
            self._loss_sum += float(loss.detach()) if torch.is_tensor(loss) else float(loss)
            self._loss_n += 1
        h = c.local_steps
        m.steps_done += 1
        if h == 1:
            t0 = time.perf_counter()
            with torch.no_grad():
                for p, u in zip(self.params, self._update):
                    if p.grad is None:
                        u.zero_()
                    else:
                        u.copy_(p.grad)
            self.stats.bytes_copied += 4 * m.params
            self.stats.bridge_s += time.perf_counter() - t0
            return self._finish(c)
        if self.inner is None:
            raise DsspError("the node asks for %d local steps a round; give Optimizer(..., inner=torch.optim.SGD(...))" % h)
        self.inner.step()
        if m.steps_done < h:
            return True
        t0 = time.perf_counter()
        with torch.no_grad():
            for p, u, th in zip(self.params, self._update, self._theta):
                u.copy_(p)
                torch.sub(th, u, out=u)
        self.stats.bytes_copied += 8 * m.params
        self.stats.bridge_s += time.perf_counter() - t0
        return self._finish(c)

    def _finish(self, c):
        m = self.mesh
        loss = self._loss_sum / self._loss_n if self._loss_n else None
        self._loss_sum, self._loss_n = 0.0, 0
        t0 = time.perf_counter()
        own = t0 - m.compute_at - (self.stats.bridge_s - self._bridge_at_compute)
        m.send_update(c.iter, loss, c.samples, compute_s=max(0.0, own))
        self.stats.bridge_s += time.perf_counter() - t0
        self.stats.rounds += 1
        self.stats.samples += c.samples
        return self._wait()

    def _wait(self):
        t0 = time.perf_counter()
        b0 = self.stats.bridge_s
        c = self.mesh.next_compute()
        # next_compute's θ load counted itself as bridge time
        self.stats.wait_s += time.perf_counter() - t0 - (self.stats.bridge_s - b0)
        return c is not None
