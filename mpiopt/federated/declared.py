"""A federated piece built from its declared options: the declaration checks them, fills the defaults, keeps them.

Strategies, hooks and attacks declare their options once (``options =
Options(Option(...), ...)``, :mod:`mpiopt.core.options`): name, type, default,
range and help.  ``run_federated`` checks a piece's ``*_options`` against the
declaration before building it (in the declaration's words: ``strategy
'fedprox': mu must be a float >= 0, got -1``); the constructor calls
:meth:`~mpiopt.core.options.Declared.take_options`, which checks them
against the same declaration, completes them with its defaults and keeps each
one as an attribute of its name, so a piece built directly (``FedProx(mu=0.1)``,
``get_strategy("fedprox", mu=0.1)``) and one built by name are the same.
A constructor refuses in the words the pieces' constructors have always used
(``fedprox: mu must be a number >= 0, got -1``: a number, an integer), which
scripts already read; the declaration still decides.
"""
from ..core.options import Declared


class DeclaredPiece(Declared):
    """A federated piece: :meth:`~mpiopt.core.options.Declared.take_options` builds it from its declaration,
    refusing in the federated constructors' words (:meth:`options_problem`)."""

    @classmethod
    def options_problem(cls, values, options=None):
        """The declaration's first refusal of ``values``, worded ``{name}: ...`` as the constructors word it."""
        declared = cls.options if options is None else options
        for name, option in declared.items():
            refusal = option.problem(values[name]) if name in values else None
            if refusal is not None:
                if option.message is None:
                    refusal = refusal.replace(" a float", " a number", 1).replace(
                        " a finite float", " a finite number", 1).replace(" an int", " an integer", 1)
                return f"{cls.name}: {refusal}"
        return None

    def option_values(self):
        """The declared options' values, in declaration order (in the checkpoint's fingerprint and the result's
        info)."""
        return {name: getattr(self, name, None) for name in type(self).options}

