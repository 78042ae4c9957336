"""``python -m mpiopt``: see :mod:`mpiopt.cli`."""
import sys

from .cli import main

sys.exit(main())
