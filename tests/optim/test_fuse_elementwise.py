"""fuse_elementwise and the kiln.FusedElementwise operator it produces."""

from __future__ import annotations

import math

import numpy as np
import pytest

import kiln
from kiln.errors import OpArgumentError
from kiln.ir import expand_node
from kiln.ir.graph import NameScope
from kiln.ops.registry import get_op
from kiln.optim import fuse_elementwise
from kiln.optim.fuse_elementwise import MIN_ELEMENTS, fuse_elementwise_regions
from kiln.tensor import call, dispatch

from ..numerics import assert_close
from .graphs import ops, run, traced

f32 = np.float32
RNG = np.random.default_rng(8)
FUSED = "kiln.FusedElementwise"


def gelu(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)))


def fused(fn, *inputs, min_elements=1, **trace_kwargs):
    g = traced(fn, *inputs, **trace_kwargs)
    out, n = fuse_elementwise_regions(g, min_elements)
    out.verify()
    assert out.output_names == g.output_names
    for got, want in zip(run(out, *inputs), run(g, *inputs)):
        assert_close(got, want, rtol=1e-6, atol=1e-6)
    assert fuse_elementwise_regions(out, min_elements)[1] == 0
    return out, n


def test_a_chain_becomes_one_node():
    x = RNG.standard_normal((4, 8)).astype(f32)
    out, n = fused(gelu, x)
    assert n == 1 and ops(out) == [FUSED]
    assert len(out.nodes[0].attrs["program"]) == 9


def test_regions_stop_at_other_operators_and_shared_values():
    x = RNG.standard_normal((4, 8)).astype(f32)

    def f(x):
        a = np.exp(x) * 2.0
        s = a.sum(axis=-1, keepdims=True)  # a reduction splits the graph
        b = np.tanh(a / s) + 1.0
        return b, a  # `a` is also an output: it cannot be an intermediate

    out, n = fused(f, x)
    assert ops(out) == [FUSED, "ReduceSum", FUSED]


def test_dynamic_axes_and_the_size_threshold():
    x = RNG.standard_normal((3, 64, 512)).astype(f32)  # 64 * 512 = MIN_ELEMENTS
    g = traced(gelu, x, dynamic_axes={"x": [0]})
    out, n = fuse_elementwise(g)
    assert n == 1 and ops(out) == [FUSED]
    small = traced(gelu, x[:, :8], dynamic_axes={"x": [0]})
    assert fuse_elementwise(small)[1] == 0  # 8 * 512 elements: NumPy's overhead is small
    assert MIN_ELEMENTS == 64 * 512
    bigger = RNG.standard_normal((5, 64, 512)).astype(f32)
    assert_close(run(out, bigger)[0], run(g, bigger)[0], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    "fn, dtype",
    [
        (lambda x: np.where(x > 0, x * 2, -x), np.int32),
        (lambda x: np.maximum(x, 1) * x - 3, np.int64),
        (lambda x: np.sqrt(np.abs(x)) / (1.0 + np.exp(-x)), np.float64),
        (lambda x: (x > 0) & ~(x < 1), np.float32),
    ],
)
def test_dtypes_numexpr_handles(fn, dtype):
    x = (RNG.standard_normal((5, 6)) * 3).astype(dtype)
    out, n = fused(fn, x)
    assert n == 1 and ops(out) == [FUSED]


@pytest.mark.parametrize(
    "fn, dtype",
    [
        (lambda x: (x * x + 1) // 3, np.int32),  # integer division truncates
        (lambda x: np.exp(x) * 2 + 1, np.float16),  # numexpr has no float16
        (lambda x: call("Erf", x * 2) + 1, np.float32),  # nor erf
    ],
)
def test_operators_numexpr_lacks_are_not_fused(fn, dtype):
    x = RNG.standard_normal((5, 6)).astype(dtype)
    g = traced(fn, x)
    out, n = fuse_elementwise_regions(g, 1)
    assert FUSED not in ops(out) or len(out.nodes[0].attrs["program"]) < len(g.nodes)


def test_the_kernel_falls_back_step_by_step_and_expands_to_onnx_nodes():
    op = get_op(FUSED)
    program = ("Div(v0, v1)", "Erf(v2)", "Mul(v3, v0)")
    x = RNG.standard_normal((3, 4)).astype(np.float16)
    two = np.asarray(2.0, np.float16)
    (y,) = dispatch(op, [kiln.asarray(x), kiln.asarray(two)], {"program": program})
    expected = np.vectorize(lambda v: math.erf(v / 2) * v)(x.astype(np.float64))
    assert_close(y, expected.astype(np.float16))
    g = traced(lambda x: call(FUSED, x, kiln.asarray(two), program=program), x)
    nodes = expand_node(g.nodes[0], NameScope(v.name for v in g.values()))
    assert [n.op for n in nodes] == ["Div", "Erf", "Mul"]
    assert nodes[-1].outputs[0] is g.nodes[0].outputs[0]


@pytest.mark.parametrize(
    "program, message",
    [
        ((), "empty"),
        (("Mul(v0, v5)",), "not computed yet"),
        (("MatMul(v0, v0)",), "not a one-output elementwise"),
        (("Nope(v0)",), "no operator"),
        (("Mul(v0 v0)",), "form"),
    ],
)
def test_bad_programs_are_rejected(program, message):
    with pytest.raises(OpArgumentError, match=message):
        call(FUSED, kiln.ones((2,), "float32"), program=program)
