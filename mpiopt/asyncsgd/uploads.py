"""Compressed uploads for the dense methods: the baselines of Shadowheart's comparison.

Minibatch SGD and Asynchronous SGD send one dense gradient per job.  With
``compressor`` they send it compressed, once: ``randomk`` (K = ``coordinates``
of d, scaled by d/K: the "QSGD" baseline of the Shadowheart paper's code) or
``qsgd8``/``qsgd4`` (Alistarh et al. 2017: 8 or 4 bits a coordinate and a
norm per bucket of 512), both unbiased with variance parameter omega
(E||C(x) - x||^2 <= omega ||x||^2):

    randomk  omega = d/K - 1
    qsgd     omega = min(b / s^2, sqrt(b) / s),  b = 512, s = 2^(bits-1) - 1   (the paper's Lemma 3.1)

The timing model prices the upload by what travels (K values, or the QSGD
payload's bytes / 8 coordinates), and the step sizes shrink with omega (the
unbiased-compression SGD bounds: the estimator's variance grows to
(1 + omega) sigma^2 + omega ||grad f||^2 per gradient).
"""
import math

from ..core.options import Option, Options
from .jobs import Job

COMPRESSORS = (None, "randomk", "qsgd8", "qsgd4")
BUCKET = 512
UPLOAD_OPTIONS = Options(
    Option("compressor", object, None, "upload compressed: randomk (K = coordinates), qsgd8 or qsgd4 (None: dense)",
           choices=COMPRESSORS),
    Option("coordinates", int, None, "randomk's K (None: max(1, d // 100))", low=1))


def upload_job(values, dim):
    """The Job of one compressed gradient for these options, or None (dense: the default job)."""
    name = values.get("compressor")
    if name is None:
        return None
    if name == "randomk":
        k = values.get("coordinates") or max(1, dim // 100)
        if k > dim:
            raise ValueError(f"coordinates K = {k} is more than d = {dim}")
        return Job(messages=1, coordinates=k)
    return Job(quantize=8 if name == "qsgd8" else 4)


def omega(job, dim):
    """The compressor's variance parameter (0 without one)."""
    if job is None:
        return 0.0
    if job.messages:
        return dim / job.coordinates - 1
    levels = 2 ** (job.quantize - 1) - 1
    bucket = min(BUCKET, dim)
    return min(bucket / levels ** 2, math.sqrt(bucket) / levels)
