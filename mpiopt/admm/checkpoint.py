"""ADMM's checkpoints on the core checkpointer (mpiopt.core.checkpoint).

Shared arrays: z and the last plain iterate z_plain.  Per rank: u_i, x_i, the
loss shard's x-step warm start (``loss_*``) and Anderson's memory (``aa_*``).
Metadata: rho, the iteration, the status with the rule that stopped it
(``stop``; a file written before it had one reads as "tolerances"), the
residual and objective histories, the rho changes.  The fingerprint (``Problem.fingerprint``) holds,
for each rank, its rows, the columns, the loss and its parameters, the
intercept, the penalty with every parameter at full precision (floats as exact
JSON numbers, arrays such as group labels by their SHA-256) and a SHA-256 of
the shard, so a checkpoint of a slightly different problem is refused.
Before restoring, rank 0 checks that every array fits the problem: lengths n
for z, z_plain, u_i and x_i, and Anderson memory of 2n columns with the same
shape on every rank (its Gram matrix is all-reduced).
"""
from ..core.checkpoint import Checkpointer

FORMAT = "mpiopt-admm-checkpoint-2"  # 2: exact problem parameters in the fingerprint
META = ("rho", "iteration", "status", "stop", "previous_residuals", "rho_changes", "history", "objective_history")
OPTIONAL = ("status", "stop")  # older files may lack them
ANDERSON_WIDE = ("aa_residuals", "aa_images", "aa_previous_residual", "aa_previous_image")


def admm_checkpointer(path, comm, fingerprint):
    return Checkpointer(path, comm, fingerprint, FORMAT, "ADMM")


def split_state(state):
    """The engine's state as (shared arrays, this rank's arrays, metadata)."""
    shared = {"z": state["z"], "z_plain": state["z_plain"]}
    mine = {"u": state["u"], "x": state["x"], **{f"loss_{key}": value for key, value in state["loss"].items()},
            **{f"aa_{key}": value for key, value in state["anderson"].items()}}
    meta = {key: state[key] for key in META}
    meta["previous_residuals"] = list(meta["previous_residuals"])
    return shared, mine, meta


def join_state(shared, mine, meta):
    """The inverse of split_state."""
    return dict(meta, z=shared["z"], z_plain=shared["z_plain"], u=mine["u"], x=mine["x"],
                loss={key[len("loss_"):]: value for key, value in mine.items() if key.startswith("loss_")},
                anderson={key[len("aa_"):]: value for key, value in mine.items() if key.startswith("aa_")})


def validator(n):
    """A check, run on rank 0 before anything is restored, that the file's arrays fit a problem of n columns."""
    def validate(shared, parts, meta):
        missing = [key for key in META if key not in OPTIONAL and key not in meta]
        missing += [key for key in ("z", "z_plain") if key not in shared]
        missing += [f"rank{rank}_{key}" for rank, part in enumerate(parts) for key in ("u", "x") if key not in part]
        if missing:
            raise ValueError(f"entries {', '.join(missing)} are missing")
        wrong = [key for key in ("z", "z_plain") if shared[key].shape != (n,)]
        wrong += [f"rank{rank}_{key}" for rank, part in enumerate(parts) for key in ("u", "x")
                  if part[key].shape != (n,)]
        if wrong:
            raise ValueError(f"arrays {', '.join(wrong)} do not have {n} entries")
        for key in sorted({key for part in parts for key in part if key.startswith("aa_")}):
            shapes = [part[key].shape if key in part else None for part in parts]
            if len(set(shapes)) != 1:
                raise ValueError(f"the ranks' {key} arrays have different shapes {shapes}")
            if key in ANDERSON_WIDE and shapes[0][-1] != 2 * n:
                raise ValueError(f"{key} has shape {shapes[0]}, expected {2 * n} columns")
    return validate
