"""A torch ``nn.Module`` as an mpiopt model: ``TorchModel(module, loss_fn)``.

mpiopt's trainers (``train()``, ``run_federated`` with every strategy, ``async_sgd``) move one flat float64
parameter vector and ask a model for the loss and gradient of a batch (:mod:`mpiopt.models.base`).
``TorchModel`` is that model for a module: its vector is the module's trainable parameters in
``module.parameters()`` order, each flattened (row-major, as ``tensor.reshape(-1)``), and

    loss_and_grad(params, X, y):  the vector written into the module's parameters (in their dtype), the
                                  forward pass on X, loss_fn(outputs, y), backward; the gradients, flattened in
                                  the same order, returned as a float64 vector

so a float32 module computes in float32 (its results rounded to float32, then widened), a float64 module in
float64.  ``X`` is a 2-D array of ``n_features`` columns (a module that wants images reshapes them itself,
``nn.Unflatten``), converted to the module's dtype; ``y`` integer labels in [0, n_classes) for a classifier
(``n_classes`` given; a LongTensor to ``loss_fn``), floats otherwise.  ``loss_fn(outputs, y)`` must return
the batch's mean loss as a scalar tensor (``torch.nn.functional.cross_entropy``, ``mse_loss``...); an empty
batch has a loss of 0 and a zero gradient, as every mpiopt model.  ``alpha`` adds mpiopt's L2 penalty
(alpha / 2 the squared norm of every parameter of two or more dimensions: the weights, not the biases).

``init_params(seed)`` is the module's own initialization: its parameters as they were when the TorchModel
was built (seed the module's construction with ``torch.manual_seed`` so that every rank builds the same),
whatever the seed.  ``TorchModel.load(solution)`` writes a solution vector back into the module.

On the command line ``--model torch:package.module:factory`` builds one from a user's factory, a callable
that returns a ``TorchModel`` (or ``(module, loss_fn)``, or ``(module, loss_fn, options)``).
"""
import importlib
import math

import numpy as np
import torch

from ..models.base import Model, count_problem


def _infer_features(module):
    for child in module.modules():
        if hasattr(child, "in_features"):
            return int(child.in_features)
    return None


