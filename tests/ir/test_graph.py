"""The ModelGraph IR: verify(), printing, copy, placement and the lifecycle."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.errors import DeviceUnavailableError, GraphNotFinalizedError, GraphValidationError
from kiln.ir import Constant, ModelGraph, Node, Value
from kiln.ops.registry import TensorType
from kiln.symbolic import symbol

f32 = np.dtype(np.float32)


def vec(name, n=3):
    return Value(name, TensorType(f32, (n,)))


def add_graph():
    x, y, z = vec("x"), vec("y"), vec("z")
    return ModelGraph("g", [x, y], [z], [Node("Add", (x, y), (z,), {}, "z")])


def test_a_valid_graph_verifies_and_runs():
    g = add_graph()
    g.verify()
    assert g.input_names == ["x", "y"] and g.output_names == ["z"]
    assert g.inputs[0] == kiln.TensorSpec((3,), "float32", "x")
    with pytest.raises(GraphNotFinalizedError, match=r"call graph.finalize\(\)"):
        g.run([np.ones(3, f32), np.ones(3, f32)])
    g.finalize()
    (z,) = g.run([np.ones(3, f32), np.full(3, 2, f32)])
    np.testing.assert_array_equal(np.asarray(z), np.full(3, 3, f32))


def test_verify_reports_use_before_definition():
    x, a, b = vec("x"), vec("a"), vec("b")
    nodes = [Node("Exp", (a,), (b,), {}, "b"), Node("Exp", (x,), (a,), {}, "a")]
    with pytest.raises(GraphValidationError, match="'a' is used before it is defined"):
        ModelGraph("g", [x], [b], nodes).verify()


def test_verify_reports_duplicate_names_and_double_definition():
    x = vec("x")
    dup = vec("x")
    with pytest.raises(GraphValidationError, match="name 'x' is used by"):
        ModelGraph("g", [x], [dup], [Node("Exp", (x,), (dup,), {}, "n")]).verify()


def test_verify_reports_types_that_disagree_with_infer():
    x, y = vec("x"), Value("y", TensorType(np.dtype(np.float64), (3,)))
    with pytest.raises(GraphValidationError, match="typed float64.*infers float32"):
        ModelGraph("g", [x], [y], [Node("Exp", (x,), (y,), {}, "y")]).verify()


def test_verify_reports_unknown_ops_attrs_and_undefined_outputs():
    x, y = vec("x"), vec("y")
    with pytest.raises(GraphValidationError, match="no operator 'Nope'"):
        ModelGraph("g", [x], [y], [Node("Nope", (x,), (y,), {}, "y")]).verify()
    with pytest.raises(GraphValidationError, match="unknown attribute"):
        ModelGraph("g", [x], [y], [Node("Exp", (x,), (y,), {"bad": 1}, "y")]).verify()
    with pytest.raises(GraphValidationError, match="output 'y' is not defined"):
        ModelGraph("g", [x], [y], []).verify()


def test_verify_checks_constant_contents():
    c = Value("c", TensorType(f32, (2,)))
    with pytest.raises(GraphValidationError, match="constant 'c' holds"):
        ModelGraph("g", [], [c], [], [Constant(c, np.zeros(3, f32))]).verify()


def test_printout_has_one_line_per_node_with_dtypes_and_symbolic_shapes():
    b = symbol("B")
    x = Value("x", TensorType(f32, (b, 3)))
    y = Value("y", TensorType(f32, (b, 3)))
    g = ModelGraph("demo", [x], [y], [Node("Exp", (x,), (y,), {}, "y")])
    text = str(g)
    assert text.splitlines() == [
        "graph demo(x: float32[B, 3]) -> (y: float32[B, 3])",
        "  y: float32[B, 3] = Exp(x)",
    ]
    assert "1 nodes" in repr(g)


def test_copy_is_independent_and_unfinalized():
    g = add_graph()
    g.finalize()
    c = g.copy()
    assert not c.is_finalized() and c.nodes == g.nodes
    c.optimize()
    assert g.is_finalized()


def test_to_chooses_and_moves_the_place():
    g = add_graph()
    g.to("cpu")
    g.finalize()
    g.to(kiln.Device("cpu"))
    assert g.is_finalized() and g.place == kiln.Device("cpu")
    with pytest.raises(DeviceUnavailableError, match="cupy"):
        g.to("cuda:0")


def test_run_accepts_tensors_arrays_and_names():
    g = add_graph()
    g.finalize()
    (z,) = g.run({"x": kiln.ones(3, "float32"), "y": np.ones(3, f32)})
    assert z.tolist() == [2.0, 2.0, 2.0]
    with pytest.raises(kiln.InputMismatchError, match="not a single tensor"):
        g.run(np.ones(3, f32))
