"""The model and the optimizer of a training run, given as objects or by registered name with their options.

``train("mlp", X, y, "adam", model_options={"hidden": (32,), "n_classes": 10},
optimizer_options={"lr": 1e-3})`` builds them on every rank through their
declarations (:func:`mpiopt.models.get_model`, :func:`mpiopt.optim.get_optimizer`):
a model that declares ``n_features`` and is not given it gets the columns of
``X``.  What is wrong (an unknown name, an undeclared option, a bad value)
is one line, which the trainer's collective check raises on every rank.
"""
from ..core import registry
from ..models import get_model, model_problem
from ..optim import get_optimizer, optimizer_problem


def _named(kind, piece, options, problem_of, build, defaults):
    """(the piece, the problem or None) for ``piece`` (an object, or a registered name built with ``options``)."""
    if not isinstance(piece, str):
        return piece, (None if options is None else f"{kind}_options need the {kind} by name, got {piece!r}")
    if options is not None and not isinstance(options, dict):
        return None, f"{kind}_options must be a dict or None, got {options!r}"
    options = dict(options or {})
    if registry.unknown(kind, piece) is None:
        declared = registry.options(kind, piece)
        options.update({name: value for name, value in defaults.items() if name in declared and name not in options})
    problem = problem_of(piece, options)
    return (None, f"{kind}_options: {problem}") if problem else (build(piece, **options), None)


def named_pieces(model, model_options, optimizer, optimizer_options, X):
    """(model, optimizer, problem): each built when given by name (see the module docstring)."""
    shape = getattr(X, "shape", ())
    model, model_problem_found = _named("model", model, model_options, model_problem, get_model,
                                        {"n_features": shape[1]} if len(shape) == 2 else {})
    optimizer, optimizer_problem_found = _named("optimizer", optimizer, optimizer_options, optimizer_problem,
                                                get_optimizer, {})
    return model, optimizer, model_problem_found or optimizer_problem_found
