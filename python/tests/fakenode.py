"""A fake dssp node for the tests: a real Unix socket in a temporary folder
and a real shared-memory file, speaking the trainer protocol (version 1)
from a script run on a thread (protocol version 2)."""
import json
import mmap
import os
import socket
import struct
import tempfile
import threading

import numpy as np


class FakeNode:
    """Listens on <dir>/trainer.sock. serve(script) accepts one trainer on
    a thread, reads its hello, answers (error when the job's layout differs,
    welcome otherwise) and runs script(node). The script talks with send(),
    recv(), compute() and evaluate(); whatever it raises is re-raised by
    join()."""

    def __init__(self, params, layout=None, batch=4, local_steps=1, seed=1, send_init=False,
                 dir=None, code=None, node_id="node-fake", update="delta", optimizer=None):
        self.dir = dir or tempfile.mkdtemp(prefix="dssp-fakenode-")
        self.path = os.path.join(self.dir, "trainer.sock")
        self.shm_path = os.path.join(self.dir, "trainer.shm")
        self.params = params
        self.layout = layout
        self.code = code  # an error code to refuse every hello with
        self.welcome = {"op": "welcome", "node": node_id, "shm": self.shm_path,
                        "shm_bytes": 3 * 4 * params, "params": params, "layout": layout,
                        "batch": batch, "local_steps": local_steps, "seed": seed,
                        "dataset": "mnist", "send_init": send_init, "update": update,
                        "optimizer": optimizer or {"kind": "sgd", "lr": 0.1, "momentum": 0.0}, "wire": "fp32"}
        with open(self.shm_path, "wb") as f:
            f.truncate(3 * 4 * params)
        fd = os.open(self.shm_path, os.O_RDWR)
        self._mm = mmap.mmap(fd, 3 * 4 * params)
        os.close(fd)
        self.theta, self.update, self.eval = (
            np.frombuffer(self._mm, dtype="<f4", count=params, offset=i * 4 * params) for i in range(3))
        if os.path.exists(self.path):
            os.unlink(self.path)
        self.lsock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.lsock.bind(self.path)
        self.lsock.listen(2)
        self.conn = None
        self.hello = None
        self.error = None
        self._thread = None

    def serve(self, script):
        def run():
            try:
                self.conn, _ = self.lsock.accept()
                self.conn.settimeout(20)
                self.hello = self.recv()
                refusal = self._refusal(self.hello)
                if refusal:
                    self.send(refusal)
                    self.conn.close()
                    return
                self.send(self.welcome)
                script(self)
            except BaseException as e:  # re-raised by join
                self.error = e
        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def _refusal(self, hello):
        if self.code:
            return {"op": "error", "code": self.code, "message": "refused: " + self.code}
        if self.layout is None:
            self.welcome["layout"] = hello["layout"]
            return None
        for want, got in zip(self.layout, hello["layout"] + [None] * len(self.layout)):
            if got is None or want["name"] != got["name"] or want["shape"] != got["shape"]:
                return {"op": "error", "code": "layout-mismatch",
                        "message": 'tensor "%s" is %s in the job, %s in the trainer' % (
                            want["name"], want["shape"], got and got["shape"])}
        return None

    def join(self, timeout=20):
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise AssertionError("fake node's script still running after %s s" % timeout)
        if self.error is not None:
            raise self.error

    def close(self):
        for s in (self.conn, self.lsock):
            if s is not None:
                try:
                    s.close()
                except OSError:
                    pass

    # -- the script's vocabulary --------------------------------------------

    def send(self, msg):
        body = json.dumps(msg).encode()
        self.conn.sendall(struct.pack("<I", len(body)) + body)

    def send_raw(self, data):
        self.conn.sendall(data)

    def recv(self):
        n = struct.unpack("<I", self._exact(4))[0]
        return json.loads(self._exact(n).decode())

    def _exact(self, n):
        buf = b""
        while len(buf) < n:
            chunk = self.conn.recv(n - len(buf))
            if not chunk:
                raise EOFError("trainer closed the socket")
            buf += chunk
        return buf

    def compute(self, it, theta, pos=0, batch=None, local_steps=1, lo=0, hi=None):
        """Writes theta, sends compute, returns the trainer's update message
        and a copy of the update region."""
        batch = batch or self.welcome["batch"]
        self.theta[:] = theta
        self.send({"op": "compute", "iter": it, "batch": batch, "pos": pos, "local_steps": local_steps,
                   "lo": lo, "hi": batch if hi is None else hi})
        msg = self.recv()
        if msg.get("op") != "update":
            raise AssertionError("expected update, got %r" % msg)
        return msg, self.update.copy()

    def evaluate(self, seq, params):
        """Writes params into eval, sends evaluate and returns the trainer's
        evaluated; an "evaluating" ack first (the evaluation off the
        training path) is noted in self.acked."""
        self.eval[:] = params
        self.send({"op": "evaluate", "seq": seq})
        msg = self.recv()
        self.acked = msg.get("op") == "evaluating"
        if self.acked:
            if msg.get("seq") != seq:
                raise AssertionError("evaluating %r, want seq %d" % (msg, seq))
            msg = self.recv()
        if msg.get("op") != "evaluated":
            raise AssertionError("expected evaluated, got %r" % msg)
        return msg
