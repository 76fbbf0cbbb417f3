"""The trainer's side of the socket: attach, the shared memory, the rounds."""
import mmap
import numbers
import os
import re
import socket
import threading

import time

import numpy as np

from . import protocol
from .errors import Busy, DsspError, JobMismatch, LayoutRefused, NodeGone, ProtocolError, Stopped, Timeout
from .order import Order, own_seed

ENV_SOCKET = "DSSP_TRAINER_SOCKET"


class Compute:
    """One compute request: round iter of batch samples per step at job-wide
    position pos (pos < 0: the trainer's own reading), local_steps steps,
    computing the batch's samples [lo, hi)."""

    __slots__ = ("iter", "batch", "pos", "local_steps", "lo", "hi")

    def __init__(self, msg):
        try:
            self.iter = int(msg["iter"])
            self.batch = int(msg["batch"])
            self.pos = int(msg.get("pos", -1))
            self.local_steps = int(msg.get("local_steps", 1) or 1)
            self.lo = int(msg.get("lo", 0))
            self.hi = int(msg.get("hi", self.batch))
        except (KeyError, TypeError, ValueError) as e:
            raise ProtocolError("compute message %r: %s" % (msg, e)) from None
        if self.batch <= 0 or self.local_steps <= 0 or not (0 <= self.lo < self.hi <= self.batch):
            raise ProtocolError("compute message %r: batch %d, local_steps %d, [lo, hi) = [%d, %d) out of range"
                                % (msg, self.batch, self.local_steps, self.lo, self.hi))

    @property
    def samples(self):
        """Samples computed over the round: (hi - lo) per step, H steps."""
        return (self.hi - self.lo) * self.local_steps

    def __repr__(self):
        return "Compute(iter=%d, batch=%d, pos=%d, local_steps=%d, lo=%d, hi=%d)" % (
            self.iter, self.batch, self.pos, self.local_steps, self.lo, self.hi)


def _tensor_named(text):
    """The tensor a layout-mismatch message names: the node's messages read
    "layout mismatch at tensor I NAME: shape ...", "... at tensor I: NAME
    [..] in the job, ...", "... at tensor I: the job has I tensors, the
    trainer has more (NAME [..])"; a quoted "NAME" otherwise."""
    for pat in (r"at tensor \d+ ([^\s:]+):", r"the trainer has more \((\S+)",
                r"at tensor \d+: (\S+) ", r'"([^"]+)"'):
        m = re.search(pat, text)
        if m:
            return m.group(1)
    return None


def _error_from(msg):
    code = msg.get("code", "")
    text = "node refused the trainer (%s): %s" % (code, msg.get("message", ""))
    if code == "layout-mismatch":
        return LayoutRefused(text, tensor=msg.get("tensor") or _tensor_named(msg.get("message", "")))
    if code in ("job-mismatch", "not-external", "version"):
        return JobMismatch(text, code=code)
    if code == "busy":
        return Busy(text)
    return ProtocolError(text)


