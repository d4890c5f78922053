"""Shape guards: comparisons of symbolic sizes during a capture (issue 10, items 2 and 3).

A comparison or truth test of a symbolic size takes the branch the call's sizes give and
records a guard; a call whose sizes give another answer fails the graph's input check and
``kiln.compile`` captures it anew. Sizes that must agree (contracted axes) and axes a reduction
without identity must not be empty are guards too, so kiln raises where NumPy raises.
"""

from __future__ import annotations

import operator
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest

import kiln
from kiln.errors import CaptureError, GraphValidationError, InputMismatchError
from kiln.exec.inputs import ShapeGuardError
from kiln.optim.specialize import specialize_graph
from kiln.symbolic import ShapeGuard, symbol

F32 = np.float32


def _branch(x: Any) -> Any:
    return x[0] * 10 if x.shape[0] == 1 else x.sum(0)


def _same(got: Any, want: np.ndarray) -> None:
    got = np.asarray(got)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def _run_like_numpy(
    fn: Callable[..., Any], calls: Sequence[Sequence[np.ndarray]], **options: Any
) -> kiln.CompiledFunction:
    """Compile ``fn`` and check every call against eager NumPy (value or exception type)."""
    compiled = kiln.compile(fn, **options)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for args in calls:
            try:
                want = fn(*args)
            except ValueError:  # NumPy refuses: kiln raises a ValueError too
                with pytest.raises(ValueError):
                    compiled(*args)
                continue
            _same(compiled(*args), np.asarray(want))
    return compiled


def _ones(*shape: int) -> np.ndarray:
    return np.arange(int(np.prod(shape)), dtype=F32).reshape(shape) + 1


# -- item 2: branches on a dynamic size ---------------------------------------------------


def test_branch_after_drift_takes_numpys_path() -> None:
    """The issue's reproducer: after a drift, a (1, 3) call must take the ``== 1`` branch."""
    calls = [(_ones(4, 3),), (_ones(2, 3),), (_ones(1, 3),), (_ones(1, 3),), (_ones(5, 3),)]
    compiled = _run_like_numpy(_branch, calls)
    kinds = [e.kind for e in compiled.history]
    assert kinds == ["first", "shape drift", "shape guard", "shape guard"]
    guard_event = compiled.history[2]
    assert "d0 != 1" in guard_event.message and "test_shape_guards.py" in guard_event.message
    assert guard_event.old == "d0 != 1" and guard_event.new == {"d0": 1}


@pytest.mark.parametrize("op", ["==", "!=", "<", "<=", ">", ">="])
def test_every_comparison_records_a_guard(op: str) -> None:
    compare = {
        "==": operator.eq,
        "!=": operator.ne,
        "<": operator.lt,
        "<=": operator.le,
        ">": operator.gt,
        ">=": operator.ge,
    }[op]

    def fn(x: Any) -> Any:
        return x * 2 if compare(x.shape[0], 2) else x - 1

    sizes = [3, 2, 1, 2, 4]
    compiled = _run_like_numpy(fn, [(_ones(n),) for n in sizes], dynamic=True)
    graph = compiled.current_graph
    assert graph is not None and len(graph.shape_guards) == 1


def test_comparison_with_int_on_the_left_and_between_sizes() -> None:
    def fn(x: Any, y: Any) -> Any:
        return x + y.sum() if 3 < x.shape[0] and x.shape[0] == y.shape[0] else x * 3

    calls = [(_ones(4), _ones(4)), (_ones(4), _ones(5)), (_ones(2), _ones(2)), (_ones(6), _ones(6))]
    _run_like_numpy(fn, calls, dynamic=True)


def test_truth_test_of_a_size() -> None:
    def fn(x: Any) -> Any:
        return x * 2 if x.shape[0] else x + 1

    _run_like_numpy(fn, [(_ones(3),), (_ones(0),), (_ones(2),)], dynamic=True)


