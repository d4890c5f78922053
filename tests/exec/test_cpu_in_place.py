"""The NumPy plan computes in buffers it allocated when nothing reads them afterwards: squares
for a ReduceSumSquare, mask writes (Where) and box writes; results stay NumPy's bit for bit."""

from __future__ import annotations

import re

import numpy as np
import pytest

import kiln
from kiln.exec.cpu import CpuPlan


def _plan(fn, *args):
    graph = kiln.trace(fn, *args).graph
    graph.optimize()
    return CpuPlan(graph)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("axis, keepdims", [(0, False), (1, True), (None, False), ((0, 1), True)])
def test_variance_squares_in_place_equal_numpy(dtype, axis, keepdims):
    x = (np.random.default_rng(0).standard_normal((300, 40)) * 3).astype(dtype)

    def var(x):
        return np.var(x, axis=axis, keepdims=keepdims), np.std(x * 2, axis=axis)

    plan = _plan(var, x)
    # the deviations are squared in their own buffer: k(v, v, out=v)
    assert re.search(r"k\d+\((v\d+), \1, out=\1\)", plan.source), plan.source
    got_var, got_std = plan.run_arrays([x.copy()])
    want_var, want_std = var(x)
    np.testing.assert_array_equal(got_var, want_var)
    np.testing.assert_array_equal(got_std, want_std)
    assert got_var.dtype == want_var.dtype and got_var.shape == want_var.shape


def test_squares_of_a_value_read_later_are_not_written_in_place():
    x = np.random.default_rng(1).standard_normal((200, 30))

    def both(x):
        d = x - 1.0
        return (d * d).sum(axis=0), d  # d is an output: its buffer must stay d

    plan = _plan(both, x)
    sums, d = plan.run_arrays([x.copy()])
    np.testing.assert_array_equal(d, x - 1.0)
    np.testing.assert_array_equal(sums, ((x - 1.0) ** 2).sum(axis=0))


def test_mask_writes_run_in_the_buffer_they_write():
    x = np.random.default_rng(2).standard_normal(5000)

    def clip_masks(x):
        y = x * 2
        y[y > 1] = 1.0
        y[y < -1] = -1.0
        return y

    plan = _plan(clip_masks, x)
    given = x.copy()
    (got,) = plan.run_arrays([given])
    np.testing.assert_array_equal(got, np.clip(x * 2, -1, 1))
    np.testing.assert_array_equal(given, x)  # the input is never written by the pure run


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.bool_])
def test_the_mask_write_kernel_is_numpys_mask_assignment(dtype):
    # One value and a mask of the data's shape: data[cond] = value; anything else: copyto.
    from kiln.exec.cpu import _where_into

    rng = np.random.default_rng(5)
    data = (rng.standard_normal((6, 7)) * 4).astype(dtype)
    for cond in (data > 1, np.zeros((6, 7), bool), np.ones((6, 7), bool), (data > 0)[0]):
        for values in (np.array(3, dtype), (rng.standard_normal(7) * 4).astype(dtype)):
            expected = np.where(cond, values, data)
            buffer = data.copy()
            got = _where_into(cond, values, buffer)
            assert got is buffer and got.dtype == expected.dtype
            np.testing.assert_array_equal(got, expected)
    frozen = data.copy()
    frozen.flags.writeable = False
    got = _where_into(frozen > 1, np.array(3, dtype), frozen)
    assert got is not frozen
    np.testing.assert_array_equal(got, np.where(frozen > 1, np.array(3, dtype), frozen))


def test_rows_of_a_fill_are_computed_in_the_result():
    x = np.random.default_rng(3).standard_normal((6, 50))
    a = np.random.default_rng(4).standard_normal(50)

    def recurrence(x, a):
        out = np.empty_like(x)
        out[0] = x[0]
        for i in range(1, x.shape[0]):
            out[i] = out[i - 1] * a + x[i]  # each row read by the next one, then kept
        return out, out[2] * 1.0

    plan = _plan(recurrence, x, a)
    assert re.search(r"out=v\d+\[k\d+\]\.reshape", plan.source), plan.source
    got, row = plan.run_arrays([x.copy(), a.copy()])
    want, want_row = recurrence(x, a)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(row, want_row)
    assert not np.shares_memory(got, row)


def test_a_concat_part_that_is_also_a_result_is_not_computed_in_place():
    x = np.random.default_rng(5).standard_normal((4, 8))

    def parts(x):
        top = x[:2] * 2.0
        return np.concatenate([top, x[2:] + 1.0]), top

    plan = _plan(parts, x)
    joined, top = plan.run_arrays([x.copy()])
    np.testing.assert_array_equal(joined, np.concatenate([x[:2] * 2.0, x[2:] + 1.0]))
    np.testing.assert_array_equal(top, x[:2] * 2.0)
    assert not np.shares_memory(joined, top)


def _central(y):
    d = np.empty_like(y)
    d[1:-1] = (y[2:] - y[:-2]) / 0.2
    d[0] = (y[1] - y[0]) / 0.1
    d[-1] = (y[-1] - y[-2]) / 0.1
    return d


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_ufunc_chain_written_into_a_box_is_computed_there(dtype):
    y = np.random.default_rng(2).standard_normal(20_000).astype(dtype)
    plan = CpuPlan(kiln.trace(_central, y).graph)  # as recorded: the writes are SliceUpdates
    # Sub and Div both compute into the box d[1:-1] of the preallocated result (no buffer of
    # their own copied there afterwards), as NumPy's assignment does.
    assert len(re.findall(r"out=v\d+\[k\d+\]", plan.source)) == 2, plan.source
    for seed in (3, 4):
        y = np.random.default_rng(seed).standard_normal(20_000).astype(dtype)
        (got,) = plan.run_arrays([y])
        expected = _central(y)
        assert got.dtype == expected.dtype
        np.testing.assert_array_equal(got, expected)


