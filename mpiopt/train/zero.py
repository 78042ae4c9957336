"""How the ranks share gradients, parameters and optimizer state: DDP (stage 0) and ZeRO stages 1-3.

Rajbhandari, Rasley, Ruwase and He, "ZeRO: Memory Optimizations Toward
Training Trillion Parameter Models", SC 2020; Li et al., "PyTorch
Distributed: Experiences on Accelerating Data Parallel Training", VLDB 2020.

Every rank computes the gradient of its rows of the global batch; the ranks
then need the sum of ``rows_r * gradient_r``, divided by the global batch's
rows (so that any rank count gives the single-process gradient).  The four
stages get there differently; per step, with n parameters in float64 and the
buckets of :mod:`.buckets`:

=====  ==========================================  ===================================  ===================
stage  gradients                                   optimizer step                       parameters
=====  ==========================================  ===================================  ===================
0      all-reduce every bucket (all n on a rank)   the whole vector, on every rank      all n on every rank
1      all-reduce every bucket                     this rank's shard only, then every   all n on every rank
                                                   bucket all-gathered
2      reduce-scatter every bucket: a rank keeps   this rank's shard, then every        all n on every rank
       its chunks only (n/p)                       bucket all-gathered
3      reduce-scatter every bucket                 this rank's shard; nothing gathered  n/p: a layer is
                                                                                        gathered just before
                                                                                        its forward and its
                                                                                        backward, released after
=====  ==========================================  ===================================  ===================

Communication volume per rank and step, in the bandwidth term: stage 0 and 1
move 2n(p-1)/p (an all-reduce; stage 1 adds an all-gather of n(p-1)/p, as
ZeRO-1 does when it all-gathers after its step), stage 2 n(p-1)/p + n(p-1)/p
(reduce-scatter, all-gather), stage 3 3n(p-1)/p (two all-gathers, forward and
backward, and a reduce-scatter): ZeRO's 1.5x of DDP.

Every collective goes through the reducer, on the communication queue of
:mod:`.overlap`, in the same order on every rank; a bucket's reduction
starts as soon as the backward pass has finished it (the queue may run it on
a background thread while the backward pass goes on).

On a GPU the parameters, gradients, buckets, shards and gathered layers are
CuPy arrays (``self.xp``, the module of the starting parameters), the same
lines as on the CPU; the reducer stages them through pinned host memory or
hands them to a CUDA-aware MPI (:mod:`mpiopt.collectives.device`).
"""
import numpy as np

from ..core.backend import get_array_module


