"""dsspmesh.Optimizer: the user's optimizer, stepping through the mesh.

It is a torch.optim.Optimizer: param_groups, state, state_dict() and
load_state_dict() are those of the optimizer it wraps (the user's own, with
its param groups and settings), so an LR scheduler attaches to it as to the
wrapped one, and a checkpoint of it is a checkpoint of the wrapped one.

The rule (docs/design.md, "The combine rule"): each step() steps the user's
optimizer on the model as it would alone; after the round's H steps (H = 1
unless the job has --local-steps) the change θ_start − θ_end of every tensor
of the model's state (parameters and buffers) goes to the node, and the next
compute brings the mesh's θ: the shards apply the mean of the workers'
changes weighted by samples. On equal workers in lock step (--paradigm bsp)
that is DDP's step for SGD and momentum SGD; under a staleness gate each
change was computed on parameters up to the bound stale.
"""
import contextlib
import copy
import time
import warnings

import torch

from .errors import DsspError, ProtocolError, Stopped
from .tensors import bridge, model_tensors


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


def _default_inner(mesh, model):
    """The job's optimizer (welcome's "optimizer"), for a loop that brings
    none: SGD at the job's --lr with its --momentum."""
    o = mesh.optimizer or {}
    lr = float(o.get("lr") or 0.05)
    momentum = float(o.get("momentum", 0.0)) if o.get("kind", "sgd") == "momentum" else 0.0
    return torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=lr, momentum=momentum)


