"""eliminate_common_subexpressions: equal nodes and equal small constants merge."""

from __future__ import annotations

import numpy as np

import kiln
from kiln.optim import eliminate_common_subexpressions, eliminate_dead_code

from ..numerics import assert_close
from .graphs import ops, run, traced

f32 = np.float32
X = np.linspace(-2, 2, 12, dtype=f32).reshape(3, 4)


def merged(fn, x=X):
    """Merge, drop what merging left unused, verify, compare numerics; return (graph, count)."""
    g = traced(fn, x)
    out, n = eliminate_common_subexpressions(g)
    out, _ = eliminate_dead_code(out)
    out.verify()
    assert out.output_names == g.output_names
    for want, got in zip(run(g, x), run(out, x)):
        assert_close(got, want)
    return g, out, n


def test_the_same_operation_on_the_same_inputs_is_computed_once():
    g, out, n = merged(lambda x: kiln.exp(x) * kiln.exp(x))
    assert ops(g) == ["Exp", "Exp", "Mul"]
    assert n == 1 and ops(out) == ["Exp", "Mul"]
    again, m = eliminate_common_subexpressions(out)
    assert m == 0 and again is out


def test_merging_cascades_through_users():
    g, out, n = merged(lambda x: kiln.tanh(kiln.exp(x)) + kiln.tanh(kiln.exp(x)))
    assert n == 2 and ops(out) == ["Exp", "Tanh", "Add"]


def test_different_attributes_do_not_merge():
    g, out, n = merged(lambda x: kiln.sum(x, axis=0) + kiln.sum(x, axis=1).sum())
    assert ops(out).count("ReduceSum") == ops(g).count("ReduceSum")


def test_equal_small_constants_merge():
    w = np.arange(96, dtype=f32).reshape(8, 3, 4)  # more elements than a trace shares itself
    g, out, n = merged(lambda x: x * kiln.asarray(w.copy()) + kiln.asarray(w.copy()))
    assert n >= 1 and len(out.constants) < len(g.constants)


def test_graph_outputs_keep_their_own_nodes():
    g, out, n = merged(lambda x: (kiln.exp(x), kiln.exp(x)))
    assert n == 0 and ops(out) == ["Exp", "Exp"]
    assert len(set(out.output_names)) == 2
