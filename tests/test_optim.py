"""Optimizers on flat vectors against PyTorch's documented update rules, sharded, checkpointed, end to end."""
import numpy as np
import pytest
from sklearn.datasets import make_classification
from sklearn.linear_model import LogisticRegression as ScikitLogisticRegression

from mpiopt.core.partition import offsets
from mpiopt.core.registry import RegistryError
from mpiopt.models import LogisticRegression
from mpiopt.optim import SGD, Adam, get_optimizer


def reference_sgd(params, grads, lr, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False):
    """torch.optim.SGD's algorithm as its documentation writes it, one coordinate at a time."""
    params = [float(value) for value in params]
    buffers = [0.0] * len(params)
    for t, grad in enumerate(grads, start=1):
        for i, theta in enumerate(params):
            g = grad[i] + weight_decay * theta
            if momentum:
                buffers[i] = g if t == 1 else momentum * buffers[i] + (1 - dampening) * g
                g = g + momentum * buffers[i] if nesterov else buffers[i]
            params[i] = theta - lr * g
    return np.array(params)


def reference_adam(params, grads, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, amsgrad=False):
    """torch.optim.Adam's algorithm in the textbook form: bias-corrected moments, one coordinate at a time."""
    beta1, beta2 = betas
    params = [float(value) for value in params]
    m, v, v_max = [0.0] * len(params), [0.0] * len(params), [0.0] * len(params)
    for t, grad in enumerate(grads, start=1):
        for i, theta in enumerate(params):
            g = grad[i] + weight_decay * theta
            m[i] = beta1 * m[i] + (1 - beta1) * g
            v[i] = beta2 * v[i] + (1 - beta2) * g * g
            v_max[i] = max(v_max[i], v[i])
            m_hat = m[i] / (1 - beta1 ** t)
            v_hat = (v_max[i] if amsgrad else v[i]) / (1 - beta2 ** t)
            params[i] = theta - lr * m_hat / (np.sqrt(v_hat) + eps)
    return np.array(params)


def gradients(size, steps, seed=0, decay=1.0):
    """Gradients whose scale shrinks by ``decay`` per step (so AMSGrad's maximum differs from v)."""
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(size) * decay ** step * 3 for step in range(steps)]


SGD_CASES = [dict(lr=0.1), dict(lr=0.05, momentum=0.9), dict(lr=0.05, momentum=0.8, dampening=0.3),
             dict(lr=0.05, momentum=0.9, nesterov=True), dict(lr=0.1, weight_decay=0.01),
             dict(lr=0.02, momentum=0.7, nesterov=True, weight_decay=0.1)]
ADAM_CASES = [dict(), dict(lr=0.01, betas=(0.8, 0.99), eps=1e-6), dict(lr=0.01, weight_decay=0.05),
              dict(lr=0.01, amsgrad=True), dict(lr=0.02, betas=(0.5, 0.9), amsgrad=True, weight_decay=0.01)]


def run(optimizer, params, grads):
    params = params.copy()
    for grad in grads:
        optimizer.step(params, grad)
    return params