class Mesh:
    """A trainer's attachment to its local dssp node: the protocol only.

    Built by connect(). The hello (which carries the model's layout) is sent
    by Optimizer(mesh, model) or connect(model=...); after the welcome the
    attributes node, params, layout, batch, local_steps, seed, dataset,
    send_init, update ("delta": the trainer's own optimizer steps and an
    update holds θ_start − θ_end; "gradient": a job started by an earlier
    build, whose shards step on gradients), optimizer (the job's: what
    Optimizer steps with when given none), wire (the job's wire precision:
    under "int8" and "bf16" the θ of a compute holds bf16-rounded values)
    and the three shared-memory regions theta, update and eval (numpy
    float32 views of P values, no copies) are set.

    The Mesh holds the attachment's state — the compute in progress
    (current), the steps taken of it (steps_done), stop — and hooks that
    the optimizer bound to it registers (what to do when a compute arrives,
    how to load the eval region into a model); it holds no optimizer. Not
    safe for concurrent use: one thread drives it.
    """

    def __init__(self, path, timeout):
        self.path = path
        self.timeout = timeout
        self.wait_timeout = None  # waiting for compute: none by default (the gate may hold a worker long)
        self.sock = None
        self._mm = None
        self.theta = self.update = self.eval = None
        self.welcome = None
        self._layout = None
        self.stopped = False
        self.stop_reason = None
        self.stop_code = None
        self.current = None  # the Compute of the round in progress
        self.round_id = 0  # counts computes received
        self.steps_done = 0  # steps taken in the current round
        self._on_compute = []  # hooks run when a compute arrives (the optimizer loads θ)
        self._on_attach = []  # hooks run after a (re)attachment's welcome
        self._eval_model = None  # loads the eval region into a model for the evaluation function
        self._eval_async = None  # takes the eval region into a copy of the model, for an evaluation off the training path
        self._eval_failure = None  # what the last evaluation off the training path raised, raised from next_compute
        self._send_lock = threading.Lock()  # the training loop and an evaluation's thread both send
        self._eval_fn = None
        self._own = None  # (Order, cursor) of the pos < 0 reading
        self.evaluations = 0
        self.compute_at = 0.0  # perf_counter() when the current compute arrived
        # eval_samples is the test samples the node asks the evaluation to
        # use (its --eval-samples), None when the evaluate message names none.
        self.eval_samples = None
        self.eval_s = 0.0  # seconds spent in the evaluation function

    # -- attaching --------------------------------------------------------

    def _open(self, deadline):
        """Connects the socket, retrying while the node is not there yet until
        deadline; NodeGone after it."""
        while True:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.settimeout(max(0.1, deadline - time.monotonic()))
                s.connect(self.path)
                self.sock = s
                return
            except (FileNotFoundError, ConnectionRefusedError) as e:
                s.close()
                if time.monotonic() >= deadline:
                    raise NodeGone("no node at %s: %s" % (self.path, e)) from e
                time.sleep(0.1)
            except socket.timeout:
                s.close()
                raise Timeout("connecting to %s: no answer within %.1f s" % (self.path, self.timeout)) from None
            except OSError:
                s.close()
                raise

    def hello(self, layout):
        """Sends hello with layout (a list of {"name", "shape", "dtype",
        "kind", "aliases"}) and reads the welcome; maps the shared memory.
        Raises LayoutRefused, JobMismatch, Busy, NodeGone, Timeout or
        ProtocolError."""
        if self.sock is None:
            self._open(time.monotonic() + self.timeout)
        self._layout = [dict(t) for t in layout]
        self.sock.settimeout(self.timeout)
        protocol.send(self.sock, {"op": "hello", "version": protocol.VERSION, "role": "train", "layout": self._layout})
        msg = protocol.recv(self.sock)
        if msg["op"] == "error":
            self._close_socket()
            raise _error_from(msg)
        if msg["op"] != "welcome":
            self._close_socket()
            raise ProtocolError("expected welcome or error after hello, got %r" % msg["op"])
        self._map(msg)
        self.sock.settimeout(self.wait_timeout)
        self.stopped, self.stop_reason, self.stop_code = False, None, None
        self.current, self.steps_done = None, 0
        for hook in self._on_attach:
            hook()
        return msg

    def _map(self, w):
        try:
            p = int(w["params"])
            size = int(w["shm_bytes"])
            shm = w["shm"]
        except (KeyError, TypeError, ValueError) as e:
            raise ProtocolError("welcome %r: %s" % (w, e)) from None
        want = sum(int(np.prod(t["shape"], dtype=np.int64)) for t in self._layout)
        if p != want:
            raise ProtocolError("welcome says %d parameters, the layout sent has %d" % (p, want))
        if size < protocol.REGIONS * 4 * p:
            raise ProtocolError("shared memory of %d bytes holds fewer than %d regions of %d parameters" % (size, protocol.REGIONS, p))
        self._unmap()
        fd = os.open(shm, os.O_RDWR)
        try:
            if os.fstat(fd).st_size < size:
                raise ProtocolError("shared memory file %s has %d bytes, the welcome says %d" % (shm, os.fstat(fd).st_size, size))
            self._mm = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        f4 = np.dtype("<f4")
        self.theta, self.update, self.eval = (
            np.frombuffer(self._mm, dtype=f4, count=p, offset=i * 4 * p)
            for i in (protocol.REGION_THETA, protocol.REGION_UPDATE, protocol.REGION_EVAL))
        self.welcome = w
        self.node = w.get("node", "")
        self.params = p
        self.layout = w.get("layout") or self._layout
        self.batch = int(w.get("batch", 0))
        self.local_steps = int(w.get("local_steps", 1) or 1)
        self.seed = int(w.get("seed", 0))
        self.dataset = w.get("dataset", "")
        self.send_init = bool(w.get("send_init", False))
        self.update_kind = w.get("update", "delta")
        if self.update_kind not in ("delta", "gradient"):
            raise ProtocolError("welcome: update %r, want delta or gradient" % (self.update_kind,))
        self.optimizer = w.get("optimizer") or {}
        self.wire = w.get("wire", "fp32")
        self._own = None

    def _unmap(self):
        self.theta = self.update = self.eval = None
        if self._mm is not None:
            try:
                self._mm.close()
            except BufferError:
                pass  # a view still lives; the map goes when it does
            self._mm = None

    def _close_socket(self):
        if self.sock is not None:
            try:
                self.sock.close()
            finally:
                self.sock = None

    def close(self):
        """Closes the socket: the node removes this trainer's worker."""
        self._close_socket()
        self._unmap()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def wait_for_node(self, timeout=120.0):
        """After NodeGone: reconnects to the same path once the node is back
        (within timeout seconds, else Timeout), sends the same hello, and
        waits for the first compute (the bound Optimizer loads its θ). The
        batches() generator continues with the new round."""
        self._close_socket()
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._open(deadline)
                self.hello(self._layout)
                break
            except (NodeGone, Busy) as e:
                self._close_socket()
                if time.monotonic() >= deadline:
                    raise Timeout("node at %s not back within %.0f s: %s" % (self.path, timeout, e)) from e
                time.sleep(0.2)
        return self.next_compute()

    # -- hooks of the optimizer bound to the mesh ----------------------------

    def add_hooks(self, on_compute=None, on_attach=None, eval_model=None, eval_async=None):
        """Registers what the optimizer bound to this mesh does: on_compute()
        when a compute arrives (load θ into the model), on_attach() after a
        (re)attachment's welcome (bind the new shared memory),
        eval_model(), a context manager yielding the model loaded with the
        eval region for the evaluation function, and eval_async(), which
        takes the eval region into a copy of the model and returns a
        function running the evaluation function on it (None when it
        cannot: the evaluation then runs in step)."""
        if on_compute is not None:
            self._on_compute.append(on_compute)
        if on_attach is not None:
            self._on_attach.append(on_attach)
        if eval_model is not None:
            self._eval_model = eval_model
        if eval_async is not None:
            self._eval_async = eval_async

    def _send(self, msg):
        with self._send_lock:
            protocol.send(self.sock, msg)

    # -- rounds -----------------------------------------------------------

    def send_init_params(self):
        """Sends init after the initial parameters were written into theta."""
        self._send({"op": "init"})

    def took_step(self):
        """Counts one step of the current round taken (batches() then
        yields the next step's samples)."""
        self.steps_done += 1

    def next_compute(self):
        """Waits for the next compute, serving evaluate requests meanwhile.
        Returns the Compute (also in self.current), or None after a stop
        that ends training (code "end"); raises Stopped after a stop that
        names a reason the trainer must hear (code "stopped": its updates
        refused, the job diverged), and the evaluation function's error
        when it raised or returned something that is not an evaluation.
        The hooks of the bound optimizer load θ on arrival."""
        if self.sock is None:
            raise NodeGone("not attached (the node went away; call wait_for_node)")
        while True:
            self._raise_eval_failure()
            msg = protocol.recv(self.sock)
            op = msg["op"]
            if op == "compute":
                self.compute_at = time.perf_counter()
                c = Compute(msg)
                self.current, self.steps_done = c, 0
                self.round_id += 1
                for hook in self._on_compute:
                    hook()
                return c
            if op == "evaluate":
                self._serve_evaluate(msg)
            elif op == "stop":
                self.stopped, self.stop_reason = True, msg.get("reason", "")
                self.stop_code = msg.get("code", "end")
                self.current = None
                self._close_socket()
                if self.stop_code == "stopped":
                    raise Stopped("the node stopped this trainer: %s" % self.stop_reason, code=self.stop_code, reason=self.stop_reason)
                return None
            elif op == "error":
                self._close_socket()
                raise _error_from(msg)
            else:
                raise ProtocolError("unexpected %r while waiting for compute" % op)

    def send_update(self, it, loss, samples, compute_s=None, lr=None):
        """Tells the node the update region holds round it's update: loss the
        round's mean loss (0 when the loop gave none; null when not finite),
        compute_s the trainer's own time for the round, which the node
        subtracts from its round trip to tell the bridge's cost, lr the
        learning rate the trainer's optimizer stepped at."""
        loss = 0.0 if loss is None else float(loss)
        msg = {"op": "update", "iter": int(it), "loss": loss if np.isfinite(loss) else None, "samples": int(samples)}
        if compute_s is not None:
            msg["compute_s"] = round(float(compute_s), 9)
        if lr is not None and np.isfinite(lr):
            msg["lr"] = float(lr)
        self._send(msg)

    # -- evaluation -------------------------------------------------------

    def on_evaluate(self, fn):
        """Registers fn as this trainer's evaluation: called with the model
        holding the node's snapshot (in eval mode, without gradients; with
        no Optimizer bound, with the eval region, a numpy view) and
        returning (accuracy, loss), (accuracy, loss, samples) or a dict with
        "accuracy" and optionally "loss" and "samples"; accuracy in [0, 1].
        Anything else raises TypeError (or ValueError) from the optimizer's
        step(), naming what fn returned. Returns fn, so it serves as a
        decorator."""
        self._eval_fn = fn
        return fn

    def _serve_evaluate(self, msg):
        """Answers evaluate: off the training path when the bound optimizer
        can take the eval region into a copy of the model (an
        "evaluating" ack at once, the evaluation on a thread, its
        "evaluated" sent when done, between the rounds), else in step."""
        seq = msg.get("seq")
        n = msg.get("samples")
        self.eval_samples = int(n) if isinstance(n, int) and n > 0 else None
        if self._eval_fn is not None and self._eval_async is not None:
            run = self._eval_async()
            if run is not None:
                self._send({"op": "evaluating", "seq": seq})
                threading.Thread(target=self._evaluate, args=(seq, run), name="dsspmesh-evaluate", daemon=True).start()
                return
        if self._eval_fn is None:
            self._send({"op": "evaluated", "seq": seq, "accuracy": 0.0, "loss": 0.0, "samples": 0,
                        "error": "the trainer registered no evaluation function (mesh.on_evaluate)"})
            self.evaluations += 1
            return
        if self._eval_model is not None:
            def run(fn):
                with self._eval_model() as model:
                    return fn(model)
        else:
            def run(fn):
                return fn(self.eval)
        self._evaluate(seq, run)
        self._raise_eval_failure()

    def _evaluate(self, seq, run):
        """Runs the evaluation function through run and sends evaluated;
        what it raised (or a return that is not an evaluation) is kept for
        the training loop to raise, after the node has heard it."""
        reply = {"op": "evaluated", "seq": seq, "accuracy": 0.0, "loss": 0.0, "samples": 0}
        t0 = time.perf_counter()
        try:
            acc, loss, n = evaluation_result(run(self._eval_fn))
            reply.update(accuracy=acc, loss=loss if np.isfinite(loss) else None, samples=n)
        except Exception as e:  # the user's code: the node hears it, then the trainer raises it
            reply.update(accuracy=0.0, loss=0.0, samples=0, error="evaluation: %s: %s" % (type(e).__name__, e))
            self._eval_failure = e
        self.eval_s += time.perf_counter() - t0
        self.evaluations += 1  # before the answer: whoever heard it sees the count
        try:
            self._send(reply)
        except DsspError:
            pass  # the node is gone: the training loop hears it

    def _raise_eval_failure(self):
        e, self._eval_failure = self._eval_failure, None
        if e is not None:
            raise e

    # -- data -------------------------------------------------------------

    def round_positions(self, step):
        """The sample positions of step `step` of the current round:
        (start, count) in the job-wide order, or (None, count) for the
        trainer's own reading."""
        c = self.current
        if c.pos < 0:
            return None, c.hi - c.lo
        return c.pos + step * c.batch + c.lo, c.hi - c.lo

    def batches(self, n_samples):
        """Yields the index arrays (numpy int64) of the batches this trainer
        computes, over a dataset of n_samples: H per round, each the node's
        batch size (its [lo, hi) part), from the job-wide order (pos >= 0) or
        the trainer's own shuffled reading (pos < 0). One optimizer step per
        yielded batch; ends when the node sends stop."""
        order = None
        last = None
        while True:
            if self.stopped:
                return
            c = self.current
            if c is None:
                if not self._on_compute:
                    raise ProtocolError("batches() needs an Optimizer bound to the mesh: dsspmesh.Optimizer(mesh, model)")
                raise ProtocolError("no compute in progress (was the node lost? call mesh.wait_for_node)")
            here = (self.round_id, self.steps_done)
            if here == last:
                raise ProtocolError("batches(): optimizer step() was not called after the previous batch (round %d, step %d)" % here)
            if self.steps_done >= c.local_steps:
                raise ProtocolError("batches(): round %d's %d steps are done but no update was sent" % (c.iter, c.local_steps))
            last = here
            start, count = self.round_positions(self.steps_done)
            if start is None:
                if self._own is None:
                    self._own = [Order(n_samples, own_seed(self.node)), 0]
                o = self._own
                if o[0].n != n_samples:
                    o[0] = Order(n_samples, own_seed(self.node))
                idx = o[0].indices(o[1], count)
                o[1] += count
            else:
                if order is None or order.n != n_samples or order.seed != self.seed:
                    order = Order(n_samples, self.seed)
                idx = order.indices(start, count)
            yield idx

    def batch_sampler(self, n_samples):
        """A torch batch_sampler-style iterable: DataLoader(ds,
        batch_sampler=mesh.batch_sampler(len(ds))) reads this trainer's
        batches (lists of ints) until the node stops it."""
        return _BatchSampler(self, n_samples)


