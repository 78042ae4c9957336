"""Federated learning on MPI: ``run_federated(model, clients, strategy="fedavg", comm=None, **settings)``.

K virtual clients (K >> ranks; client k on rank k % p) train locally from
the global model each round; a registered strategy combines their updates,
the same bit for bit at any rank count.  The channel between the two
(:mod:`.strategy`): the strategy's instructions to each client, named uploads
and metrics back, client state kept on the client's rank and checkpointed.
Faults (dropouts, stragglers, failing clients, Byzantine clients),
compressed uploads, checkpoints at round boundaries, per-round metrics.
Every strategy, partitioner, hook and attack declares its options
(``registry.options(kind, name)``).  See docs/federated.md.

===================  ===============================================================
``strategy.py``      the Strategy base, the channel (Instructions, ClientRound, Layout)
``aggregate.py``     the arithmetic: weighted means and sums, median, trimmed mean, Krum, Bulyan
``declared.py``      a piece's options from its declaration (checked, defaults filled, kept)
``strategies.py``    FedAvg (FedAvgM), FedSGD, FedProx, FedNova
``scaffold.py``      SCAFFOLD;  ``feddyn.py``: FedDyn;  ``fedadmm.py``: federated ADMM
``fedopt.py``        FedAdagrad, FedAdam, FedYogi (the server optimizers)
``robust.py``        median, trimmed mean, Krum, multi-Krum, Bulyan
``fedbuff.py``       FedBuff, FedAsync (asynchronous)
``client.py``        one client's local training; the clients' state on a rank
``runner.py``        the rounds: sampling, faults, the all-gather, hooks, checkpoints, log
``asynchronous.py``  the same for the asynchronous strategies, on the parameter server
``attacks.py``       Byzantine clients and their attacks (kind "attack")
``uplink.py``        compressed uploads with error feedback or EF21
``hooks.py``         the Hook base; DPHook, SecureAggregationHook (kind "hook")
``partition.py``     iid, pathological, dirichlet, quantity (kind "partition")
``synthetic.py``     FedProx's Synthetic(alpha, beta)
``settings.py``      ``FederatedSettings``;  ``result.py``: ``FederatedResult``
===================  ===============================================================
"""
from .partition import partition, split_clients
from .result import FederatedResult
from .runner import run_federated
from .settings import FederatedSettings
from .strategies import FedAvg, FedNova, FedProx, FedSGD, get_strategy
from .strategy import ClientRound, ClientUpdate, Instructions, RunInfo, Strategy
from .synthetic import synthetic_clients

__all__ = ["ClientRound", "ClientUpdate", "Instructions", "RunInfo", "FedAvg", "FedNova", "FedProx", "FedSGD",
           "FederatedResult", "FederatedSettings",
           "Strategy", "get_strategy", "partition", "run_federated", "split_clients", "synthetic_clients"]

from .hooks import DPHook, Hook, SecureAggregationHook  # noqa: E402 (the hook base; privacy and secure aggregation)

__all__ += ["DPHook", "Hook", "SecureAggregationHook"]
from .fedbuff import FedAsync, FedBuff, run_fedbuff, staleness_weight  # noqa: E402
# the strategies on the channel, one module each (importing registers them)
from .scaffold import Scaffold  # noqa: E402
from .feddyn import FedDyn  # noqa: E402
from .fedopt import FedAdagrad, FedAdam, FedYogi  # noqa: E402
from .robust import Bulyan, Krum, Median, MultiKrum, TrimmedMean  # noqa: E402
from .fedadmm import FedADMM  # noqa: E402

__all__ += ["Bulyan", "FedADMM", "FedAdagrad", "FedAdam", "FedDyn", "FedYogi", "Krum", "Median", "MultiKrum",
            "Scaffold", "TrimmedMean"]

__all__ += ["FedAsync", "FedBuff", "run_fedbuff", "staleness_weight"]
