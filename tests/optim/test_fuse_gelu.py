"""fuse_gelu: the erf and tanh formulas in the orders NumPy code writes them."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kiln.optim import DefaultsOptions, fuse_gelu, simplify_algebra
from kiln.tensor import call

from ..numerics import assert_close
from .graphs import ops, run, traced

f32 = np.float32
RNG = np.random.default_rng(5)
X = (RNG.standard_normal((4, 8)) * 2).astype(f32)
SQRT2 = math.sqrt(2)
C = math.sqrt(2 / math.pi)


# The Gelu kernel computes one order of the formula's operations; the others round otherwise,
# so the rewrite runs only where reassociation is allowed.
RELAXED = DefaultsOptions(allow_reassociation=True)


def erf(x):
    return call("Erf", x)  # NumPy has no erf; kiln's operator stands in for scipy.special.erf


def _reference(x, approximate):
    values = []
    for v in x.astype(np.float64).reshape(-1):
        if approximate == "tanh":
            values.append(0.5 * v * (1 + math.tanh(C * (v + 0.044715 * v**3))))
        else:
            values.append(0.5 * v * (1 + math.erf(v / SQRT2)))
    return np.array(values).reshape(x.shape).astype(x.dtype)


ERF_FORMS = [
    lambda x: 0.5 * x * (1 + erf(x / SQRT2)),
    lambda x: x * 0.5 * (1.0 + erf(x * (1 / SQRT2))),
    lambda x: x * (0.5 * (1 + erf(x / math.sqrt(2.0)))),
    lambda x: 0.5 * (x * (1 + erf(x / SQRT2))),
    lambda x: x * (1 + erf(x / SQRT2)) / 2,
    lambda x: x / 2 * (erf(x * math.sqrt(0.5)) + 1),
]
TANH_FORMS = [
    lambda x: 0.5 * x * (1 + np.tanh(C * (x + 0.044715 * x**3))),
    lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * np.power(x, 3)))),
    lambda x: x * 0.5 * (1.0 + np.tanh((x + x * x * x * 0.044715) * C)),
    lambda x: 0.5 * x * (1 + np.tanh(0.7978845608 * (x + 0.044715 * x * x * x))),
]


@pytest.mark.parametrize(
    "fn, approximate", [(f, "none") for f in ERF_FORMS] + [(f, "tanh") for f in TANH_FORMS]
)
@pytest.mark.parametrize("dynamic", [False, True])
def test_gelu_is_recognised(fn, approximate, dynamic):
    g = traced(fn, X, **({"dynamic_axes": {"x": [0]}} if dynamic else {}))
    out, n = fuse_gelu(g, RELAXED)
    out.verify()
    assert n == 1 and ops(out) == ["Gelu"] and out.nodes[0].attrs["approximate"] == approximate
    assert fuse_gelu(out, RELAXED)[1] == 0
    x = (RNG.standard_normal((6 if dynamic else 4, 8)) * 2).astype(f32)
    assert_close(run(out, x)[0], _reference(x, approximate), rtol=1e-5, atol=1e-6)
    assert_close(run(out, x)[0], run(g, x)[0], rtol=1e-5, atol=1e-6)


def test_after_simplification_and_in_float64():
    # x ** 3 is x * x * x by now (for floats only under relaxed rules: it rounds twice)
    g, _ = simplify_algebra(traced(TANH_FORMS[0], X), DefaultsOptions(allow_reassociation=True))
    assert "Pow" not in ops(g)
    out, _ = fuse_gelu(g, RELAXED)
    assert ops(out) == ["Gelu"]
    x = X.astype(np.float64)
    out, _ = fuse_gelu(traced(ERF_FORMS[0], x), RELAXED)
    assert ops(out) == ["Gelu"]
    assert_close(run(out, x)[0], _reference(x, "none"))


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: 0.5 * x * (1 + erf(x / 1.414)),  # sqrt(2) cut short
        lambda x: 0.6 * x * (1 + erf(x / SQRT2)),
        lambda x: 0.5 * x * (2 + erf(x / SQRT2)),
        lambda x: 0.5 * x * (1 - erf(x / SQRT2)),
        lambda x: 0.5 * x * (1 + erf(x * SQRT2)),
        lambda x: 0.5 * x * (1 + np.tanh(C * (x + 0.0447 * x**3))),
        lambda x: 0.5 * x * (1 + np.tanh(C * (x + 0.044715 * x**2))),
        lambda x: 0.5 * x * (1 + np.tanh(C * (x + 0.044715 * x * x * 2.0))),
        lambda x: 0.5 * np.exp(x) * (1 + erf(x / SQRT2)),  # another value in front
        # np.sqrt of a Python float is a float64 NumPy scalar: the float32 formula is computed
        # in float64 (NumPy's promotion rules), which is not Gelu of the float32 input.
        lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3))),
    ],
)
def test_near_misses_are_left_alone(fn):
    g = traced(fn, X)
    out, n = fuse_gelu(g, RELAXED)
    assert n == 0 and "Gelu" not in ops(out)


def test_shared_intermediates_are_not_fused():
    def f(x):
        t = erf(x / SQRT2)
        return 0.5 * x * (1 + t), t

    out, n = fuse_gelu(traced(f, X), RELAXED)
    assert n == 0


@pytest.mark.parametrize("fn", TANH_FORMS + ERF_FORMS)
def test_by_default_the_formula_is_left_as_written(fn):
    g = traced(fn, X)
    out, n = fuse_gelu(g)
    assert n == 0 and "Gelu" not in ops(out)
