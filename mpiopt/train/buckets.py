"""Gradient buckets, and each rank's shard of them for ZeRO (PyTorch DDP; Li et al. 2020, VLDB 13(12)).

The flat gradient of n entries is reduced in buckets of about ``bucket_bytes``
(B entries), not whole: a large model then never needs one message of n
entries, and a bucket can be reduced as soon as the backward pass has written
it.  Backpropagation produces the last layer's gradient first, so the buckets
are cut from the end of the vector and numbered in the order they fill::

    entries   0 ........................................... n
    layers    |     layer 0      |   layer 1   |  layer 2  |
    buckets   |  3  |     2     |     1     |      0      |      (stages 0, 1: size only)
    buckets   | 4 |    3    | 2 |   1    |      0     |           (stages 2, 3: also cut at layers)

Bucket k = [start, stop) is complete once the backward pass has finished
every layer that starts at or after ``start``.  From ZeRO stage 2 on,
buckets never straddle two layers, so that a layer's gradient (stage 2) and
parameters (stage 3) can live in a buffer of their own that is released once
the layer's buckets have moved.

**Shards** (ZeRO stages 1-3, Rajbhandari et al. 2020).  Each bucket is split
over the p ranks by the reducer's rule, :func:`mpiopt.core.partition.offsets`,
and rank r owns chunk r of every bucket: what a reducer's ``reduce_scatter``
of the bucket leaves on it and what its ``allgather`` takes from it.  Rank r's
shard is its chunks, packed one after the other into a vector of about n/p
entries (exactly the sum of its chunks, at most one entry per bucket above
n/p); the optimizer steps that packed vector, every update being elementwise.
"""
import dataclasses

import numpy as np

from ..core.backend import get_array_module
from ..core.partition import offsets


def bucket_bounds(layer_bounds, bucket_entries, split_at_layers):
    """[(start, stop)] of every bucket, in the order the backward pass fills them (from the end of the vector)."""
    count = layer_bounds[-1][1]
    edges = sorted({0, count} | ({start for start, _ in layer_bounds} if split_at_layers else set()))
    buckets = []
    for low, high in reversed(list(zip(edges[:-1], edges[1:]))):
        stop = high
        while stop > low:
            start = max(low, stop - bucket_entries)
            buckets.append((start, stop))
            stop = start
    return buckets


@dataclasses.dataclass
class Bucket:
    index: int      # the order in which the backward pass fills it
    start: int      # its entries [start, stop) in the flat vector
    stop: int
    layer: int      # the first layer it touches (it is complete once the backward pass has finished this layer)
    chunk: tuple    # this rank's chunk [start, stop) of the bucket, in flat coordinates
    packed: tuple   # where that chunk sits in this rank's packed shard

    @property
    def size(self):
        return self.stop - self.start


class BucketLayout:
    """The buckets of a model's flat vector and this rank's shard of them."""

    def __init__(self, layer_bounds, bucket_bytes, split_at_layers, rank, size, itemsize=8):
        self.layer_bounds = [tuple(bounds) for bounds in layer_bounds]
        self.count = self.layer_bounds[-1][1]
        self.bucket_entries = max(1, bucket_bytes // itemsize)
        layer_starts = [start for start, _ in self.layer_bounds]
        self.buckets, packed = [], 0
        for index, (start, stop) in enumerate(bucket_bounds(self.layer_bounds, self.bucket_entries, split_at_layers)):
            bounds = offsets(stop - start, size)
            chunk = (start + bounds[rank], start + bounds[rank + 1])
            layer = int(np.searchsorted(layer_starts, start, side="right")) - 1
            self.buckets.append(Bucket(index, start, stop, layer, chunk, (packed, packed + chunk[1] - chunk[0])))
            packed += chunk[1] - chunk[0]
        self.shard_size = packed

    def __len__(self):
        return len(self.buckets)

    def of_layer(self, layer):
        """The buckets that lie inside ``layer`` (stages 2 and 3, where buckets never straddle layers)."""
        return [bucket for bucket in self.buckets if bucket.layer == layer]

    def pack(self, vector):
        """This rank's shard of a flat vector: its chunk of every bucket, packed (a new array)."""
        packed = get_array_module(vector).empty(self.shard_size, dtype=vector.dtype)
        for bucket in self.buckets:
            packed[slice(*bucket.packed)] = vector[slice(*bucket.chunk)]
        return packed

    def describe(self):
        sizes = [bucket.size for bucket in self.buckets]
        return {"count": len(self.buckets), "entries": sizes, "bucket_bytes": self.bucket_entries * 8,
                "shard_entries": self.shard_size}
