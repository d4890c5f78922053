"""lower_contiguous_writes: a write of one contiguous run becomes slices and a Concat."""

from __future__ import annotations

import numpy as np
import pytest

from kiln.functions.shape import index_update
from kiln.optim import eliminate_dead_code, fold_constants, fold_shapes, simplify_algebra
from kiln.optim.lower_contiguous_writes import lower_contiguous_writes

from ..numerics import assert_close
from .graphs import ops, run, traced

RNG = np.random.default_rng(15)
DTYPES = [np.float32, np.float64, np.int32, np.bool_]


def prepared(fn, *args):
    g = traced(fn, *args)
    g.optimize([fold_shapes, fold_constants, simplify_algebra, eliminate_dead_code])
    return g


def lowered(g):
    out, n = lower_contiguous_writes(g)
    out.verify()
    assert lower_contiguous_writes(out)[1] == 0  # idempotent
    return out, n


def sample(shape, dtype):
    return (RNG.standard_normal(shape) * 4).astype(dtype)


def write(index, reads=False):
    def f(x, v):
        y = index_update(x, index, v)
        return (y, y.sum()) if reads else y

    return f


def numpy_write(index, x, v):
    y = x.copy()
    y[index] = v
    return y


CASES = [
    ((8,), slice(1, -1), (6,), False),  # a stencil's interior
    ((8,), slice(0, 3), (3,), False),  # a head: no slice before
    ((6, 3), slice(2, 5), (3, 3), False),  # rows of a 2-D array
    ((8,), slice(5, 1, -1), (4,), True),  # backwards: a Gather puts them in order
    ((8,), np.array([2, 3, 2, 4]), (4,), True),  # 2 written twice: the last write wins
    ((2,), slice(0, 1), (1,), False),  # size 2, one element
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape, index, value_shape, gathers", CASES)
def test_contiguous_writes_lowered(dtype, shape, index, value_shape, gathers):
    x, v = sample(shape, dtype), sample(value_shape, dtype)
    g = prepared(write(index), x, v)
    assert ops(g).count("ScatterND") == 1
    out, n = lowered(g)
    assert n == 1 and "ScatterND" not in ops(out) and "Concat" in ops(out)
    assert ("Gather" in ops(out)) == gathers
    x2, v2 = sample(shape, dtype), sample(value_shape, dtype)
    assert_close(run(out, x2, v2)[0], numpy_write(index, x2, v2))
    assert_close(run(out, x2, v2)[0], run(g, x2, v2)[0])


def test_a_version_read_elsewhere_reads_the_concat():
    x, v = sample((5,), np.float64), sample((3,), np.float64)
    g = prepared(write(slice(1, 4), reads=True), x, v)
    out, n = lowered(g)
    assert n == 1 and "ScatterND" not in ops(out)
    y = numpy_write(slice(1, 4), x, v)
    got = run(out, x, v)
    assert_close(got[0], y)
    assert_close(got[1], y.sum())


@pytest.mark.parametrize(
    "why, shape, index, value_shape",
    [
        ("every other element", (8,), slice(1, 7, 2), (3,)),
        ("a column: not one run in C order", (4, 3), (slice(None), 1), (4,)),
        ("everything: fold_full_overwrites' case", (4,), slice(None), (4,)),
        ("nothing", (4,), slice(2, 2), (0,)),
        ("size 0", (0,), slice(None), (0,)),
        ("a short run: cheaper scattered in place", (64,), slice(3, 5), (2,)),
    ],
)
def test_left_alone(why, shape, index, value_shape):
    g = prepared(write(index), sample(shape, np.float32), sample(value_shape, np.float32))
    out, n = lower_contiguous_writes(g)
    assert n == 0 and out is g, why


def test_a_chain_is_left_to_fold_scatters():
    def f(x, a, b):
        x = index_update(x, slice(0, 2), a)
        return index_update(x, slice(4, 6), b)

    args = [sample(s, np.float32) for s in [(8,), (2,), (2,)]]
    g = prepared(f, *args)
    assert ops(g).count("ScatterND") == 2
    assert lower_contiguous_writes(g)[1] == 0


def test_in_the_default_pipeline_a_recurrence_needs_no_scatter():
    def f(x):
        for i in range(1, 6):
            x = index_update(x, i, x[i - 1] * 0.5)
        return x

    x = sample((6, 4), np.float32)
    g = traced(f, x)
    g.optimize()
    assert "ScatterND" not in ops(g) and "Gather" not in ops(g)  # reads forwarded in order
    expected = x.copy()
    for i in range(1, 6):
        expected[i] = expected[i - 1] * np.float32(0.5)
    assert_close(run(g, x)[0], expected)
