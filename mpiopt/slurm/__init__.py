"""Slurm: batch scripts rendered safely, submitted with sbatch, followed with squeue and scontrol."""
from .jobs import JobResult, job_state, submit, wait
from .render import WORKLOADS, render_script

__all__ = ["JobResult", "WORKLOADS", "job_state", "render_script", "submit", "wait"]
