"""The job-wide data order of the trainer protocol.

Epoch e's order of a dataset of N samples is
numpy.random.default_rng([seed, e]).permutation(N); job-wide position p is
sample order_e[p mod N] with e = p div N. Every trainer computing position p
reads the same sample, so trainers whose batches differ (the node's balance
layer) still cover each epoch once between them.
"""
import zlib

import numpy as np


class Order:
    """Positions to sample indices for one (N, seed). Keeps the two most
    recent epochs' permutations (a batch straddles at most one boundary).
    Not safe for concurrent use."""

    def __init__(self, n, seed):
        if n <= 0:
            raise ValueError("an order of %d samples" % n)
        self.n = int(n)
        self.seed = int(seed)
        self._cache = {}

    def permutation(self, epoch):
        p = self._cache.get(epoch)
        if p is None:
            p = np.random.default_rng([self.seed, int(epoch)]).permutation(self.n).astype(np.int64)
            if len(self._cache) >= 2:
                del self._cache[min(self._cache)]
            self._cache[epoch] = p
        return p

    def indices(self, pos, count, out=None):
        """The sample indices of positions [pos, pos+count) as int64; written
        into out (length count) when given."""
        if pos < 0:
            raise ValueError("position %d < 0" % pos)
        if out is None:
            out = np.empty(count, dtype=np.int64)
        done = 0
        while done < count:
            e, off = divmod(pos + done, self.n)
            k = min(count - done, self.n - off)
            out[done:done + k] = self.permutation(e)[off:off + k]
            done += k
        return out


def own_seed(node_id):
    """The seed of a trainer's own reading (pos < 0): derived from its node's
    id, so two trainers on two nodes read different sequences."""
    return zlib.crc32(node_id.encode("utf-8"))
