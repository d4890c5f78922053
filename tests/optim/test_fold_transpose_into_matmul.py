"""fold_transpose_into_matmul: a transposed matrix operand becomes Gemm's transA/transB."""

from __future__ import annotations

import numpy as np
import pytest

from kiln.optim import fold_transpose_into_matmul, fuse_gemm
from kiln.tensor import call

from ..numerics import assert_close
from .graphs import ops, run, traced

f32 = np.float32
RNG = np.random.default_rng(2)
A = RNG.standard_normal((3, 4)).astype(f32)
B = RNG.standard_normal((5, 3)).astype(f32)


def folded(fn, *inputs, **trace_kwargs):
    g = traced(fn, *inputs, **trace_kwargs)
    out, n = fold_transpose_into_matmul(g)
    out.verify()
    assert_close(run(out, *inputs)[0], run(g, *inputs)[0], rtol=1e-5, atol=1e-6)
    assert fold_transpose_into_matmul(out)[1] == 0
    return out, n


def _flags(graph):
    node = graph.nodes[-1]
    return node.attrs["transA"], node.attrs["transB"]


@pytest.mark.parametrize(
    "fn, flags",
    [
        (lambda a, b: a.T @ b.T, (1, 1)),
        (lambda a, b: np.matmul(a.T, b.T), (1, 1)),
        (lambda a, b: (b @ a).T @ b.T.T, (1, 0)),
    ],
)
def test_transposes_fold_into_gemm_flags(fn, flags):
    out, n = folded(fn, A, B)
    assert n >= 1 and ops(out)[-1] == "Gemm" and "Transpose" not in ops(out)
    assert _flags(out) == flags


def test_a_gemm_flag_flips_and_a_dynamic_axis_works():
    g = traced(lambda a, b: call("Gemm", a.T, b, transA=1), A.T.copy(), A)
    out, n = fold_transpose_into_matmul(g)
    assert n == 1 and ops(out) == ["Gemm"] and _flags(out) == (0, 0)
    w = RNG.standard_normal((5, 4)).astype(f32)
    out, _ = folded(lambda a, w: a @ w.T, A, w, dynamic_axes={"a": [0]})
    assert ops(out) == ["Gemm"] and _flags(out) == (0, 1)
    a = RNG.standard_normal((6, 4)).astype(f32)
    assert_close(run(out, a, w)[0], a @ w.T, rtol=1e-5, atol=1e-6)


def test_linear_with_a_bias_ends_as_one_gemm():
    w, b = RNG.standard_normal((5, 4)).astype(f32), RNG.standard_normal(5).astype(f32)
    g = traced(lambda x, w, b: x @ w.T + b, A, w, b)
    out, _ = fold_transpose_into_matmul(g)
    out, _ = fuse_gemm(out)
    out.verify()
    assert ops(out) == ["Gemm"] and _flags(out) == (0, 1)
    assert_close(run(out, A, w, b)[0], A @ w.T + b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "fn, args",
    [
        (lambda a, b: a[None].transpose(0, 2, 1) @ b[None].transpose(0, 2, 1), (A, B)),  # 3-D
        (lambda a, b: a @ b, (A, A.T.copy())),  # nothing transposed
        (lambda v, b: v @ b.T, (A[:, 0].copy(), B)),  # a vector operand: not a matrix product
    ],
)
def test_near_misses_are_left_alone(fn, args):
    g = traced(fn, *args)
    out, n = fold_transpose_into_matmul(g)
    assert n == 0 and "Gemm" not in ops(out)


def test_an_unused_product_that_may_not_contract_still_raises():
    # fuzz 34:479: a dead np.matmul(a.T, a.T) over symbolic sizes raises in NumPy when they
    # differ; folded into a Gemm, the node must still run (and raise) though unused
    import kiln

    def fn(a):
        np.matmul(a.T, a.T)
        return np.ceil(a.T)

    spec = kiln.TensorSpec(("A", "B"), kiln.float64)
    traced_fn = kiln.trace(fn, signature=[spec])
    traced_fn.optimize()
    assert "Gemm" in ops(traced_fn.graph)
    traced_fn.finalize()
    square = np.ones((3, 3))
    np.testing.assert_array_equal(traced_fn.graph.run([square])[0], np.ceil(square.T))
    with pytest.raises(ValueError, match="mismatch in its core dimension"):
        traced_fn.graph.run([np.ones((6, 1))])
