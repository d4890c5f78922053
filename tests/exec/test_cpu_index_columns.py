"""Fancy indexing with several index arrays (``a[rows, cols] = v``, ``a[rows, cols]``) records
a ``Concat`` of the index columns feeding a ScatterND/GatherND; the NumPy plan passes the
columns as a tuple (NumPy's own indexing) instead of joining them, with NumPy's results,
repeated indices ("last write wins"), negative indices and IndexError."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.exec.cpu import CpuPlan
from kiln.ir.builder import GraphBuilder
from kiln.ops.registry import TensorType

I64 = np.dtype("int64")
F64 = np.dtype("float64")


def _plan(fn, *args):
    graph = kiln.trace(fn, *args).graph
    graph.optimize()
    return CpuPlan(graph)


def _grid(p):
    ij = np.minimum((p * 8).astype(np.int64), 7)
    occ = np.zeros((8, 8), dtype=bool)
    occ[ij[:, 1], ij[:, 0]] = True
    return occ


def _picks(a, r, c):
    b = a.copy()
    b[r, c] = -1.0
    return a[r, c], b


def test_assignment_through_index_columns_equals_numpy():
    p = np.random.default_rng(0).random((500, 2))
    plan = _plan(_grid, p)
    assert "Concat" not in plan.source and "[..., 0]" in plan.source
    for seed in (1, 2):
        p = np.random.default_rng(seed).random((500, 2))
        np.testing.assert_array_equal(plan.run_arrays([p])[0], _grid(p))


def test_reads_and_writes_with_repeats_and_negative_indices():
    a = np.arange(30.0).reshape(5, 6)
    r = np.array([0, -1, 2, 2, 0], np.int64)
    c = np.array([1, 5, -2, -2, 1], np.int64)
    plan = _plan(_picks, a, r, c)
    for got, expected in zip(plan.run_arrays([a, r, c]), _picks(a, r, c)):
        np.testing.assert_array_equal(got, expected)
    with pytest.raises(IndexError):
        plan.run_arrays([a, np.array([0, 9, 0, 0, 0], np.int64), c])


def test_a_column_written_in_place_later_is_read_first():
    # The columns' buffer is written (in place, by the plan's rules) between the Concat and
    # the GatherND in graph order: the GatherND must read the columns as they were.
    b = GraphBuilder()
    data = b.add_input("data", TensorType(F64, (6, 6)))
    rows = b.add_input("rows", TensorType(I64, (4,)))
    cols = b.add_input("cols", TensorType(I64, (4,)))
    (one,) = [b.add_constant(np.array(1, np.int64))]
    (r,) = b.add("Add", [rows, one])  # a buffer of the run's own
    axis = b.add_constant(np.array([1], np.int64))
    (ru,) = b.add("Unsqueeze", [r, axis])
    (cu,) = b.add("Unsqueeze", [cols, axis])
    (index,) = b.add("Concat", [ru, cu], {"axis": -1})
    starts, ends = b.add_constant(np.array([0], np.int64)), b.add_constant(np.array([4], np.int64))
    (zeros,) = b.add("Mul", [r, b.add_constant(np.array(0, np.int64))])
    (r2,) = b.add("kiln.SliceUpdate", [r, zeros, starts, ends])  # r[0:4] = 0, in place if it may
    (picked,) = b.add("GatherND", [data, index])
    graph = b.graph("late", [picked, r2])
    plan = CpuPlan(graph)
    a = np.arange(36.0).reshape(6, 6)
    rows_in, cols_in = np.array([0, 1, 2, 3], np.int64), np.array([5, 4, 3, 2], np.int64)
    got, got_r = plan.run_arrays([a, rows_in, cols_in])
    np.testing.assert_array_equal(got, a[rows_in + 1, cols_in])
    np.testing.assert_array_equal(got_r, np.zeros(4, np.int64))
