"""The compressor interface: arrays in, payload arrays out; nothing here knows of MPI.

    compressor = get_compressor("topk", ratio=0.01)
    payload, ctx = compressor.compress(grad, name="grad")   # payload: a tuple of 1-D arrays
    approx = compressor.decompress(payload, ctx)            # or decompress(payload, ctx, out=buffer)
    compressor.accumulate(payload, ctx, total)              # total += the decoded payload

The **payload** is what travels: a tuple of 1-D numpy arrays whose dtypes and
lengths are listed in ``ctx.parts``, so ``ctx.payload_bytes`` is exactly the
number of bytes a rank sends for it, and :func:`pack` / :func:`unpack` turn it
into one contiguous uint8 buffer and back.  CuPy input gives CuPy payloads (the
compressors in this package run their kernels on the GPU, see
:mod:`mpiopt.kernels.compress`), and ``decompress`` then returns CuPy arrays.

The **context** ``ctx`` is small metadata that every rank rebuilds without any
communication, :meth:`Compressor.context` (shape, dtype, buffer name, step,
and what follows from them: k, the buckets, Random-K's shared indices, the
matrix shape of PowerSGD), so a rank decodes another rank's payload of the
same buffer with its own ``ctx``.

**Steps.** A compressor that draws random numbers keys them on the buffer's
name and the step: ``compress(x, name, step)``.  Without ``step`` a
compressor counts the calls per name itself (0, 1, 2, ...); the compressed
reducer passes its own count so that every rank, and every stage of one call,
agrees.

**Linear** compressors (``linear = True``) have payloads that can be summed
element by element as they travel (in their own dtype): the sum of the
payloads of several ranks, decoded with the shared ``ctx``, is the sum of the
decoded payloads.  ``unbiased`` says whether E[decompress(compress(x))] = x;
``error_feedback`` whether the compressed reducer wraps it in
:class:`~mpiopt.compression.error_feedback.ErrorFeedback` by default (the
biased, contractive ones).  ``options`` declares the constructor's arguments
(:class:`~mpiopt.core.options.Options`: type, default, constraint, help), and
is the one place of their defaults and constraints: ``Compressor.__init__``
checks the values given through it (:meth:`Compressor.options_problem`), fills
in the declared defaults and sets each option as an attribute.

**Tensors.**  ``per_tensor`` says whether the compressor works on a tensor's
shape (PowerSGD's matrices) rather than on its elements: given a buffer that
holds several tensors and their shapes (a training bucket), the compressed
reducer then hands it each tensor on its own, as the matrix
:func:`tensor_matrix_shape` (PyTorch's ``view(shape[0], -1)``: a vector of n
is n x 1), under its own name; the others see the buffer whole, flat.
"""
import inspect
import math
from dataclasses import dataclass, field

import numpy as np

from ..core.backend import Scratch, get_array_module
from ..core.options import Declared, Option, Options

FLOAT_DTYPES = (np.float32, np.float64)


def tensor_matrix_shape(shape):
    """(shape[0], the product of the others): the matrix a tensor of ``shape`` is seen as, PyTorch's
    ``tensor.view(shape[0], -1)``; a vector of n entries is (n, 1), a scalar (1, 1)."""
    shape = tuple(int(n) for n in shape)
    if not shape:
        return 1, 1
    rest = element_count(shape[1:])
    return shape[0], rest


def element_count(shape):
    """The number of elements of an array of ``shape`` (math.prod: a tenth of np.prod's cost per call)."""
    return math.prod(int(n) for n in shape)


def bucket_payload_bytes(compressor, shapes, dtype=np.float32):
    """Bytes of one rank's payload for a buffer holding tensors of ``shapes`` (in order), as the compressed
    reducer sends it: each tensor's own payload when the compressor works per tensor, else the flat buffer's."""
    if getattr(compressor, "per_tensor", False):
        return sum(compressor.payload_bytes(tensor_matrix_shape(shape), dtype) for shape in shapes
                   if element_count(shape))
    return compressor.payload_bytes(sum(element_count(shape) for shape in shapes), dtype)


def buffer_name(name):
    """The key of a buffer: its name as a string ('' when None)."""
    return "" if name is None else str(name)


@dataclass(frozen=True, eq=False)
class Context:
    """What a receiver needs besides the payload; every rank rebuilds it (see the module docstring).

    ``parts`` lists the payload's arrays as (dtype, length); ``info`` holds the
    compressor's own derived values (k, buckets, indices, matrix shape)."""

    shape: tuple
    dtype: np.dtype
    name: str
    step: int
    parts: tuple
    info: dict = field(default_factory=dict)

    @property
    def size(self):
        return element_count(self.shape)

    @property
    def payload_bytes(self):
        return sum(np.dtype(dtype).itemsize * int(count) for dtype, count in self.parts)


