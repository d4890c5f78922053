"""fuse_gemm: MatMul + bias into Gemm, structure and numerics, near-misses left alone."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.optim import fuse_gemm
from kiln.tensor import call

from ..numerics import assert_close
from .graphs import ops, run, traced

f32 = np.float32
RNG = np.random.default_rng(1)
X = RNG.standard_normal((4, 3)).astype(f32)
W = RNG.standard_normal((5, 3)).astype(f32)  # (out, in), as linear layers store it
B = RNG.standard_normal(5).astype(f32)


def fused(fn, *inputs, **trace_kwargs):
    g = traced(fn, *inputs, **trace_kwargs)
    out, n = fuse_gemm(g)
    out.verify()
    assert_close(run(out, *inputs)[0], run(g, *inputs)[0], rtol=1e-5, atol=1e-6)
    assert fuse_gemm(out)[1] == 0
    return out, n


@pytest.mark.parametrize(
    "fn, bias",
    [
        (lambda x, w, b: x @ w.T + b, B),
        (lambda x, w, b: b + x @ w.T, B),
        (lambda x, w, b: x @ w.T + b, B.reshape(1, 5)),
        (lambda x, w, b: x @ w.T + b, RNG.standard_normal((4, 1)).astype(f32)),
        (lambda x, w, b: x @ w.T + b, np.float32(0.5)),
    ],
)
def test_matmul_plus_bias_becomes_gemm(fn, bias):
    out, n = fused(fn, X, W, np.asarray(bias))
    assert n == 1 and ops(out) == ["Gemm"] and out.nodes[0].attrs["transB"] == 1


def test_plain_matmul_and_dynamic_rows():
    wt = W.T.copy()
    out, _ = fused(lambda x, w, b: np.matmul(x, w) + b, X, wt, B)
    assert ops(out) == ["Gemm"] and out.nodes[0].attrs["transB"] == 0
    out, _ = fused(lambda x, w, b: x @ w.T + b, X, W, B, dynamic_axes={"x": [0]})
    assert ops(out) == ["Gemm"]
    bigger = RNG.standard_normal((7, 3)).astype(f32)
    assert_close(run(out, bigger, W, B)[0], bigger @ W.T + B, rtol=1e-5, atol=1e-6)


def test_gemm_without_bias_takes_one():
    g = traced(lambda x, w, b: call("Gemm", x, w, transB=1) + b, X, W, B)
    out, n = fuse_gemm(g)
    out.verify()
    assert n == 1 and ops(out) == ["Gemm"] and len(out.nodes[0].inputs) == 3


@pytest.mark.parametrize(
    "fn, args",
    [
        # 3-D input: ONNX Gemm takes matrices only
        (lambda x, w, b: x @ w.T + b, (X[None], W, B)),
        # the bias would broadcast the result to 3-D
        (lambda x, w, b: x @ w.T + b, (X, W, np.ones((2, 1, 5), f32))),
        # the product is used twice: fusing would compute it twice
        (lambda x, w, b: (x @ w.T + b, np.exp(x @ w.T)), (X, W, B)),
        (lambda x, w, b: x @ w.T - b, (X, W, B)),
    ],
)
def test_near_misses_are_left_alone(fn, args):
    g = traced(fn, *args)
    if len(g.output_names) > 1:
        g, _ = kiln.optim.eliminate_common_subexpressions(g)
    out, n = fuse_gemm(g)
    assert n == 0 and "Gemm" not in ops(out)
