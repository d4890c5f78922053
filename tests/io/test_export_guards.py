"""ONNX export of shape guards: a size a guard pins is exported static; every other guard is
checked by the model at run time, so onnxruntime fails for sizes the graph does not hold for
and gives NumPy's answer at the others; graphs without guards export as before."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.errors import GraphValidationError, UnsupportedOperationError
from kiln.exec.inputs import ShapeGuardError
from kiln.ir.sizes import pinned_sizes
from kiln.symbolic import ShapeGuard, symbol

from ..numerics import assert_close

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnxruntime.capi.onnxruntime_pybind11_state import InvalidArgument  # noqa: E402

LEVELS = [ort.GraphOptimizationLevel.ORT_DISABLE_ALL, ort.GraphOptimizationLevel.ORT_ENABLE_ALL]


def session(model: onnx.ModelProto, level=LEVELS[1]) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.graph_optimization_level = level
    options.log_severity_level = 4  # a refused size is expected here: keep stderr quiet
    return ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )


def dims(info: onnx.ValueInfoProto) -> list[int | str]:
    return [
        d.dim_param if d.HasField("dim_param") else d.dim_value
        for d in info.type.tensor_type.shape.dim
    ]


def rng_arrays(*shapes: tuple[int, ...], seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape) for shape in shapes]


def check_same_answers(graph, fn, arrays, level=LEVELS[1]) -> None:
    """onnxruntime, kiln's ``run`` and NumPy agree at sizes the graph holds for."""
    want = fn(*[a.copy() for a in arrays])
    want = list(want) if isinstance(want, tuple) else [want]
    got = session(graph.to_onnx(), level).run(None, dict(zip(graph.input_names, arrays)))
    graph.finalize()
    mine = graph.run(list(arrays))
    assert len(got) == len(want) == len(mine)
    for g, m, w in zip(got, mine, want):
        assert_close(g, np.asarray(w), what="onnxruntime")
        assert_close(np.asarray(m), np.asarray(w), what="graph.run")


# -- sizes a guard pins ---------------------------------------------------------------------


def weighted_rows(x):
    t = x[0]
    for i in range(1, x.shape[0]):  # int(s0): the loop unrolls for one size
        t = t + x[i] * i
    return t


def pinned_through_guards(x, y):
    t = x[0]
    for i in range(x.shape[0] - 1):  # s0 - 1 == 3: pins s0 = 4
        t = t + x[i + 1]
    if y.shape[0] == 2 * x.shape[0]:  # s1 == 2*s0: pins s1 = 8 through s0
        return t, y * 2
    return t, y


def test_pinned_size_is_exported_static():
    (x,) = rng_arrays((4, 3))
    graph = kiln.trace(weighted_rows, x, dynamic_axes={"x": [0]}).graph
    assert [str(g) for g in graph.shape_guards] == ["s0 == 4"]
    model = graph.to_onnx()
    assert dims(model.graph.input[0]) == [4, 3]
    for info in list(model.graph.value_info) + list(model.graph.output):
        assert all(isinstance(d, int) for d in dims(info)), info.name
    assert not model.metadata_props  # nothing is left to check at run time
    assert [n.op_type for n in model.graph.node if n.op_type == "Shape"] == []
    check_same_answers(graph, weighted_rows, [x])
    with pytest.raises(InvalidArgument, match="dimensions"):  # onnxruntime's input check
        session(model).run(None, {"x": np.ones((5, 3))})
    assert graph.shape_guards and graph.inputs[0].shape[0] == symbol("s0")  # graph unchanged


def test_sizes_pinned_through_arithmetic_and_other_guards_are_static():
    x, y = rng_arrays((4, 3), (8, 3))
    graph = kiln.trace(pinned_through_guards, x, y, dynamic_axes={"x": [0], "y": [0]}).graph
    assert pinned_sizes(graph.shape_guards) == {"s0": 4, "s1": 8}
    model = graph.to_onnx()
    assert [dims(i) for i in model.graph.input] == [[4, 3], [8, 3]]
    assert [dims(o) for o in model.graph.output] == [[3], [8, 3]]
    assert not model.metadata_props
    check_same_answers(graph, pinned_through_guards, [x, y])
    for wrong in [(5, 3), (3, 3)]:
        with pytest.raises(InvalidArgument):
            session(model).run(None, {"x": np.ones(wrong), "y": y})


