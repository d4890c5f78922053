"""fuse_attention: softmax(q @ k^T * scale (+ mask)) @ v into ONNX Attention."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kiln.optim import DefaultsOptions, fuse_attention, fuse_softmax

from ..numerics import assert_close
from .graphs import ops, run, traced

f32 = np.float32
RNG = np.random.default_rng(7)


def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def rand(*shape):
    return RNG.standard_normal(shape).astype(f32)


def _reference(q, k, v, scale, mask=None):
    s = np.einsum("...id,...jd->...ij", q.astype(np.float64), k.astype(np.float64)) * scale
    if mask is not None:
        s = s + mask
    s = np.exp(s - s.max(axis=-1, keepdims=True))
    return (s / s.sum(axis=-1, keepdims=True) @ v.astype(np.float64)).astype(q.dtype)


# The Attention kernel multiplies and scales in its own order, which rounds unlike the
# operations as written: the rewrite runs only where reassociation is allowed.
RELAXED = DefaultsOptions(allow_reassociation=True)


def fused(fn, *inputs, **trace_kwargs):
    g = traced(fn, *inputs, **trace_kwargs)
    out, _ = fuse_softmax(g)
    assert fuse_attention(out)[1] == 0  # not by default
    out, n = fuse_attention(out, RELAXED)
    out.verify()
    assert fuse_attention(out, RELAXED)[1] == 0
    assert_close(run(out, *inputs)[0], run(g, *inputs)[0], rtol=1e-5, atol=1e-5)
    return out, n


Q, K, V = rand(2, 3, 4, 8), rand(2, 3, 6, 8), rand(2, 3, 6, 5)
MASK = np.where(RNG.random((4, 6)) < 0.3, -1e4, 0).astype(f32)


@pytest.mark.parametrize(
    "fn, scale",
    [
        (lambda q, k, v: softmax(q @ k.transpose(0, 1, 3, 2) / math.sqrt(8)) @ v, 8**-0.5),
        (lambda q, k, v: softmax(q @ np.swapaxes(k, -1, -2) * 0.25) @ v, 0.25),
        (lambda q, k, v: softmax((q * 0.5) @ k.transpose(0, 1, 3, 2)) @ v, 0.5),
        (lambda q, k, v: softmax(np.matmul(q, k.transpose(0, 1, 3, 2))) @ v, 1.0),
    ],
)
def test_attention_is_recognised(fn, scale):
    out, n = fused(fn, Q, K, V)
    assert n == 1 and ops(out) == ["Attention"]
    assert out.nodes[0].attrs["scale"] == pytest.approx(scale)
    assert_close(run(out, Q, K, V)[0], _reference(Q, K, V, scale), rtol=1e-5, atol=1e-5)


def test_with_an_additive_mask_and_k_given_transposed():
    def f(q, kt, v, mask):
        return softmax(q @ kt / math.sqrt(8) + mask) @ v

    kt = K.transpose(0, 1, 3, 2).copy()
    out, n = fused(f, Q, kt, V, MASK)
    assert ops(out) == ["Transpose", "Attention"] and len(out.nodes[1].inputs) == 4
    assert_close(run(out, Q, kt, V, MASK)[0], _reference(Q, K, V, 8**-0.5, MASK), atol=1e-5)


def test_keys_stored_in_another_layout_get_a_transpose():
    from kiln.optim import simplify_algebra

    k = rand(2, 6, 3, 8)  # (batch, sequence, heads, size)
    out, _ = fused(lambda q, k, v: softmax(q @ k.transpose(0, 2, 3, 1)) @ v, Q, k, V)
    out, _ = simplify_algebra(out)  # the inserted Transpose merges with the recorded one
    assert ops(out) == ["Transpose", "Attention"]
    assert out.nodes[0].attrs["perm"] == (0, 2, 1, 3)
    assert_close(run(out, Q, k, V)[0], _reference(Q, k.transpose(0, 2, 1, 3), V, 1.0), atol=1e-5)


def test_the_3d_form_and_a_dynamic_sequence():
    def f(q, k, v):
        return softmax(q @ k.transpose(0, 2, 1) / math.sqrt(8)) @ v

    q, k, v = rand(2, 4, 8), rand(2, 6, 8), rand(2, 6, 5)
    out, _ = fused(f, q, k, v)
    assert "Attention" in ops(out) and "Softmax" not in ops(out)
    assert_close(run(out, q, k, v)[0], _reference(q, k, v, 8**-0.5), rtol=1e-5, atol=1e-5)

    def g(q, k, v):
        return softmax(q @ k.transpose(0, 1, 3, 2) / math.sqrt(8)) @ v

    dyn = {"q": [2], "k": [2], "v": [2]}
    out, _ = fused(g, Q, K[:, :, :4], V[:, :, :4], dynamic_axes=dyn)
    assert ops(out) == ["Attention"]
    q, k, v = rand(2, 3, 7, 8), rand(2, 3, 7, 8), rand(2, 3, 7, 5)
    assert_close(run(out, q, k, v)[0], _reference(q, k, v, 8**-0.5), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "fn, args",
    [
        # softmax over the wrong axis
        (
            lambda q, k, v: (
                (lambda s: np.exp(s) / np.exp(s).sum(axis=2, keepdims=True))(
                    q @ k.transpose(0, 1, 3, 2)
                )
                @ v
            ),
            (Q, K, V),
        ),
        # a scale that is not a constant
        (lambda q, k, v, s: softmax(q @ k.transpose(0, 1, 3, 2) * s) @ v, (Q, K, V, rand(1))),
        # the weights are also a result
        (lambda q, k, v: (lambda p: (p @ v, p))(softmax(q @ k.transpose(0, 1, 3, 2))), (Q, K, V)),
        # rank 2: not batched attention
        (lambda q, k, v: softmax(q @ k.T) @ v, (rand(4, 8), rand(6, 8), rand(6, 5))),
    ],
)
def test_near_misses_are_left_alone(fn, args):
    g, _ = fuse_softmax(traced(fn, *args))
    out, n = fuse_attention(g, RELAXED)
    assert n == 0 and "Attention" not in ops(out)
