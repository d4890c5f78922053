"""fuse_layer_norm and fuse_rms_norm are tested on NumPy code as people write it."""

from __future__ import annotations

import numpy as np
import pytest

from kiln.optim import eliminate_common_subexpressions, fuse_layer_norm
from kiln.optim.transform import DefaultsOptions

from ..numerics import assert_close
from .graphs import ops, run, traced

f32 = np.float32
RNG = np.random.default_rng(3)
X = RNG.standard_normal((4, 16)).astype(f32) * 3 + 1
W = RNG.uniform(0.5, 2, 16).astype(f32)
B = RNG.standard_normal(16).astype(f32)


# A division by the standard deviation (what people write) rounds unlike the kernel's
# product with its reciprocal: fused only where reassociation is allowed.
RELAXED = DefaultsOptions(allow_reassociation=True)


def fused(fn, *inputs, options=RELAXED, **trace_kwargs):
    g = traced(fn, *inputs, **trace_kwargs)
    out, n = fuse_layer_norm(g, options)
    out.verify()
    for got, want in zip(run(out, *inputs), run(g, *inputs)):
        assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert fuse_layer_norm(out, options)[1] == 0
    return out, n


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_by_default_only_the_product_with_the_reciprocal_fuses_and_rounds_as_written(dtype):
    x, w, b = (a.astype(dtype) for a in (X, W, B))
    for fn in (ln_pow, ln_var, ln_plain):  # divisions: left as written
        assert fuse_layer_norm(traced(fn, x, w, b))[1] == 0
    assert fuse_layer_norm(traced(ln_pow, X.astype(np.float16), W, B))[1] == 0  # half: too
    g = traced(ln_rsqrt, x, w, b)
    out, n = fuse_layer_norm(g)
    assert n and "LayerNormalization" in ops(out)
    for seed in range(3):
        inputs = [np.random.default_rng(seed).standard_normal(x.shape).astype(dtype), w, b]
        np.testing.assert_array_equal(run(out, *inputs)[0], run(g, *inputs)[0])


def ln_pow(x, w, b):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + 1e-5) * w + b


def ln_var(x, w, b):
    mu = np.mean(x, axis=-1, keepdims=True)
    return w * ((x - mu) / np.sqrt(x.var(axis=-1, keepdims=True) + 1e-6)) + b


def ln_rsqrt(x, w, b):
    d = x - x.mean(axis=-1, keepdims=True)
    inv = 1.0 / (np.mean(d * d, axis=-1, keepdims=True) + 1e-5) ** 0.5
    return d * inv * w + b


def ln_plain(x, w, b):
    mu = x.mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(((x - mu) ** 2).mean(axis=-1, keepdims=True) + 1e-5)


@pytest.mark.parametrize(
    "fn, affine", [(ln_pow, True), (ln_var, True), (ln_rsqrt, True), (ln_plain, False)]
)
def test_layer_norm_is_recognised(fn, affine):
    out, n = fused(fn, X, W, B)
    assert ops(out) == ["LayerNormalization"]
    node = out.nodes[0]
    assert len(node.inputs) == (3 if affine else 2) and node.attrs["axis"] == 1
    eps = 1e-6 if fn is ln_var else 1e-5
    assert node.attrs["epsilon"] == pytest.approx(eps, rel=1e-6)
    expected = _reference(X, W, B, eps) if affine else _reference(X, 1, 0, eps)
    assert_close(run(out, X, W, B)[0], expected, rtol=1e-5, atol=1e-5)


def _reference(x, w, b, eps=1e-5, axes=-1):
    x64 = x.astype(np.float64)
    mu = x64.mean(axis=axes, keepdims=True)
    var = x64.var(axis=axes, keepdims=True)
    return ((x64 - mu) / np.sqrt(var + eps) * w + b).astype(x.dtype)


def test_several_trailing_axes_float64_and_a_dynamic_batch():
    x = RNG.standard_normal((2, 3, 4, 5))

    def ln(x):
        mu = x.mean(axis=(-2, -1), keepdims=True)
        return (x - mu) / np.sqrt(((x - mu) ** 2).mean(axis=(2, 3), keepdims=True) + 1e-5)

    out, _ = fused(ln, x)
    assert ops(out) == ["LayerNormalization"] and out.nodes[0].attrs["axis"] == 2
    assert out.nodes[0].attrs["stash_type"] == 11  # float64 statistics for float64 data
    assert_close(run(out, x)[0], _reference(x, 1, 0, axes=(2, 3)))
    out, _ = fused(ln_pow, X, W, B, dynamic_axes={"x": [0]})
    assert ops(out) == ["LayerNormalization"]
    x = RNG.standard_normal((9, 16)).astype(f32)
    assert_close(run(out, x, W, B)[0], _reference(x, W, B), rtol=1e-5, atol=1e-5)


def test_common_subexpressions_merged_first_still_match():
    g, _ = eliminate_common_subexpressions(traced(ln_pow, X, W, B))
    out, _ = fuse_layer_norm(g, RELAXED)
    assert ops(out) == ["LayerNormalization"]


def near_misses():
    def axes_differ(x, w, b):
        mu = x.mean(axis=-1, keepdims=True)
        return (x - mu) / np.sqrt(((x - mu) ** 2).mean(axis=0, keepdims=True) + 1e-5)

    def not_trailing(x, w, b):
        x3 = x.reshape(4, 4, 4)
        mu = x3.mean(axis=1, keepdims=True)
        return (x3 - mu) / np.sqrt(((x3 - mu) ** 2).mean(axis=1, keepdims=True) + 1e-5)

    def eps_outside(x, w, b):
        mu = x.mean(axis=-1, keepdims=True)
        return (x - mu) / (np.sqrt(((x - mu) ** 2).mean(axis=-1, keepdims=True)) + 1e-5)

    def sum_not_mean(x, w, b):
        mu = x.mean(axis=-1, keepdims=True)
        return (x - mu) / np.sqrt(((x - mu) ** 2).sum(axis=-1, keepdims=True) + 1e-5)

    def other_mean(x, w, b):
        mu = x.mean(axis=-1, keepdims=True)
        return (x - mu) / np.sqrt(((w - mu) ** 2).mean(axis=-1, keepdims=True) + 1e-5)

    def sample_variance(x, w, b):
        mu = x.mean(axis=-1, keepdims=True)
        return (x - mu) / np.sqrt(x.var(axis=-1, ddof=1, keepdims=True) + 1e-5)

    def mean_used_elsewhere(x, w, b):
        mu = x.mean(axis=-1, keepdims=True)
        d = x - mu
        return d / np.sqrt((d**2).mean(axis=-1, keepdims=True) + 1e-5), d

    return [
        axes_differ,
        not_trailing,
        eps_outside,
        sum_not_mean,
        other_mean,
        sample_variance,
        mean_used_elsewhere,
    ]


@pytest.mark.parametrize("fn", near_misses())
def test_near_misses_are_left_alone(fn):
    out, n = fuse_layer_norm(traced(fn, X, W, B), RELAXED)
    assert n == 0 and "LayerNormalization" not in ops(out)


def test_a_scale_that_does_not_fit_the_axes_stays_a_multiplication():
    per_row = RNG.standard_normal((4, 1)).astype(f32)
    out, n = fused(ln_pow, X, per_row, B)
    assert ops(out) == ["LayerNormalization", "Mul", "Add"]
