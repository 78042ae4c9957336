"""Adam, and its AMSGrad variant: PyTorch's ``torch.optim.Adam`` (Kingma and Ba 2015; Reddi et al. 2018).

With learning rate gamma, betas (beta1, beta2), eps and weight decay lambda,
step t (from 1) does, as PyTorch documents and implements it:

    g_t = grad + lambda theta_{t-1}                         (when lambda != 0: L2, not AdamW's decoupled decay)
    m_t = beta1 m_{t-1} + (1 - beta1) g_t
    v_t = beta2 v_{t-1} + (1 - beta2) g_t^2
    vmax_t = max(vmax_{t-1}, v_t)                           (AMSGrad; then v_t is replaced by vmax_t below)
    theta_t = theta_{t-1} - (gamma / (1 - beta1^t)) m_t / (sqrt(v_t) / sqrt(1 - beta2^t) + eps)

the last line being PyTorch's arrangement of m^_t / (sqrt(v^_t) + eps) with
the bias corrections m^_t = m_t / (1 - beta1^t), v^_t = v_t / (1 - beta2^t).
State: ``exp_avg`` (m), ``exp_avg_sq`` (v) and, with AMSGrad,
``max_exp_avg_sq`` (vmax).  Cost per step: a few passes over the vector.
"""
import math

from ..core.backend import get_array_module
from ..core.registry import register
from ..core.options import Option, Options
from .base import Optimizer, flag_option, in_range, number_option


@register("optimizer", "adam")
class Adam(Optimizer):
    name = "adam"
    HYPERPARAMETERS = ("lr", "beta1", "beta2", "eps", "weight_decay")
    FLAGS = ("amsgrad",)
    options = Options(
        number_option("lr", 1e-3, "learning rate gamma"),
        Option("betas", object, (0.9, 0.999), "(beta1, beta2), each in [0, 1): the moments' decay rates"),
        number_option("eps", 1e-8, "added to the denominator"),
        number_option("weight_decay", 0.0, "L2 weight decay lambda, added to the gradient (not AdamW's)"),
        flag_option("amsgrad", False, "AMSGrad: the running maximum of the second moment"))

    def __init__(self, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, amsgrad=False):
        try:
            beta1, beta2 = betas
        except (TypeError, ValueError):
            raise ValueError(f"adam: betas must be a pair (beta1, beta2), got {betas!r}") from None
        super().__init__(lr=lr, beta1=beta1, beta2=beta2, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad)

    @property
    def betas(self):
        return self.beta1, self.beta2

    def problems(self):
        return [
            (in_range(self.beta1, 0.0, 1.0), f"beta1 must be a number in [0, 1), got {self.beta1!r}"),
            (in_range(self.beta2, 0.0, 1.0), f"beta2 must be a number in [0, 1), got {self.beta2!r}"),
        ]

    def state_names(self):
        return ("exp_avg", "exp_avg_sq") + (("max_exp_avg_sq",) if self.amsgrad else ())

    def update(self, params, grad):
        if self.weight_decay:
            grad = grad + self.weight_decay * params
        xp = get_array_module(params)
        exp_avg, exp_avg_sq = self.state["exp_avg"], self.state["exp_avg_sq"]
        exp_avg *= self.beta1
        exp_avg += (1.0 - self.beta1) * grad
        exp_avg_sq *= self.beta2
        exp_avg_sq += (1.0 - self.beta2) * (grad * grad)
        if self.amsgrad:
            second_moment = xp.maximum(self.state["max_exp_avg_sq"], exp_avg_sq, out=self.state["max_exp_avg_sq"])
        else:
            second_moment = exp_avg_sq
        denominator = xp.sqrt(second_moment)
        denominator /= math.sqrt(1.0 - self.beta2 ** self.steps)
        denominator += self.eps
        params -= (self.lr / (1.0 - self.beta1 ** self.steps)) * (exp_avg / denominator)