def pack(payload, out=None):
    """The payload's arrays, one after the other, as one contiguous uint8 buffer (or into ``out``), in the
    payload's array module (numpy or CuPy)."""
    total = sum(part.nbytes for part in payload)
    out = get_array_module(*payload).empty(total, dtype=np.uint8) if out is None else out
    start = 0
    for part in payload:
        out[start:start + part.nbytes] = part.reshape(-1).view(np.uint8)
        start += part.nbytes
    return out


def _address(array):
    """The address of an array's first byte (numpy or CuPy)."""
    data = getattr(array, "data", None)
    pointer = getattr(data, "ptr", None)  # CuPy: a MemoryPointer
    return int(pointer) if pointer is not None else int(array.__array_interface__["data"][0])


def device_misaligned(part, dtype):
    """Whether ``part`` is a device (CuPy) array whose first byte is not aligned for ``dtype``: a CUDA kernel
    would fault on it.  A numpy array never is (numpy reads misaligned views, and a copy would cost memory)."""
    return not isinstance(part, np.ndarray) and _address(part) % np.dtype(dtype).alignment != 0


def unpack(buffer, ctx):
    """The payload tuple from a buffer written by :func:`pack`, by ``ctx.parts``: views (no copies), except
    for a device (CuPy) part that does not start at an address aligned to its itemsize: an aligned copy.

    The parts are packed back to back, so a part may start at any byte: Top-K's float64 values after
    another rank's 12 k bytes (k odd), QSGD's float32 norms or sign's float32 scale after n bytes.  numpy
    reads such views correctly (slowly), but a CUDA kernel given a misaligned float64 or float32 pointer
    faults (cudaErrorMisalignedAddress), and the fault is sticky: every later CUDA call of the process fails."""
    parts, start = [], 0
    for dtype, count in ctx.parts:
        dtype = np.dtype(dtype)
        nbytes = dtype.itemsize * int(count)
        part = buffer[start:start + nbytes]
        if nbytes and device_misaligned(part, dtype):
            part = part.copy()  # on the device, a new allocation: aligned (numpy reads a misaligned view as is)
        parts.append(part.view(dtype))
        start += nbytes
    if start != buffer.size:
        raise ValueError(f"a payload of {ctx.payload_bytes} bytes for buffer {ctx.name!r} "
                         f"(step {ctx.step}) cannot come from {buffer.size} bytes")
    return tuple(parts)


