"""fold_full_overwrites: a write of every element no longer reads the old version."""

from __future__ import annotations

import numpy as np
import pytest

from kiln.functions.shape import index_update
from kiln.ir.builder import GraphBuilder
from kiln.ops.registry import TensorType
from kiln.optim import eliminate_dead_code, fold_constants, fold_shapes, simplify_algebra
from kiln.optim.fold_full_overwrites import fold_full_overwrites
from kiln.optim.fold_scatters import fold_scatters

from ..numerics import assert_close
from .graphs import ops, run, traced

RNG = np.random.default_rng(13)
DTYPES = [np.float32, np.float64, np.int32, np.bool_]


def prepared(fn, *args):
    """The recorded graph with index arithmetic folded and write chains folded."""
    g = traced(fn, *args)
    g.optimize([fold_shapes, fold_constants, simplify_algebra, fold_scatters, eliminate_dead_code])
    return g


def folded(g):
    out, n = fold_full_overwrites(g)
    out.verify()
    assert fold_full_overwrites(out)[1] == 0  # idempotent
    return out, n


def sample(shape, dtype):
    return (RNG.standard_normal(shape) * 4).astype(dtype)


def reads_input(graph, name):
    return any(v is not None and v.name == name for node in graph.nodes for v in node.inputs)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("backwards", [False, True])
def test_a_fill_loop_does_not_read_the_buffer(dtype, backwards):
    def fill(buf, x):
        for i in reversed(range(4)) if backwards else range(4):
            buf = index_update(buf, i, x[i] + x[i])
        return buf

    buf, x = sample((4, 3), dtype), sample((4, 3), dtype)
    g = prepared(fill, buf, x)
    assert reads_input(g, "buf") and ops(g).count("ScatterND") == 1
    out, n = folded(g)
    assert n == 1 and "ScatterND" not in ops(out) and not reads_input(out, "buf")
    # rows in position order need no gather; rows written backwards are concatenated so
    assert "Gather" not in ops(out)
    buf2, x2 = sample((4, 3), dtype), sample((4, 3), dtype)
    expected = buf2.copy()
    for i in range(4):
        expected[i] = x2[i] + x2[i]
    assert_close(run(out, buf2, x2)[0], expected)
    assert_close(run(out, buf2, x2)[0], run(g, buf2, x2)[0])


def test_repeated_indices_keep_the_last_write():
    index = np.array([2, 0, 1, 0, 2, 1])

    def f(buf, v):
        return index_update(buf, index, v)

    buf, v = sample((3,), np.float32), sample((6,), np.float32)
    out, n = folded(prepared(f, buf, v))
    assert n == 1 and not reads_input(out, "buf")
    expected = buf.copy()
    expected[index] = v
    assert_close(run(out, buf, v)[0], expected)


@pytest.mark.parametrize("size", [0, 1])
def test_sizes_zero_and_one(size):
    def f(buf, v):
        return index_update(buf, slice(None), v)

    buf, v = sample((size, 2), np.float64), sample((size, 2), np.float64)
    out, n = folded(prepared(f, buf, v))
    assert n == 1 and not reads_input(out, "buf")
    assert_close(run(out, buf, v)[0], v.copy())


def test_a_partial_write_is_left_alone():
    def f(buf, v):
        return index_update(buf, slice(1, None), v)

    g = prepared(f, sample((4,), np.float32), sample((3,), np.float32))
    out, n = fold_full_overwrites(g)
    assert n == 0 and out is g


def test_depth_two_by_hand_with_blocks():
    # every (i, j) cell of a (2, 2, 3) array, in shuffled order with negative indices
    f32 = np.dtype(np.float32)
    cells = np.array([[1, 1], [0, -2], [-1, 0], [0, 1]], np.int64)
    b = GraphBuilder()
    x = b.add_input("x", TensorType(f32, (2, 2, 3)))
    u = b.add_input("u", TensorType(f32, (4, 3)))
    (y,) = b.add("ScatterND", [x, b.add_constant(cells), u])
    g = b.graph("g", [y])
    out, n = folded(g)
    assert n == 1 and ops(out) == ["Gather", "Reshape"] and not reads_input(out, "x")
    xv, uv = sample((2, 2, 3), np.float32), sample((4, 3), np.float32)
    expected = xv.copy()
    expected[tuple(cells.T)] = uv
    assert_close(run(out, xv, uv)[0], expected)


@pytest.mark.parametrize("shape", [(3, 0), (0, 3), (2, 0, 2)])
def test_empty_blocks_by_hand(shape):
    # every cell of the first two axes written, the arrays holding no element
    f64 = np.dtype(np.float64)
    cells = np.stack(np.unravel_index(np.arange(np.prod(shape[:2])), shape[:2]), -1)
    b = GraphBuilder()
    x = b.add_input("x", TensorType(f64, shape))
    u = b.add_input("u", TensorType(f64, (len(cells), *shape[2:])))
    (y,) = b.add("ScatterND", [x, b.add_constant(cells.astype(np.int64)), u])
    out, n = folded(b.graph("g", [y]))
    assert n == 1 and not reads_input(out, "x")
    uv = np.zeros((len(cells), *shape[2:]))
    assert_close(run(out, np.zeros(shape), uv)[0], np.zeros(shape))


def test_scatter_elements_by_hand():
    f32 = np.dtype(np.float32)
    index = np.array([3, 1, 0, 2, 1])
    b = GraphBuilder()
    x = b.add_input("x", TensorType(f32, (4,)))
    u = b.add_input("u", TensorType(f32, (5,)))
    (y,) = b.add("ScatterElements", [x, b.add_constant(index), u], {"axis": 0})
    out, n = folded(b.graph("g", [y]))
    assert n == 1 and "ScatterElements" not in ops(out) and not reads_input(out, "x")
    xv, uv = sample((4,), np.float32), sample((5,), np.float32)
    expected = xv.copy()
    expected[index] = uv
    assert_close(run(out, xv, uv)[0], expected)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
def test_blocks_written_out_of_order_are_concatenated_in_order(dtype):
    def central(y):
        d = np.empty_like(y)
        d[1:-1] = y[2:] - y[:-2]
        d[0] = y[1] - y[0]
        d[-1] = y[-1] - y[-2]
        return d

    y = sample(40, dtype)
    g = prepared(central, y)
    out, n = folded(g)
    assert n == 1 and "Gather" not in ops(out) and "ScatterND" not in ops(out)
    y2 = sample(40, y.dtype)
    assert_close(run(out, y2)[0], central(y2))
