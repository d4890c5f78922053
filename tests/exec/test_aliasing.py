"""Outputs never alias (issue 10, item 4): a result shares memory with no input (unless it is
the caller's array itself or a view of it, as in NumPy: `return x`, `return x.T`), no constant,
no other result and nothing an earlier call returned, on every engine and through
``kiln.compile``'s replay, ``ModelGraph.run`` and the plans' ``run_arrays``; and outputs the
run allocated afresh are handed out without a copy."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import kiln
from kiln.exec import build_plan
from kiln.exec.cpu import CpuPlan
from kiln.exec.plan import output_copies
from kiln.optim import DefaultsOptions

RELAXED = DefaultsOptions(allow_reassociation=True)

ENGINES = ["numpy", "reference"]
if importlib.util.find_spec("jax") is not None:
    ENGINES.append("jax")
if importlib.util.find_spec("onnxruntime") is not None and importlib.util.find_spec("onnx"):
    ENGINES.append("onnxruntime")

WEIGHT = np.arange(6, dtype=np.float32).reshape(2, 3)


def _same(x: Any) -> Any:
    y = x * 2
    return y, y


def _view_and_base(x: Any) -> Any:
    y = x * 2
    return y.T, y


# Functions whose recorded or optimized graph hands out an input, a view of one, a constant,
# or one value twice. Each returns a tuple or one tensor.
CASES: dict[str, Callable[[Any], Any]] = {
    "x + 0": lambda x: x + 0,
    "x * 1": lambda x: x * 1,
    "x - 0": lambda x: x - 0,
    "x / 1": lambda x: x / 1,
    "x ** 1": lambda x: x**1,
    "x.astype(same)": lambda x: x.astype(np.float32),
    "x.T.T": lambda x: x.T.T,
    "x.T": lambda x: x.T,
    "x.reshape": lambda x: x.reshape(6),
    "x": lambda x: x,
    "(x, x)": lambda x: (x, x),
    "(x, x.T)": lambda x: (x, x.T),
    "(y, y)": _same,
    "(y.T, y)": _view_and_base,
    "closure weight": lambda x: (x * 2, kiln.asarray(WEIGHT)),
    "x[0]": lambda x: x[0],
}


def _arrays(result: Any) -> list[np.ndarray]:
    results = result if isinstance(result, tuple) else (result,)
    return [np.asarray(r) for r in results]


def _assert_unaliased(
    outs: list[np.ndarray], inputs: list[np.ndarray], earlier: list[np.ndarray] = ()
) -> None:
    for k, out in enumerate(outs):
        for x in [*inputs, WEIGHT]:
            assert not np.shares_memory(out, x), f"output {k} shares memory with an input"
        for j, other in enumerate(outs):
            if j != k:
                assert not np.shares_memory(out, other), f"outputs {j} and {k} share memory"
        for old in earlier:
            assert not np.shares_memory(out, old), f"output {k} shares memory with a past one"


@pytest.mark.parametrize("name", list(CASES))
def test_compiled_replay_never_returns_the_callers_buffer(name: str) -> None:
    """No result views the caller's array, except where NumPy's does: a result that *is* it
    (``return x``) is the caller's object itself, and one that is a view of it (``x.T``,
    ``x[0]``) a view of the caller's array, as NumPy's."""
    fn = CASES[name]
    cf = kiln.compile(fn)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    x_copy = x.copy()
    expected = _arrays(fn(x_copy))
    itself = [r is x_copy for r in _arrays(fn(x_copy))]
    views = [np.shares_memory(r, x_copy) for r in _arrays(fn(x_copy))]
    numpys = _arrays(fn(x_copy))
    # One array returned twice (``return y, y``) is one object twice, as NumPy's.
    again = [any(r is s for s in numpys[:k]) for k, r in enumerate(numpys)]

    def results() -> list[np.ndarray]:
        got = _arrays(cf(x))
        assert [r is x for r in got] == itself
        assert [np.shares_memory(r, x) for r in got] == views
        assert [any(r is s for s in got[:k]) for k, r in enumerate(got)] == again
        return [r for r, shared, twice in zip(got, views, again) if not (shared or twice)]

    first = results()  # call 1 captures, serving the eager result
    assert cf.state == kiln.State.Compiled
    _assert_unaliased(first, [x])
    second = results()
    third = results()
    assert cf.state == kiln.State.Compiled
    _assert_unaliased(second, [x])
    _assert_unaliased(third, [x], second)
    x[...] = -7  # refilling the caller's buffer changes no earlier result
    kept = [e for e, shared, twice in zip(expected, views, again) if not (shared or twice)]
    for got, want in [*zip(first, kept), *zip(second, kept)]:
        np.testing.assert_array_equal(got, want)
        assert got.dtype == want.dtype and got.shape == want.shape


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("name", list(CASES))
def test_every_engine_hands_out_fresh_writable_arrays(engine: str, name: str) -> None:
    fn = CASES[name]
    for optimize in (False, True):
        graph = kiln.trace(fn, kiln.ones((2, 3), "float32")).graph
        # (x ** 1 is a Pow, which jax and onnxruntime round their own way: accepted here)
        graph.optimize(None if optimize else [], defaults=RELAXED)
        plan = build_plan(graph, None, engine)
        x = np.arange(6, dtype=np.float32).reshape(2, 3)
        first = plan.run_arrays([x])
        again = plan.run_arrays([x])
        _assert_unaliased(first, [x])
        _assert_unaliased(again, [x], first)
        for out, want in zip(first, _arrays(fn(x.copy()))):
            assert isinstance(out, np.ndarray) and out.flags.writeable
            np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("name", ["x", "x.T.T", "(x, x.T)", "closure weight"])
def test_model_graph_run_copies_inputs_and_constants(name: str) -> None:
    graph = kiln.trace(CASES[name], kiln.ones((2, 3), "float32")).graph
    graph.optimize()
    graph.finalize(engine="numpy")
    x = np.ones((2, 3), np.float32)
    outs = [np.asarray(t) for t in graph.run([x])]
    _assert_unaliased(outs, [x])


def test_plan_time_folds_are_copied_per_run() -> None:
    # x.shape is folded at plan time into a bound constant; each run must hand out its own.
    graph = kiln.trace(lambda x: (x * 2, kiln.asarray(x.shape)), kiln.ones((2, 3))).graph
    plan = CpuPlan(graph)
    x = np.ones((2, 3))
    first, second = plan.run_arrays([x]), plan.run_arrays([x])
    np.testing.assert_array_equal(first[1], [2, 3])
    assert first[1].flags.writeable
    assert not np.shares_memory(first[1], second[1])


def _allocated_by(graph: Any, *ops: str) -> Callable[[Any], bool]:
    ids = {id(v) for node in graph.nodes if node.op in ops for v in node.outputs}
    return lambda v: id(v) in ids


def test_fresh_outputs_cost_no_copy() -> None:
    graph = kiln.trace(lambda x: (x * 2, np.tanh(x)), kiln.ones((2, 3), "float32")).graph
    copies = output_copies(graph, _allocated_by(graph, "Mul", "Tanh"))
    assert [c.action for c in copies] == ["keep", "keep"]
    source = CpuPlan(graph).source
    assert ".copy()" not in source


def _bare_outputs(fn: Callable[..., Any]) -> Any:
    """``fn``'s graph with its output Identity nodes removed: outputs that are the input
    itself or one value twice (as an imported or rewritten graph may have)."""
    graph = kiln.trace(fn, kiln.ones((2, 3), "float32")).graph
    alias = {n.outputs[0]: n.inputs[0] for n in graph.nodes if n.op == "Identity"}
    nodes = [n for n in graph.nodes if n.op != "Identity"]
    return graph.with_body(nodes, outputs=[alias.get(v, v) for v in graph.output_values])


def test_output_copies_decides_at_plan_time() -> None:
    def fn(x: Any) -> Any:
        y = x * 2
        return x, y, y, y.T, np.tanh(x)

    graph = _bare_outputs(fn)
    graph.reassociation_allowed = True  # (jax's and onnxruntime's tanh are theirs)
    copies = output_copies(graph, _allocated_by(graph, "Mul", "Tanh"))
    # An input: always copied; y twice: the second is a copy of the first; y and y.T overlap:
    # each checked at run time; tanh(x) is fresh.
    assert [c.action for c in copies] == ["copy", "check", "copy", "check", "keep"]
    for engine in ENGINES:
        plan = build_plan(graph, None, engine)
        x = np.arange(6, dtype=np.float32).reshape(2, 3)
        outs = plan.run_arrays([x])
        _assert_unaliased(outs, [x])
        for got, want in zip(outs, fn(x.copy())):
            np.testing.assert_allclose(got, want, rtol=1e-6)  # jax's tanh: 1 ulp off
    # On NumPy, y (the run's own buffer) is handed out as is; y.T, a view of it, is copied.
    outs = CpuPlan(graph).run_arrays([x])
    assert outs[1].base is None


def test_reduction_of_an_input_is_not_copied() -> None:
    # A registry kernel that might return a view is checked at run time, not always copied:
    # a sum allocates its result, so the check keeps it.
    graph = kiln.trace(lambda x: x.sum(axis=0), kiln.ones((2, 3), "float32")).graph
    plan = CpuPlan(graph)
    x = np.ones((2, 3), np.float32)
    out = plan.run_arrays([x])[0]
    assert out.base is None and not np.shares_memory(out, x)


def test_a_view_read_through_a_shape_or_bounds_input_costs_no_copy() -> None:
    # The shape of a Reshape and the bounds of a Slice are read for their values only
    # (Input.values_only): a reshape or slice of the run's own buffer is handed out as is,
    # while one of the input is still copied.
    def fn(x: Any) -> Any:
        y = x * 2
        return y.reshape(3, 2), y[:, 1:], x.reshape(3, 2)

    graph = kiln.trace(fn, kiln.ones((2, 3), "float32")).graph
    copies = output_copies(graph, _allocated_by(graph, "Mul"))
    assert [c.action for c in copies][:1] == ["check"]  # y is shared by the first two
    graph = kiln.trace(lambda x: (x * 2).reshape(3, 2), kiln.ones((2, 3), "float32")).graph
    assert [c.action for c in output_copies(graph, _allocated_by(graph, "Mul"))] == ["keep"]
    assert ".copy()" not in CpuPlan(graph).source
    for engine in ENGINES:
        plan = build_plan(kiln.trace(fn, kiln.ones((2, 3), "float32")).graph, None, engine)
        x = np.arange(6, dtype=np.float32).reshape(2, 3)
        outs = plan.run_arrays([x])
        _assert_unaliased(outs, [x])
        for got, want in zip(outs, fn(x.copy())):
            np.testing.assert_array_equal(got, want)


def test_a_broadcast_output_is_handed_out_writable():
    # fuzz 35:4979: np.broadcast_to(...).copy(): the optimizer drops the copy of a pure
    # value, so the plan's output was the read-only broadcast view itself
    def fn(c):
        return np.broadcast_to(c.astype(np.int32), (2, 3)).copy()

    c = np.array(-7.5, np.float32)
    compiled = kiln.compile(fn)
    for _ in range(3):
        got = compiled(c)
        assert got.flags.writeable and got.strides == (12, 4)
        np.testing.assert_array_equal(got, fn(c))
        got[0, 0] = 1  # its own memory: the next call is unaffected
