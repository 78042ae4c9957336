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

With a compressor that works on each tensor in its own shape (PowerSGD;
``tensor_shapes`` given), buckets are made of whole tensors, as PyTorch DDP's
are: the tensors are taken from the end and a bucket is closed when the next
one would take it past B entries (a tensor larger than B is a bucket of its
own), and each bucket carries its tensors' shapes for the reducer::

    tensors   | W_0        | b_0 | W_1   | b_1 |
    buckets   |     2      |   1       |  0  |      (whole tensors; B about the size of W_1)

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


def bucket_bounds(layer_bounds, bucket_entries, split_at_layers, tensor_sizes=None):
    """[(start, stop)] of every bucket, in the order the backward pass fills them (from the end of the vector);
    of whole tensors when ``tensor_sizes`` (the tensors' lengths, in the vector's order) is given."""
    count = layer_bounds[-1][1]
    if tensor_sizes is not None:
        return tensor_bucket_bounds(layer_bounds, bucket_entries, split_at_layers, tensor_sizes)
    edges = sorted({0, count} | ({start for start, _ in layer_bounds} if split_at_layers else set()))
    buckets = []
    for low, high in reversed(list(zip(edges[:-1], edges[1:]))):
        stop = high
        while stop > low:
            start = max(low, stop - bucket_entries)
            buckets.append((start, stop))
            stop = start
    return buckets


def tensor_bucket_bounds(layer_bounds, bucket_entries, split_at_layers, tensor_sizes):
    """Buckets of whole tensors, from the end: the next tensor joins the open bucket unless it would take
    it past ``bucket_entries`` (or, with ``split_at_layers``, a layer starts between them)."""
    ends = np.cumsum([0] + [int(size) for size in tensor_sizes]).tolist()
    if ends[-1] != layer_bounds[-1][1]:
        raise ValueError(f"the tensors hold {ends[-1]} entries, the layers {layer_bounds[-1][1]}")
    layer_starts = {start for start, _ in layer_bounds} if split_at_layers else set()
    buckets, stop, start = [], ends[-1], ends[-1]
    for low, high in reversed(list(zip(ends[:-1], ends[1:]))):
        if start < stop and (stop - low > bucket_entries or high in layer_starts):
            buckets.append((start, stop))
            stop = start
        start = low
    if start < stop or not buckets:
        buckets.append((start, stop))
    return buckets


@dataclasses.dataclass
class Bucket:
    index: int      # the order in which the backward pass fills it
    start: int      # its entries [start, stop) in the flat vector
    stop: int
    layer: int      # the first layer it touches (it is complete once the backward pass has finished this layer)
    chunk: tuple    # this rank's chunk [start, stop) of the bucket, in flat coordinates
    packed: tuple   # where that chunk sits in this rank's packed shard
    shapes: tuple = None  # the shapes of the whole tensors it holds, in order (buckets of whole tensors only)

    @property
    def size(self):
        return self.stop - self.start


class BucketLayout:
    """The buckets of a model's flat vector and this rank's shard of them."""

    def __init__(self, layer_bounds, bucket_bytes, split_at_layers, rank, size, itemsize=8, tensor_shapes=None):
        self.layer_bounds = [tuple(bounds) for bounds in layer_bounds]
        self.count = self.layer_bounds[-1][1]
        self.bucket_entries = max(1, bucket_bytes // itemsize)
        self.whole_tensors = tensor_shapes is not None
        layer_starts = [start for start, _ in self.layer_bounds]
        shapes = [tuple(shape) for shape in tensor_shapes] if self.whole_tensors else []
        sizes = [int(np.prod(shape, dtype=np.int64)) for shape in shapes]
        tensor_starts = np.cumsum([0] + sizes).tolist()
        self.buckets, packed = [], 0
        for index, (start, stop) in enumerate(bucket_bounds(self.layer_bounds, self.bucket_entries, split_at_layers,
                                                            sizes if self.whole_tensors else None)):
            bounds = offsets(stop - start, size)
            chunk = (start + bounds[rank], start + bounds[rank + 1])
            layer = int(np.searchsorted(layer_starts, start, side="right")) - 1
            held = None
            if self.whole_tensors:
                first = tensor_starts.index(start)
                last = tensor_starts.index(stop) if stop < self.count else len(shapes)
                held = tuple(shapes[first:last])
            self.buckets.append(Bucket(index, start, stop, layer, chunk, (packed, packed + chunk[1] - chunk[0]),
                                       held))
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
                "shard_entries": self.shard_size, "whole_tensors": self.whole_tensors}
