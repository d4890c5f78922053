"""Arrays a kernel reads without receiving them: module globals, closure cells, attributes of
``self``. The input makers update them before each call, as a training loop or a parameter
sweep does between calls; a compiled kernel must read them afresh."""

from __future__ import annotations

import numpy as np

from . import kernel

W_GLOBAL = np.zeros((64, 8))  # rebound by the maker before every call


def _rebind_global(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    global W_GLOBAL
    W_GLOBAL = rng.standard_normal((64, 8))
    return (rng.standard_normal((n, 64)),)


@kernel("implicit input", make=_rebind_global, bench=512, tiny=3)
def global_weights(x):
    """Logistic-regression scores with weights in a module global rebound between calls."""
    return 1 / (1 + np.exp(-(x @ W_GLOBAL)))


def _closure_kernel():
    center = np.zeros(32)  # updated in place by the maker

    def refill(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
        center[...] = rng.standard_normal(32)
        return (rng.standard_normal((n, 32)),)

    def closure_center(x):
        """Squared distances to a center held in a closure cell, updated in place between calls."""
        return ((x - center * 2) ** 2).sum(axis=1)

    return refill, closure_center


_refill, _closure_center = _closure_kernel()
kernel("implicit input", make=_refill, bench=2000, tiny=3)(_closure_center)


class LinearModel:
    """A model object whose parameters change between calls (gradient steps)."""

    def __init__(self) -> None:
        self.w = np.zeros((16, 4))
        self.b = np.zeros(4)

    def predict(self, x):
        """Softmax of a linear model read from self.w and self.b (a bound method)."""
        z = x @ self.w + self.b
        e = np.exp(z - z.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)


MODEL = LinearModel()


def _step_model(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    MODEL.w = MODEL.w * 0 + rng.standard_normal((16, 4))  # rebinding, as w = w - lr * g does
    MODEL.b = rng.standard_normal(4)
    return (rng.standard_normal((n, 16)),)


kernel("implicit input", make=_step_model, bench=1000, tiny=3, name="model_predict")(MODEL.predict)
