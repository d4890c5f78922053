"""fold_scatters: chains of constant-index writes become one scatter, last write winning."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.errors import KilnError
from kiln.functions.shape import index_update
from kiln.ir.builder import GraphBuilder
from kiln.ops.registry import TensorType
from kiln.optim import eliminate_dead_code, fold_constants, fold_shapes, simplify_algebra
from kiln.optim.fold_scatters import fold_scatters

from ..numerics import assert_close
from .graphs import ops, run, traced

RNG = np.random.default_rng(12)
DTYPES = [np.float32, np.float64, np.int32, np.bool_]


def prepared(fn, *args):
    """The recorded graph with its index arithmetic folded to constants (what the pipeline
    hands this pass)."""
    g = traced(fn, *args)
    g.optimize([fold_shapes, fold_constants, simplify_algebra, eliminate_dead_code])
    return g


def folded(g):
    out, n = fold_scatters(g)
    out.verify()
    assert fold_scatters(out)[1] == 0  # idempotent
    return out, n


def sample(shape, dtype):
    return (RNG.standard_normal(shape) * 4).astype(dtype)


def fill_rows(buf, x):
    for i in range(x.shape[0]):
        buf = index_update(buf, i, x[i] * 2)
    return buf


@pytest.mark.parametrize("dtype", DTYPES)
def test_fill_loop_becomes_one_scatter(dtype):
    buf, x = sample((5, 3), dtype), sample((5, 3), dtype)
    g = prepared(fill_rows, buf, x)
    assert ops(g).count("ScatterND") == 5
    out, n = folded(g)
    assert n == 1 and ops(out).count("ScatterND") == 1 and ops(out).count("Concat") == 1
    buf2, x2 = sample((5, 3), dtype), sample((5, 3), dtype)
    expected = buf2.copy()
    for i in range(5):
        expected[i] = x2[i] * 2
    assert_close(run(out, buf2, x2)[0], expected)
    assert_close(run(out, buf2, x2)[0], run(g, buf2, x2)[0])


def overlapping(buf, a, b, c):
    buf = index_update(buf, slice(1, 4), a)  # rows 1..3
    buf = index_update(buf, slice(3, 6), b)  # rewrites row 3
    return index_update(buf, np.array([0, 7, 0]), c)  # repeats row 0: the last one wins


def numpy_overlapping(buf, a, b, c):
    out = buf.copy()
    out[1:4] = a
    out[3:6] = b
    out[np.array([0, 7, 0])] = c
    return out


@pytest.mark.parametrize("dtype", DTYPES)
def test_overlaps_and_repeats_keep_the_last_write(dtype):
    args = [sample(s, dtype) for s in [(8, 2), (3, 2), (3, 2), (3, 2)]]
    g = prepared(overlapping, *args)
    out, n = folded(g)
    assert n == 1 and ops(out).count("ScatterND") == 1
    (scatter,) = [node for node in out.nodes if node.op == "ScatterND"]
    index = {id(c.value): c.data for c in out.constants}[id(scatter.inputs[1])]
    assert len(np.unique(index)) == len(index)  # the folded indices never repeat
    new = [sample(s, dtype) for s in [(8, 2), (3, 2), (3, 2), (3, 2)]]
    assert_close(run(out, *new)[0], numpy_overlapping(*new))
    assert_close(run(out, *new)[0], run(g, *new)[0])


def test_a_write_rewritten_entirely_is_dropped():
    def f(buf, x):
        buf = index_update(buf, slice(2, 4), np.exp(x[:2]))  # entirely rewritten below
        return index_update(buf, slice(1, 5), x * 3)

    buf, x = sample((6,), np.float32), sample((4,), np.float32)
    g = prepared(f, buf, x)
    out, n = folded(g)
    assert n == 1 and "Exp" not in ops(out) and ops(out).count("ScatterND") == 1
    expected = buf.copy()
    expected[1:5] = x * 3
    assert_close(run(out, buf, x)[0], expected)


@pytest.mark.parametrize("size", [0, 1])
def test_sizes_zero_and_one(size):
    def f(buf, x):
        buf = index_update(buf, slice(0, size), x)
        buf = index_update(buf, slice(size, size), 5.0)  # writes nothing
        return index_update(buf, slice(-1, None), x + 1)

    buf, x = sample((size,), np.float64), sample((size,), np.float64)
    g = prepared(f, buf, x)
    out, _ = folded(g)
    assert ops(out).count("ScatterND") <= 1
    expected = buf.copy()
    expected[0:size] = x
    expected[size:size] = 5.0
    expected[-1:] = x + 1
    assert_close(run(out, buf, x)[0], expected)


# -- by hand: depth-2 writes, negative indices, and what must stay ----------------------------


def _by_hand(first, second, *, depths=(2, 2), reuse=False):
    """``ScatterND(ScatterND(x, first, u1), second, u2)`` over a float32 (3, 4) input, the
    indices constants (None: a graph input) of the given depths."""
    f32 = np.dtype(np.float32)
    b = GraphBuilder()
    x = b.add_input("x", TensorType(f32, (3, 4)))
    values = []
    for name, index, depth in (("i1", first, depths[0]), ("i2", second, depths[1])):
        rows = len(index) if index is not None else 2
        i = (
            b.add_input(name, TensorType(np.dtype(np.int64), (rows, depth)))
            if index is None
            else b.add_constant(np.array(index, np.int64).reshape(rows, depth))
        )
        u = b.add_input(name.replace("i", "u"), TensorType(f32, (rows, *(3, 4)[depth:])))
        values.append((i, u))
    (s1,) = b.add("ScatterND", [x, *values[0]])
    (s2,) = b.add("ScatterND", [s1, *values[1]])
    return b.graph("g", [s2, s1] if reuse else [s2])


def _numpy(x, pairs):
    out = x.copy()
    for index, update in pairs:
        out[tuple(np.moveaxis(np.asarray(index), -1, 0))] = update
    return out


def test_depth_two_with_negative_indices():
    first, second = [[0, 1], [-1, -1], [2, 0]], [[1, -1], [1, 1]]
    g = _by_hand(first, second)
    out, n = folded(g)
    assert n == 1 and ops(out) == ["Concat", "ScatterND"]
    x, u1, u2 = sample((3, 4), np.float32), sample((3,), np.float32), sample((2,), np.float32)
    expected = _numpy(x, [(first, u1), (second, u2)])
    assert_close(run(out, x, u1, u2)[0], expected)
    assert_close(run(out, x, u1, u2)[0], run(g, x, u1, u2)[0])


def test_a_partly_rewritten_write_keeps_its_other_rows():
    first, second = [[0, 0], [1, 1], [2, 2]], [[1, 1], [0, 3]]
    out, n = folded(_by_hand(first, second))
    assert n == 1 and ops(out) == ["Gather", "Concat", "ScatterND"]
    x, u1, u2 = sample((3, 4), np.float32), sample((3,), np.float32), sample((2,), np.float32)
    assert_close(run(out, x, u1, u2)[0], _numpy(x, [(first, u1), (second, u2)]))


@pytest.mark.parametrize(
    "why, graph",
    [
        ("indices computed at run time", lambda: _by_hand([[0, 0], [1, 1]], None)),
        ("different depths", lambda: _by_hand([[0], [1]], [[2, 3], [1, 1]], depths=(1, 2))),
        ("the first version is read too", lambda: _by_hand([[0, 0]], [[1, 1]], reuse=True)),
        ("an index out of range", lambda: _by_hand([[0, 0], [3, 0]], [[1, 1]])),
    ],
)
def test_left_alone(why, graph):
    g = graph()
    out, n = fold_scatters(g)
    assert n == 0 and out is g, why


def test_an_index_out_of_range_still_raises():
    g = _by_hand([[0, 0], [3, 0]], [[1, 1]])
    x, u1, u2 = sample((3, 4), np.float32), sample((2,), np.float32), sample((1,), np.float32)
    with pytest.raises((IndexError, KilnError)):
        run(fold_scatters(g)[0], x, u1, u2)


def test_in_the_default_pipeline():
    buf, x = sample((4, 3), np.float32), sample((4, 3), np.float32)
    g = traced(fill_rows, buf, x)
    g.optimize()
    assert "ScatterND" not in ops(g)  # folded, then a full overwrite: buf is not read
    assert_close(run(g, buf, x)[0], x * 2)


def test_symbolic_sizes_are_left_alone():
    buf, x = sample((4, 3), np.float32), sample((4, 3), np.float32)
    g = traced(fill_rows, buf, x, dynamic_axes={"buf": [1], "x": [1]})
    g.optimize([fold_shapes, fold_constants, simplify_algebra, eliminate_dead_code])
    out, n = fold_scatters(g)
    assert n == 0 and out is g
    buf, x = sample((4, 5), np.float32), sample((4, 5), np.float32)
    assert_close(run(out, buf, x)[0], x * 2)


def test_compiled_fill_loop_replays_with_new_values():
    calls = []

    def f(buf, x):
        calls.append(1)
        return fill_rows(buf, x)

    cf = kiln.compile(f)
    for _ in range(3):
        buf, x = sample((4, 3), np.float32), sample((4, 3), np.float32)
        assert_close(np.asarray(cf(buf, x)), x * 2)
    assert len(calls) == 1  # captured once, replayed after


def test_scatter_elements_on_1d_fold_into_one():
    # the same writes recorded as ScatterElements (1-D data, axis 0) stay ScatterElements
    writes = [[4, -1, 4], [0, 2], [-1, 1]]  # 4 twice in the first, 5 rewritten by the last
    i64, f32 = np.dtype(np.int64), np.dtype(np.float32)
    b = GraphBuilder()
    y = b.add_input("x", TensorType(f32, (6,)))
    for n, index in enumerate(writes):
        u = b.add_input(f"u{n}", TensorType(f32, (len(index),)))
        i = b.add_constant(np.array(index, i64))
        (y,) = b.add("ScatterElements", [y, i, u], {"axis": 0})
    g = b.graph("g", [y])
    out, n = folded(g)
    assert n == 1 and ops(out).count("ScatterElements") == 1 and "ScatterND" not in ops(out)
    args = [sample((6,), np.float32)] + [sample((len(i),), np.float32) for i in writes]
    expected = args[0].copy()
    for index, u in zip(writes, args[1:]):
        expected[index] = u
    assert_close(run(out, *args)[0], expected)
    assert_close(run(out, *args)[0], run(g, *args)[0])


def _box_chain(shape, boxes):
    """``kiln.SliceUpdate`` writes of the ``boxes`` ((starts, ends, axes) each) in turn into
    a float32 input of ``shape``, each box's updates a graph input."""
    f32, i64 = np.dtype(np.float32), np.dtype(np.int64)
    b = GraphBuilder()
    y = b.add_input("x", TensorType(f32, shape))
    sizes = []
    for n, (starts, ends, axes) in enumerate(boxes):
        box_shape = list(shape)
        for s, e, a in zip(starts, ends, axes):
            box_shape[a] = len(range(*slice(s, e).indices(shape[a])))
        sizes.append(tuple(box_shape))
        u = b.add_input(f"u{n}", TensorType(f32, tuple(box_shape)))
        bounds = [b.add_constant(np.array(v, i64)) for v in (starts, ends, axes)]
        (y,) = b.add("kiln.SliceUpdate", [y, u, *bounds])
    return b.graph("g", [y]), sizes


