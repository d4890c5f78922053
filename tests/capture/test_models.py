"""Whole models written in plain NumPy, traced and run: equal to eager NumPy within 1e-5."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.demo import make_block

f32 = np.float32


def cnn_params(seed=0):
    rng = np.random.default_rng(seed)
    return {
        "w1": (rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(f32),
        "b1": (rng.standard_normal(8) * 0.1).astype(f32),
        "w2": (rng.standard_normal((16, 8, 3, 3)) * 0.2).astype(f32),
        "b2": (rng.standard_normal(16) * 0.1).astype(f32),
        "wf": (rng.standard_normal((16 * 3 * 3, 10)) * 0.1).astype(f32),
        "bf": np.zeros(10, f32),
    }


def conv3x3(x, w, b):
    """A valid 3x3 convolution in plain NumPy: im2col by slicing, then a tensordot."""
    h, wd = x.shape[2] - 2, x.shape[3] - 2
    patches = np.stack(
        [x[:, :, i : i + h, j : j + wd] for i in range(3) for j in range(3)], axis=2
    )  # (N, C, 9, H, W)
    kernel = w.reshape(w.shape[0], w.shape[1], 9)  # (M, C, 9)
    out = np.einsum("nckhw,mck->nmhw", patches, kernel)
    return out + b.reshape(1, -1, 1, 1)


def max_pool2(x):
    n, c, h, w = x.shape
    return x.reshape(n, c, h // 2, 2, w // 2, 2).max(axis=(3, 5))


def cnn(x, p):
    h = np.maximum(conv3x3(x, p["w1"], p["b1"]), 0)  # (N, 8, 14, 14)
    h = max_pool2(h)  # (N, 8, 7, 7)
    h = np.maximum(conv3x3(h, p["w2"], p["b2"]), 0)  # (N, 16, 5, 5)
    h = h[:, :, :3, :3]  # (N, 16, 3, 3)
    logits = h.reshape(h.shape[0], -1) @ p["wf"] + p["bf"]
    logits = logits - logits.max(axis=-1, keepdims=True)
    return logits - np.log(np.exp(logits).sum(axis=-1, keepdims=True))


@pytest.mark.parametrize("optimize", [False, True])
def test_transformer_block_in_plain_numpy(optimize):
    block = make_block(d_model=64, heads=4, ffn=128)
    x = np.random.default_rng(3).standard_normal((2, 16, 64)).astype(f32)
    tg = kiln.trace(block, x)
    if optimize:
        tg.optimize()
    tg.graph.verify()
    tg.finalize()
    (out,) = tg.run([x])
    np.testing.assert_allclose(np.asarray(out), block(x), rtol=1e-5, atol=1e-5)


def test_transformer_block_with_a_dynamic_batch():
    block = make_block(d_model=32, heads=2, ffn=64)
    x = np.random.default_rng(4).standard_normal((2, 8, 32)).astype(f32)
    tg = kiln.trace(block, x, dynamic_axes={"x": {0: "B", 1: "S"}})
    tg.optimize()
    tg.finalize()
    for batch, seq in ((1, 8), (3, 5), (1, 1)):
        xb = np.random.default_rng(batch).standard_normal((batch, seq, 32)).astype(f32)
        (out,) = tg.run([xb])
        np.testing.assert_allclose(np.asarray(out), block(xb), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("optimize", [False, True])
def test_small_cnn_in_plain_numpy(optimize):
    p = cnn_params()
    x = np.random.default_rng(5).standard_normal((2, 3, 16, 16)).astype(f32)
    tg = kiln.trace(cnn, x, p)
    assert tg.input_names[:2] == ["x", "p.b1"]
    if optimize:
        tg.optimize()
    tg.graph.verify()
    tg.finalize()
    out = tg(x, p)
    np.testing.assert_allclose(np.asarray(out), cnn(x, p), rtol=1e-5, atol=1e-5)


def test_compiled_cnn_replays_without_python():
    p = cnn_params(1)
    calls = []

    def counted(x, params):
        calls.append(1)
        return cnn(x, params)

    f = kiln.compile(counted)
    for seed in range(3):
        x = np.random.default_rng(seed).standard_normal((2, 3, 16, 16)).astype(f32)
        np.testing.assert_allclose(np.asarray(f(x, p)), cnn(x, p), rtol=1e-5, atol=1e-5)
    assert len(calls) == 1
