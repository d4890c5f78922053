"""The NumPy engine's plan over dynamic sizes: the generated input check (symbols, derived
sizes, shape guards compiled to Python once) and the steps computed from the inputs' sizes
(shape arithmetic and slices with symbolic bounds), each against NumPy and the full check."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import kiln
from kiln.errors import InputMismatchError
from kiln.exec.cpu import CpuPlan
from kiln.exec.inputs import ShapeGuardError
from kiln.ir.builder import GraphBuilder
from kiln.ops.registry import TensorType
from kiln.symbolic import symbol


def _paired_mean(x):
    n = x.shape[0]
    if n > 6:
        x = x[: n - n % 2]
        x = 0.5 * (x[0::2] + x[1::2])
    return x.mean(axis=0)


def _plan(fn, *arrays, axes):
    graph = kiln.trace(fn, *arrays, dynamic_axes=axes).graph
    return CpuPlan(graph)


def test_shape_arithmetic_and_slices_read_the_sizes():
    plan = _plan(_paired_mean, np.zeros((10, 3)), axes={0: [0]})
    # x[: n - n % 2] is basic slicing of the input with the bound computed from its size;
    # the Shape/Mod/Mul/Add/Concat steps that made the bound are gone.
    assert "x0[0:" in plan.source
    for op in ("Mod", "Concat", "Shape"):
        assert op not in str(plan.source)
    rng = np.random.default_rng(0)
    for n in (7, 8, 9, 12, 13, 101):
        x = rng.standard_normal((n, 3))
        (got,) = plan.run([x])
        expected = _paired_mean(x)
        np.testing.assert_array_equal(got.numpy(), expected)
        assert got.dtype == expected.dtype


def test_guard_is_checked_by_the_fast_path():
    plan = _plan(_paired_mean, np.zeros((10, 3)), axes={0: [0]})
    assert plan.check_inputs([np.zeros((8, 3))])[0].shape == (8, 3)
    with pytest.raises(ShapeGuardError, match="n > 6|d0 > 6|> 6"):
        plan.check_inputs([np.zeros((5, 3))])


@pytest.mark.parametrize(
    "bad, error",
    [
        (np.zeros((9, 4)), "axis 1: expected size 3"),
        (np.zeros((9, 3), np.float32), "expected dtype float64"),
        (np.zeros((9, 3, 1)), "expected rank 2"),
    ],
)
def test_fast_check_refuses_like_the_full_check(bad, error):
    plan = _plan(_paired_mean, np.zeros((10, 3)), axes={0: [0]})
    with pytest.raises(InputMismatchError, match=error):
        plan.check_inputs([bad])


def test_a_size_shared_by_two_inputs_must_agree():
    n = symbol("n")
    b = GraphBuilder()
    x = b.add_input("x", TensorType(np.dtype("float64"), (n, 2)))
    y = b.add_input("y", TensorType(np.dtype("float64"), (n, 2)))
    plan = CpuPlan(b.graph("shared", list(b.add("Add", [x, y], {}))))
    assert plan.check_inputs([np.zeros((6, 2)), np.zeros((6, 2))])[0].shape == (6, 2)
    with pytest.raises(InputMismatchError, match="breaks the symbolic size n"):
        plan.check_inputs([np.zeros((6, 2)), np.zeros((5, 2))])


def test_derived_input_size_is_checked():
    n = symbol("n")
    b = GraphBuilder()
    x = b.add_input("x", TensorType(np.dtype("float64"), (n,)))
    y = b.add_input("y", TensorType(np.dtype("float64"), (2 * n,)))
    (r,) = b.add("ReduceSum", [y], {})
    (out,) = b.add("Add", [x, r], {})
    plan = CpuPlan(b.graph("derived", [out]))
    assert len(plan.check_inputs([np.zeros(3), np.zeros(6)])) == 2
    with pytest.raises(InputMismatchError, match="expected size 2\\*n = 6, got 5"):
        plan.check_inputs([np.zeros(3), np.zeros(5)])


def test_division_by_a_size_stays_a_kernel():
    # n // m could divide by zero: computed by the kernel, as NumPy does, not by Python.
    def fn(x, y):
        return x[: x.shape[0] // y.shape[0]]

    plan = _plan(fn, np.arange(12.0), np.zeros(4), axes={0: [0], 1: [0]})
    for n, m in ((12, 4), (12, 5), (3, 7)):
        x = np.arange(float(n))
        (got,) = plan.run([x, np.zeros(m)])
        np.testing.assert_array_equal(got.numpy(), fn(x, np.zeros(m)))


def test_compiled_replay_after_drift_matches_numpy():
    f = kiln.compile(_paired_mean)
    rng = np.random.default_rng(1)
    for n in (10, 12, 14, 15, 16, 31):
        x = rng.standard_normal((n, 5))
        np.testing.assert_array_equal(f(x), _paired_mean(x))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.float16])
@pytest.mark.parametrize("axis, keepdims", [(0, False), (-1, True), ((0, 1), False)])
def test_a_mean_over_a_symbolic_size_counts_it_at_run_time(dtype, axis, keepdims):
    def fn(x):
        return x.mean(axis=axis, keepdims=keepdims)

    plan = _plan(fn, np.zeros((6, 4), dtype), axes={0: [0, 1]})
    assert "shape[" in plan.source  # the count is read off the data's shape
    rng = np.random.default_rng(2)
    for shape in ((6, 4), (1, 3), (7, 1), (0, 4), (3, 0)):
        x = (rng.standard_normal(shape) * 100).astype(dtype)
        with warnings.catch_warnings():  # (an empty mean is NaN, with NumPy's warning)
            warnings.simplefilter("ignore", RuntimeWarning)
            expected = fn(x)
        (got,) = plan.run([x])
        assert got.dtype == expected.dtype and got.shape == expected.shape
        np.testing.assert_array_equal(got.numpy(), expected)
