"""Graphs whose shape-deciding inputs are computed at run time (graph inputs here, as the ONNX
backend suite feeds them): the output sizes are fresh symbolic sizes, bound when the graph runs,
and every engine runs such a graph with NumPy's answer (jax where it can lower it, else it
refuses with UnsupportedOperationError and automatic selection takes another engine)."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

import kiln
from kiln.errors import UnsupportedOperationError
from kiln.ir.builder import GraphBuilder
from kiln.ops.registry import TensorType
from kiln.symbolic import is_fresh

F32 = np.dtype("float32")
I64 = np.dtype("int64")


def _ints(*values: int) -> np.ndarray:
    return np.array(values, np.int64)


@dataclass
class Case:
    """One operator with its data inputs and its shape-like inputs fed at run time: two calls
    (different shape-like values, so different output sizes) and NumPy's answers."""

    op: str
    data: Sequence[np.ndarray]
    calls: Sequence[Sequence[np.ndarray | None]]  # the shape-like inputs of each call
    expected: Callable[..., Any]  # NumPy's outputs from (data..., shape-like inputs...)
    attrs: dict[str, Any] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return self.op


_X = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
_M = np.arange(20, dtype=np.float32).reshape(5, 4)
_PERM = np.random.default_rng(0).permutation(20).reshape(5, 4).astype(np.float32)


