"""fuse_softmax on NumPy code as people write it."""

from __future__ import annotations

import numpy as np
import pytest

from kiln.optim import fuse_softmax

from ..numerics import assert_close
from .graphs import ops, run, traced

f32 = np.float32
RNG = np.random.default_rng(6)
X = RNG.standard_normal((3, 4, 5)).astype(f32)


def softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _reference(x, axis):
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(axis=axis, keepdims=True))
    return (e / e.sum(axis=axis, keepdims=True)).astype(x.dtype)


@pytest.mark.parametrize(
    "fn, axis",
    [
        (softmax, 2),
        (lambda x: softmax(x, axis=1), 1),
        (
            lambda x: (
                np.exp(x - np.max(x, axis=0, keepdims=True))
                / np.sum(np.exp(x - np.max(x, axis=0, keepdims=True)), axis=0, keepdims=True)
            ),
            0,
        ),
        (lambda x: np.exp(x) / np.exp(x).sum(axis=-1, keepdims=True), 2),  # no max subtracted
    ],
)
@pytest.mark.parametrize("dynamic", [False, True])
def test_softmax_is_recognised(fn, axis, dynamic):
    g = traced(fn, X, **({"dynamic_axes": {"x": [1]}} if dynamic else {}))
    out, n = fuse_softmax(g)
    out.verify()
    assert n == 1 and ops(out) == ["Softmax"] and out.nodes[0].attrs["axis"] == axis
    assert fuse_softmax(out)[1] == 0
    x = RNG.standard_normal((3, 7 if dynamic else 4, 5)).astype(f32)
    assert_close(run(out, x)[0], _reference(x, axis), rtol=1e-5, atol=1e-6)
    assert_close(run(out, x)[0], run(g, x)[0], rtol=1e-5, atol=1e-6)


def test_softmax_no_longer_overflows():
    g = traced(lambda x: np.exp(x) / np.exp(x).sum(axis=-1, keepdims=True), X)
    out, _ = fuse_softmax(g)
    big = np.array([[1000.0, 0.0]], f32)
    g2 = traced(lambda x: np.exp(x) / np.exp(x).sum(axis=-1, keepdims=True), big)
    out, _ = fuse_softmax(g2)
    assert_close(run(out, big)[0], np.array([[1.0, 0.0]], f32))


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: np.exp(x) / np.exp(x).sum(axis=(1, 2), keepdims=True),  # two axes
        lambda x: np.exp(x) / np.exp(x).max(axis=-1, keepdims=True),
        lambda x: np.exp(x) / np.exp(x * 2).sum(axis=-1, keepdims=True),
        lambda x: np.exp(x) / np.exp(x).sum(),
        lambda x: (
            np.exp(x - x.max(axis=1, keepdims=True))
            / np.exp(x - x.max(axis=1, keepdims=True)).sum(axis=2, keepdims=True)
        ),  # axes differ
        lambda x: x / x.sum(axis=-1, keepdims=True),
    ],
)
def test_near_misses_are_left_alone(fn):
    g = traced(fn, X)
    out, n = fuse_softmax(g)
    assert "Softmax" not in ops(out)