def test_int_of_a_size_unrolls_with_a_guard() -> None:
    def fn(x: Any) -> Any:
        total = x[0] * 0
        for i in range(x.shape[0]):
            total = total + x[i] * i
        return total

    compiled = _run_like_numpy(fn, [(_ones(3, 2),), (_ones(3, 2),), (_ones(4, 2),)], dynamic=True)
    graph = compiled.current_graph
    assert graph is not None and [str(g) for g in graph.shape_guards] == ["s0 == 4"]


def test_kiln_bookkeeping_adds_no_guards() -> None:
    """Comparisons kiln's own code makes (broadcasting, reshape arithmetic) stay expressions."""
    compiled = kiln.compile(lambda x, y: (x + y).reshape(x.shape[0], -1) * 2, dynamic=True)
    compiled(_ones(1, 3), _ones(1, 3))
    graph = compiled.current_graph
    assert graph is not None and graph.shape_guards == ()


def test_guards_print_and_survive_optimize_and_specialize() -> None:
    traced = kiln.trace(_branch, _ones(4, 3), dynamic_axes={"x": [0]})
    graph = traced.graph
    assert [str(g) for g in graph.shape_guards] == ["s0 != 1"]
    assert "guard s0 != 1  # " in str(graph) and "test_shape_guards.py" in str(graph)
    graph.verify()
    graph.optimize()
    assert [str(g) for g in graph.shape_guards] == ["s0 != 1"]
    assert specialize_graph(graph, {"s0": 4}).shape_guards == ()  # bound and true: dropped
    broken = specialize_graph(graph, {"s0": 1})
    assert [str(g) for g in broken.shape_guards] == ["1 != 1"]
    broken.finalize()
    with pytest.raises(ShapeGuardError):
        broken.run([_ones(1, 3)])


def test_traced_graph_refuses_sizes_that_break_a_guard() -> None:
    graph = kiln.trace(_branch, _ones(4, 3), dynamic_axes={"x": [0]}).graph
    graph.finalize()
    _same(graph.run([_ones(3, 3)])[0], _ones(3, 3).sum(0))
    with pytest.raises(InputMismatchError, match=r"s0 != 1 \(s0 == 1 at .*test_shape_guards"):
        graph.run([_ones(1, 3)])


def test_trace_from_a_signature_cannot_pick_a_branch() -> None:
    spec = kiln.TensorSpec(("B", 3), "float32")
    with pytest.raises(CaptureError, match=r"B == 1 at .*test_shape_guards.py.*_branch"):
        kiln.trace(_branch, signature=[spec])
    with pytest.raises(CaptureError, match="B > 2"):
        kiln.trace(lambda x: x if x.shape[0] > 2 else -x, signature=[spec])


def test_symbolic_size_outside_a_capture_has_no_answer() -> None:
    graph = kiln.trace(lambda x: x * 2, signature=[kiln.TensorSpec(("B", 3), "float32")]).graph
    size = graph.inputs[0].shape[0]
    with pytest.raises(TypeError, match="no value until the graph runs"):
        bool(size > 2)
    assert size != 2 and not size == 2  # as expressions: not the same expression


# -- item 3: sizes that must agree, reductions without identity -----------------------------


def test_tensordot_after_drift_raises_like_numpy() -> None:
    """The issue's reproducer: a (5, 2, 1) input after a drift must raise, not give 5.0s."""
    calls = [(_ones(2, 2, 2),), (_ones(3, 2, 3),), (_ones(5, 2, 1),), (_ones(4, 2, 4),)]
    _run_like_numpy(lambda x: np.tensordot(x, x, axes=1), calls)


