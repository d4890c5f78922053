"""The rewrite helpers passes share: topological order after any rewrite."""

from __future__ import annotations

import numpy as np

import kiln
from kiln.ir.builder import GraphBuilder
from kiln.ir.rewrite import remove_unused, topological_order
from kiln.ops.registry import TensorType


def graph_of(fn, *args):
    return kiln.trace(fn, *args).graph


def defined(graph):
    return [*graph.input_values, *(c.value for c in graph.constants)]


def test_an_ordered_body_comes_back_as_it_is():
    g = graph_of(lambda x: np.exp(x + 1.0) * 2.0, np.ones(3))
    assert topological_order(g.nodes, defined(g)) == list(g.nodes)


def test_nodes_placed_before_their_inputs_move_just_after_them():
    g = graph_of(lambda x, y: (np.exp(x) + np.tanh(y), np.abs(y)), np.ones(3), np.ones(3))
    ops = [n.op for n in g.nodes]
    assert ops == ["Exp", "Tanh", "Add", "Abs"]
    shuffled = [g.nodes[2], g.nodes[0], g.nodes[3], g.nodes[1]]  # Add first: it must wait
    ordered = topological_order(shuffled, defined(g))
    assert [n.op for n in ordered] == ["Exp", "Abs", "Tanh", "Add"]
    g.with_body(ordered).verify()


def test_a_node_whose_input_nothing_makes_stays_last_for_verify_to_name():
    g = graph_of(lambda x: np.exp(x) * 2.0, np.ones(3))
    other = graph_of(lambda x: np.exp(x), np.ones(3))
    ordered = topological_order(list(g.nodes), defined(other))  # g's input is not defined
    assert ordered == list(g.nodes)


def test_unused_node_that_checks_sizes_at_run_time_is_kept() -> None:
    # fuzz 1:1587: under dynamic=True an unused np.maximum of sizes that do not broadcast must
    # still raise NumPy's error, not vanish with dead-code elimination.
    import numpy as np
    import pytest

    import kiln

    def f(a, b):
        np.maximum(np.concatenate([a, a], axis=0), b)  # unused
        return a * 2.0

    cf = kiln.compile(f, dynamic=True)
    a, b = np.zeros((0,), np.float32), np.zeros((0,), np.float32)
    cf(a, b)
    cf(a, b)
    with pytest.raises(ValueError):
        f(np.ones(3, np.float32), np.ones(4, np.float32))
    with pytest.raises(ValueError):
        cf(np.ones(3, np.float32), np.ones(4, np.float32))
    np.testing.assert_array_equal(cf(np.ones(2, np.float32), np.ones(4, np.float32)), 2.0)


# -- nodes that raise on their values stay (OpDef.raises_on_values; issue 10, fuzz 1:4412) ----


def _unused_then_add(op_of):
    def f(a, *rest):
        op_of(a, *rest)  # computed, never used
        return a + 1

    return f


def test_unused_integer_power_is_kept_and_an_unused_float_power_goes() -> None:
    from kiln.ir.rewrite import can_raise, remove_unused

    power = _unused_then_add(lambda a: a**a)
    g, _ = remove_unused(graph_of(power, np.arange(3, dtype=np.int32)))
    assert [n.op for n in g.nodes] == ["Pow", "Add"] and can_raise(g.nodes[0])
    g, removed = remove_unused(graph_of(power, np.arange(3, dtype=np.float32)))
    assert [n.op for n in g.nodes] == ["Add"] and removed == 1


def test_unused_gather_stays_unless_its_indices_are_known_in_range() -> None:
    from kiln.ir.rewrite import remove_unused

    data = np.arange(5.0)
    by_input = _unused_then_add(lambda a, i: np.take(a, i))  # indices known only at run time
    g, _ = remove_unused(graph_of(by_input, data, np.array([1, 2])))
    assert [n.op for n in g.nodes][-2:] == ["Gather", "Add"]
    known = _unused_then_add(lambda a: a[np.array([0, 3])])  # checked when recorded
    g, _ = remove_unused(graph_of(known, data))
    assert "Gather" not in [n.op for n in g.nodes]


