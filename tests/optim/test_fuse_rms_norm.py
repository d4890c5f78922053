"""fuse_rms_norm on NumPy code as people write it."""

from __future__ import annotations

import numpy as np
import pytest

from kiln.optim import fuse_rms_norm, simplify_algebra
from kiln.optim.transform import DefaultsOptions

from ..numerics import assert_close
from .graphs import ops, run, traced

f32 = np.float32
RNG = np.random.default_rng(4)
X = RNG.standard_normal((4, 16)).astype(f32)
W = RNG.uniform(0.5, 2, 16).astype(f32)


def _reference(x, w, eps):
    x64 = x.astype(np.float64)
    return (x64 / np.sqrt((x64**2).mean(axis=-1, keepdims=True) + eps) * w).astype(x.dtype)


# A division rounds unlike the kernel's product with the reciprocal: fused where reassociation
# is allowed (the product form fuses by default).
RELAXED = DefaultsOptions(allow_reassociation=True)


def rms_div(x, w):
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + 1e-6) * w


def rms_rsqrt(x, w):
    return w * (x * (1.0 / np.sqrt(np.mean(x**2, axis=-1, keepdims=True) + 1e-6)))


def rms_no_weight(x, w):
    return x / np.sqrt(np.mean(np.square(x), axis=-1, keepdims=True) + 1e-6)


@pytest.mark.parametrize("fn", [rms_div, rms_rsqrt, rms_no_weight])
@pytest.mark.parametrize("dynamic", [False, True])
def test_rms_norm_is_recognised(fn, dynamic):
    kwargs = {"dynamic_axes": {"x": [0]}} if dynamic else {}
    g = traced(fn, X, W, **kwargs)
    out, n = fuse_rms_norm(g, RELAXED)
    out.verify()
    assert ops(out) == ["RMSNormalization"] and fuse_rms_norm(out, RELAXED)[1] == 0
    assert out.nodes[0].attrs["epsilon"] == pytest.approx(1e-6)
    x = RNG.standard_normal((7 if dynamic else 4, 16)).astype(f32)
    weight = 1 if fn is rms_no_weight else W
    assert_close(run(out, x, W)[0], _reference(x, weight, 1e-6), rtol=1e-5, atol=1e-6)
    assert_close(run(out, x, W)[0], run(g, x, W)[0], rtol=1e-5, atol=1e-6)


def test_by_default_only_the_product_with_the_reciprocal_fuses_and_rounds_as_written():
    assert fuse_rms_norm(traced(rms_div, X, W))[1] == 0
    assert fuse_rms_norm(traced(rms_no_weight, X, W))[1] == 0
    assert fuse_rms_norm(traced(rms_rsqrt, X.astype(np.float16), W))[1] == 0
    g = traced(rms_rsqrt, X, W)
    out, n = fuse_rms_norm(g)
    assert n and ops(out) == ["RMSNormalization"]
    for seed in range(3):
        x = np.random.default_rng(seed).standard_normal(X.shape).astype(f32)
        np.testing.assert_array_equal(run(out, x, W)[0], run(g, x, W)[0])


def test_after_simplification_too():
    g, _ = simplify_algebra(traced(rms_rsqrt, X, W))  # x ** 2 is x * x by now
    out, _ = fuse_rms_norm(g)
    assert ops(out) == ["RMSNormalization"]


@pytest.mark.parametrize(
    "fn",
    [
        lambda x, w: x / np.sqrt((x * w).mean(axis=-1, keepdims=True) + 1e-6),  # not x * x
        lambda x, w: x / np.sqrt((x * x).mean(axis=0, keepdims=True) + 1e-6),  # not trailing
        lambda x, w: x / np.sqrt((x * x).sum(axis=-1, keepdims=True) + 1e-6),  # a sum
        lambda x, w: x / np.sqrt((x**3).mean(axis=-1, keepdims=True) + 1e-6),
        lambda x, w: w / np.sqrt((x * x).mean(axis=-1, keepdims=True) + 1e-6),  # other numerator
        lambda x, w: x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + w),  # eps not constant
    ],
)
def test_near_misses_are_left_alone(fn):
    g = traced(fn, X, W)
    out, n = fuse_rms_norm(g, RELAXED)
    assert n == 0 and "RMSNormalization" not in ops(out)
