"""kiln's creation functions inside a capture: recorded, fresh, writable tensors with NumPy's
values and dtypes (``kiln.zeros``/``full``/``*_like``/``arange``/``linspace``/``eye``)."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.capture.trace import TraceRef

from ..numerics import assert_close


def _traced(fn, *args):
    """``fn`` traced on ``args``: the graph and the tensors ``fn`` stored in ``seen``."""
    seen: dict[str, object] = {}

    def target(*xs):
        return fn(seen, *xs)

    return kiln.trace(target, *args).graph, seen


def _fresh(t, graph, *others):
    """``t`` is a recording tensor whose values are writable memory of its own: not a graph
    constant's, not an input's."""
    assert isinstance(t, kiln.Tensor) and isinstance(t._trace, TraceRef)
    data = t._data
    assert data is not None
    root = data if data.base is None else data.base
    assert root.flags.writeable
    for c in graph.constants:
        assert not np.shares_memory(data, c.data), f"shares memory with constant {c.value.name}"
    for o in others:
        assert not np.shares_memory(data, o)


def _ops(graph):
    return [n.op for n in graph.nodes]


def _biggest_constant(graph):
    return max((c.data.size for c in graph.constants), default=0)


@pytest.mark.parametrize(
    ("make", "expected", "op"),
    [
        (lambda: kiln.zeros((3, 4)), np.zeros((3, 4)), "ConstantOfShape"),
        (lambda: kiln.ones(5, dtype=np.int32), np.ones(5, np.int32), "ConstantOfShape"),
        (lambda: kiln.full((2, 3), 2.5), np.full((2, 3), 2.5), "ConstantOfShape"),
        (lambda: kiln.full((2, 3), 7), np.full((2, 3), 7), "ConstantOfShape"),
        (lambda: kiln.full(4, True), np.full(4, True), "ConstantOfShape"),
        (
            lambda: kiln.full((2,), np.int64(300), dtype=np.uint8),
            np.full(2, 44, np.uint8),
            "ConstantOfShape",
        ),
        (lambda: kiln.empty((0, 3)), np.zeros((0, 3)), "ConstantOfShape"),
        (lambda: kiln.zeros(()), np.zeros(()), "ConstantOfShape"),
        (lambda: kiln.arange(7), np.arange(7), "Range"),
        (lambda: kiln.arange(2, 11, 3, dtype=np.int8), np.arange(2, 11, 3, dtype=np.int8), "Range"),
        (lambda: kiln.arange(5, -4, -2), np.arange(5, -4, -2), "Range"),
        (lambda: kiln.arange(0.0, 1.0, 0.1), np.arange(0.0, 1.0, 0.1), "Range"),
        (lambda: kiln.arange(0.1, 3.3, 0.2), np.arange(0.1, 3.3, 0.2), "Range"),
        (lambda: kiln.arange(1.0, 0.0, -0.3), np.arange(1.0, 0.0, -0.3), "Range"),
        (lambda: kiln.linspace(0, 1, 7), np.linspace(0, 1, 7), "Range"),
        (lambda: kiln.linspace(-2.5, 10, 13), np.linspace(-2.5, 10, 13), "Range"),
        (lambda: kiln.linspace(0, 1, 5, endpoint=False), np.linspace(0, 1, 5, False), "Range"),
        (lambda: kiln.linspace(0, 10, 4, dtype=int), np.linspace(0, 10, 4, dtype=int), "Range"),
        (lambda: kiln.eye(3), np.eye(3), "Range"),
        (lambda: kiln.eye(3, 5, 2, dtype=np.int32), np.eye(3, 5, 2, dtype=np.int32), "Range"),
        (lambda: kiln.eye(4, 2, -1, dtype=bool), np.eye(4, 2, -1, dtype=bool), "Range"),
        (lambda: kiln.identity(1), np.identity(1), "Range"),
    ],
)
def test_creation_is_recorded_fresh_and_exact(make, expected, op):
    x = np.ones(2)
    graph, seen = _traced(lambda s, x: s.setdefault("t", make()) * 0 + x.sum(), x)
    t = seen["t"]
    _fresh(t, graph, x)
    assert op in _ops(graph)
    assert _biggest_constant(graph) <= 8  # the values are computed, not stored
    assert t.dtype == expected.dtype and t.shape == expected.shape
    np.testing.assert_array_equal(t._data, expected)  # bit for bit, NumPy's own arithmetic


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda x: kiln.zeros_like(x), lambda x: np.zeros_like(x)),
        (lambda x: kiln.ones_like(x, dtype=np.int64), lambda x: np.ones_like(x, dtype=np.int64)),
        (lambda x: kiln.full_like(x, 2.7), lambda x: np.full_like(x, 2.7)),
        (lambda x: kiln.empty_like(x, shape=(2, 5)), lambda x: np.zeros((2, 5), x.dtype)),
    ],
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.bool_])
def test_like_functions_record_and_follow_numpy(make, expected, dtype):
    x = (np.arange(12).reshape(3, 4) % 3).astype(dtype)
    graph, seen = _traced(lambda s, x: s.setdefault("t", make(x)), x)
    t = seen["t"]
    _fresh(t, graph, x)
    assert "ConstantOfShape" in _ops(graph)
    assert_close(t._data, expected(x))


def test_full_like_casts_the_fill_as_numpy():
    x = np.zeros(3, np.uint8)
    graph, seen = _traced(lambda s, x: s.setdefault("t", kiln.full_like(x, np.int64(-1))), x)
    assert_close(seen["t"]._data, np.full_like(x, np.int64(-1)))  # NumPy's unsafe cast: 255
    with pytest.raises(OverflowError):  # a Python int out of range, as NumPy 2
        kiln.trace(lambda x: kiln.full_like(x, -1), x)


def test_full_with_a_tensor_fill_is_a_fresh_broadcast():
    x = np.array([1.5, -2.0])
    graph, seen = _traced(lambda s, x: s.setdefault("t", kiln.full((3, 2), x)), x)
    _fresh(seen["t"], graph, x)
    assert_close(seen["t"]._data, np.full((3, 2), x))


def test_like_keeps_a_dynamic_axis_dynamic():
    spec = kiln.TensorSpec(("n", 3), np.float32)
    traced = kiln.trace(lambda x: kiln.zeros_like(x) + kiln.eye(x.shape[0], 3), signature=[spec])
    graph = traced.graph
    assert "Shape" in _ops(graph) and "ConstantOfShape" in _ops(graph)
    traced.finalize()
    for n in (1, 4, 0):
        x = np.ones((n, 3), np.float32)
        (out,) = traced.run([x])
        assert_close(out, np.zeros_like(x) + np.eye(n, 3))


def test_copy_of_a_recording_tensor_does_not_alias():
    x = np.arange(6.0).reshape(2, 3)
    graph, seen = _traced(lambda s, x: s.setdefault("c", x.copy()) + s.setdefault("x", x), x)
    c, xt = seen["c"], seen["x"]
    _fresh(c, graph, x)
    assert not np.shares_memory(c._data, xt._data)
    assert_close(c._data, x)


def test_eager_creation_is_unchanged():
    assert_close(kiln.eye(3, 4, -1), np.eye(3, 4, -1))
    assert_close(kiln.identity(2, dtype=np.float32), np.identity(2, np.float32))
    assert_close(kiln.linspace(1, 2, 6), np.linspace(1, 2, 6))
    y, step = kiln.linspace(0, 1, 5, retstep=True)
    assert_close(y, np.linspace(0, 1, 5)) and step == np.linspace(0, 1, 5, retstep=True)[1]
    assert_close(kiln.arange(0.5, 2.0, 0.25), np.arange(0.5, 2.0, 0.25))
    assert kiln.zeros(2)._trace is None
    t = kiln.tensor([1, 2, 3])  # np.*_like on a kiln tensor dispatch to kiln's
    for got, want in [
        (np.zeros_like(t), np.zeros(3, np.int64)),
        (np.full_like(t, 2.7), np.full(3, 2, np.int64)),
        (np.ones_like(t, dtype=np.float32, shape=(2, 2)), np.ones((2, 2), np.float32)),
    ]:
        assert isinstance(got, kiln.Tensor)
        assert_close(got, want)


def test_compiled_creation_replays_new_values():
    def f(x):
        return kiln.zeros_like(x) + kiln.arange(4.0) * x + kiln.eye(3, 4)

    cf = kiln.compile(f)
    for seed in range(3):
        x = np.random.default_rng(seed).standard_normal((3, 4))
        assert_close(cf(x), np.arange(4.0) * x + np.eye(3, 4))
    assert cf.state is kiln.State.Compiled
