"""Typed errors of the trainer protocol. Every one is a DsspError."""


class DsspError(Exception):
    """Base class of the errors dsspmesh raises."""


class NodeGone(DsspError):
    """The node is not there: the socket is missing, refused the connection,
    or closed it (EOF, reset). mesh.wait_for_node() reconnects once the node
    is back on the same data directory."""


class LayoutRefused(DsspError):
    """The node refused the model's parameter layout (code layout-mismatch).
    tensor is the name of the first tensor that differs, when the node's
    message names one."""

    def __init__(self, message, tensor=None):
        super().__init__(message)
        self.tensor = tensor


class JobMismatch(DsspError):
    """The node trains another job, a built-in model (code not-external), or
    speaks another protocol version (code version)."""

    def __init__(self, message, code="job-mismatch"):
        super().__init__(message)
        self.code = code


class Busy(DsspError):
    """Another trainer is attached to this node (code busy)."""


class Timeout(DsspError):
    """The node did not answer within the timeout given to connect()."""


class ProtocolError(DsspError):
    """A malformed frame or an unexpected message, from either side."""


class Stopped(DsspError):
    """The node stopped this trainer (code "stopped": its updates refused,
    the job diverged; reason says why), or step() was called after the node
    ended training (code "end"). Raised from the optimizer's step()."""

    def __init__(self, message, code="stopped", reason=""):
        super().__init__(message)
        self.code = code
        self.reason = reason
