"""SGD with heterogeneous workers: one engine, two runtimes, one timing model, and the methods beside them.

When workers compute at different speeds a synchronous step waits for the
slowest.  These methods differ in how they use the fast workers and what they
do with stale gradients; their times to an epsilon-stationary point are known
(:mod:`.theory`, and each method's own).  The same method code runs on two
runtimes::

    from mpiopt.asyncsgd import async_sgd, predicted_times
    result = async_sgd("worst-case", method="ringmaster", runtime="simulator", n_workers=1000, tau="sqrt")
    result = async_sgd("logistic", method="rennala", runtime="mpi")        # under mpiexec: rank 0 serves

The methods (:mod:`.methods`, one module each; registry kind ``asyncsgd-method``):

* ``minibatch``: Minibatch SGD; one synchronous step on every worker's gradient.
* ``asgd``: Asynchronous SGD (Koloskova, Stich and Jaggi; Mishchenko et al., NeurIPS 2022); a step per
  arriving gradient, delay-adaptive by default.
* ``rennala``: Rennala SGD (Tyurin and Richtarik, NeurIPS 2023); a step once B gradients computed at x_k
  are in; optimal.
* ``ringmaster``: Ringmaster ASGD (Maranjyan, Tyurin and Richtarik, ICML 2025); Asynchronous SGD that
  discards delays of R or more; optimal.
* ``malenia``: Malenia SGD (Tyurin and Richtarik, NeurIPS 2023); Rennala's idea for heterogeneous data f_i.
* ``mindflayer``: MindFlayer SGD (Maranjyan, Shaikh Omar and Richtarik, UAI 2025); attempts given up after a
  budget, for heavy-tailed compute times.
* ``shadowheart``: Shadowheart SGD (Tyurin, Pozzi, Ilin and Richtarik, NeurIPS 2024); Random-K compressed
  uploads planned at the equilibrium time; optimal under communication costs.
* ``freya-page``: Freya PAGE (Tyurin, Gruntkowska and Richtarik, NeurIPS 2024); PAGE's estimator for finite
  sums, collecting from whoever is fast.
* ``soviet-page``: Soviet PAGE (the same paper); Freya PAGE's synchronous baseline, each phase split evenly.
* ``amelie``: Amelie SGD (Tyurin and Richtarik, NeurIPS 2024); Malenia's rounds on a graph, around a pivot.
* ``fragile``: Fragile SGD (Tyurin and Richtarik, NeurIPS 2024); Rennala's rounds on a graph, around a pivot.

The rest: :mod:`.api` (``async_sgd``: the collective set-up), :mod:`.base`
(what a method is), :mod:`.engine` (the loop), the runtimes :mod:`.simulator`
(a virtual clock, thousands of workers on one core; under mpiexec rank 0
simulates) and :mod:`.mpi` (rank 0 runs the method, ranks 1.. compute, on
nonblocking point-to-point; :mod:`.routes` on a graph), :mod:`.runner` (what
both share: building, recording, the result), :mod:`.checkpoint`, and the
timing model: :mod:`.timing`, :mod:`.taus`, :mod:`.power`, :mod:`.graphs`,
:mod:`.treelinks`, :mod:`.jobs`, :mod:`.uploads`; problems (``asyncsgd-problem``):
:mod:`.problems`.  Settings: :class:`AsyncSGDSettings`.  docs/async_sgd.md
has the formulas, the tables and the plots.
"""
from .api import async_sgd, given_workers, make_timing
from .base import ALL, Accumulator, Method
from .graphs import Graph, get_graph, graph_workers
from .methods import available as available_methods
from .power import POWER_MODELS, PowerTrace, get_power_model
from .problems import PROBLEMS, ModelProblem, Problem, get_problem
from .result import AsyncSGDResult
from .settings import RUNTIMES, AsyncSGDSettings
from .simulator import EventQueue, simulate
from .taus import TAU_MODELS, FixedTaus, TauModel, get_tau_model
from .theory import default_batch, default_step_size, predicted_times
from .timing import LinkTimes, Timing

__all__ = ["ALL", "Accumulator", "AsyncSGDResult", "AsyncSGDSettings", "EventQueue", "FixedTaus", "Graph",
           "LinkTimes", "Method", "ModelProblem", "POWER_MODELS", "PROBLEMS", "PowerTrace", "Problem", "RUNTIMES",
           "TAU_MODELS", "TauModel", "Timing", "async_sgd", "available_methods", "default_batch",
           "default_step_size", "get_graph", "get_power_model", "get_problem", "get_tau_model", "given_workers",
           "graph_workers", "make_timing", "predicted_times", "simulate"]