def evaluation_result(res):
    """(accuracy, loss, samples) of what an evaluation function returned:
    (accuracy, loss), (accuracy, loss, samples) or a dict with "accuracy"
    and optionally "loss" and "samples"; numbers may be 0-d tensors or
    numpy scalars. Samples 0 means unknown. Raises TypeError or ValueError
    naming what it got."""
    def num(v, what):
        try:
            if hasattr(v, "item") and callable(v.item):
                v = v.item()
            if isinstance(v, bool) or not isinstance(v, numbers.Real):
                raise TypeError
            return float(v)
        except (TypeError, ValueError, RuntimeError):
            raise TypeError("the evaluation function's %s is %r (%s), not a number; it must return "
                            "(accuracy, loss), (accuracy, loss, samples) or a dict with those keys" % (what, v, type(v).__name__)) from None
    if isinstance(res, dict):
        if "accuracy" not in res:
            raise TypeError("the evaluation function returned a dict without \"accuracy\" (keys: %s)" % ", ".join(map(str, res)) or "none")
        acc, loss, n = res["accuracy"], res.get("loss", 0.0), res.get("samples", 0)
    elif isinstance(res, (tuple, list)) and len(res) in (2, 3):
        acc, loss = res[0], res[1]
        n = res[2] if len(res) == 3 else 0
    else:
        raise TypeError("the evaluation function returned %.200r (%s); it must return (accuracy, loss), "
                        "(accuracy, loss, samples) or a dict with \"accuracy\" (and \"loss\", \"samples\")" % (res, type(res).__name__))
    acc, loss, n = num(acc, "accuracy"), num(loss, "loss"), num(n, "samples")
    if not 0.0 <= acc <= 1.0:
        raise ValueError("the evaluation function gave accuracy %r, outside [0, 1] (a fraction, not a percentage)" % (acc,))
    if n < 0 or n != int(n):
        raise ValueError("the evaluation function gave samples %r, not a count" % (n,))
    return acc, loss, int(n)


class _BatchSampler:
    def __init__(self, mesh, n):
        self.mesh, self.n = mesh, n

    def __iter__(self):
        for idx in self.mesh.batches(self.n):
            yield idx.tolist()


def connect(path=None, model=None, timeout=60.0):
    """Opens the trainer socket of the local dssp node at path (default
    $DSSP_TRAINER_SOCKET), waiting up to timeout seconds for the node to
    create it. With model (a torch.nn.Module) the hello is sent at once;
    otherwise Optimizer(mesh, model) sends it. Raises NodeGone when no node
    listens within timeout."""
    if path is None:
        path = os.environ.get(ENV_SOCKET)
        if not path:
            raise DsspError("no socket path: pass connect(path) or set %s (dssp node --trainer external prints it)" % ENV_SOCKET)
    m = Mesh(path, float(timeout))
    m._open(time.monotonic() + float(timeout))
    if model is not None:
        from .tensors import layout_of
        m.hello(layout_of(model))
    return m
