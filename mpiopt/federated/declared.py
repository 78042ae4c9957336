"""A federated piece built from its declared options: the declaration checks them, fills the defaults, keeps them.

Strategies, hooks and attacks declare their options once (``options =
Options(Option(...), ...)``, :mod:`mpiopt.core.options`): name, type, default,
range and help.  ``run_federated`` checks a piece's ``*_options`` against the
declaration before building it (in the declaration's words: ``strategy
'fedprox': mu must be a float >= 0, got -1``); the constructor calls
:meth:`DeclaredPiece.take_options`, which checks them against the same
declaration, completes them with its defaults and keeps each one as an
attribute of its name, so a piece built directly (``FedProx(mu=0.1)``,
``get_strategy("fedprox", mu=0.1)``) and one built by name are the same.
A constructor refuses in the words the pieces' constructors have always used
(``fedprox: mu must be a number >= 0, got -1``: a number, an integer), which
scripts already read; the declaration still decides.
"""
from ..core.options import Declared


class DeclaredPiece(Declared):
    """A piece whose constructor takes its options from its ``options`` declaration (:meth:`take_options`)."""

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

    def take_options(self, args=(), values=None, *, complete=False, keep=True):
        """The options of ``args`` (positional, in declaration order) and ``values`` (by name), checked against
        ``type(self).options``, completed with its defaults, numbers as their declared type, and (with
        ``keep``) set as attributes; the dict of them in declaration order.  TypeError for an undeclared
        option (and, with ``complete``, a required one left out), ValueError for a value the declaration
        refuses."""
        declared, values = type(self).options, dict(values or {})
        if len(args) > len(declared):
            raise TypeError(f"{self.name} takes at most {len(declared)} options ({', '.join(declared)}), "
                            f"got {len(args)} positional values")
        for name, value in zip(declared, args):
            if name in values:
                raise TypeError(f"{self.name}: {name} given twice")
            values[name] = value
        message = declared.unknown(values, self.name)
        missing = [name for name, option in declared.items() if complete and option.required and name not in values]
        if message or missing:
            raise TypeError(message or f"{self.name} needs {', '.join(missing)}")
        message = type(self).options_problem(values)
        if message:
            raise ValueError(message)
        resolved = {}
        for name, option in declared.items():
            if name in values or not option.required:
                resolved[name] = _typed(option, values.get(name, option.default))
        if keep:
            for name, value in resolved.items():
                setattr(self, name, value)
        return resolved

    def option_values(self):
        """The declared options' values, in declaration order (in the checkpoint's fingerprint and the result's
        info)."""
        return {name: getattr(self, name, None) for name in type(self).options}


def _typed(option, value):
    """``value`` as the declared number type (an int given for a float is kept as a float), else as it is."""
    if value is None or option.choices is not None:
        return value
    if option.type is float:
        return float(value)
    if option.type is int:
        return int(value)
    return value
