"""eliminate_dead_code: unused nodes and constants go, outputs and numerics stay."""

from __future__ import annotations

import numpy as np

import kiln
from kiln.ir.rewrite import remove_unused
from kiln.optim import eliminate_dead_code

from ..numerics import assert_close
from .graphs import ops, run, traced

f32 = np.float32
X = np.linspace(-1, 1, 6, dtype=f32)
W = np.arange(6, dtype=f32)


def test_unused_nodes_and_their_constants_go():
    def f(x):
        unused = kiln.exp(x) * kiln.asarray(W)  # noqa: F841 - dead on purpose
        return kiln.tanh(x) + 1.0

    g = traced(f, X)
    assert ops(g) == ["Exp", "Mul", "Tanh", "Add"]
    out, n = eliminate_dead_code(g)
    out.verify()
    assert ops(out) == ["Tanh", "Add"]
    assert n == 2 + (len(g.constants) - len(out.constants)) and len(out.constants) < len(
        g.constants
    )
    assert out.output_names == g.output_names
    assert_close(run(out, X)[0], run(g, X)[0])
    again, m = eliminate_dead_code(out)
    assert m == 0 and again is out


def test_a_graph_without_dead_code_comes_back_unchanged():
    g = traced(lambda x: kiln.exp(x) * 2.0, X)
    out, n = eliminate_dead_code(g)
    assert n == 0 and out is g


def test_nodes_feeding_only_other_dead_nodes_go_too():
    def f(x):
        dead = kiln.exp(kiln.sin(x))  # noqa: F841 - a dead chain
        return x * 2.0

    g = traced(f, X)
    out, n = eliminate_dead_code(g)
    out.verify()
    assert n >= 2 and ops(out) == ["Mul"]
    assert_close(run(out, X)[0], X * f32(2))


def test_the_pass_is_the_sweep_the_rewrite_driver_uses():
    def f(x):
        unused = kiln.cos(x)  # noqa: F841 - dead on purpose
        return kiln.exp(x)

    g = traced(f, X)
    by_pass, n = eliminate_dead_code(g)
    by_helper, m = remove_unused(g)
    assert n == m == 1 and ops(by_pass) == ops(by_helper) == ["Exp"]
