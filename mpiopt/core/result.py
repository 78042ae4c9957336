"""The result of a method: a plain object a user can print, save as JSON, compare and plot.

Every method's result subclasses :class:`Result` and adds its answer (``x``,
``params``, ...).  The core fields are the same for every entry point:

* ``solution``: the answer (``x`` of a solve, ``params`` of training or a
  federation; the method's own name stays too), named by the class's
  ``SOLUTION``;
* ``iterations``: the iterations, steps or rounds run (a field, or a property
  over the method's own count, which stays);
* ``status``: how the run ended, one word of :data:`STATUSES`; the detail
  (which budget ran out) is in ``info["stop"]``;
* ``history``: per-iteration columns; ``timings``: seconds; ``info``: the
  problem, the settings, the ranks, what the method measured;
* ``to_dict``/``save_json``: plain JSON (arrays as lists, non-finite floats as
  null); ``plot(path)``: the result's curves in one figure (:func:`plot_panels`).
"""
import dataclasses
import io

from .backend import to_host
from .io import write_atomic, write_json

STATUSES = {
    "converged": "a stopping rule was met (the tolerances, a duality gap, a target accuracy epsilon)",
    "finished": "the fixed work asked for was done (epochs, rounds, steps or gradients)",
    "max_iterations": "an iterative solver stopped at its iteration limit before it converged",
    "time_limit": "the run's time limit ran out (wall-clock seconds, or the simulator's compute time)",
    "interrupted": "a signal stopped the run after it wrote its checkpoint (run it again to resume)",
    "diverged": "the iterates or the loss stopped being finite",
}


def require_plotting():
    """matplotlib's pyplot on the Agg backend, or an ImportError that says how to install it.

    Call it before the work where a plot is asked for (the command lines' ``--plot``), so that a missing
    matplotlib stops the run at once, not after every iteration has run.
    """
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as error:
        raise ImportError(f"plotting needs matplotlib: pip install 'mpiopt[plots]' ({error})") from None
    return plt


def plot_panels(path, panels, title=None, width=5.0):
    """Draw ``panels`` side by side and write the PNG atomically to ``path`` (the one plotting helper).

    Each panel is a dict: ``title``, ``xlabel``, ``curves`` (a list of ``(x, y, label)``; label None: no
    legend entry), optional ``yscale`` ("log"), ``hlines`` (a list of ``(y, label)``, dashed), ``ylabel``,
    ``ylim`` (a pair) and ``marker`` (the curves' point marker, e.g. ".").
    """
    plt = require_plotting()
    figure, axes = plt.subplots(1, len(panels), figsize=(width * len(panels), 3.5), squeeze=False)
    for axis, panel in zip(axes[0], panels):
        for x, y, label in panel["curves"]:
            axis.plot(x, y, label=label, marker=panel.get("marker"))
        for y, label in panel.get("hlines", ()):
            axis.axhline(y, color="gray", linestyle="--", label=label)
        if panel.get("yscale"):
            axis.set_yscale(panel["yscale"])
        axis.set_title(panel.get("title", ""))
        axis.set_xlabel(panel.get("xlabel", ""))
        if panel.get("ylabel"):
            axis.set_ylabel(panel["ylabel"])
        if panel.get("ylim"):
            axis.set_ylim(*panel["ylim"])
        if any(label for _, _, label in panel["curves"]) or panel.get("hlines"):
            axis.legend()
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    plt.close(figure)
    write_atomic(path, buffer.getvalue(), mode="wb")


@dataclasses.dataclass
class Result:
    status: str       # how the run ended: one of STATUSES; the detail in info["stop"]
    history: dict     # per-iteration columns (lists of equal length)
    timings: dict     # seconds
    info: dict        # the problem, the settings, the ranks, what the method measured

    # A subclass names the field holding its answer ("x", "params"), which ``solution`` reads, and has an
    # ``iterations``: a field, or a property over its own count (steps, rounds).
    SOLUTION = None

    @property
    def solution(self):
        """The answer: ``x`` of a solve, ``params`` of training or a federation."""
        return getattr(self, self.SOLUTION)

    def plot_panels(self):
        """The panels of :func:`plot_panels` that show this result (a subclass gives its curves)."""
        raise NotImplementedError(f"{type(self).__name__} has no plot")

    def plot(self, path, title=None):
        """The result's curves in one figure, written as PNG to ``path`` (needs matplotlib)."""
        plot_panels(path, self.plot_panels(), title)

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
