"""forward_scatter_reads: a read of constant positions of a write reads the updates (or the
old data) directly."""

from __future__ import annotations

import numpy as np
import pytest

from kiln.functions.shape import index_update
from kiln.ir.builder import GraphBuilder
from kiln.ops.registry import TensorType
from kiln.optim import eliminate_dead_code, fold_constants, fold_shapes, simplify_algebra
from kiln.optim.forward_scatter_reads import forward_scatter_reads

from ..numerics import assert_close
from .graphs import ops, run, traced

RNG = np.random.default_rng(14)
DTYPES = [np.float32, np.float64, np.int32, np.bool_]
WRITTEN = np.array([0, -2, 5, 0])  # position 0 twice: the last write wins


def prepared(fn, *args):
    g = traced(fn, *args)
    g.optimize([fold_shapes, fold_constants, simplify_algebra, eliminate_dead_code])
    return g


def forwarded(g):
    out, n = forward_scatter_reads(g)
    out.verify()
    assert forward_scatter_reads(out)[1] == 0  # idempotent
    return out, n


def sample(shape, dtype):
    return (RNG.standard_normal(shape) * 4).astype(dtype)


def write_then_read(read):
    def f(x, v):
        y = index_update(x, WRITTEN, v)
        return y[read]

    return f


def numpy_write_then_read(read, x, v):
    y = x.copy()
    y[WRITTEN] = v
    return y[read]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "read, source",
    [
        (np.array([4, 0, -6]), "v"),  # all written (4 is -2)
        (np.array([[0], [5]]), "v"),  # an index of another shape
        (np.array([1, 2, -3]), "x"),  # none written
    ],
)
def test_reads_forwarded(dtype, read, source):
    x, v = sample((6,), dtype), sample((4,), dtype)
    g = prepared(write_then_read(read), x, v)
    assert ops(g) == ["ScatterND", "Gather"]
    out, n = forwarded(g)
    assert n == 1 and ops(out) == ["Gather"]
    assert out.nodes[0].inputs[0].name == source  # the scatter itself is gone
    x2, v2 = sample((6,), dtype), sample((4,), dtype)
    assert_close(run(out, x2, v2)[0], numpy_write_then_read(read, x2, v2))
    assert_close(run(out, x2, v2)[0], run(g, x2, v2)[0])


def test_a_read_of_written_and_old_positions_is_left_alone():
    g = prepared(
        write_then_read(np.array([0, 1])), sample((6,), np.float32), sample((4,), np.float32)
    )
    out, n = forward_scatter_reads(g)
    assert n == 0 and out is g


def test_the_scatter_stays_while_something_else_reads_it():
    def f(x, v):
        y = index_update(x, WRITTEN, v)
        return y[np.array([5])], y * 2

    x, v = sample((6,), np.float32), sample((4,), np.float32)
    out, n = forwarded(prepared(f, x, v))
    assert n == 1 and ops(out).count("ScatterND") == 1
    y = x.copy()
    y[WRITTEN] = v
    got = run(out, x, v)
    assert_close(got[0], y[[5]])
    assert_close(got[1], y * 2)


@pytest.mark.parametrize("size", [0, 1])
def test_sizes_zero_and_one(size):
    def f(x, v):
        y = index_update(x, slice(0, size), v)
        return y[np.arange(size)]

    x, v = sample((size,), np.float64), sample((size,), np.float64)
    out, _ = forwarded(prepared(f, x, v))
    assert "ScatterND" not in ops(out)
    assert_close(run(out, x, v)[0], v.copy())


def _gather_nd_graph(cells, read):
    """``GatherND(ScatterND(x, cells, u), read)`` over a float32 (3, 4, 2) input (blocks of 2)."""
    f32 = np.dtype(np.float32)
    b = GraphBuilder()
    x = b.add_input("x", TensorType(f32, (3, 4, 2)))
    u = b.add_input("u", TensorType(f32, (len(cells), 2)))
    (y,) = b.add("ScatterND", [x, b.add_constant(np.array(cells, np.int64)), u])
    (z,) = b.add("GatherND", [y, b.add_constant(np.array(read, np.int64))])
    return b.graph("g", [z])


