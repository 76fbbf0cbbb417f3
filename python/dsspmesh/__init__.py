"""dsspmesh: train a PyTorch model through the local dssp node.

The three changed lines of a training loop:

    mesh = dsspmesh.connect()                                  # $DSSP_TRAINER_SOCKET
    opt = dsspmesh.Optimizer(mesh, model, inner=torch.optim.SGD(model.parameters(), lr=0.05))
    for idx in mesh.batches(len(train_set)):                   # the node's batch size and order
        x, y = X[idx], Y[idx]
        opt.zero_grad(); loss = F.cross_entropy(model(x), y); loss.backward()
        opt.step(loss)

numpy is required; torch is needed only by Optimizer. The protocol
(version 1): length-prefixed JSON on a Unix socket, tensors in a shared-memory
file of three float32 regions (theta, update, eval).
"""
from . import safetensors
from .errors import Busy, DsspError, JobMismatch, LayoutRefused, NodeGone, ProtocolError, Timeout
from .mesh import ENV_SOCKET, Compute, Mesh, connect
from .order import Order, own_seed

__all__ = [
    "Busy", "Compute", "DsspError", "ENV_SOCKET", "JobMismatch", "LayoutRefused", "Mesh", "NodeGone",
    "Optimizer", "Order", "ProtocolError", "Timeout", "connect", "own_seed", "safetensors",
]


def __getattr__(name):
    # torch is optional: importing it only when Optimizer is used.
    if name in ("Optimizer", "layout_of", "Stats"):
        from . import torchopt
        return getattr(torchopt, name)
    raise AttributeError("module 'dsspmesh' has no attribute %r" % name)
