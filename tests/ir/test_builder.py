"""GraphBuilder: the one builder of typed nodes, and expand_node over it."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.errors import KilnError, OpArgumentError, OpTypeError
from kiln.ir import Constant, GraphBuilder, ModelGraph, NameScope, Node, Value, expand_node
from kiln.ops.registry import TensorType, get_op
from kiln.symbolic import SymDim, symbol

f32 = np.dtype(np.float32)
i64 = np.dtype(np.int64)


def typed(shape, dtype=f32):
    return TensorType(np.dtype(dtype), tuple(shape))


def test_add_binds_attributes_infers_types_and_names_outputs_after_the_operator():
    b = GraphBuilder(source="model.py:3")
    x = b.add_input("x", typed((2, 3)))
    (s,) = b.add("Softmax", [x])
    (a,) = b.add("Add", [s, x], source="model.py:4")
    (a1,) = b.add("Add", [a, x])
    assert (s.name, a.name, a1.name) == ("softmax", "add", "add_1")
    assert s.type == typed((2, 3)) and a1.type == typed((2, 3))
    softmax, add, add_1 = b.nodes
    assert softmax.attrs == {"axis": -1}  # bound: the default is written out
    assert [n.name for n in b.nodes] == ["softmax", "add", "add_1"]  # a node is its output
    assert [n.source for n in b.nodes] == ["model.py:3", "model.py:4", "model.py:3"]
    assert add.inputs == (s, x) and add.outputs == (a,)
    g = b.graph("g", [a1])
    g.verify()
    assert g.input_values == (x,) and g.output_values == (a1,)


def test_a_call_that_does_not_fit_raises_the_operators_error_and_records_nothing():
    b = GraphBuilder()
    x = b.add_input("x", typed((2, 3)))
    with pytest.raises(OpArgumentError, match="takes inputs"):
        b.add("Add", [x])
    with pytest.raises(OpArgumentError, match="unknown attribute"):
        b.add("Relu", [x], {"alpha": 1.0})
    with pytest.raises(OpArgumentError):
        b.add("MatMul", [x, x])  # (2, 3) @ (2, 3)
    assert b.nodes == () and "relu" not in _names(b)


def _names(b: GraphBuilder) -> set[str]:
    return {v.name for n in b.nodes for v in n.outputs}


def test_outputs_of_a_multi_output_operator():
    b = GraphBuilder()
    x = b.add_input("x", typed((4, 6)))
    k = b.add_constant(np.array([2], np.int64))
    values, indices = b.add("TopK", [x, k])
    assert (values.name, indices.name) == ("top_k", "top_k_1")
    assert indices.type == typed((4, 2), i64)
    (first,) = b.add("TopK", [x, k], n_outputs=1)
    assert len(b.nodes[-1].outputs) == 1 and first.name == "top_k_2"
    with pytest.raises(OpArgumentError, match="3 outputs but the operator makes 2"):
        b.add("TopK", [x, k], n_outputs=3)
    halves = b.add("Split", [x], {"num_outputs": 2}, hint="piece")
    assert [v.name for v in halves] == ["piece_outputs", "piece_outputs_1"]


def test_given_output_names_are_kept_and_the_node_named_apart_from_them():
    b = GraphBuilder()
    for name in ("x", "y", "relu1"):  # an importer reserves every name of the model first
        b.scope.reserve(name)
    x = b.add_input("x", typed((3,)))
    (y,) = b.add("Relu", [x], outputs=["y"], name="relu1")
    assert y.name == "y" and b.nodes[-1].name == "relu1"
    (z,) = b.add("Relu", [y], outputs=["z"], name="relu1")  # a repeated node name
    assert z.name == "z" and b.nodes[-1].name == "relu1_1"
    (w,) = b.add("Relu", [z], outputs=["w"])  # unnamed: after its output, which is taken
    assert w.name == "w" and b.nodes[-1].name == "w_1"
    b.graph("g", [w]).verify()


def test_a_node_can_define_an_existing_value_of_the_type_it_infers():
    b = GraphBuilder()
    x = b.add_input("x", typed((3,)))
    y = Value("y", typed((3,)))
    b.scope.reserve("y")  # a value of the graph the nodes join
    assert b.add("Neg", [x], outputs=[y]) == (y,)
    assert b.nodes[-1].outputs[0] is y and b.nodes[-1].name == "y_1"
    with pytest.raises(OpTypeError, match="typed float32.*infers int64"):
        b.add("Cast", [x], {"to": 7}, outputs=[y])


def test_constants_are_read_only_and_typed_with_known_contents():
    b = GraphBuilder()
    writable = np.array([1, 2, 3], np.int64)
    c = b.add_constant(writable)
    writable[0] = 9  # the graph holds a copy
    (held,) = b.constants
    assert c.name == "const" and c.type.value == (1, 2, 3)
    assert held.data[0] == 1 and not held.data.flags.writeable
    frozen = np.ones(4, np.float32)
    frozen.flags.writeable = False
    d = b.add_constant(frozen, hint="w")
    assert d.name == "w" and b.constants[-1].data is frozen  # shared, as a traced tensor's
    e = b.add_constant(np.float32(2.0), name="two")
    assert e.name == "two" and e.type == typed(())


def test_known_shapes_name_data_dependent_sizes_and_nothing_else():
    b = GraphBuilder()
    x = b.add_input("x", typed((3, 4)))
    (free,) = b.add("NonZero", [x])
    assert isinstance(free.shape[1], SymDim) and free.shape[0] == 2
    (named,) = b.add("NonZero", [x], known_shapes=[(None, symbol("nnz"))])
    assert named.shape == (2, symbol("nnz"))
    (relu,) = b.add("Relu", [x], known_shapes=[(7, 7)])  # not data-dependent: ignored
    assert relu.shape == (3, 4)
    b.graph("g", [named]).verify()


def test_a_refine_hook_completes_the_inferred_types():
    seen = []

    def refine(opdef, inputs, attrs, types):
        seen.append((opdef.name, attrs))
        return [TensorType(t.dtype, t.shape, (3, 4)) if t.dtype == i64 else t for t in types]

    b = GraphBuilder(refine=refine)
    x = b.add_input("x", typed((symbol("n"), 4)))
    (shape,) = b.add("Shape", [x], {"start": 1})
    assert shape.type.value == (3, 4) and seen == [("Shape", {"start": 1, "end": None})]


def test_rebuild_keeps_the_node_and_infers_its_types_again():
    n = symbol("n")
    b = GraphBuilder()
    x = b.add_input("x", typed((n, 4)))
    (nz,) = b.add("NonZero", [x], known_shapes=[(None, symbol("nnz"))])
    (r,) = b.add("ReduceSum", [x], {"keepdims": 0}, outputs=["total"], name="sum")
    special = GraphBuilder()
    x5 = special.add_input("x", typed((5, 4)))
    (nz5,) = special.rebuild(b.nodes[0], [x5])
    (r5,) = special.rebuild(b.nodes[1], [x5])
    assert nz5.shape == (2, symbol("nnz"))  # a data-dependent size keeps its name
    assert (r5.name, r5.shape, special.nodes[1].name) == ("total", (), "sum")
    assert special.nodes[1].attrs is b.nodes[1].attrs
    special.graph("g", [nz5, r5]).verify()


def test_expand_node_defines_the_fused_nodes_own_outputs():
    x = Value("x", typed((2, 3)))
    y = Value("y", typed((2, 3)))
    program = ("Mul(v0, v0)", "Tanh(v1)")
    fused = Node("kiln.FusedElementwise", (x,), (y,), {"program": program}, "y", "f.py:1")
    nodes = expand_node(fused, NameScope(["x", "y"]))
    assert [n.op for n in nodes] == ["Mul", "Tanh"]
    assert nodes[-1].outputs == (y,) and nodes[0].inputs == (x, x)
    assert {n.source for n in nodes} == {"f.py:1"}
    ModelGraph("g", [x], [y], nodes).verify()


def test_expand_node_refuses_a_missing_hook_and_an_incomplete_expansion():
    x = Value("x", typed((3,)))
    with pytest.raises(KilnError, match="no expand hook"):
        expand_node(Node("Relu", (x,), (Value("y", typed((3,))),), {}, "y"), NameScope())
    op = get_op("kiln.FusedElementwise")
    y, z = Value("y", typed((3,))), Value("z", typed((3,)))
    attrs = {"program": ("Neg(v0)",), "outputs": (1, 1)}  # the second output is never made
    fused = Node(op.qualified_name, (x,), (y, z), attrs, "y")
    with pytest.raises(KilnError, match="does not define its output\\(s\\) z"):
        expand_node(fused, NameScope(["x", "y", "z"]))


def test_the_tracer_builds_the_same_nodes_as_the_builder():
    g = kiln.trace(lambda x: np.tanh(x * 2.0) + 1.0, np.ones((2, 3), np.float32)).graph
    b = GraphBuilder()
    x = b.add_input("x", typed((2, 3)))
    (m,) = b.add("Mul", [x, b.add_constant(np.float32(2.0))])
    (t,) = b.add("Tanh", [m])
    b.add("Add", [t, b.add_constant(np.float32(1.0))], outputs=["output"])
    assert [(n.op, n.name, dict(n.attrs)) for n in g.nodes] == [
        (n.op, n.name, dict(n.attrs)) for n in b.nodes[:2]
    ] + [("Add", "output", {})]
    assert [c.value.type for c in g.constants] == [c.value.type for c in b.constants]
    assert isinstance(g.constants[0], Constant)


def test_builders_share_inferred_types_but_a_refine_hook_always_runs():
    # A builder without a hook remembers infer's answer for every builder without one (the
    # optimizer makes a builder per attempted rewrite); a hook still sees every node.
    first = GraphBuilder()
    (shape,) = first.add("Shape", [first.add_input("x", typed((2, 3)))])
    assert shape.type.value == (2, 3)
    seen = []

    def refine(opdef, inputs, attrs, types):
        seen.append(opdef.name)
        return [TensorType(t.dtype, t.shape, (7, 7)) for t in types]

    hooked = GraphBuilder(refine=refine)
    (refined,) = hooked.add("Shape", [hooked.add_input("x", typed((2, 3)))])
    assert seen == ["Shape"] and refined.type.value == (7, 7)
    again = GraphBuilder()
    (plain,) = again.add("Shape", [again.add_input("x", typed((2, 3)))])
    assert plain.type.value == (2, 3)  # the hook's answer is nobody else's
