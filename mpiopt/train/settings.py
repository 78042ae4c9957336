"""Settings of data-parallel training, validated once on every rank (mpiopt.core.settings).

Defaults live here and nowhere else.  ``batch_size`` is the *global* batch:
the ranks split each batch of the sampler between them, so a run at any rank
count takes the same steps.  ``bucket_bytes`` scales PyTorch DDP's 25 MB
bucket down to the models mpiopt trains.

``device`` places the run (docs/training.md, "GPU"): None follows the data (CuPy
``X`` trains on the GPU that holds it, numpy on the CPU), ``"gpu"`` moves
numpy data to this rank's GPU (picked by local rank,
:func:`mpiopt.core.backend.select_device`), ``"cpu"`` moves CuPy data to the host.
"""
import dataclasses

from ..collectives import REDUCERS, Reducer
from ..collectives.compressed import MODES, compressed_reducer_problem
from ..core import registry
from ..core.backend import device_count
from ..core.registry import names
from ..core.settings import Settings, checkpoint_and_log_checks, is_integer, is_number
from ..core.threads import threads_problem

BUCKET_BYTES = 1 << 20   # 1 MiB (PyTorch DDP: 25 MiB)
ZERO_STAGES = (0, 1, 2, 3)
DEVICES = (None, "cpu", "gpu")
SETTING_OF = {"mode": "compression_mode"}  # the compressed reducer's argument -> the setting that gives it


