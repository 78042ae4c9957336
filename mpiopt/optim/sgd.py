"""Stochastic gradient descent with momentum, Nesterov momentum and weight decay: PyTorch's ``torch.optim.SGD``.

With learning rate gamma, momentum mu, dampening tau and weight decay lambda,
step t (from 1) does, as PyTorch documents it:

    g_t = grad + lambda theta_{t-1}                            (when lambda != 0)
    b_t = g_t                                 if t = 1         (when mu != 0)
        = mu b_{t-1} + (1 - tau) g_t          otherwise
    g_t = g_t + mu b_t  (Nesterov)  or  b_t                    (when mu != 0)
    theta_t = theta_{t-1} - gamma g_t

State: ``momentum_buffer`` (b) when mu != 0, else none.  Cost per step: a few
passes over the vector; one temporary array for the weight-decayed gradient.
Nesterov needs mu > 0 and tau = 0, as in PyTorch.
"""
from ..core.registry import register
from ..core.options import REQUIRED, Options
from .base import Optimizer, flag_option, number_option


@register("optimizer", "sgd")
class SGD(Optimizer):
    name = "sgd"
    HYPERPARAMETERS = ("lr", "momentum", "dampening", "weight_decay")
    FLAGS = ("nesterov",)
    options = Options(
        number_option("lr", REQUIRED, "learning rate gamma"),
        number_option("momentum", 0.0, "momentum mu (0: none)"),
        flag_option("nesterov", False, "Nesterov momentum (needs momentum > 0 and dampening 0)"),
        number_option("weight_decay", 0.0, "L2 weight decay lambda, added to the gradient"),
        number_option("dampening", 0.0, "dampening tau of the momentum", high=1))

    def __init__(self, lr, momentum=0.0, nesterov=False, weight_decay=0.0, dampening=0.0):
        super().__init__(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                         nesterov=nesterov)

    def problems(self):
        return [
            (lambda: not self.nesterov or (self.momentum > 0 and self.dampening == 0),
             f"Nesterov momentum needs momentum > 0 and dampening 0, got momentum={self.momentum!r}, "
             f"dampening={self.dampening!r}"),
        ]

    def state_names(self):
        return ("momentum_buffer",) if self.momentum else ()

    def update(self, params, grad):
        if self.weight_decay:
            grad = grad + self.weight_decay * params
        if self.momentum:
            buffer = self.state["momentum_buffer"]
            if self.steps == 1:
                buffer[...] = grad
            else:
                buffer *= self.momentum
                buffer += (1.0 - self.dampening) * grad
            grad = grad + self.momentum * buffer if self.nesterov else buffer
        params -= self.lr * grad