class TorchModel(Model):
    """See the module docstring."""

    name = "torch"

    def __init__(self, module, loss_fn, n_features=None, n_classes=None, alpha=0.0):
        if not isinstance(module, torch.nn.Module):
            raise TypeError(f"module must be a torch.nn.Module, got {type(module).__name__}")
        if not callable(loss_fn):
            raise TypeError(f"loss_fn must be callable (outputs, y) -> a scalar tensor, got {loss_fn!r}")
        self.module, self.loss_fn = module, loss_fn
        self.tensors = [parameter for parameter in module.parameters() if parameter.requires_grad]
        if not self.tensors:
            raise ValueError(f"the module {type(module).__name__} has no parameters to train")
        kinds = {(parameter.dtype, parameter.device) for parameter in self.tensors}
        if len(kinds) > 1 or next(iter(kinds))[0] not in (torch.float32, torch.float64):
            raise ValueError(f"the module's parameters must share one dtype (float32 or float64) and device, "
                             f"got {sorted(map(str, kinds))}")
        self.dtype, self.device = next(iter(kinds))
        n_features = _infer_features(module) if n_features is None else n_features
        if n_features is None:
            raise ValueError("n_features: the module has no layer with in_features; give the number of "
                             "columns of X")
        problem = None if n_classes is None else count_problem("n_classes", n_classes, 2)
        if problem:
            raise ValueError(problem)
        super().__init__(n_features, [tuple(parameter.shape) for parameter in self.tensors], alpha)
        self.n_classes = n_classes
        self.penalized = [i for i, shape in enumerate(self.shapes) if len(shape) >= 2]  # the weights, not biases
        self._initial = self.flat_parameters()

    def __repr__(self):
        return (f"TorchModel({type(self.module).__name__}, n_features={self.n_features}, n_classes={self.n_classes}, "
                f"n_params={self.n_params}, dtype={str(self.dtype).replace('torch.', '')}, alpha={self.alpha})")

    def settings(self):
        return {"module": type(self.module).__name__, "n_features": self.n_features, "n_classes": self.n_classes,
                "n_params": self.n_params, "dtype": str(self.dtype), "alpha": self.alpha}

    # -- the flat vector ------------------------------------------------------------------------------------
    def flat_parameters(self):
        """The module's parameters now, as one float64 vector."""
        return np.concatenate([parameter.detach().cpu().double().reshape(-1).numpy()
                               for parameter in self.tensors])

    def load(self, params):
        """Write the flat vector ``params`` (numpy or CuPy, n_params entries) into the module's parameters."""
        return self._write(self.check_params(params))

    def _write(self, params):
        """``load`` of a vector already checked."""
        vector = torch.as_tensor(params, device=self.device).to(self.dtype)
        with torch.no_grad():
            start = 0
            for parameter, size in zip(self.tensors, self.sizes):
                parameter.copy_(vector[start:start + size].view_as(parameter))
                start += size
        return self.module

    def init_params(self, seed):
        return self._initial.copy()

    # -- the model interface ----------------------------------------------------------------------------------
    def _inputs(self, X):
        """Checked rows as a tensor of the module's dtype on its device."""
        return torch.as_tensor(np.ascontiguousarray(X), device=self.device).to(self.dtype)

    def _targets(self, y, rows):
        y = self.check_targets(np.asarray(y), rows)
        if self.n_classes is None:
            return torch.as_tensor(y, device=self.device).to(self.dtype)
        return torch.as_tensor(y.astype(np.int64), device=self.device)

    def _outputs(self, params, X):
        self.load(params)
        return self.module(self._inputs(self.check_inputs(X)))

    def loss_and_grad(self, params, X, y):
        params, X = self.check_params(params), self.check_inputs(X)
        targets = self._targets(y, X.shape[0])
        self._write(params)
        for parameter in self.tensors:
            parameter.grad = None
        if X.shape[0]:
            loss = self.loss_fn(self.module(self._inputs(X)), targets)
            if not isinstance(loss, torch.Tensor) or loss.dim() != 0:
                shape = tuple(loss.shape) if isinstance(loss, torch.Tensor) else type(loss).__name__
                raise ValueError(f"loss_fn must return the batch's mean loss as a scalar tensor, got {shape}")
            loss.backward()
            value = float(loss.detach())
        else:
            value = 0.0
        grad = np.concatenate([(parameter.grad.detach().cpu().double().reshape(-1).numpy()
                                if parameter.grad is not None else np.zeros(size))
                               for parameter, size in zip(self.tensors, self.sizes)])
        blocks, grad_blocks = self.views(np.asarray(params)), self.views(grad)
        value = self.add_penalty(value, [blocks[i] for i in self.penalized], [grad_blocks[i] for i in self.penalized])
        return value, grad

    def batch_problem(self, params, X, y):
        """What one forward and backward pass on the first rows of (X, y) shows wrong, or None: a loss_fn that
        fails or returns no scalar, a loss or gradient with NaN or inf.  The trainers ask before any work, on
        every rank, and raise it on every rank."""
        rows = min(4, X.shape[0])
        try:
            loss, grad = self.loss_and_grad(params, X[:rows], y[:rows])
        except (ValueError, TypeError, RuntimeError) as error:
            return f"the torch model on the first rows: {error}"
        if not (math.isfinite(loss) and np.isfinite(grad).all()):
            return (f"the torch model on the first rows: the loss ({loss}) or the gradient "
                    f"({int(np.count_nonzero(~np.isfinite(grad)))} entries) is NaN or inf")
        return None

    def scores(self, params, X):
        with torch.no_grad():
            return self._outputs(params, X).detach().cpu().double().numpy()

    def predict_proba(self, params, X):
        if self.n_classes is None:
            raise ValueError("predict_proba needs a classifier (n_classes)")
        with torch.no_grad():
            return torch.softmax(self._outputs(params, X), dim=1).detach().cpu().double().numpy()

    def predict(self, params, X):
        scores = self.scores(params, X)
        if self.n_classes is None:
            return scores.reshape(scores.shape[0], -1)[:, 0] if scores.ndim > 1 else scores
        return scores.argmax(axis=1)


def load_factory(spec):
    """A TorchModel from ``"torch:package.module:factory"`` (or without the ``torch:`` prefix): the factory is
    imported and called with no arguments."""
    text = spec[len("torch:"):] if spec.startswith("torch:") else spec
    module_name, _, attribute = text.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"a torch model is named torch:package.module:factory, got {spec!r}")
    factory = getattr(importlib.import_module(module_name), attribute)
    made = factory()
    if isinstance(made, TorchModel):
        return made
    if isinstance(made, tuple) and len(made) in (2, 3):
        return TorchModel(made[0], made[1], **(made[2] if len(made) == 3 else {}))
    raise TypeError(f"{spec}: the factory must return a TorchModel or (module, loss_fn[, options]), "
                    f"got {type(made).__name__}")