def test_a_box_update_reading_its_own_buffer_is_not_computed_in_the_box():
    def shift(y):
        d = np.sqrt(y)  # a buffer of the run's own
        d[1:] = d[:-1] * 2.0  # reads the old contents it overwrites, shifted by one
        return d

    y = np.arange(10_000, dtype=np.float64)
    plan = CpuPlan(kiln.trace(shift, y).graph)
    # Not np.multiply(d[:-1], 2, out=d[1:]): NumPy would copy the overlapping operand first
    # (a stencil reading its own box was 1.5x slower so), so the product keeps its buffer.
    assert not re.search(r"out=v\d+\[k\d+\]", plan.source), plan.source
    np.testing.assert_array_equal(plan.run_arrays([y])[0], shift(y))


def test_a_buffer_read_before_the_write_keeps_its_old_contents():
    def fill(y):
        d = np.ones_like(y)
        u = np.exp(y[1:])
        s = d * 3.0  # reads d before the write below
        d[1:] = u
        return d, s

    y = np.linspace(-1, 1, 10_000)
    plan = CpuPlan(kiln.trace(fill, y).graph)
    assert "out=" not in plan.source  # the exp waits in its own buffer
    for got, expected in zip(plan.run_arrays([y]), fill(y)):
        np.testing.assert_array_equal(got, expected)


def test_a_box_update_that_broadcasts_is_not_computed_in_place():
    def fill(y):
        d = np.zeros((8, 5000))
        d[2:4] = np.sin(y)  # (5000,) broadcast over two rows
        return d

    y = np.linspace(0, 3, 5000)
    plan = _plan(fill, y)
    np.testing.assert_array_equal(plan.run_arrays([y])[0], fill(y))


def _vandermonde(x):
    v = np.empty((x.shape[0], 5))
    v[:, 0] = 1.0
    for k in range(1, 5):
        v[:, k] = v[:, k - 1] * x
    return v


@pytest.mark.parametrize(
    "fn, in_box",
    [
        (_vandermonde, 4),  # reads column k - 1 while writing column k: disjoint boxes
        (lambda x: _column_update(x, lambda d: d[:, 1] * 2.0), 0),  # reads the box it writes
        # A step after the first reads d: the chain starts there (the Mul keeps its buffer).
        (lambda x: _column_update(x, lambda d: d[:, 0] * 2.0 + d[:, 2]), 1),
        (lambda x: _column_update(x, lambda d: d[:, 0] * 2.0 + x), 2),  # only the first reads d
        # The sum read the box before: the Mul that writes it reads only the sum and x.
        (lambda x: _column_update(x, lambda d: d[:, 0:2].sum(axis=1) * x), 1),
    ],
)
def test_a_ufunc_reading_its_own_buffer_beside_the_box_computes_in_the_box(fn, in_box):
    x = np.random.default_rng(3).standard_normal(8_000)
    plan = CpuPlan(kiln.trace(fn, x).graph)
    assert len(re.findall(r"out=v\d+\[k\d+\]", plan.source)) == in_box, plan.source
    for seed in (4, 5):
        x = np.random.default_rng(seed).standard_normal(8_000)
        (got,) = plan.run_arrays([x])
        np.testing.assert_array_equal(got, fn(x))


def _column_update(x, value):
    d = x[:, None] * np.array([1.0, 2.0, 3.0])  # a buffer of the run's own
    d[:, 1] = value(d)
    return d


def _numpy_softmax(x, axis, log):
    e = x - x.max(axis=axis, keepdims=True)
    if log:
        return e - np.log(np.exp(e).sum(axis=axis, keepdims=True))
    e = np.exp(e)
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize(
    "shape, axis", [((400, 33), 1), ((50, 6, 70), 0), ((3, 0), 0), ((0, 5), 1)]
)
def test_softmax_writes_into_a_dead_input_buffer(dtype, log, shape, axis):
    x = (np.random.default_rng(3).standard_normal(shape) * 20).astype(dtype)
    if x.size:
        x.flat[0] = np.nan  # its row or column is NaN, as in NumPy

    def softmax(x):  # NumPy code (fused to one Softmax), or kiln.nn's LogSoftmax
        if log and isinstance(x, kiln.Tensor):
            return kiln.nn.log_softmax(x * 2, axis=axis)
        return _numpy_softmax(x * 2, axis, log)

    plan = _plan(softmax, x)
    assert [n.op for n in plan.graph.nodes] == ["Mul", "LogSoftmax" if log else "Softmax"]
    if x.size:  # (a large buffer, the only one in use)
        assert re.search(r"k\d+\((v\d+), axis=k\d+, log=k\d+, out=\1\)", plan.source), plan.source
    with np.errstate(invalid="ignore"):
        want = softmax(x)
    (got,) = plan.run_arrays([x.copy()])
    np.testing.assert_array_equal(got, want)
    assert got.dtype == want.dtype and got.shape == want.shape
