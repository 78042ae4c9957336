"""The methods of heterogeneous-worker SGD, one module each (registry kind ``asyncsgd-method``).

Each module opens with its paper and its time, declares its options and
builds itself from them (:class:`..base.Method`); the runtimes read what it
declares and never its name.  Registered in this order, the comparison's
(slowest theory first): ``--method all`` and the docs' tables.

    minibatch     Minibatch SGD: one synchronous step on every worker's gradient
    asgd          Asynchronous SGD (Koloskova et al.; Mishchenko et al., NeurIPS 2022): a step per gradient
    rennala       Rennala SGD (Tyurin and Richtarik, NeurIPS 2023): a step once B gradients of x_k are in; optimal
    ringmaster    Ringmaster ASGD (Maranjyan, Tyurin and Richtarik, ICML 2025): ASGD that drops delays >= R; optimal
    malenia       Malenia SGD (Tyurin and Richtarik, NeurIPS 2023): Rennala's idea for heterogeneous data f_i
    mindflayer    MindFlayer SGD (Maranjyan, Shaikh Omar and Richtarik, UAI 2025): attempts cut off at a budget
    shadowheart   Shadowheart SGD (Tyurin et al., NeurIPS 2024): compressed uploads at the equilibrium time
    freya-page    Freya PAGE (Tyurin, Gruntkowska and Richtarik, NeurIPS 2024): optimal for finite sums
    soviet-page   Soviet PAGE (the same paper): Freya PAGE's synchronous baseline, work split evenly
    amelie        Amelie SGD (Tyurin and Richtarik, NeurIPS 2024): Malenia's rounds on a graph, around a pivot
    fragile       Fragile SGD (Tyurin and Richtarik, NeurIPS 2024): Rennala's rounds on a graph, around a pivot
"""
from ...core.registry import lookup, names
from .minibatch import MinibatchSGD
from .asgd import AsynchronousSGD
from .rennala import RennalaSGD
from .ringmaster import RingmasterASGD
from .malenia import MaleniaSGD
from .mindflayer import MindFlayerSGD
from .shadowheart import ShadowheartSGD
from .freya import FreyaPAGE
from .soviet_page import SovietPAGE
from .amelie import AmelieSGD
from .fragile import FragileSGD



def available(settings=None, problem=None):
    """The registered methods in registration order; with ``settings`` (an AsyncSGDSettings) and ``problem``
    (a name or a Problem), those that can run with them (``Method.unavailable``: Shadowheart needs upload
    times, Freya PAGE a finite sum, Fragile and Amelie a graph)."""
    found = names("asyncsgd-method")
    if settings is None:
        return found
    return [name for name in found if lookup("asyncsgd-method", name).unavailable(settings, problem) is None]


__all__ = ["available", "AmelieSGD", "AsynchronousSGD", "FragileSGD", "FreyaPAGE", "MaleniaSGD", "MindFlayerSGD", "MinibatchSGD",
           "RennalaSGD", "RingmasterASGD", "ShadowheartSGD", "SovietPAGE"]