class Optimizer(torch.optim.Optimizer):
    """Optimizer(mesh, model, inner=None): trains model through the node
    attached by mesh, stepping inner, the user's torch optimizer over the
    model's parameters (None: SGD at the job's --lr and --momentum).

    At construction it sends hello with the model's state (parameters and
    persistent buffers, their dtypes, tied names as aliases), writes the
    model's own values as θ₀ when the node asks (send_init), and waits for
    the first compute: the model starts from the mesh's θ.

    step(closure=None) after backward(), as any torch optimizer; the loss
    may be passed instead of a closure (step(loss), the earlier form).
    Returns the closure's loss. Raises dsspmesh.Stopped when the node
    stopped this trainer (with the reason), NodeGone when the node went
    away (mesh.wait_for_node() continues), and the evaluation function's
    error when it failed.

    The evaluation the node asks of the evaluator's trainer runs off the
    training path (eval_async, the default): on a copy of the model made
    at the first evaluation (its parameters and buffers once more in
    memory), on a thread, while the rounds go on. eval_async=False
    evaluates on the model itself, between two rounds.
    """

    def __init__(self, mesh, model, inner=None, staged=None, eval_async=True):
        self.mesh = mesh
        self.model = model
        self.tensors = model_tensors(model)
        self.layout = [m.wire() for m in self.tensors]
        self.stats = Stats()
        self._loss_sum = 0.0
        self._loss_n = 0
        self._bridge_at_compute = 0.0
        self._staged = staged
        self._bridge = None
        self._eval_async = eval_async
        self._eval_copy = None  # (model copy, its bridge) for evaluations off the training path
        if mesh._on_compute:
            raise DsspError("the mesh already has an Optimizer")
        if mesh.welcome is None:
            mesh.hello(self.layout)
        elif [(t["name"], list(t["shape"])) for t in mesh._layout] != [(t["name"], t["shape"]) for t in self.layout]:
            raise DsspError("the mesh said hello with another model's layout")
        if inner is None:
            inner = _default_inner(mesh, model)
        mine = {id(m.t) for m in self.tensors if m.kind == "param"}
        for g in inner.param_groups:
            for p in g["params"]:
                if id(p) not in mine:
                    raise DsspError("the optimizer given holds a tensor of shape %s that is not a parameter of the model" % (list(p.shape),))
        super().__init__(inner.param_groups, inner.defaults)  # torch's own bookkeeping; the groups are replaced below
        self.inner = inner
        self._share()
        if mesh.update_kind == "gradient":
            import warnings
            warnings.warn("this mesh's job combines gradients on its shards (--combine sum, a job started by an earlier build): "
                          "the shards' --lr and --momentum act, not this optimizer's", stacklevel=2)
        mesh.add_hooks(on_compute=self._load_theta, on_attach=self._attached, eval_model=self._eval_model,
                       eval_async=self._take_eval if eval_async else None)
        self._attached()
        self._wait()

    def _share(self):
        """param_groups and state are the wrapped optimizer's own objects,
        so a scheduler's change to a group's lr is the one inner steps at."""
        self.param_groups = self.inner.param_groups
        self.state = self.inner.state
        self.defaults = self.inner.defaults

    # -- called by the mesh's hooks -------------------------------------------

    def _attached(self):
        """Binds the copies to the (new) shared memory, and sends the
        model's values as θ₀ when the node asks for them."""
        if self._bridge is not None:
            self._bridge.close()
        self._bridge = bridge(self.tensors, self.mesh, self._staged)
        if self._eval_copy is not None and self._eval_copy[1] is not None:
            self._eval_copy[1].close()  # the new shared memory: rebound at the next evaluation
            self._eval_copy = (self._eval_copy[0], None)
        if self.mesh.send_init:
            self._bridge.write_init()
            self.mesh.send_init_params()

    def _load_theta(self):
        self._bridge_at_compute = self.stats.bridge_s
        t0 = time.perf_counter()
        self._bridge.load()
        self.stats.bytes_copied += 4 * self.mesh.params
        self.stats.bridge_s += time.perf_counter() - t0

    @contextlib.contextmanager
    def _eval_model(self):
        """The model holding the eval region, in eval mode, without
        gradients; put back in its mode after (the next compute loads θ)."""
        self._bridge.load_eval()
        was = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                yield self.model
        finally:
            self.model.train(was)

    def _take_eval(self):
        """Takes the eval region into the evaluation's copy of the model
        (made at the first call) and returns the function that runs the
        evaluation on it; None when the model cannot be copied (the
        evaluation then runs in step, on the model)."""
        if not self._eval_async:
            return None
        if self._eval_copy is None or self._eval_copy[1] is None:
            try:
                m = self._eval_copy[0] if self._eval_copy is not None else copy.deepcopy(self.model)
                self._eval_copy = (m, bridge(model_tensors(m), self.mesh, self._staged))
            except Exception as e:  # a model deepcopy cannot copy
                warnings.warn("evaluating in step, on the model: a copy of it for evaluations off the training path failed (%s: %s)"
                              % (type(e).__name__, e))
                self._eval_async = False
                return None
        model, b = self._eval_copy
        b.load_eval()

        def run(fn):
            model.eval()
            with torch.no_grad():
                return fn(model)
        return run

    # -- torch.optim.Optimizer ---------------------------------------------

    def zero_grad(self, *args, **kwargs):
        self.inner.zero_grad(*args, **kwargs)

    def state_dict(self):
        return self.inner.state_dict()

    def load_state_dict(self, state_dict):
        self.inner.load_state_dict(state_dict)
        self._share()

    def add_param_group(self, param_group):
        if not hasattr(self, "inner"):  # torch.optim.Optimizer.__init__ adding inner's groups
            return super().add_param_group(param_group)
        mine = {id(m.t) for m in self.tensors if m.kind == "param"}
        params = param_group["params"]
        params = [params] if torch.is_tensor(params) else list(params)
        if any(id(p) not in mine for p in params):
            raise DsspError("add_param_group: a tensor that is not a parameter of the model")
        self.inner.add_param_group(param_group)

    def step(self, closure=None):
        """One step of the current round (see the class doc); the round's
        last step sends the update and loads the next round's θ."""
        loss = None
        if callable(closure):
            with torch.enable_grad():
                loss = closure()
        elif closure is not None:
            loss = closure  # the loop's loss: step(loss)
        m = self.mesh
        c = m.current
        if c is None:
            if m.stopped:
                raise Stopped("step() after the node ended training: %s" % (m.stop_reason,), code=m.stop_code or "end",
                              reason=m.stop_reason or "")
            raise ProtocolError("step() with no compute in progress")
        if loss is not None:
            self._loss_sum += float(loss.detach()) if torch.is_tensor(loss) else float(loss)
            self._loss_n += 1
        if m.update_kind == "gradient" and c.local_steps == 1:
            m.took_step()
            t0 = time.perf_counter()
            self._bridge.write_gradient()
            self.stats.bytes_copied += 4 * m.params
            self.stats.bridge_s += time.perf_counter() - t0
            self._finish(c)
            return loss
        self.inner.step()
        m.took_step()
        if m.steps_done < c.local_steps:
            return loss
        t0 = time.perf_counter()
        self._bridge.write_delta()
        self.stats.bytes_copied += 4 * m.params
        self.stats.bridge_s += time.perf_counter() - t0
        self._finish(c)
        return loss

    def _finish(self, c):
        m = self.mesh
        loss = self._loss_sum / self._loss_n if self._loss_n else None
        self._loss_sum, self._loss_n = 0.0, 0
        t0 = time.perf_counter()
        own = t0 - m.compute_at - (self.stats.bridge_s - self._bridge_at_compute)
        lr = None
        if self.param_groups and "lr" in self.param_groups[0]:
            lr = float(self.param_groups[0]["lr"])
        m.send_update(c.iter, loss, c.samples, compute_s=max(0.0, own), lr=lr)
        self.stats.bridge_s += time.perf_counter() - t0
        self.stats.rounds += 1
        self.stats.samples += c.samples
        self._wait()

    def _wait(self):
        t0 = time.perf_counter()
        b0 = self.stats.bridge_s
        try:
            self.mesh.next_compute()
        finally:
            # next_compute's θ load counted itself as bridge time
            self.stats.wait_s += time.perf_counter() - t0 - (self.stats.bridge_s - b0)