@pytest.mark.parametrize(
    "read, op",
    [([[2, -1], [0, 1], [2, 3]], "Gather"), ([[[1, 1]], [[0, 0]]], "GatherND")],
)
def test_gather_nd_by_hand(read, op):
    cells = [[0, 1], [2, 3], [1, 2]]
    g = _gather_nd_graph(cells, read)
    out, n = forwarded(g)
    assert n == 1 and ops(out) == [op]
    x, u = sample((3, 4, 2), np.float32), sample((3, 2), np.float32)
    y = x.copy()
    y[tuple(np.array(cells).T)] = u
    expected = y[tuple(np.moveaxis(np.array(read), -1, 0))]
    assert_close(run(out, x, u)[0], expected)
    assert_close(run(out, x, u)[0], run(g, x, u)[0])


def test_gather_on_another_axis_is_left_alone():
    f32 = np.dtype(np.float32)
    b = GraphBuilder()
    x = b.add_input("x", TensorType(f32, (3, 4)))
    u = b.add_input("u", TensorType(f32, (1, 4)))
    (y,) = b.add("ScatterND", [x, b.add_constant(np.array([[1]], np.int64)), u])
    (z,) = b.add("Gather", [y, b.add_constant(np.array([0, 2], np.int64))], {"axis": 1})
    g = b.graph("g", [z])
    assert forward_scatter_reads(g)[1] == 0


@pytest.mark.parametrize(
    "read, source", [(slice(4, 6), "v"), (slice(-2, None, -4), "v"), (slice(1, 4), "x")]
)
def test_slices_forwarded(read, source):
    x, v = sample((6,), np.int32), sample((4,), np.int32)
    g = prepared(write_then_read(read), x, v)
    assert ops(g) == ["ScatterND", "Slice"]
    out, n = forwarded(g)
    assert n == 1 and ops(out) == ["Gather" if source == "v" else "Slice"]
    assert out.nodes[0].inputs[0].name == source
    assert_close(run(out, x, v)[0], numpy_write_then_read(read, x, v))


def test_a_recurrence_reads_the_previous_update():
    def f(x):
        out = x
        for i in range(1, 4):
            out = index_update(out, slice(i, i + 1), out[i - 1 : i] * 3)
        return out

    x = sample((4,), np.float64)
    g = prepared(f, x)
    assert ops(g).count("Slice") == 3
    out, n = forwarded(g)
    assert n == 2  # the first read is of x itself
    expected = x.copy()
    for i in range(1, 4):
        expected[i : i + 1] = expected[i - 1 : i] * 3
    assert_close(run(out, x)[0], expected)


def test_scatter_elements_reads_forwarded():
    f32 = np.dtype(np.float32)
    b = GraphBuilder()
    x = b.add_input("x", TensorType(f32, (6,)))
    u = b.add_input("u", TensorType(f32, (3,)))
    (y,) = b.add("ScatterElements", [x, b.add_constant(np.array([1, 4, 1])), u], {"axis": 0})
    (z,) = b.add("Gather", [y, b.add_constant(np.array([1, -2]))], {"axis": 0})
    g = b.graph("g", [z])
    out, n = forwarded(g)
    assert n == 1 and ops(out) == ["Gather"] and out.nodes[0].inputs[0].name == "u"
    xv, uv = sample((6,), np.float32), sample((3,), np.float32)
    y = xv.copy()
    y[[1, 4, 1]] = uv
    assert_close(run(out, xv, uv)[0], y[[1, -2]])


@pytest.mark.parametrize("read, source", [((1, 3), "u"), ((3, 4), None), ((0, 2), None)])
def test_slice_update_reads_forwarded(read, source):
    # y = x.copy(); y[1:3] = u; y[a:b]: rows 1..2 were written. A read of rows the box did not
    # write stays on y (a plan writes the box in x's buffer when nothing reads x afterwards).
    f32, i64 = np.dtype(np.float32), np.dtype(np.int64)
    b = GraphBuilder()
    x = b.add_input("x", TensorType(f32, (4, 2)))
    u = b.add_input("u", TensorType(f32, (2, 2)))
    box = [b.add_constant(np.array([v], i64)) for v in (1, 3, 0)]
    (y,) = b.add("kiln.SliceUpdate", [x, u, *box])
    bounds = [b.add_constant(np.array([v], i64)) for v in (*read, 0)]
    (z,) = b.add("Slice", [y, *bounds])
    g = b.graph("g", [z])
    out, n = forward_scatter_reads(g)
    out.verify()
    assert n == int(source is not None)
    if source is not None:
        assert "kiln.SliceUpdate" not in ops(out)
        read_inputs = {v.name for node in out.nodes for v in node.inputs if v is not None}
        assert read_inputs & {"x", "u"} == {source}
    xv, uv = sample((4, 2), np.float32), sample((2, 2), np.float32)
    yv = xv.copy()
    yv[1:3] = uv
    assert_close(run(out, xv, uv)[0], yv[read[0] : read[1]])


