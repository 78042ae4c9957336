"""Settings of a federated run, validated once on every rank (mpiopt.core.settings).

Defaults live here and nowhere else; they are McMahan et al.'s usual
choices scaled to small data (C = 0.1, E = 1, B = 10).  ``client_sampling``
is how the C share is drawn each round: "fixed" (the default) samples exactly
max(1, round(C K)) of the K clients without replacement; "poisson" includes
each client independently with probability C (McMahan et al. 2018's DP-FedAvg,
whose accountant assumes it), so a round has C K clients on average and may
have none.
"""
import dataclasses

from ..collectives import REDUCERS, Reducer
from ..core.settings import Settings, checkpoint_and_log_checks, is_integer, is_number
from .uplink import FEEDBACKS as UPLINK_FEEDBACKS

CLIENT_SAMPLINGS = ("fixed", "poisson")


def _names(kind):
    from ..core.registry import names
    return lambda: names(kind)


def local_training_checks(settings):
    """The checks of the settings every client's local training reads (synchronous and asynchronous runs)."""
    number, integer, s = is_number, is_integer, settings
    return [
        (integer(s.local_epochs) and s.local_epochs >= 1, f"local_epochs must be an integer >= 1, got {s.local_epochs!r}"),
        (s.batch_size is None or (integer(s.batch_size) and s.batch_size >= 1),
         f"batch_size must be None or an integer >= 1, got {s.batch_size!r}"),
        (number(s.lr) and s.lr > 0, f"lr must be a number > 0, got {s.lr!r}"),
        (number(s.momentum) and s.momentum >= 0, f"momentum must be a number >= 0, got {s.momentum!r}"),
        (integer(s.seed) and s.seed >= 0, f"seed must be an integer >= 0, got {s.seed!r}"),
    ]


@dataclasses.dataclass(frozen=True)
class FederatedSettings(Settings):
    label = "federated"
    choices = {"client_sampling": CLIENT_SAMPLINGS, "reducer": lambda: list(REDUCERS), "attack": _names("attack"),
               "compressor": _names("compressor"), "uplink_feedback": UPLINK_FEEDBACKS}

    rounds: int = 10               # communication rounds (counted from the first run when resumed); the server's
                                   # steps for an asynchronous strategy (FedBuff, FedAsync)
    fraction: float = 0.1          # C: the share of the K clients sampled each round
    client_sampling: str = "fixed"  # "fixed": max(1, round(C K)) of the K; "poisson": each client with probability C
                                   # (DP-FedAvg's accounting: Poisson, add or remove one client; use it with DP)
    local_epochs: int = 1          # E: passes over its rows a client makes each round
    batch_size: int = 10           # B: rows per local step; None: all of a client's rows
    lr: float = 0.01               # the clients' SGD learning rate
    momentum: float = 0.0          # the clients' SGD momentum (reset every round)
    seed: int = 0                  # sampling, dropouts, stragglers, local minibatch orders
    dropout: float = 0.0           # p: each sampled client drops out of a round with this probability
    stragglers: float = 0.0        # share of the sampled clients that run a random 1..E local epochs
    tolerate_failures: bool = False  # a client whose training raises is left out (True) or ends the run
    byzantine: float = 0.0         # share of the K clients that are Byzantine (drawn once from the seed): their
                                   # deltas are forged by the attack after the gather
    attack: str = "sign_flip"      # the Byzantine clients' attack (kind "attack"; its options: attack_options)
    compressor: str = "none"       # the uploads' compressor (kind "compressor"; its options: compressor_options)
    uplink_feedback: str = "auto"  # compressed uploads: "ef" (error feedback), "ef21", "none", or "auto" (ef for
                                   # the biased compressors, none for the unbiased)
    reducer: str = "mpi"           # a registered reducer name or a Reducer: moves the client updates
    client_delays: tuple = None    # seconds client k sleeps after training (emulated slow devices); None: 0
    idle_timeout: float = None     # asynchronous strategies: the server gives up after this many silent seconds
    eval_every: int = 1            # rounds between test evaluations (and the last round)
    checkpoint: str = None         # npz path, written at round boundaries; resumed from when it exists
    checkpoint_every: int = 0      # rounds between checkpoints (0: at the end and on SIGUSR1/SIGTERM only)
    verbose: bool = False          # the round log on rank 0
    log_every: int = 1             # with verbose, a log row every this many rounds

    def checks(self):
        number, integer = is_number, is_integer
        return [
            (integer(self.rounds) and self.rounds >= 0, f"rounds must be an integer >= 0, got {self.rounds!r}"),
            (number(self.fraction) and 0 < self.fraction <= 1, f"fraction must be in (0, 1], got {self.fraction!r}"),
            (self.client_sampling in CLIENT_SAMPLINGS,
             f"client_sampling must be one of {', '.join(CLIENT_SAMPLINGS)}, got {self.client_sampling!r}"),
            *local_training_checks(self),
            (number(self.dropout) and 0 <= self.dropout < 1, f"dropout must be in [0, 1), got {self.dropout!r}"),
            (number(self.stragglers) and 0 <= self.stragglers <= 1,
             f"stragglers must be in [0, 1], got {self.stragglers!r}"),
            (isinstance(self.tolerate_failures, bool),
             f"tolerate_failures must be True or False, got {self.tolerate_failures!r}"),
            (number(self.byzantine) and 0 <= self.byzantine < 1, f"byzantine must be in [0, 1), got {self.byzantine!r}"),
            (self.attack in self.choices["attack"](), lambda: f"attack must be one of "
             f"{', '.join(self.choices['attack']())}, got {self.attack!r}"),
            (self.compressor in self.choices["compressor"](), lambda: f"compressor must be one of "
             f"{', '.join(self.choices['compressor']())}, got {self.compressor!r}"),
            (self.uplink_feedback in UPLINK_FEEDBACKS,
             f"uplink_feedback must be one of {', '.join(UPLINK_FEEDBACKS)}, got {self.uplink_feedback!r}"),
            (isinstance(self.reducer, Reducer) or self.reducer in REDUCERS,
             lambda: f"reducer must be one of {', '.join(REDUCERS)} or a Reducer, got {self.reducer!r}"),
            (self.client_delays is None or (isinstance(self.client_delays, tuple)
                                            and all(number(d) and d >= 0 for d in self.client_delays)),
             f"client_delays must be None or a sequence of seconds >= 0, got {self.client_delays!r}"),
            (self.idle_timeout is None or (number(self.idle_timeout) and self.idle_timeout > 0),
             f"idle_timeout must be None or a number > 0, got {self.idle_timeout!r}"),
            (integer(self.eval_every) and self.eval_every >= 1,
             f"eval_every must be an integer >= 1, got {self.eval_every!r}"),
            *checkpoint_and_log_checks(self),
        ]
