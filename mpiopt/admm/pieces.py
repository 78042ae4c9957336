"""How the ADMM front ends read the options the losses, penalties and x-solvers declare.

Each piece declares its options once (:mod:`mpiopt.core.options`); the front
ends (``solve``, ``Problem``, ``regularization_path``, the lasso family, the
estimators) never list them.  A keyword of a front end goes, in this order, to

1. the ADMM settings, when it names one (``rho``, ``max_iter``, ...);
2. the chosen penalty, when it declares it (``lam``, ``l1_ratio``, ``groups``,
   ``lower``, ``upper``, a user's ``gamma``);
3. the chosen loss, when it declares it (``delta``, ``x_solver``);

and one that only other registered penalties or losses declare is not this
problem's and is left out, as it always was (the command line passes
``l1_ratio``, ``lower``, ``delta``, ... whatever the penalty and loss).  The
same options may be given as a dict, ``penalty_options={"gamma": 3}`` and
``loss_options={"delta": 0.5}``; there an option the piece does not declare is
an error naming the options it takes, and an option given both ways is an
error too.  A piece with a name clashing with a setting takes it through its
``*_options`` dict only.
"""
from ..core.options import NO_OPTIONS, Option
from ..core.registry import names, options, unknown

# the penalties' weight, in the words users, scripts and tests already know (``lam must be a finite number >= 0,
# got -1.0``)
LAM = Option("lam", float, None, "the penalty's weight; None: give lam_ratio (lam over lambda_max) instead",
             low=0, message="{name} must be a finite number >= 0, got {value!r}")


def declared_of(kind, name):
    """The declared options of the registered ``kind`` ``name`` (``registry.options``); none for an unknown
    name or an object (a Penalty instance, which carries its values)."""
    if not isinstance(name, str) or unknown(kind, name):
        return NO_OPTIONS
    return options(kind, name)


def every_option(kind):
    """The names that some registered piece of ``kind`` declares."""
    return {option for name in names(kind) for option in options(kind, name)}


def split_keywords(keywords, settings, *, penalty=None, loss=None):
    """(penalty options, loss options, the other keywords) of a front end's ``keywords``, read from the
    declarations of the chosen ``penalty`` and ``loss`` (names; None: not this front end's) and the
    ``settings`` names (see the module docstring)."""
    penalty_names = declared_of("penalty", penalty) if penalty is not None else NO_OPTIONS
    loss_names = declared_of("loss", loss) if loss is not None else NO_OPTIONS
    others = (every_option("penalty") if penalty is not None else set()) | (
        every_option("loss") if loss is not None else set())
    penalty_values, loss_values, rest = {}, {}, {}
    for key, value in keywords.items():
        if key in settings:
            rest[key] = value
        elif key in penalty_names:
            penalty_values[key] = value
        elif key in loss_names:
            loss_values[key] = value
        elif key not in others:
            rest[key] = value
    return penalty_values, loss_values, rest


def merge(kind, keywords, given):
    """(the options from ``keywords`` and the ``given`` dict together, a problem or None): ``given`` must be
    a dict, and no option may come both ways."""
    if given is None:
        return dict(keywords), None
    if not isinstance(given, dict) or not all(isinstance(key, str) for key in given):
        return dict(keywords), f"{kind}_options must be a dict of option names to values, got {given!r}"
    twice = [key for key in given if key in keywords]
    if twice:
        return dict(keywords), (f"{', '.join(twice)} given twice: as a keyword and in {kind}_options; "
                                "give each option once")
    return {**keywords, **given}, None