def _topk(x: np.ndarray, k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(-x, axis=-1, kind="stable")[..., : int(k[0])]
    return np.take_along_axis(x, order, -1), order.astype(np.int64)


def _split(x: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, ...]:
    return tuple(np.split(x, np.cumsum(sizes)[:-1], axis=2))


CASES = [
    Case(
        "Reshape",
        [_X],
        [[_ints(4, -1)], [_ints(0, 12)]],
        lambda x, s: x.reshape([x.shape[i] if v == 0 else v for i, v in enumerate(s)]),
    ),
    Case(
        "Slice",
        [_M],
        [[_ints(1), _ints(4), _ints(0), _ints(2)], [_ints(-1), _ints(-5), _ints(1), _ints(-1)]],
        lambda x, st, en, ax, sp: x[
            tuple(slice(st[0], en[0], sp[0]) if a == ax[0] else slice(None) for a in range(2))
        ],
    ),
    Case(
        "Pad",
        [_M],
        [[_ints(1, 0, 0, 2)], [_ints(0, 1, 3, -1)]],
        lambda x, p: np.pad(
            x[:, : x.shape[1] + min(p[3], 0)], [(p[0], p[2]), (p[1], max(p[3], 0))]
        ),
        {"mode": "constant"},
    ),
    Case(
        "Resize",
        [_X.reshape(1, 2, 3, 4)],
        [[None, None, _ints(1, 2, 6, 8)], [None, None, _ints(1, 2, 3, 12)]],
        lambda x, roi, scales, sizes: np.repeat(
            np.repeat(x, sizes[2] // x.shape[2], 2), sizes[3] // x.shape[3], 3
        ),
        {"mode": "nearest"},
    ),
    Case("TopK", [_PERM], [[_ints(2)], [_ints(4)]], _topk),
    Case(
        "ReduceSum",
        [_X],
        [[_ints(1)], [_ints(-1)]],
        lambda x, a: np.sum(x, axis=tuple(a), keepdims=True),
    ),
    Case(
        "ReduceMax",
        [_X.astype(np.int32)],  # onnxruntime skips NaN in a float max: not on that engine
        [[_ints(0, 2)], [_ints(1, 0)]],
        lambda x, a: np.max(x, axis=tuple(a)),
        {"keepdims": 0},
    ),
    Case("Split", [_X], [[_ints(1, 3)], [_ints(2, 2)]], _split, {"axis": 2}),
    Case(
        "Unsqueeze",
        [_M],
        [[_ints(0, 3)], [_ints(-1, 1)]],
        lambda x, a: np.expand_dims(x, tuple(a)),
    ),
    Case(
        "Squeeze",
        [_X.reshape(1, 2, 1, 12)],
        [[_ints(0)], [_ints(-2)]],
        lambda x, a: np.squeeze(x, tuple(a)),
    ),
    Case("Tile", [_M], [[_ints(1, 2)], [_ints(3, 1)]], lambda x, r: np.tile(x, tuple(r))),
    Case(
        "Expand",
        [_M[:1].T],  # (4, 1)
        [[_ints(2, 1, 3)], [_ints(3, 1, 5)]],
        lambda x, s: np.broadcast_to(x, np.broadcast_shapes(x.shape, tuple(s))),
    ),
    Case(
        "ConstantOfShape",
        [],
        [[_ints(2, 3)], [_ints(0, 4)]],
        lambda s: np.full(tuple(s), 7, np.int64),
        {"value": np.array([7], np.int64)},
    ),
    Case(
        "Range",
        [],
        [[np.int64(1), np.int64(9), np.int64(3)], [np.int64(5), np.int64(-1), np.int64(-2)]],
        lambda a, b, d: np.arange(a, b, d, dtype=np.int64),
    ),
]


def _graph(case: Case) -> kiln.ModelGraph:
    b = GraphBuilder()
    inputs = [b.add_input(f"x{i}", TensorType(d.dtype, d.shape)) for i, d in enumerate(case.data)]
    for i, v in enumerate(case.calls[0]):
        inputs.append(None if v is None else b.add_input(f"s{i}", TensorType(v.dtype, v.shape)))
    outs = b.add(case.op, inputs, case.attrs)
    graph = b.graph(f"runtime_{case.op.lower()}", list(outs))
    graph.reassociation_allowed = True  # an engine's rounding is not what these tests check
    return graph


def _feeds(case: Case, call: Sequence[np.ndarray | None]) -> dict[str, np.ndarray]:
    feed = {f"x{i}": d for i, d in enumerate(case.data)}
    feed.update({f"s{i}": v for i, v in enumerate(call) if v is not None})
    return feed


def _expected(case: Case, call: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    out = case.expected(*case.data, *call)
    return [np.asarray(o) for o in (out if isinstance(out, tuple) else (out,))]


def _assert_same(got: Sequence[Any], want: Sequence[np.ndarray]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g = np.asarray(g)
        assert g.shape == w.shape and g.dtype == w.dtype, (g.dtype, g.shape, w.dtype, w.shape)
        np.testing.assert_array_equal(g, w)


def _engines() -> list[str | None]:
    engines: list[str | None] = ["numpy", "reference", None]
    if importlib.util.find_spec("onnxruntime") is not None:
        engines.append("onnxruntime")
    if importlib.util.find_spec("jax") is not None:
        engines.append("jax")
    return engines


@pytest.mark.parametrize("engine", _engines(), ids=str)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_every_engine_runs_shape_inputs_fed_at_run_time(case: Case, engine: str | None) -> None:
    graph = _graph(case)
    graph.verify()
    assert any(is_fresh(d) for v in graph.output_values for d in v.shape), graph.outputs
    try:
        graph.finalize(engine)
    except UnsupportedOperationError:
        assert engine == "jax", "only jax may refuse a graph whose sizes are known at run time"
        return
    for call in case.calls:
        try:
            got = graph.run(_feeds(case, call))
        except UnsupportedOperationError:  # jax: a size it cannot know when compiling
            assert engine == "jax"
            return
        _assert_same(got, _expected(case, call))


def test_fresh_sizes_flow_through_consumers_and_print() -> None:
    """A Reshape to a run-time shape, squared, reduced over run-time axes: each call binds
    the sizes anew (a size not seen before), and the printer names the fresh sizes."""
    b = GraphBuilder()
    x = b.add_input("x", TensorType(F32, (2, 3, 4)))
    shape = b.add_input("shape", TensorType(I64, (3,)))
    axes = b.add_input("axes", TensorType(I64, (1,)))
    (y,) = b.add("Reshape", [x, shape], {})
    (sq,) = b.add("Mul", [y, y], {})
    (out,) = b.add("ReduceSum", [sq, axes], {"keepdims": 0})
    graph = b.graph("chain", [out])
    graph.verify()
    assert len(out.shape) == 2 and all(is_fresh(d) for d in out.shape)
    text = str(graph)
    assert all(str(d) in text for d in y.shape)
    graph.optimize()
    graph.verify()
    graph.finalize("numpy")
    for target, axis in (((4, 3, 2), 0), ((1, 24, 1), 2), ((6, -1, 2), 1)):
        (got,) = graph.run({"x": _X, "shape": _ints(*target), "axes": _ints(axis)})
        want = np.sum(_X.reshape(target) ** 2, axis=axis)
        _assert_same([got], [want])


def test_onnxruntime_refuses_an_empty_input_check_it_cannot_make() -> None:
    """Einsum crashes onnxruntime on an empty input; a call whose sizes make one empty runs on
    NumPy, which needs the sizes before the run: a size the run decides cannot be checked, so
    the engine refuses the graph (and automatic selection runs it on NumPy)."""
    pytest.importorskip("onnxruntime")
    b = GraphBuilder()
    shape = b.add_input("shape", TensorType(I64, (2,)))
    (m,) = b.add("ConstantOfShape", [shape], {"value": np.array([1.5], np.float32)})
    (out,) = b.add("Einsum", [m, m], {"equation": "ij,ij->i"})
    graph = b.graph("einsum_runtime", [out])
    graph.reassociation_allowed = True  # (onnxruntime's sums: accepted)
    with pytest.raises(UnsupportedOperationError, match="known only when the graph runs"):
        graph.finalize("onnxruntime")
    graph.finalize()
    for target in ((2, 3), (0, 6), (4, 0)):
        (got,) = graph.run({"shape": _ints(*target)})
        want = np.full(target[:1], 2.25 * target[1], np.float32)
        _assert_same([got], [want])
