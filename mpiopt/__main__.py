"""``python -m mpiopt`` and the ``mpiopt`` script: see :mod:`mpiopt.cli`.

The signal handlers go in before anything else is imported (the subcommands, numpy, MPI), so a signal sent
to a rank while the job starts waits for the run's first iteration instead of killing the rank.
"""
import sys

from .core import signals


def main():
    signals.catch()
    from .cli import main as command_line
    return command_line()


if __name__ == "__main__":
    sys.exit(main())
