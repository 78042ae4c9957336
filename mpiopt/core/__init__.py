"""Shared plumbing: communicators, collective validation, array backends, I/O."""
from .comm import CollectiveError, check_collectively, first_problem, resolve_comm

__all__ = ["CollectiveError", "check_collectively", "first_problem", "resolve_comm"]
