"""The result of a method: a plain object a user can print, save as JSON and compare.

Every method's result subclasses :class:`Result` and adds its answer (``x``,
``params``, ...).  ``status`` says how the run ended, ``history`` holds
per-iteration columns, ``timings`` seconds, ``info`` the problem and the
settings.  Arrays are written as lists; non-finite floats as JSON null.
"""
import dataclasses

from .backend import to_host
from .io import write_json


@dataclasses.dataclass
class Result:
    status: str       # how the run ended: "converged", "max_iter", "time_limit", "interrupted", ...
    history: dict     # per-iteration columns (lists of equal length)
    timings: dict     # seconds
    info: dict        # the problem, the settings, the ranks, what the method measured

    def to_dict(self):
        """Every field as plain JSON values (arrays to lists), ``status`` first."""
        payload = {}
        for field in dataclasses.fields(self):
            if field.metadata.get("json", True):
                value = getattr(self, field.name)
                payload[field.name] = to_host(value).tolist() if hasattr(value, "shape") else value
        return payload

    def save_json(self, path):
        """Write the result as JSON, atomically (call it on one rank)."""
        write_json(path, self.to_dict())


def not_in_json():
    """A field that ``to_dict`` leaves out (per-rank state such as a dual variable)."""
    return dataclasses.field(default=None, metadata={"json": False})
