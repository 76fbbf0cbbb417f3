"""dsspmesh: train a PyTorch model through the local dssp node.

The three changed lines of a training loop:

    mesh = dsspmesh.connect()                                   # $DSSP_TRAINER_SOCKET
    opt = dsspmesh.Optimizer(mesh, model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9))
    for idx in mesh.batches(len(train_set)):                    # the node's batch size and order
        x, y = X[idx], Y[idx]
        opt.zero_grad(); loss = F.cross_entropy(model(x), y); loss.backward()
        opt.step()

Optimizer is a torch.optim.Optimizer wrapping the loop's own (schedulers
attach to it); each worker steps it, and the shards apply the mean change
(docs/design.md, "The combine rule"). numpy is required; torch is needed
only by Optimizer and load_state_dict. The protocol (version 2):
length-prefixed JSON on a Unix socket, tensors in a shared-memory file of
three float32 regions (theta, update, eval).
"""
from . import safetensors
from .errors import Busy, DsspError, JobMismatch, LayoutRefused, NodeGone, ProtocolError, Stopped, Timeout
from .mesh import ENV_SOCKET, Compute, Mesh, connect, evaluation_result
from .order import Order, own_seed

__all__ = [
    "Busy", "Compute", "DsspError", "ENV_SOCKET", "JobMismatch", "LayoutRefused", "Mesh", "NodeGone",
    "Optimizer", "Order", "ProtocolError", "Stopped", "Timeout", "connect", "evaluation_result", "load_state_dict",
    "own_seed", "safetensors",
]


def __getattr__(name):
    # torch is optional: importing it only when Optimizer is used.
    if name in ("Optimizer", "Stats"):
        from . import torchopt
        return getattr(torchopt, name)
    if name in ("layout_of", "model_tensors"):
        from . import tensors
        return getattr(tensors, name)
    if name == "load_state_dict":
        return safetensors.load_state_dict
    raise AttributeError("module 'dsspmesh' has no attribute %r" % name)
