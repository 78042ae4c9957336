"""Federated learning on MPI: ``run_federated(model, clients, strategy="fedavg", comm=None, **settings)``.

K virtual clients (K >> ranks; client k on rank k % p) train locally from
the global model each round; a registered strategy (FedAvg/FedAvgM, FedSGD,
FedProx, FedNova) combines their updates, the same bit for bit at any rank
count.  Faults (dropouts, stragglers, failing clients), checkpoints at round
boundaries, per-round metrics.  Every strategy, partitioner and hook declares
its options (``registry.options(kind, name)``).  See docs/federated.md.

================  ==================================================================
``strategy.py``   the Strategy base (configure_fit, local objective, aggregate_fit)
``strategies.py`` FedAvg, FedSGD, FedProx, FedNova, registered as kind "strategy"
``client.py``     one client's local training
``runner.py``     the rounds: sampling, faults, the all-gather, hooks, checkpoints, log
``hooks.py``      DPHook, SecureAggregationHook, registered as kind "hook" ("dp", "secure_aggregation")
``partition.py``  iid, pathological, dirichlet, quantity (kind "partition")
``synthetic.py``  FedProx's Synthetic(alpha, beta)
``settings.py``   ``FederatedSettings``;  ``result.py``: ``FederatedResult``
================  ==================================================================
"""
from .partition import partition, split_clients
from .result import FederatedResult
from .runner import run_federated
from .settings import FederatedSettings
from .strategies import FedAvg, FedNova, FedProx, FedSGD, get_strategy
from .strategy import ClientRound, ClientUpdate, Instructions, RunInfo, Strategy
from .synthetic import synthetic_clients

__all__ = ["ClientRound", "ClientUpdate", "Instructions", "RunInfo", "FedAvg", "FedNova", "FedProx", "FedSGD", "FederatedResult", "FederatedSettings",
           "Strategy", "get_strategy", "partition", "run_federated", "split_clients", "synthetic_clients"]

from .hooks import DPHook, Hook, SecureAggregationHook  # noqa: E402 (the hook base; privacy and secure aggregation)

__all__ += ["DPHook", "Hook", "SecureAggregationHook"]
from .fedbuff import FedBuffSettings, run_fedbuff, staleness_weight  # noqa: E402
# the strategies on the channel, one module each (importing registers them)
from .scaffold import Scaffold  # noqa: E402
from .feddyn import FedDyn  # noqa: E402
from .fedopt import FedAdagrad, FedAdam, FedYogi  # noqa: E402
from .robust import Bulyan, Krum, Median, MultiKrum, TrimmedMean  # noqa: E402
from .fedadmm import FedADMM  # noqa: E402

__all__ += ["Bulyan", "FedADMM", "FedAdagrad", "FedAdam", "FedDyn", "FedYogi", "Krum", "Median", "MultiKrum",
            "Scaffold", "TrimmedMean"]

__all__ += ["FedBuffSettings", "run_fedbuff", "staleness_weight"]
