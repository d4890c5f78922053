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