@pytest.mark.parametrize(
    "read, source",
    [
        (np.array([0, 1]), "u0"),  # written by the first of three writes
        (np.array([7]), "x"),  # written by none
        (np.array([4, 2]), "u1"),  # by the second
        (np.array([1, 2]), "scatter_nd_1"),  # partly by the first and the second: version 2
    ],
)
def test_reads_go_back_through_versions_in_one_pass(read, source):
    writes = [[0, 1], [2, 3, 4], [5, 6]]
    f32 = np.dtype(np.float32)
    b = GraphBuilder()
    y = b.add_input("x", TensorType(f32, (8,)))
    for n, index in enumerate(writes):
        u = b.add_input(f"u{n}", TensorType(f32, (len(index),)))
        (y,) = b.add("ScatterND", [y, b.add_constant(np.array(index).reshape(-1, 1)), u])
    (z,) = b.add("Gather", [y, b.add_constant(read)], {"axis": 0})
    g = b.graph("g", [z])
    out, n = forwarded(g)
    assert n == 1
    read_from = [v.name for node in out.nodes for v in node.inputs if v is not None]
    assert source in read_from
    args = [sample((8,), np.float32)] + [sample((len(i),), np.float32) for i in writes]
    y = args[0].copy()
    for index, u in zip(writes, args[1:]):
        y[index] = u
    assert_close(run(out, *args)[0], y[read])


@pytest.mark.parametrize("row", [3, 70_000])  # a row longer than the folding limit too
def test_a_row_recurrence_reads_the_previous_row_whatever_its_length(row):
    # out[i] = out[i - 1] * 2 + x[i]: a box that takes whole rows addresses rows only, so the
    # positions are counted per row and the read forwards however long the rows are
    f64, i64 = np.dtype(np.float64), np.dtype(np.int64)
    b = GraphBuilder()
    x = b.add_input("x", TensorType(f64, (3, row)))
    (out,) = b.add("Identity", [x])
    axis = b.add_constant(np.array([0], i64))
    for i in (1, 2):
        before = [b.add_constant(np.array([v], i64)) for v in (i - 1, i)]
        here = [b.add_constant(np.array([v], i64)) for v in (i, i + 1)]
        (prev,) = b.add("Slice", [out, *before, axis])
        (xi,) = b.add("Slice", [x, *here, axis])
        (scaled,) = b.add("Mul", [prev, b.add_constant(np.array(2.0))])
        (value,) = b.add("Add", [scaled, xi])
        (out,) = b.add("kiln.SliceUpdate", [out, value, *here, axis])
    g = b.graph("g", [out])
    result, n = forwarded(g)
    assert n == 1  # the second row's read (the first reads x's own row through Identity)
    written = {id(node.outputs[0]) for node in result.nodes if node.op == "kiln.SliceUpdate"}
    assert not any(id(node.inputs[0]) in written for node in result.nodes if node.op == "Slice")
    xv = sample((3, row), np.float64)
    want = xv.copy()
    for i in (1, 2):
        want[i] = want[i - 1] * 2 + xv[i]
    assert_close(run(result, xv)[0], want)


@pytest.mark.parametrize(
    "positions, distinct",
    [([3, 1, 2], True), ([1, 1], False), ([], True), ([5], True), ([[0, 2], [1, 2]], False)],
)
def test_written_positions_are_told_distinct_as_np_unique_would(positions, distinct):
    # (np.unique's first call imports numpy.ma: tens of milliseconds of a first call)
    from kiln.optim.forward_scatter_reads import _distinct

    array = np.array(positions, np.int64)
    assert _distinct(array) is distinct
    assert distinct == (len(np.unique(array)) == array.size)