def _numpy_boxes(x, boxes, updates):
    out = x.copy()
    for (starts, ends, axes), u in zip(boxes, updates):
        index = [slice(None)] * x.ndim
        for s, e, a in zip(starts, ends, axes):
            index[a] = slice(s, e)
        out[tuple(index)] = u
    return out


@pytest.mark.parametrize(
    "boxes, left",
    [
        ([([i], [i + 1], [0]) for i in range(4)], 0),  # every row: a full overwrite
        ([([i], [i + 1], [1]) for i in range(3)], 0),  # every column
        ([([1], [3], [0]), ([0], [4], [0])], 1),  # the last box covers the first: it alone
        ([([1], [3], [0]), ([3], [4], [0])], 2),  # rows 1..3: boxes written in place
        ([([0], [1], [1]), ([2], [3], [1])], 2),  # two columns: the same
    ],
)
def test_slice_update_chains(boxes, left):
    g, sizes = _box_chain((4, 3), boxes)
    out, n = folded(g)
    assert n == int(left < len(boxes)) and ops(out).count("kiln.SliceUpdate") == left
    x, us = sample((4, 3), np.float32), [sample(s, np.float32) for s in sizes]
    assert_close(run(out, x, *us)[0], _numpy_boxes(x, boxes, us))
    assert_close(run(out, x, *us)[0], run(g, x, *us)[0])
