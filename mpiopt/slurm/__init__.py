"""Slurm: batch scripts rendered safely, submitted with sbatch, followed with scontrol."""
from .jobs import JobResult, SlurmError, job_state, never_starts, submit, wait
from .render import WORKLOADS, render_script

__all__ = ["JobResult", "SlurmError", "WORKLOADS", "job_state", "never_starts", "render_script", "submit", "wait"]
