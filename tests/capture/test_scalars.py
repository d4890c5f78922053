"""A float argument is static at the first capture; when its value changes it becomes a 0-d
graph input at the re-capture, so later values replay (SPEC section 5, "Python scalars")."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import kiln
from kiln.capture.compiled import State


def exact(got, want):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def sgd(w, g, lr):
    return w - lr * g


def test_twenty_learning_rates_cost_one_recapture_then_replay():
    f = kiln.compile(sgd)
    w = np.linspace(-1, 1, 6, dtype=np.float32)
    g = np.arange(6, dtype=np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for i in range(20):
            lr = 0.1 / (i + 1)
            exact(f(w, g, lr), sgd(w, g, lr))  # float32 stays float32: lr is weak
    assert f.recapture_count == 1 and f.state is State.Compiled
    assert [e.kind for e in f.history] == ["first", "scalar input"]
    event = f.history[1]
    assert (event.path, event.old, event.new) == ("lr", 0.1, 0.05)
    assert f.input_names == ["w", "g", "lr"]


@pytest.mark.parametrize(
    "body",
    [
        lambda x, a: x * (1 - a) + a,  # Python arithmetic on the scalar
        lambda x, a: np.exp(a) * x - a**2,  # a NumPy ufunc on it alone: float64
        lambda x, a: x / a + (-a) * 0.5 - abs(a) // 0.25 % 3,
        lambda x, a: np.maximum(x, a),
        lambda x, a: (x.astype(np.float16) * a).sum(),
    ],
    ids=["arith", "ufunc", "operators", "maximum", "float16"],
)
def test_a_promoted_float_computes_like_numpy(body):
    f = kiln.compile(body)
    x = np.linspace(0.5, 2, 5, dtype=np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for a in (0.3, 0.7, 1.9, 0.25, 3.5):
            exact(f(x, a), body(x, a))
    assert f.recapture_count == 1


def test_a_numpy_float_scalar_is_a_strong_0d_input():
    f = kiln.compile(lambda x, a: x * a)
    x = np.ones(3, np.float32)
    for a in (np.float64(0.5), np.float64(1.5), np.float64(2.5)):
        exact(f(x, a), x * a)  # float64: a NumPy scalar is strong
    assert f.recapture_count == 1


def test_a_branch_on_a_promoted_float_is_a_value_guard():
    def clipped(x, a):
        if a > 1.0:
            return x * 2.0
        return x * a

    f = kiln.compile(clipped)
    x = np.ones(3)
    for a in (0.5, 0.6, 0.7, 0.8):
        exact(f(x, a), clipped(x, a))
    assert f.recapture_count == 1  # the branch answer stayed the same
    exact(f(x, 3.0), clipped(x, 3.0))  # another answer: re-captured, still right
    assert f.history[-1].kind == "value guard"


def test_ints_and_bools_stay_static_values():
    f = kiln.compile(lambda x, n, flag: x.reshape(n, -1) * (2 if flag else 3))
    x = np.ones(12)
    exact(f(x, 3, True), x.reshape(3, -1) * 2)
    exact(f(x, 4, True), x.reshape(4, -1) * 2)
    exact(f(x, 4, False), x.reshape(4, -1) * 3)
    assert [e.kind for e in f.history] == ["first", "static value", "static value"]


def test_a_float_used_as_an_operator_attribute_is_guarded():
    f = kiln.compile(lambda x, eps: kiln.nn.layer_norm(kiln.asarray(x), eps=eps))
    x = np.random.default_rng(0).standard_normal((2, 4))
    outs = [np.asarray(f(x, eps)) for eps in (1e-5, 1e-3, 1e-1)]
    for got, eps in zip(outs, (1e-5, 1e-3, 1e-1)):
        mean = x.mean(-1, keepdims=True)
        want = (x - mean) / np.sqrt(x.var(-1, keepdims=True) + eps)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_returning_the_float_itself_serves_eagerly():
    f = kiln.compile(lambda x, a: (x * a, a * 2))
    x = np.ones(2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for a in (0.5, 1.5, 2.5):
            out, twice = f(x, a)
            exact(out, x * a)
            assert twice == a * 2 and type(twice) is float
    assert "abandoned" in [e.kind for e in f.history]


def test_the_stand_in_behaves_like_the_float():
    seen = []

    def probe(x, a):
        seen.append((isinstance(a, float), hash(a) == hash(float(a)), math.isfinite(a)))
        return x + a

    f = kiln.compile(probe)
    f(np.ones(2), 0.5)
    f(np.ones(2), 0.75)
    assert seen == [(True, True, True), (True, True, True)]