class Replicated:
    """Stage 0, PyTorch DDP: all-reduce the gradient bucket by bucket; every rank steps the whole vector."""

    stage = 0

    def __init__(self, model, params, layout, reducer, queue, memory):
        self.model, self.layout, self.reducer, self.queue, self.memory = model, layout, reducer, queue, memory
        self.bounds = model.layer_bounds()
        self.rows = 0.0
        self.next_bucket = 0
        # Bytes this rank sent: the reducer's count of each call (``last_bytes_sent``: a compressed reducer's
        # payloads, else the ring algorithm's, exact for the ring reducers and a model for the others).
        self.bytes_sent = 0
        self.xp = get_array_module(params)  # numpy, or CuPy on a GPU: every array of the strategy lives there
        self.setup_params(self.xp.array(params, dtype=np.float64))
        self.setup_gradients()

    # -- parameters ---------------------------------------------------------------
    def setup_params(self, params):
        self.params = params
        self.memory.set("params", self.params)

    def fetch(self, layer):
        """Layer ``layer``'s parameters, for its forward or its backward."""
        return self.params[slice(*self.bounds[layer])]

    def full_params(self):
        """The whole parameter vector (a copy)."""
        return self.params.copy()

    def load_params(self, params):
        self.params[...] = self.xp.asarray(params)

    # -- gradients ----------------------------------------------------------------
    def setup_gradients(self):
        self.grad = self.xp.empty(self.layout.count)
        self.memory.set("gradients", self.grad)

    def begin(self, rows):
        """A new step whose batch has ``rows`` rows on this rank."""
        self.rows = float(rows)
        self.next_bucket = 0

    def grad_of(self, layer):
        """Where the model writes layer ``layer``'s gradient."""
        return self.grad[slice(*self.bounds[layer])]

    def ready(self, layer):
        """Layer ``layer``'s gradient is complete: start the reduction of every bucket it completes."""
        start = self.bounds[layer][0]
        buckets = self.layout.buckets
        while self.next_bucket < len(buckets) and buckets[self.next_bucket].start >= start:
            bucket = buckets[self.next_bucket]
            piece = self.grad[bucket.start:bucket.stop]
            piece *= self.rows
            self.queue.submit(("reduce", bucket.index), self.allreduce_bucket, piece, bucket)
            self.next_bucket += 1

    def allreduce_bucket(self, piece, bucket):
        # By name each bucket keeps its own state (a compressed reducer's error-feedback residual); the shapes
        # of its tensors are for a per-tensor compressor.  Reducers without such state ignore both.
        self.reducer.allreduce(piece, piece, name=f"bucket{bucket.index}", shapes=bucket.shapes)
        self.bytes_sent += self.reducer.last_bytes_sent

    def finish(self, global_rows):
        """Wait for the reductions and divide by the global batch: the gradient of the global batch."""
        self.queue.wait_all()
        self.reduced_gradient()[...] /= global_rows

    def reduced_gradient(self):
        return self.grad

    # -- the optimizer step -------------------------------------------------------
    def step(self, optimizer):
        optimizer.step(self.params, self.grad)
        self.memory.set("optimizer_state", *optimizer.state.values())

    def state(self):
        """(shared arrays, this rank's arrays) of the parameters for a checkpoint."""
        return {"params": self.params}, {}

    def restore(self, shared, mine):
        self.load_params(shared["params"])


class ShardedOptimizer(Replicated):
    """Stage 1: gradients all-reduced as in DDP; each rank keeps optimizer state for its shard only,
    steps its shard and all-gathers the parameters bucket by bucket."""

    stage = 1

    def step(self, optimizer):
        shard = self.layout.pack(self.params)
        self.memory.add(shard.nbytes)
        self.step_shard(optimizer, shard)
        self.gather_params(shard)
        self.memory.add(-shard.nbytes)

    def step_shard(self, optimizer, shard):
        gradient = self.layout.pack(self.grad)
        self.memory.add(gradient.nbytes)
        optimizer.step(shard, gradient)
        self.memory.add(-gradient.nbytes)
        self.memory.set("optimizer_state", *optimizer.state.values())

    def gather_params(self, shard):
        """Every bucket's parameters from every rank's updated chunk (all-gather), into ``self.params``."""
        for bucket in self.layout.buckets:
            self.queue.submit(("gather", bucket.index), self.gather_bucket, shard, bucket,
                              self.params[bucket.start:bucket.stop])
        self.queue.wait_all()

    def gather_bucket(self, shard, bucket, out):
        chunk = shard[slice(*bucket.packed)]
        self.memory.add(out.nbytes)  # the reducer's result, until copied
        out[...] = self.reducer.allgather(chunk, bucket.size)
        self.bytes_sent += self.reducer.last_bytes_sent
        self.memory.add(-out.nbytes)


