"""fold_shapes: shape arithmetic with known contents becomes constants; symbolic sizes stay."""

from __future__ import annotations

import numpy as np

import kiln
from kiln.ops.folding import known_array
from kiln.ops.registry import TensorType
from kiln.optim import eliminate_dead_code, fold_shapes, specialize_graph

from ..numerics import assert_close
from .graphs import ops, run, traced

f32 = np.float32
X = np.arange(24, dtype=f32).reshape(2, 3, 4)


def flatten_rows(x):
    return x.reshape(x.shape[0], -1)


def test_shape_arithmetic_folds_once_the_sizes_are_bound():
    dynamic = traced(flatten_rows, X, dynamic_axes={"x": [0]})
    assert ops(dynamic) == ["Shape", "Concat", "Reshape"]
    special = specialize_graph(dynamic, {"s0": 5})
    out, n = fold_shapes(special)
    out, _ = eliminate_dead_code(out)
    out.verify()
    assert n == 2 and ops(out) == ["Reshape"]
    assert out.output_names == special.output_names
    x = np.arange(60, dtype=f32).reshape(5, 3, 4)
    assert_close(run(out, x)[0], run(special, x)[0])
    assert_close(run(out, x)[0], x.reshape(5, 12))
    again, m = fold_shapes(out)
    assert m == 0 and again is out


def test_symbolic_sizes_stay_computed():
    dynamic = traced(flatten_rows, X, dynamic_axes={"x": [0]})
    out, n = fold_shapes(dynamic)
    assert n == 0 and out is dynamic
    x = np.ones((7, 3, 4), f32)
    assert run(out, x)[0].shape == (7, 12)


def test_folded_shape_constants_hold_the_known_contents():
    special = specialize_graph(
        traced(lambda x: kiln.zeros(x.shape[0]), X, dynamic_axes={"x": [0]}), {"s0": 5}
    )
    out, n = fold_shapes(special)
    out.verify()
    assert n == 2
    before = {id(c.value) for c in special.constants}
    folded = [c for c in out.constants if id(c.value) not in before]
    assert folded
    for c in folded:
        assert not c.data.flags.writeable
        assert c.data.dtype == c.value.dtype and c.data.shape == tuple(c.value.shape)
        assert c.data.reshape(-1).tolist() == list(c.value.type.value)
    x = np.ones((5, 3, 4), f32)
    assert_close(run(out, x)[0], run(special, x)[0])
    assert_close(run(out, x)[0], np.zeros(5))


def test_known_array_reads_integer_contents_only_when_asked():
    i64, f = np.dtype("int64"), np.dtype("float32")
    assert known_array(TensorType(i64, (2,), (3, 4)), integral=True).tolist() == [3, 4]
    assert known_array(TensorType(f, (2,), (0.5, 2.0))).tolist() == [0.5, 2.0]
    assert known_array(TensorType(f, (2,), (0.5, 2.0)), integral=True) is None
    assert known_array(TensorType(i64, (2,))) is None