def test_pinned_sizes_solves_linear_equalities_only():
    s, t = symbol("s"), symbol("t")
    assert pinned_sizes([ShapeGuard(2 * s + 1, "==", 9), ShapeGuard(t + s, "==", 10)]) == {
        "s": 4,
        "t": 6,
    }
    assert pinned_sizes([ShapeGuard(s // 2, "==", 3)]) == {}  # holds for 6 and 7
    assert pinned_sizes([ShapeGuard(s * t, "==", 6), ShapeGuard(s, ">", 1)]) == {}
    assert pinned_sizes([ShapeGuard(2 * s, "==", 7), ShapeGuard(s + 3, "==", 1)]) == {}


def test_contradicting_guards_refuse_export():
    (x,) = rng_arrays((4, 3))
    graph = kiln.trace(weighted_rows, x, dynamic_axes={"x": [0]}).graph
    bad = graph.with_shape_guards([*graph.shape_guards, ShapeGuard(symbol("s0"), ">", 5)])
    with pytest.raises(GraphValidationError, match=r"s0 > 5.*s0 = 4.*trace"):
        bad.to_onnx()


# -- guards the model checks at run time -----------------------------------------------------


def more_than_two_rows(x):
    if x.shape[0] > 2:
        return x * 2
    return x - 1


def not_one_row(x):
    if x.shape[0] != 1:
        return x.sum(axis=0)
    return x[0] + 1


def half_rows_match(x, y):
    if x.shape[0] // 2 == y.shape[1] % 3:
        return x + 1, y.T
    return x, y.T


def rows_ratio(x, y):
    if x.shape[0] // y.shape[0] == 2:
        return x.sum(axis=0)
    return x.max(axis=0)


GUARDED = [
    # fn, dynamic axes, shapes at capture, valid shapes, violating shapes, guard text
    (more_than_two_rows, {"x": [0]}, [(4, 3)], [[(3, 3)], [(9, 3)]], [[(2, 3)], [(0, 3)]]),
    (not_one_row, {"x": [0]}, [(4, 3)], [[(2, 3)], [(0, 3)]], [[(1, 3)]]),
    (
        half_rows_match,
        {"x": [0], "y": [1]},
        [(4, 3), (2, 5)],
        [[(5, 3), (2, 2)], [(2, 3), (2, 1)], [(0, 3), (2, 3)]],
        [[(4, 3), (2, 4)], [(2, 3), (2, 2)]],
    ),
    (
        rows_ratio,
        {"x": [0], "y": [0]},
        [(4, 3), (2, 3)],
        [[(5, 3), (2, 3)], [(8, 3), (3, 3)]],
        [[(4, 3), (1, 3)], [(1, 3), (2, 3)]],
    ),
]


@pytest.mark.parametrize("level", LEVELS, ids=["no_opt", "all_opt"])
@pytest.mark.parametrize("case", GUARDED, ids=lambda c: c[0].__name__)
def test_guard_is_checked_by_the_model(case, level):
    fn, dynamic, captured, valid, violating = case
    graph = kiln.trace(fn, *rng_arrays(*captured), dynamic_axes=dynamic).graph
    assert graph.shape_guards and not pinned_sizes(graph.shape_guards)
    model = graph.to_onnx()
    assert model.metadata_props[0].key == "kiln.shape_guards"
    assert model.metadata_props[0].value.split("\n") == [str(g) for g in graph.shape_guards]
    for shapes in valid:  # the right answer wherever the graph holds
        check_same_answers(graph.copy(), fn, rng_arrays(*shapes, seed=len(shapes)), level)
    run = session(model, level)
    for shapes in violating:  # kiln refuses these sizes; the model fails naming the guard
        arrays = rng_arrays(*shapes)
        with pytest.raises(InvalidArgument, match="kiln shape guard"):
            run.run(None, dict(zip(graph.input_names, arrays)))
        checked = graph.copy()
        checked.finalize()
        with pytest.raises(ShapeGuardError):
            checked.run(arrays)


def test_zero_divisor_in_a_guard_is_refused_not_a_crash():
    graph = kiln.trace(rows_ratio, *rng_arrays((4, 3), (2, 3)), dynamic_axes={"x": [0], "y": [0]})
    run = session(graph.graph.to_onnx())
    with pytest.raises(
        InvalidArgument, match=r"kiln shape guard `s1 != 0`"
    ):  # Python's // raises there
        run.run(None, {"x": np.ones((3, 3)), "y": np.ones((0, 3))})


def test_every_output_depends_on_every_check():
    """A runtime that skips nodes nothing uses still runs the checks: each output is computed
    through them (a no-op Reshape of the output by its own shape times the checks)."""
    graph = kiln.trace(
        half_rows_match, *rng_arrays((4, 3), (2, 5)), dynamic_axes={"x": [0], "y": [1]}
    ).graph
    model = graph.to_onnx()
    producer = {out: node for node in model.graph.node for out in node.output}
    checks = {n.output[0] for n in model.graph.node if "kiln shape guard" in n.name}
    assert len(checks) == len(graph.shape_guards)

    def ancestors(name: str) -> set[str]:
        seen, stack = set(), [name]
        while stack:
            node = producer.get(stack.pop())
            if node is not None and node.output[0] not in seen:
                seen.add(node.output[0])
                stack.extend(node.input)
        return seen

    for out in graph.output_names:
        assert checks <= ancestors(out), out


def test_failing_model_names_the_guard_and_its_line():
    graph = kiln.trace(more_than_two_rows, np.ones((4, 3)), dynamic_axes={"x": [0]}).graph
    run = session(graph.to_onnx())
    with pytest.raises(InvalidArgument) as info:
        run.run(None, {"x": np.ones((2, 3))})
    assert "`s0 > 2`" in str(info.value)
    assert "test_export_guards.py" in str(info.value)


def test_saved_model_keeps_the_checks(tmp_path):
    graph = kiln.trace(more_than_two_rows, np.ones((4, 3)), dynamic_axes={"x": [0]}).graph
    path = tmp_path / "guarded.onnx"
    graph.save(path)
    run = session(onnx.load(str(path)))
    np.testing.assert_array_equal(run.run(None, {"x": np.ones((3, 3))})[0], np.full((3, 3), 2.0))
    with pytest.raises(InvalidArgument, match="kiln shape guard"):
        run.run(None, {"x": np.ones((1, 3))})


def test_loaded_model_still_refuses_sizes_the_graph_does_not_hold_for():
    """kiln's optimizer drops the no-op output reshapes of a loaded model by type, but keeps
    the checks: a Gather whose index is not known can raise."""
    graph = kiln.trace(more_than_two_rows, np.ones((4, 3)), dynamic_axes={"x": [0]}).graph
    loaded = kiln.io.load(graph.to_onnx())
    loaded.finalize()
    (x,) = rng_arrays((5, 3))
    assert_close(np.asarray(loaded.run([x])[0]), x * 2, what="loaded model")
    with pytest.raises(IndexError):
        loaded.run([np.ones((2, 3))])


def test_guarded_graph_runs_on_the_onnxruntime_engine():
    x, y = rng_arrays((5, 3), (2, 2))
    graph = kiln.trace(half_rows_match, x, y, dynamic_axes={"x": [0], "y": [1]}).graph
    graph.finalize("onnxruntime")
    for got, want in zip(graph.run([x, y]), half_rows_match(x, y)):
        assert_close(np.asarray(got), want, what="onnxruntime engine")
    with pytest.raises(ShapeGuardError):  # kiln's input check answers first
        graph.run([np.ones((4, 3)), np.ones((2, 4))])


def test_guard_on_a_size_no_input_gives_refuses_export():
    graph = kiln.trace(more_than_two_rows, np.ones((4, 3)), dynamic_axes={"x": [0]}).graph
    bad = graph.with_shape_guards([ShapeGuard(symbol("n"), "!=", 1, "f.py:3", "n != 1")])
    with pytest.raises(UnsupportedOperationError, match=r"n != 1.*no input axis.*trace"):
        bad.to_onnx()


# -- graphs without guards ---------------------------------------------------------------


def test_graph_without_guards_exports_as_before():
    def fn(x, y):
        return np.tanh(x @ y.T) * 2, (x + 1).sum(axis=0)

    x, y = rng_arrays((4, 3), (5, 3))
    graph = kiln.trace(fn, x, y, dynamic_axes={"x": [0], "y": [0]}).graph
    assert not graph.shape_guards
    model = graph.to_onnx()
    assert [n.name for n in model.graph.node] == [n.name for n in graph.nodes]
    assert [n.op_type for n in model.graph.node] == [n.op for n in graph.nodes]
    assert [i.name for i in model.graph.initializer] == [c.value.name for c in graph.constants]
    assert [dims(i) for i in model.graph.input] == [["s0", 3], ["s1", 3]]
    assert [o.name for o in model.graph.output] == graph.output_names
    assert not model.metadata_props
    check_same_answers(graph, fn, [x, y])
    # guards that hold for every size of the graph add nothing either
    trivial = graph.with_shape_guards([ShapeGuard(3, "==", 3)])
    assert trivial.to_onnx().SerializeToString() == model.SerializeToString()