class Compressor(Declared):
    """Base class: argument checks, step counting, ``decompress``/``accumulate`` around the hooks.

    A subclass sets ``name``, the flags and ``options`` (its declared
    constructor options: :class:`~mpiopt.core.options.Declared`), registers itself with
    ``register("compressor", name)`` and implements ``context(shape, dtype,
    name, step)``, ``encode(flat, ctx)`` (a tuple of arrays that do not alias
    ``flat``) and ``decode(payload, ctx, flat_out)``; ``accumulate`` may be
    replaced by a cheaper one (the sparse compressors add at their indices).
    """

    name = "base"
    linear = False
    unbiased = False
    error_feedback = False
    per_tensor = False
    rounds = 1

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # A constructor that takes its options by name (``**options``) shows the declared ones as its
        # signature (help(), inspect, the docs); one written out shows its own.
        parameters = list(inspect.signature(cls.__init__).parameters.values())[1:]
        by_name = [parameter.kind for parameter in parameters] == [inspect.Parameter.VAR_KEYWORD]
        cls.__signature__ = declared_signature(cls.options) if by_name else None

    def __init__(self, **options):
        """``options`` by name, checked against the declaration (an undeclared one is a TypeError, as for any
        constructor; a value outside it a ValueError), completed with the declared defaults and set as
        attributes; a subclass adds only what follows from them (QSGD's levels)."""
        self._steps = {}
        self._scratch = Scratch()
        self.take_options(values=options)

    # -- the interface -----------------------------------------------------
    def context(self, shape, dtype, name=None, step=0):
        raise NotImplementedError(f"{type(self).__name__} must implement context")

    def compress(self, x, name=None, step=None):
        """(payload, ctx) for the array ``x`` (float32 or float64, any shape, contiguous)."""
        x = self.check_input(x)
        ctx = self.context(x.shape, x.dtype, name, self.next_step(name, step))
        return self.encode(x.reshape(-1), ctx), ctx

    def decompress(self, payload, ctx, out=None):
        """The decoded array (shape and dtype of ``ctx``), or written into ``out`` (any shape with
        ``ctx.size`` elements, floating), which is returned."""
        out = self._output(ctx, out, payload)
        self.decode(payload, ctx, out.reshape(-1))
        return out

    def accumulate(self, payload, ctx, out, subtract=False):
        """``out += decoded`` (``-=`` with ``subtract``); by default decode into a scratch buffer, then add."""
        flat = self._output(ctx, out, payload).reshape(-1)
        xp = get_array_module(flat)
        decoded = self.scratch("accumulate", flat.size, flat.dtype, xp)
        self.decode(payload, ctx, decoded)
        (xp.subtract if subtract else xp.add)(flat, decoded, out=flat)
        return out

    def payload_bytes(self, shape, dtype=np.float32):
        """The exact bytes of the payload of one array of ``shape`` (an int is a 1-D length)."""
        shape = (shape,) if np.isscalar(shape) else tuple(shape)
        return self.context(shape, np.dtype(dtype)).payload_bytes

    def settings(self):
        """The constructor's arguments (for logs, results and the reducer's cross-rank check)."""
        return {option: getattr(self, option) for option in self.options}

    # -- hooks -------------------------------------------------------------
    def encode(self, flat, ctx):
        raise NotImplementedError(f"{type(self).__name__} must implement encode")

    def decode(self, payload, ctx, flat_out):
        raise NotImplementedError(f"{type(self).__name__} must implement decode")

    # -- helpers -----------------------------------------------------------
    def next_step(self, name, step):
        """``step`` when given, else this compressor's own count of calls for ``name``."""
        key = buffer_name(name)
        if step is None:
            step = self._steps.get(key, 0)
        self._steps[key] = int(step) + 1
        return int(step)

    def make_context(self, shape, dtype, name, step, parts, **info):
        return Context(tuple(int(n) for n in shape), np.dtype(dtype), buffer_name(name), int(step),
                       tuple((np.dtype(d), int(c)) for d, c in parts), info)

    def scratch(self, key, count, dtype, xp=np):
        """A reusable buffer of ``count`` elements (one per key and dtype), of module ``xp`` (numpy or CuPy)."""
        return self._scratch(key, count, dtype, xp)

    def check_input(self, x):
        xp = get_array_module(x)
        if not isinstance(x, xp.ndarray):
            raise TypeError(f"{self.name}: compress takes a numpy or CuPy array, got {type(x).__name__}")
        if x.dtype not in FLOAT_DTYPES:
            raise TypeError(f"{self.name}: compress takes float32 or float64 arrays, got {x.dtype}")
        return xp.ascontiguousarray(x)

    def _output(self, ctx, out, payload=()):
        """``out`` checked, or a new array of ctx's shape and dtype in the payload's module (numpy or CuPy)."""
        if out is None:
            return get_array_module(*payload).empty(ctx.shape, dtype=ctx.dtype)
        if not isinstance(out, get_array_module(out).ndarray) or out.size != ctx.size or out.dtype.kind != "f" \
                or not out.flags.c_contiguous:
            raise ValueError(f"{self.name}: out must be a C-contiguous floating array of {ctx.size} elements, "
                             f"got {getattr(out, 'dtype', type(out).__name__)} of {getattr(out, 'size', '?')}")
        return out

    def __repr__(self):
        arguments = ", ".join(f"{key}={value!r}" for key, value in self.settings().items())
        return f"{type(self).__name__}({arguments})"


def declared_signature(options):
    """The keyword-only signature of a constructor that takes the declared ``options``, with their defaults."""
    return inspect.Signature([inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=(
        inspect.Parameter.empty if option.required else option.default)) for name, option in options.items()])


def sparse_count(n, ratio, k):
    """k of Top-K and Random-K: ``k`` when given (at most n), else round(ratio n), at least 1 when n > 0."""
    if k is not None:
        return min(int(k), n)
    return min(n, max(1, int(round(ratio * n)))) if n else 0


SPARSE_OPTIONS = Options(
    Option("ratio", float, 0.01, "share of the entries kept, k = round(ratio n) (unused when k is given)",
           low=0, high=1, low_open=True, message="ratio must be in (0, 1], got {value!r}"),
    Option("k", int, None, "number of entries kept (at most n); None: from ratio", low=0,
           message="k must be an integer >= 0, got {value!r}"))


class SparseCompressor(Compressor):
    """Top-K and Random-K: ``k`` entries, ``k`` when given, else from ``ratio`` (which is then not used,
    nor checked)."""

    options = SPARSE_OPTIONS

    @classmethod
    def options_problem(cls, values, options=None):
        if values.get("k") is not None:
            values = {name: value for name, value in values.items() if name != "ratio"}
        return super().options_problem(values, options)