def test_unused_fused_node_with_an_integer_power_step_is_kept() -> None:
    from kiln.ir import GraphBuilder
    from kiln.ir.rewrite import remove_unused
    from kiln.ops.registry import TensorType

    b = GraphBuilder()
    x = b.add_input("x", TensorType(np.dtype(np.int32), (3,)))
    b.add("kiln.FusedElementwise", [x, x], {"program": ("Pow(v0, v1)", "Add(v2, v0)")})
    (kept,) = b.add("Neg", [x])
    g, _ = remove_unused(b.graph("g", [kept]))
    assert [n.op for n in g.nodes] == ["kiln.FusedElementwise", "Neg"]


def test_the_optimizer_keeps_an_unused_integer_power() -> None:
    traced = kiln.trace(_unused_then_add(lambda a: (a**a) * 1), np.arange(3, dtype=np.int32))
    traced.optimize()
    assert "Pow" in [n.op for n in traced.graph.nodes]
    traced.finalize()
    import pytest

    with pytest.raises(ValueError, match="negative integer powers"):
        traced(np.array([2, -1, 3], np.int32))


def test_dynamic_replay_raises_numpys_error_for_an_unused_raising_node() -> None:
    import warnings

    import pytest

    def power(a):  # fuzz 1:4412
        t0 = np.power(a, a)
        np.dot(t0, a)  # unused
        return a.mean(axis=-1)

    def gather(a):
        a[[0, 3]]  # unused
        return a * 2

    cases = [
        (power, np.array([5, 5, 0, 6], np.int32), np.array([4, -1], np.int32), ValueError),
        (gather, np.arange(5.0), np.arange(2.0), IndexError),
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for fn, first, drifted, error in cases:
            with pytest.raises(error):
                fn(drifted)
            cf = kiln.compile(fn, dynamic=True)
            np.testing.assert_array_equal(cf(first), fn(first))
            np.testing.assert_array_equal(cf(first), fn(first))
            with pytest.raises(error):
                cf(drifted)


def test_an_unused_gather_of_a_masks_own_positions_is_removed() -> None:
    # x[m] with m of x's shape cannot index out of range: unused, it goes (a GatherND of
    # other indices stays, since it may raise)
    f32 = np.dtype(np.float32)
    b = GraphBuilder()
    x = b.add_input("x", TensorType(f32, (3, 4)))
    (m,) = b.add("Less", [x, b.add_constant(np.array(0.0, f32))])
    (nz,) = b.add("NonZero", [m])
    (idx,) = b.add("Transpose", [nz])
    b.add("GatherND", [x, idx])
    other = b.add_input("i", TensorType(np.dtype(np.int64), (2, 2)))
    b.add("GatherND", [x, other])
    (y,) = b.add("Neg", [x])
    graph, _ = remove_unused(b.graph("g", [y]))
    assert [n.op for n in graph.nodes] == ["GatherND", "Neg"]
    assert graph.nodes[0].inputs[1] is other


def test_substitute_node_replaces_only_what_the_mapping_names():
    from kiln.ir.rewrite import substitute_node

    g = graph_of(lambda x, y: np.exp(x) + y, np.ones(3), np.ones(3))
    exp, add = g.nodes
    x, y = g.input_values
    assert substitute_node(add, {}) is add
    assert substitute_node(add, {id(x): y}) is add  # x is not an input of the Add
    assert substitute_node(add, {id(y): y}) is add  # mapped to itself: the same node
    swapped = substitute_node(add, {id(y): x, id(exp.outputs[0]): y})
    assert swapped is not add and swapped.inputs == (y, x)
    assert (swapped.op, swapped.outputs, swapped.name) == (add.op, add.outputs, add.name)
    with_none = kiln.ir.graph.Node("Clip", (x, None, y), add.outputs, {}, "clip")
    assert substitute_node(with_none, {id(y): x}).inputs == (x, None, x)
    assert substitute_node(with_none, {id(exp.outputs[0]): x}) is with_none
