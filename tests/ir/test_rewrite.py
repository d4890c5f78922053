"""The rewrite helpers passes share: topological order after any rewrite."""

from __future__ import annotations

import numpy as np

import kiln
from kiln.ir.rewrite import topological_order


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