@pytest.mark.parametrize("options", SGD_CASES, ids=str)
def test_sgd_follows_pytorch_documented_rule(options):
    start, grads = np.linspace(-1, 1, 7), gradients(7, 6)
    expected = reference_sgd(start, grads, **options)
    assert np.allclose(run(SGD(**options), start, grads), expected, rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("options", ADAM_CASES, ids=str)
def test_adam_follows_pytorch_documented_rule(options):
    start, grads = np.linspace(-1, 1, 7), gradients(7, 8, decay=0.5)
    expected = reference_adam(start, grads, **options)
    assert np.allclose(run(Adam(**options), start, grads), expected, rtol=1e-12, atol=1e-15)


def test_amsgrad_differs_from_adam_when_gradients_shrink():
    start, grads = np.zeros(5), gradients(5, 8, decay=0.3)
    assert not np.allclose(run(Adam(lr=0.01, amsgrad=True), start, grads), run(Adam(lr=0.01), start, grads))


def test_step_updates_in_place_and_leaves_the_gradient_alone():
    params, grad = np.ones(4), np.full(4, 2.0)
    address = params.ctypes.data
    assert SGD(0.5, momentum=0.5, weight_decay=0.1).step(params, grad) is None
    assert params.ctypes.data == address and np.allclose(params, 1 - 0.5 * (2 + 0.1))
    assert np.array_equal(grad, np.full(4, 2.0))


@pytest.mark.parametrize("make", [lambda: SGD(0.05, momentum=0.9, nesterov=True, weight_decay=0.01),
                                  lambda: SGD(0.1), lambda: Adam(0.01, amsgrad=True, weight_decay=0.02)],
                         ids=["sgd-nesterov", "sgd", "adam-amsgrad"])
def test_sharded_steps_equal_whole_vector_steps_bit_for_bit(make):
    size = 23
    grads = gradients(size, 5, decay=0.7)
    whole = run(make(), np.linspace(-2, 2, size), grads)
    sharded = np.linspace(-2, 2, size)
    bounds = offsets(size, 3)
    shards = [(bounds[part], bounds[part + 1], make()) for part in range(3)]
    for grad in grads:
        for start, stop, optimizer in shards:
            optimizer.step(sharded[start:stop], grad[start:stop])
    assert np.array_equal(sharded, whole)
    for start, stop, optimizer in shards:
        assert optimizer.size == stop - start
        assert all(array.size == stop - start for array in optimizer.state.values())


@pytest.mark.parametrize("make", [lambda: SGD(0.05, momentum=0.9, dampening=0.1),
                                  lambda: Adam(0.01, amsgrad=True, weight_decay=0.02)], ids=["sgd", "adam"])
def test_resuming_from_a_saved_state_dict_continues_bit_for_bit(make, tmp_path):
    grads = gradients(9, 8, decay=0.8)
    uninterrupted = run(make(), np.ones(9), grads)
    first = make()
    params = run(first, np.ones(9), grads[:3])
    np.savez(tmp_path / "state.npz", **first.state_dict())
    resumed = make()
    resumed.lr = 123.0  # the saved hyperparameters win, as in PyTorch
    with np.load(tmp_path / "state.npz") as saved:
        resumed.load_state_dict(dict(saved))
    assert resumed.lr == first.lr and resumed.steps == 3
    assert np.array_equal(run(resumed, params, grads[3:]), uninterrupted)


def test_state_dict_holds_plain_numbers_and_copies_of_the_state():
    optimizer = Adam(0.01, betas=(0.8, 0.9), amsgrad=True)
    assert optimizer.state_dict() == {"step": 0, "lr": 0.01, "beta1": 0.8, "beta2": 0.9, "eps": 1e-8,
                                      "weight_decay": 0.0, "amsgrad": True}
    optimizer.step(np.ones(3), np.ones(3))
    state = optimizer.state_dict()
    assert sorted(state) == sorted(["step", "lr", "beta1", "beta2", "eps", "weight_decay", "amsgrad", "exp_avg",
                                    "exp_avg_sq", "max_exp_avg_sq"])
    state["exp_avg"][:] = 99.0
    assert np.allclose(optimizer.state["exp_avg"], 0.2)
    assert SGD(0.1).state_dict() == {"step": 0, "lr": 0.1, "momentum": 0.0, "dampening": 0.0, "weight_decay": 0.0,
                                     "nesterov": False}


@pytest.mark.parametrize("make, message", [
    (lambda: SGD(-0.1), "sgd: lr must be a number >= 0, got -0.1"),
    (lambda: SGD("0.1"), "sgd: lr must be a number >= 0, got '0.1'"),
    (lambda: SGD(0.1, momentum=-0.5), "sgd: momentum must be a number >= 0, got -0.5"),
    (lambda: SGD(0.1, dampening=1.5), r"sgd: dampening must be a number in \[0, 1\], got 1.5"),
    (lambda: SGD(0.1, weight_decay=float("nan")), "sgd: weight_decay must be a number >= 0, got nan"),
    (lambda: SGD(0.1, nesterov=True), "sgd: Nesterov momentum needs momentum > 0 and dampening 0, got momentum=0.0"),
    (lambda: SGD(0.1, momentum=0.9, dampening=0.1, nesterov=True), "needs momentum > 0 and dampening 0"),
    (lambda: SGD(0.1, nesterov="yes"), "sgd: nesterov must be True or False, got 'yes'"),
    (lambda: Adam(lr=float("inf")), "adam: lr must be a number >= 0, got inf"),
    (lambda: Adam(betas=(0.9, 1.0)), r"adam: beta2 must be a number in \[0, 1\), got 1.0"),
    (lambda: Adam(betas=(-0.1, 0.9)), r"adam: beta1 must be a number in \[0, 1\), got -0.1"),
    (lambda: Adam(betas=0.9), r"adam: betas must be a pair \(beta1, beta2\), got 0.9"),
    (lambda: Adam(eps=-1e-8), "adam: eps must be a number >= 0, got -1e-08"),
    (lambda: Adam(weight_decay=-1), "adam: weight_decay must be a number >= 0, got -1"),
    (lambda: Adam(amsgrad=None), "adam: amsgrad must be True or False, got None"),
])
def test_invalid_hyperparameters_are_rejected_with_the_value(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_step_rejects_vectors_it_cannot_update():
    optimizer = SGD(0.1, momentum=0.9)
    with pytest.raises(ValueError, match="params must be a writable 1-D float64 numpy array .* got a 1-D float32"):
        optimizer.step(np.ones(3, dtype=np.float32), np.ones(3))
    with pytest.raises(ValueError, match="got a 2-D float64 array"):
        optimizer.step(np.ones((2, 2)), np.ones((2, 2)))
    with pytest.raises(ValueError, match="got list"):
        optimizer.step([1.0, 2.0], [1.0, 2.0])
    read_only = np.ones(3)
    read_only.flags.writeable = False
    with pytest.raises(ValueError, match="writable"):
        optimizer.step(read_only, np.ones(3))
    with pytest.raises(ValueError, match=r"grad has shape \(2,\), params \(3,\)"):
        optimizer.step(np.ones(3), np.ones(2))
    optimizer.step(np.ones(3), np.ones(3))
    with pytest.raises(ValueError, match="state is for a vector of 3 entries, got one of 4 .use one optimizer per"):
        optimizer.step(np.ones(4), np.ones(4))


def test_load_state_dict_rejects_foreign_states_and_keeps_its_own():
    sgd = SGD(0.1, momentum=0.9)
    sgd.step(np.ones(3), np.ones(3))
    adam = Adam(0.01)
    with pytest.raises(ValueError, match="adam: the state dict lacks beta1, beta2, eps, amsgrad"):
        adam.load_state_dict(sgd.state_dict())
    other = SGD(0.5)
    other.load_state_dict(dict(sgd.state_dict(), momentum_buffer=np.ones(4)))  # the saved length wins
    assert other.momentum == 0.9 and other.size == 4
    missing = {key: value for key, value in sgd.state_dict().items() if key != "momentum_buffer"}
    fresh = SGD(0.5)
    with pytest.raises(ValueError, match="after 1 steps the state dict holds momentum_buffer; missing momentum_buffer"):
        fresh.load_state_dict(missing)
    assert fresh.lr == 0.5 and fresh.momentum == 0.0 and fresh.steps == 0, "a failed load changed the optimizer"
    with pytest.raises(ValueError, match="sgd: lr must be a number >= 0, got -1"):
        fresh.load_state_dict(dict(sgd.state_dict(), lr=-1))
    assert fresh.lr == 0.5
    with pytest.raises(ValueError, match="step must be an integer >= 0, got 1.5"):
        fresh.load_state_dict(dict(sgd.state_dict(), step=1.5))
    with pytest.raises(ValueError, match="state arrays must be flat"):
        fresh.load_state_dict(dict(sgd.state_dict(), momentum_buffer=np.ones((2, 2))))
    with pytest.raises(ValueError, match="unexpected exp_avg"):
        fresh.load_state_dict(dict(sgd.state_dict(), exp_avg=np.ones(3)))


def test_optimizers_are_chosen_by_name():
    assert isinstance(get_optimizer("sgd", lr=0.1, momentum=0.9), SGD)
    assert get_optimizer("adam", betas=(0.5, 0.6)).betas == (0.5, 0.6)
    with pytest.raises(RegistryError, match="optimizer must be one of .*sgd.*, got 'lbfgs'"):
        get_optimizer("lbfgs", lr=1.0)


@pytest.mark.parametrize("name, options, steps", [("sgd", dict(lr=0.5, momentum=0.9), 300),
                                                  ("sgd", dict(lr=0.5, momentum=0.9, nesterov=True), 200),
                                                  ("adam", dict(lr=0.1), 300),
                                                  ("adam", dict(lr=0.1, amsgrad=True), 300)])
def test_optimizers_reach_scikit_learn_logistic_regression_loss(name, options, steps):
    optimizer = get_optimizer(name, **options)
    X, y = make_classification(200, 5, n_informative=3, random_state=0)
    alpha = 1e-2
    fitted = ScikitLogisticRegression(C=1 / (alpha * X.shape[0]), tol=1e-12, max_iter=10000).fit(X, y)
    model = LogisticRegression(5, alpha=alpha)
    best = model.loss(np.concatenate([fitted.coef_[0], fitted.intercept_]), X, y)
    params = model.init_params(0)
    for _ in range(steps):
        optimizer.step(params, model.loss_and_grad(params, X, y)[1])
    assert model.loss(params, X, y) - best < 1e-8
    assert np.allclose(params, np.concatenate([fitted.coef_[0], fitted.intercept_]), atol=1e-4)
