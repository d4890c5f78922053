"""Reduction operators: infer on symbolic shapes, validation messages, and edge semantics
(empty reductions, TopK ties, CumSum exclusive/reverse). Values over the samples are checked by
tests/ops/test_samples.py."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.errors import OpArgumentError, OpTypeError
from kiln.ir.builder import GraphBuilder
from kiln.ops import get_op
from kiln.ops.dispatch import run_kernel
from kiln.ops.reduce import l2_whole
from kiln.ops.registry import TensorType
from kiln.symbolic import is_fresh, symbol
from kiln.tensor import dispatch

B, S = symbol("B"), symbol("S")
F32 = np.dtype(np.float32)
I64 = np.dtype(np.int64)


def _axes(*values, known=True) -> TensorType:
    return TensorType(I64, (len(values),), tuple(values) if known else None)


def _infer(op: str, types, **attrs):
    opdef = get_op(op)
    return opdef.infer(types, opdef.bind_attrs(attrs))


@pytest.mark.parametrize(
    "axes, keepdims, expected",
    [
        ((-1,), 0, (B, S)),
        ((-1,), 1, (B, S, 1)),
        ((0, 2), 0, (S,)),
        ((1,), 1, (B, 1, 4)),
    ],
)
def test_reduce_infer_symbolic(axes, keepdims, expected) -> None:
    data = TensorType(F32, (B, S, 4))
    for op in ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceLogSumExp"):
        (out,) = _infer(op, [data, _axes(*axes)], keepdims=keepdims)
        assert out.shape == expected and out.dtype == F32


def test_reduce_infer_omitted_and_empty_axes() -> None:
    data = TensorType(F32, (B, 3))
    assert _infer("ReduceSum", [data], keepdims=0)[0].shape == ()
    assert _infer("ReduceSum", [data, None], keepdims=1)[0].shape == (1, 1)
    empty = TensorType(I64, (0,), None)  # an empty axes tensor needs no known value
    assert _infer("ReduceSum", [data, empty], keepdims=0)[0].shape == ()
    noop = _infer("ReduceSum", [data, _axes()], keepdims=0, noop_with_empty_axes=1)
    assert noop[0].shape == (B, 3)


def test_reduce_axes_computed_at_run_time_give_fresh_sizes() -> None:
    # Which axes are reduced is known only when the graph runs: the rank follows from their
    # number, each size that may change is a fresh size (a static 1 stays 1 with keepdims).
    data = TensorType(F32, (B, 1, 4))
    (kept,) = _infer("ReduceSum", [data, _axes(1, known=False)], keepdims=1)
    assert len(kept.shape) == 3 and kept.shape[1] == 1
    assert all(is_fresh(d) for d in (kept.shape[0], kept.shape[2]))
    (dropped,) = _infer("ReduceMax", [data, _axes(1, 2, known=False)], keepdims=0)
    assert len(dropped.shape) == 1 and is_fresh(dropped.shape[0])
    with pytest.raises(OpArgumentError, match=r"ReduceSum: input 'axes' has 4 entries"):
        _infer("ReduceSum", [data, _axes(0, 1, 2, 3, known=False)], keepdims=0)


def test_reduce_axes_of_unknown_length_are_a_clear_error() -> None:
    data = TensorType(F32, (B, 3))
    axes = TensorType(I64, (S,))  # not even the number of axes is known: nor is the rank
    with pytest.raises(OpArgumentError, match=r"ReduceSum: input 'axes'.*constant_inputs="):
        _infer("ReduceSum", [data, axes], keepdims=0)


@pytest.mark.parametrize(
    "axes, keepdims", [((1,), 1), ((-1,), 0), ((0, 2), 0), ((2, 0), 1), ((-3, 1, 2), 0)]
)
def test_reduce_kernel_with_run_time_axes_matches_numpy(axes, keepdims) -> None:
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    (got,) = run_kernel(get_op("ReduceSum"), [x, np.array(axes, np.int64)], {"keepdims": keepdims})
    want = np.sum(x, axis=axes, keepdims=bool(keepdims))
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    "axes, words",
    [
        ((3,), r"ReduceSum: input 'axes' \[3\] is out of range for rank 3"),
        ((1, -2), "ReduceSum: input 'axes' .* repeats an axis"),
    ],
)
def test_reduce_kernel_checks_run_time_axes(axes, words) -> None:
    x = np.ones((2, 3, 4), np.float32)
    with pytest.raises(OpArgumentError, match=words):
        run_kernel(get_op("ReduceSum"), [x, np.array(axes, np.int64)], {})


def test_reduce_symbolic_axes_value_is_rejected() -> None:
    with pytest.raises(OpArgumentError, match="ReduceMax: input 'axes' must hold constant"):
        _infer("ReduceMax", [TensorType(F32, (2, 3)), TensorType(I64, (1,), (B,))])


@pytest.mark.parametrize("axes", [(2,), (-3,)])
def test_reduce_axes_out_of_range(axes) -> None:
    with pytest.raises(OpArgumentError, match=r"ReduceSum: axes=.*out of range.*rank 2"):
        _infer("ReduceSum", [TensorType(F32, (2, 3)), _axes(*axes)])


def test_reduce_axes_repeated_and_wrong_dtype() -> None:
    with pytest.raises(OpArgumentError, match="repeats an axis"):
        _infer("ReduceProd", [TensorType(F32, (2, 3)), _axes(1, -1)])
    with pytest.raises(OpTypeError, match="ReduceSum: input 'axes' must be int64, got int32"):
        _infer("ReduceSum", [TensorType(F32, (2, 3)), TensorType(np.dtype(np.int32), (1,), (0,))])


def test_reduce_dtype_constraints() -> None:
    with pytest.raises(OpTypeError, match="ReduceSum: input 'data' has dtype int8"):
        _infer("ReduceSum", [TensorType(np.dtype(np.int8), (2,))])
    # ReduceMax takes bool and 8-bit integers (opset 20).
    for dt in (np.bool_, np.int8, np.uint8):
        assert _infer("ReduceMax", [TensorType(np.dtype(dt), (2,))])[0].dtype == dt


def _run(op: str, *arrays, **attrs):
    outs = dispatch(op, [None if a is None else kiln.asarray(a) for a in arrays], attrs)
    return [np.asarray(o) for o in outs]


def test_empty_reductions_give_the_identity() -> None:
    empty = np.zeros((0, 2), np.float32)
    axes = np.asarray([0], np.int64)
    assert _run("ReduceMax", empty, axes, keepdims=0)[0].tolist() == [-np.inf, -np.inf]
    assert _run("ReduceMin", empty, axes, keepdims=0)[0].tolist() == [np.inf, np.inf]
    assert _run("ReduceMax", np.zeros((0,), np.int8), keepdims=0)[0] == -128
    assert _run("ReduceMin", np.zeros((0,), np.uint8), keepdims=0)[0] == 255
    assert not _run("ReduceMax", np.zeros((0,), np.bool_), keepdims=0)[0]
    assert _run("ReduceMin", np.zeros((0,), np.bool_), keepdims=0)[0]
    assert _run("ReduceSum", empty, axes, keepdims=0)[0].tolist() == [0, 0]
    assert _run("ReduceProd", empty, axes, keepdims=0)[0].tolist() == [1, 1]
    assert _run("ReduceLogSumExp", empty, axes, keepdims=0)[0].tolist() == [-np.inf, -np.inf]
    assert np.isnan(_run("ReduceMean", empty, axes, keepdims=0)[0]).all()


def test_noop_reduction_reduces_each_element() -> None:
    x = np.asarray([[-2.0, 3.0]], np.float32)
    none = np.zeros((0,), np.int64)
    assert _run("ReduceSumSquare", x, none, noop_with_empty_axes=1)[0].tolist() == [[4.0, 9.0]]
    assert _run("ReduceL1", x, none, noop_with_empty_axes=1)[0].tolist() == [[2.0, 3.0]]
    assert _run("ReduceSum", x, none, noop_with_empty_axes=1)[0].tolist() == [[-2.0, 3.0]]


def test_log_sum_exp_is_stable() -> None:
    x = np.asarray([1000.0, 1000.0, -np.inf], np.float32)
    (y,) = _run("ReduceLogSumExp", x, keepdims=0)
    assert np.isclose(y, 1000.0 + np.log(2.0))
    (z,) = _run("ReduceLogSumExp", np.full(3, -np.inf, np.float64), keepdims=0)
    assert z == -np.inf


def test_argmax_infer_symbolic_and_errors() -> None:
    (out,) = _infer("ArgMax", [TensorType(F32, (B, 5))], axis=-1, keepdims=0)
    assert out.shape == (B,) and out.dtype == I64
    (out,) = _infer("ArgMin", [TensorType(F32, (B, 5))], axis=0, keepdims=1)
    assert out.shape == (1, 5)
    with pytest.raises(OpArgumentError, match="ArgMax: attempt to get argmax of an empty"):
        _infer("ArgMax", [TensorType(F32, (0, 3))], axis=0)
    with pytest.raises(OpArgumentError, match="ArgMax: axis=2 is out of range"):
        _infer("ArgMax", [TensorType(F32, (2, 3))], axis=2)
    with pytest.raises(OpTypeError, match="ArgMin: input 'data' has dtype bool"):
        _infer("ArgMin", [TensorType(np.dtype(np.bool_), (2,))])


def test_argmax_select_last_index() -> None:
    x = np.asarray([[1, 3, 3, 0]], np.int32)
    assert _run("ArgMax", x, axis=1, keepdims=0)[0].tolist() == [1]
    assert _run("ArgMax", x, axis=1, keepdims=0, select_last_index=1)[0].tolist() == [2]


def test_cumsum_exclusive_and_reverse() -> None:
    x = np.asarray([1, 2, 3, 4], np.int64)
    axis = np.asarray(0, np.int64)
    assert _run("CumSum", x, axis)[0].tolist() == [1, 3, 6, 10]
    assert _run("CumSum", x, axis, exclusive=1)[0].tolist() == [0, 1, 3, 6]
    assert _run("CumSum", x, axis, reverse=1)[0].tolist() == [10, 9, 7, 4]
    assert _run("CumSum", x, axis, exclusive=1, reverse=1)[0].tolist() == [9, 7, 4, 0]


def test_cumsum_infer() -> None:
    x = TensorType(F32, (B, 3))
    unknown_axis = TensorType(I64, (), None)  # the output shape does not depend on it
    assert _infer("CumSum", [x, unknown_axis])[0].shape == (B, 3)
    with pytest.raises(OpArgumentError, match="CumSum: axis=2 is out of range"):
        _infer("CumSum", [x, TensorType(I64, (), (2,))])
    with pytest.raises(OpArgumentError, match="CumSum: input 'axis' must be a 0-d or one-element"):
        _infer("CumSum", [x, TensorType(I64, (2,), (0, 1))])


def test_topk_kernel_checks_a_run_time_k() -> None:
    x = np.arange(10, dtype=np.float32).reshape(2, 5)
    with pytest.raises(OpArgumentError, match=r"TopK: K=6 is out of range.*0 <= K <= 5"):
        run_kernel(get_op("TopK"), [x, np.asarray([6], np.int64)], {})


def test_topk_ties_keep_the_lower_index_first() -> None:
    x = np.asarray([[1, 3, 3, 0, 3]], np.int32)
    k = np.asarray([2], np.int64)
    values, indices = _run("TopK", x, k)
    assert values.tolist() == [[3, 3]] and indices.tolist() == [[1, 2]]
    values, indices = _run("TopK", np.asarray([2.0, 0.0, 2.0, 0.0], np.float32), k, largest=0)
    assert values.tolist() == [0.0, 0.0] and indices.tolist() == [1, 3]
    unsigned = np.asarray([5, 7, 7, 5], np.uint8)
    values, indices = _run("TopK", unsigned, np.asarray([3], np.int64))
    assert values.tolist() == [7, 7, 5] and indices.tolist() == [1, 2, 0]


def test_topk_infer() -> None:
    x = TensorType(F32, (B, 10))
    values, indices = _infer("TopK", [x, TensorType(I64, (1,), (3,))], axis=-1)
    assert values.shape == (B, 3) and indices.shape == (B, 3) and indices.dtype == I64
    # K computed from a symbolic size keeps that size.
    (values, _) = _infer("TopK", [TensorType(F32, (B, S)), TensorType(I64, (1,), (S,))])
    assert values.shape == (B, S)
    # K computed at run time: the size along the axis is a fresh size, shared by both outputs.
    values, indices = _infer("TopK", [x, TensorType(I64, (1,), None)], axis=-1)
    assert values.shape[0] == B and is_fresh(values.shape[1])
    assert indices.shape == values.shape
    with pytest.raises(OpArgumentError, match=r"TopK: K=11 is out of range.*0 <= K <= 10"):
        _infer("TopK", [x, TensorType(I64, (1,), (11,))])
    with pytest.raises(OpTypeError, match="TopK: input 'K' must be int64"):
        _infer("TopK", [x, TensorType(np.dtype(np.int32), (1,), (1,))])


# -- the NumPy engine's direct reduce calls (``fast_kernel``) ----------------------------------


@pytest.mark.parametrize(
    "op", ["ReduceSum", "ReduceProd", "ReduceMax", "ReduceMin", "ReduceSumSquare", "ReduceL2"]
)
@pytest.mark.parametrize(
    "dtype", ["float16", "float32", "float64", "int32", "int64", "uint32", "int8", "bool"]
)
@pytest.mark.parametrize(
    "shape, axes, keepdims, noop",
    [
        ((3, 4), (-1,), 0, 0),
        ((2, 3, 4), (2, 0), 1, 0),
        ((2, 3), None, 0, 0),
        ((2, 3), (), 1, 1),  # the reduction of each single element
        ((0, 3), (0,), 1, 0),  # an empty set: the identity
        ((3, 0), (1,), 0, 0),
    ],
)
def test_numpy_engine_reduce_calls_equal_the_kernel(op, dtype, shape, axes, keepdims, noop):
    """The plan's ``ufunc.reduce`` with the axes bound equals the registry kernel bit for bit
    (integer sums wrap in the dtype; NaN propagates; empty sets give the identity)."""
    opdef = get_op(op)
    dt = np.dtype(dtype)
    if not _allowed(op, dt):
        pytest.skip(f"{op} does not take {dtype}")
    rng = np.random.default_rng(3)
    if dt.kind == "b":
        x = rng.random(shape) > 0.5
    elif dt.kind in "iu":
        info = np.iinfo(dt)
        x = rng.integers(info.min // 2, info.max // 2, shape, endpoint=True).astype(dt)
    else:
        x = rng.standard_normal(shape).astype(dt) * 1e4  # float16 sums overflow to inf
        if x.size > 2:
            x.flat[1] = np.nan
    b = GraphBuilder()
    data = b.add_input("x", TensorType(dt, shape))
    inputs = [data] if axes is None else [data, b.add_constant(np.array(axes, np.int64))]
    (out,) = b.add(op, inputs, {"keepdims": keepdims, "noop_with_empty_axes": noop})
    graph = b.graph("g", [out])
    graph.finalize("numpy")
    (got,) = graph.run([x])
    attrs = opdef.bind_attrs({"keepdims": keepdims, "noop_with_empty_axes": noop})
    axes_in = None if axes is None else np.array(axes, np.int64)
    (want,) = run_kernel(opdef, [x, axes_in], attrs)
    got = np.asarray(got)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    fast = opdef.fast_kernel(graph.nodes[0].inputs, graph.nodes[0].outputs, attrs)
    if op in ("ReduceSumSquare", "ReduceL2") and dt.kind != "f":
        assert fast is None  # integer results are truncated back: the registry kernel
    elif op == "ReduceL2" and axes is None:
        assert fast is not None and l2_whole in fast.binds  # np.linalg.norm's dot product
    else:
        assert fast is not None and "reduce" in repr(fast.binds)  # the plan's direct call


def _allowed(op: str, dt: np.dtype) -> bool:
    try:
        get_op(op).infer([TensorType(dt, (2,))], get_op(op).bind_attrs({}))
    except OpTypeError:
        return False
    return True