@dataclasses.dataclass(frozen=True)
class TrainSettings(Settings):
    label = "training"
    choices = {"zero_stage": ZERO_STAGES, "reducer": lambda: list(REDUCERS), "compressor": lambda: names("compressor"),
               "compression_mode": MODES, "device": ("cpu", "gpu")}

    epochs: int = 1              # passes over the training set
    batch_size: int = 64         # global batch: rows per step over all ranks together
    seed: int = 0                # the minibatch order (and the MLP's starting point when params are not given)
    shuffle: bool = True         # a new seeded permutation every epoch
    drop_last: bool = False      # skip each epoch's last, smaller batch
    max_steps: int = None        # stop after this many steps in all (counted from the first run; None: no cap)
    time_limit: float = 0.0      # seconds of training; 0 means none
    bucket_bytes: int = BUCKET_BYTES  # gradients are reduced in pieces of about this many bytes
    overlap: bool = True         # reduce finished buckets on a background thread during the backward pass
    zero_stage: int = 0          # 0: replicated (DDP); 1: optimizer state sharded; 2: + gradients; 3: + parameters
    reducer: str = "auto"        # a registered reducer name or a Reducer (mpiopt.collectives)
    reducer_options: dict = None  # options of the reducer named, as it declares them, e.g. {"segment_bytes": 4096}
    compressor: str = None       # a registered compressor name, or None for exact reductions
    compressor_options: dict = None  # options of the compressor, as it declares them, e.g. {"ratio": 0.01}
    error_feedback: bool = None  # with a compressor: carry what it dropped into the next step; None: as the
                                 # compressor says (on for the biased, contractive ones; off for unbiased ones)
    compression_mode: str = "auto"  # with a compressor: how its payloads travel (auto: allreduce when they add
                                    # up, else allgather; two-pass: compressed reduce-scatter, then allgather)
    checkpoint: str = None       # npz path for checkpoints, resumed from when it exists (None: none)
    checkpoint_every: int = 0    # steps between checkpoints (0: only at the end and on SIGUSR1/SIGTERM)
    verbose: bool = False        # iteration log on rank 0
    log_every: int = 50          # with verbose, a log row every this many steps
    trace_memory: bool = False   # cross-check the byte accounting with tracemalloc (slower)
    blas_threads: int = None     # BLAS threads per rank while training (mpiopt.core.threads)
    device: str = None           # None: where the data are (numpy: CPU, CuPy: GPU); "cpu"; "gpu": this rank's GPU

    def options_problem(self):
        """What is wrong with ``reducer_options``, ``compressor_options`` or ``compression_mode`` against the
        pieces' declarations, naming the setting (None when fine)."""
        if self.compressor is None:
            problem = registry.options("reducer", self.reducer).problem(dict(self.reducer_options or {}),
                                                                       f"reducer {self.reducer!r}")
            return None if problem is None else f"reducer_options: {problem}"
        found = compressed_reducer_problem(self.compressor, self.compressor_options, self.reducer,
                                           self.reducer_options, self.compression_mode)
        return None if found is None else f"{SETTING_OF.get(found[0], found[0])}: {found[1]}"

    def checks(self):
        """(ok, message) pairs; the first failing one is reported (see mpiopt.core.settings)."""
        number, integer = is_number, is_integer
        return [
            (integer(self.epochs) and self.epochs >= 1, f"epochs must be an integer >= 1, got {self.epochs!r}"),
            (integer(self.batch_size) and self.batch_size >= 1,
             f"batch_size must be an integer >= 1, got {self.batch_size!r}"),
            (integer(self.seed) and self.seed >= 0, f"seed must be an integer >= 0, got {self.seed!r}"),
            (isinstance(self.shuffle, bool), f"shuffle must be True or False, got {self.shuffle!r}"),
            (isinstance(self.drop_last, bool), f"drop_last must be True or False, got {self.drop_last!r}"),
            (self.max_steps is None or (integer(self.max_steps) and self.max_steps >= 0),
             f"max_steps must be None or an integer >= 0, got {self.max_steps!r}"),
            (number(self.time_limit) and self.time_limit >= 0, f"time_limit must be >= 0, got {self.time_limit!r}"),
            (integer(self.bucket_bytes) and self.bucket_bytes >= 8,
             f"bucket_bytes must be an integer >= 8 (one float64), got {self.bucket_bytes!r}"),
            (isinstance(self.overlap, bool), f"overlap must be True or False, got {self.overlap!r}"),
            (self.zero_stage in ZERO_STAGES and integer(self.zero_stage),
             f"zero_stage must be one of 0, 1, 2, 3, got {self.zero_stage!r}"),
            (isinstance(self.reducer, Reducer) or self.reducer in REDUCERS,
             lambda: f"reducer must be one of {', '.join(REDUCERS)} or a Reducer, got {self.reducer!r}"),
            (self.compressor is None or self.compressor in names("compressor"),
             lambda: f"compressor must be None or one of {', '.join(names('compressor')) or '(none registered)'}, "
                     f"got {self.compressor!r}"),
            (self.reducer_options is None or isinstance(self.reducer_options, dict),
             f"reducer_options must be a dict or None, got {self.reducer_options!r}"),
            (self.compressor_options is None or isinstance(self.compressor_options, dict),
             f"compressor_options must be a dict or None, got {self.compressor_options!r}"),
            (self.compressor is None or not isinstance(self.reducer, Reducer),
             "a compressor needs a reducer name (the trainer builds the compressed reducer), not a Reducer"),
            (not self.reducer_options or not isinstance(self.reducer, Reducer),
             "reducer_options need the reducer by name (the trainer builds it), not a Reducer"),
            (self.compressor is not None or self.compression_mode == "auto",
             f"compression_mode {self.compression_mode!r} needs a compressor: pass compressor=NAME too"),
            (lambda: isinstance(self.reducer, Reducer) or self.options_problem() is None,
             lambda: self.options_problem()),
            (self.compressor is None or self.zero_stage == 0,
             f"a compressor works with zero_stage 0 (compressed all-reduce), got zero_stage {self.zero_stage!r}"),
            (self.error_feedback is None or isinstance(self.error_feedback, bool),
             f"error_feedback must be None, True or False, got {self.error_feedback!r}"),
            *checkpoint_and_log_checks(self),
            (isinstance(self.trace_memory, bool), f"trace_memory must be True or False, got {self.trace_memory!r}"),
            (threads_problem(self.blas_threads) is None, lambda: threads_problem(self.blas_threads)),
            (self.device in DEVICES, f"device must be None, 'cpu' or 'gpu', got {self.device!r}"),
            (lambda: self.device != "gpu" or device_count() > 0,
             "device 'gpu' needs CuPy and a CUDA GPU; none is usable on this rank"),
        ]
