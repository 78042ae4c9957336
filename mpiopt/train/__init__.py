"""Data-parallel training on MPI ranks: ``train(model, X, y, optimizer, comm=None, **settings) -> TrainResult``.

PyTorch DDP's design (gradient buckets reduced while the backward pass goes
on, averaging over the global batch) and DeepSpeed ZeRO's stages 1-3
(optimizer state, gradients and parameters sharded over the ranks), on the
models and optimizers of :mod:`mpiopt.models` and :mod:`mpiopt.optim` and any
reducer of :mod:`mpiopt.collectives`.  See docs/training.md.

=================  ==================================================================
``trainer.py``     the loop: batches, the per-step all-reduce, log, checkpoints, result
``zero.py``        stage 0 (DDP) and ZeRO stages 1, 2, 3: what is reduced, stepped, gathered
``buckets.py``     the gradient buckets and each rank's shard of them
``overlap.py``     collectives on a background thread, and the overlap measured
``memory.py``      bytes per rank of parameters, gradients, optimizer state and buffers
``checkpoint.py``  the state on the core checkpointer
``settings.py``    ``TrainSettings``;  ``result.py``: ``TrainResult``;  ``printing.py``: the log
=================  ==================================================================
"""
from .result import TrainResult
from .settings import TrainSettings
from .trainer import train

__all__ = ["TrainResult", "TrainSettings", "train"]