def test_dot_of_unaligned_dynamic_operands_raises() -> None:
    def fn(a: Any, b: Any) -> Any:
        return np.dot(a, b)

    calls = [
        (_ones(4, 1, 3), _ones(3, 3, 4)),
        (_ones(4, 1, 3), _ones(3, 1, 4)),
        (_ones(2, 2, 3), _ones(1, 3, 2)),
    ]
    _run_like_numpy(fn, calls, dynamic=True)
    with pytest.raises(ValueError, match=r"not aligned.*s2=3.*s4=1"):
        kiln.compile(fn, dynamic=True)(_ones(4, 1, 3), _ones(3, 1, 4))


def test_traced_contraction_checks_its_sizes_at_run_time() -> None:
    specs = [kiln.TensorSpec(("B", "K"), "float32"), kiln.TensorSpec(("J", 3), "float32")]
    graph = kiln.trace(lambda x, y: np.tensordot(x, y, 1), signature=specs).graph
    assert [str(g) for g in graph.shape_guards] == ["K == J"]
    graph.finalize()
    _same(graph.run([_ones(2, 4), _ones(4, 3)])[0], np.tensordot(_ones(2, 4), _ones(4, 3), 1))
    with pytest.raises(InputMismatchError, match="K == J"):
        graph.run([_ones(2, 1), _ones(4, 3)])


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: x.max(axis=0),
        lambda x: np.min(x, axis=0),
        lambda x: np.max(x),
        lambda x: np.argmax(x, axis=0),
        lambda x: np.argmin(x),
    ],
    ids=["max-axis0", "min-axis0", "max-all", "argmax-axis0", "argmin-all"],
)
@pytest.mark.parametrize("dynamic", [None, True])
def test_reduction_without_identity_raises_on_an_empty_dynamic_axis(
    fn: Callable[[Any], Any], dynamic: bool | None
) -> None:
    calls = [(_ones(4, 3),), (_ones(2, 3),), (_ones(0, 3),), (_ones(3, 3),)]
    _run_like_numpy(fn, calls, dynamic=dynamic)


def test_reduction_over_an_empty_axis_refused_by_a_traced_graph() -> None:
    graph = kiln.trace(lambda x: x.max(axis=0), signature=[kiln.TensorSpec(("B", 3), "float32")])
    assert [str(g) for g in graph.graph.shape_guards] == ["B != 0"]
    g = graph.graph
    g.finalize()
    _same(g.run([_ones(2, 3)])[0], _ones(2, 3).max(axis=0))
    with pytest.raises(ValueError, match="B != 0"):
        g.run([np.zeros((0, 3), F32)])


def test_reduction_over_a_data_dependent_empty_set_raises() -> None:
    def fn(x: Any) -> Any:
        return x[x > 0].max()

    calls = [
        (np.array([1.0, -2.0, 3.0]),),
        (np.array([2.0, -1.0, 5.0]),),
        (np.array([-1.0, -2.0, -3.0]),),
        (np.array([4.0, 1.0, -3.0]),),
    ]
    _run_like_numpy(fn, calls)
    with pytest.raises(CaptureError, match="depends on the data"):
        kiln.trace(fn, np.array([1.0, -2.0, 3.0]))


def test_alternating_answers_stay_correct_past_the_budget() -> None:
    """Each change of answer re-captures; past the budget the function serves eagerly, and
    every call still gets NumPy's result."""
    calls = [(_ones(1 + i % 2, 3),) for i in range(14)]
    compiled = _run_like_numpy(_branch, calls, dynamic=True)
    kinds = [e.kind for e in compiled.history]
    assert kinds.count("shape guard") == 8 and kinds[-1] == "budget"
    assert compiled.state == kiln.State.Fallback


def test_verify_refuses_a_guard_no_input_binds() -> None:
    graph = kiln.trace(_branch, _ones(4, 3), dynamic_axes={"x": [0]}).graph
    stray = graph.with_shape_guards([ShapeGuard(symbol("Q"), "<", 3, "f.py:1")])
    with pytest.raises(GraphValidationError, match="shape guard Q < 3 uses size"):
        stray.verify()