class ShardedGradients(ShardedOptimizer):
    """Stage 2: each bucket's gradient is reduce-scattered; a rank keeps only its chunks (n/p entries).

    A layer's gradient is written into a buffer of its own, which is released
    once its buckets are reduced; at most two layers' buffers are alive (the
    one being reduced and the one being computed)."""

    stage = 2

    def setup_gradients(self):
        self.grad_shard = self.xp.empty(self.layout.shard_size)
        self.memory.set("gradients", self.grad_shard)
        self.layer_grads = {}   # layer: its gradient buffer, until ready
        self.in_flight = []     # (buffer bytes, handles) of layers whose buckets are being reduced

    def grad_of(self, layer):
        while len(self.in_flight) > 1:  # one layer in flight while the next is computed
            self.release_oldest()
        start, stop = self.bounds[layer]
        buffer = self.xp.empty(stop - start)
        self.memory.add(buffer.nbytes)
        self.layer_grads[layer] = buffer
        return buffer

    def release_oldest(self):
        nbytes, handles = self.in_flight.pop(0)
        for handle in handles:
            self.queue.wait(handle)
        self.memory.add(-nbytes)

    def ready(self, layer):
        buffer = self.layer_grads.pop(layer)
        buffer *= self.rows
        start = self.bounds[layer][0]
        handles = [self.queue.submit(("reduce", bucket.index), self.reduce_bucket,
                                     buffer[bucket.start - start:bucket.stop - start], bucket)
                   for bucket in self.layout.of_layer(layer)]
        self.in_flight.append((buffer.nbytes, handles))

    def reduce_bucket(self, piece, bucket):
        self.grad_shard[slice(*bucket.packed)] = self.reducer.reduce_scatter(piece)
        self.bytes_sent += self.reducer.last_bytes_sent

    def finish(self, global_rows):
        while self.in_flight:
            self.release_oldest()
        super().finish(global_rows)

    def reduced_gradient(self):
        return self.grad_shard

    def step_shard(self, optimizer, shard):
        optimizer.step(shard, self.grad_shard)
        self.memory.set("optimizer_state", *optimizer.state.values())


class ShardedParameters(ShardedGradients):
    """Stage 3: a rank holds only its shard of the parameters; each layer is all-gathered just before
    its forward and again before its backward, and released after.  The next layer's gather is
    started ahead (prefetch), so at most two layers are gathered at a time."""

    stage = 3

    def setup_params(self, params):
        self.param_shard = self.layout.pack(params)
        self.memory.set("params", self.param_shard)
        self.gathered = {}     # layer: (buffer, handles of its buckets' all-gathers)
        self.previous = None   # the layer fetched last, for the direction of the prefetch

    def fetch(self, layer):
        direction = 1 if self.previous is None or layer > self.previous else -1
        following = layer + direction
        self.request(layer)
        if 0 <= following < len(self.bounds):
            self.request(following)
        for other in [other for other in self.gathered if other not in (layer, following)]:
            self.release(other)
        buffer, handles = self.gathered[layer]
        for handle in handles:
            self.queue.wait(handle)
        self.gathered[layer] = (buffer, [])
        self.previous = layer
        return buffer

    def request(self, layer):
        """Start gathering ``layer`` unless it is gathered or on its way."""
        if layer in self.gathered:
            return
        start, stop = self.bounds[layer]
        buffer = self.xp.empty(stop - start)
        self.memory.add(buffer.nbytes)
        handles = [self.queue.submit(("gather", bucket.index), self.gather_bucket, self.param_shard, bucket,
                                     buffer[bucket.start - start:bucket.stop - start])
                   for bucket in self.layout.of_layer(layer)]
        self.gathered[layer] = (buffer, handles)

    def release(self, layer):
        buffer, handles = self.gathered.pop(layer)
        for handle in handles:  # a prefetch that was not used: let it land first
            self.queue.wait(handle)
        self.memory.add(-buffer.nbytes)

    def finish(self, global_rows):
        super().finish(global_rows)
        for layer in list(self.gathered):
            self.release(layer)
        self.previous = None

    def step(self, optimizer):
        optimizer.step(self.param_shard, self.grad_shard)
        self.memory.set("optimizer_state", *optimizer.state.values())

    def full_params(self):
        params = self.xp.empty(self.layout.count)
        for bucket in self.layout.buckets:
            self.queue.submit(("gather", bucket.index), self.gather_bucket, self.param_shard, bucket,
                              params[bucket.start:bucket.stop])
        self.queue.wait_all()
        return params

    def load_params(self, params):
        self.param_shard[...] = self.xp.asarray(params)

    def state(self):
        return {}, {"params": self.param_shard}

    def restore(self, shared, mine):
        self.load_params(mine["params"])


STAGES = {strategy.stage: strategy for strategy in (Replicated, ShardedOptimizer, ShardedGradients, ShardedParameters)}
