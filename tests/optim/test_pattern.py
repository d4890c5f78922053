"""The pattern matcher and the rewrite driver shared by the pattern passes."""

from __future__ import annotations

import numpy as np
import pytest

from kiln.optim import DefaultsOptions
from kiln.optim.pattern import (
    RewriteLoopError,
    Rule,
    const,
    constant_equals,
    either,
    keep,
    op,
    rewrite_with_rules,
    var,
)

from ..numerics import assert_close
from .graphs import ops, run, traced

f32 = np.float32
OPTIONS = DefaultsOptions()
X = var("x")


def test_a_rule_rewrites_and_dead_nodes_go():
    g = traced(lambda x: np.exp(np.negative(-x)), np.ones(3, f32))
    out, n = rewrite_with_rules(g, [Rule(op("Neg", op("Neg", X)), keep("x"))], OPTIONS)
    out.verify()
    assert n == 1 and ops(out) == ["Exp"] and out.output_names == ["output"]
    x = np.arange(3, dtype=f32)
    assert_close(run(out, x)[0], np.exp(x))


def test_commutative_operands_match_in_either_order_and_names_must_agree():
    rule = Rule(op("Mul", X, op("Exp", X)), keep("x"))
    for fn in (lambda x: x * np.exp(x), lambda x: np.exp(x) * x):
        _, n = rewrite_with_rules(traced(fn, np.ones(3, f32)), [rule], OPTIONS)
        assert n == 1
    # x * exp(y): the second x is a different value, so no match.
    g = traced(lambda x, y: x * np.exp(y), np.ones(3, f32), np.ones(3, f32))
    assert rewrite_with_rules(g, [rule], OPTIONS) == (g, 0)


def test_constants_match_by_value_up_to_rounding():
    assert constant_equals(np.float32(1 / np.sqrt(2)), np.sqrt(0.5))
    assert not constant_equals(np.float32(0.7071), np.sqrt(0.5))
    assert constant_equals(np.ones((2, 2), np.int32), 1)
    assert not constant_equals(np.array([1.0, 2.0], f32), 1.0)
    assert not constant_equals(np.zeros((0,), f32), 0.0)


def test_either_tries_each_alternative():
    rule = Rule(either(op("Sqrt", X), op("Exp", X)), keep("x"))
    g = traced(lambda x: np.sqrt(np.exp(x) + 1), np.ones(3, f32))
    out, n = rewrite_with_rules(g, [rule], OPTIONS)
    assert n == 2 and ops(out) == ["Add"]


def test_a_replacement_of_another_shape_is_refused():
    # x * 1 where the 1 broadcasts x to (2, 3): the result is not x.
    g = traced(lambda x: x * np.ones((2, 3), f32), np.ones(3, f32))
    out, n = rewrite_with_rules(g, [Rule(op("Mul", X, const(1)), keep("x"))], OPTIONS)
    assert n == 0 and out is g


def test_graph_outputs_keep_their_names():
    # The output would become the input itself: an Identity keeps the name "output".
    g = traced(lambda x: np.negative(-x), np.ones(3, f32))
    rules = [Rule(op("Neg", op("Neg", X)), keep("x")), Rule(op("Identity", X), keep("x"))]
    out, n = rewrite_with_rules(g, rules, OPTIONS)
    out.verify()
    assert n == 1 and ops(out) == ["Identity"] and out.output_names == ["output"]
    assert rewrite_with_rules(out, rules, OPTIONS)[1] == 0  # no ping-pong with the Identity
    # The output becomes a computed value: that value takes the output's name.
    g = traced(lambda x: (np.negative(-np.exp(x)), np.exp(x) * 2), np.ones(3, f32))
    out, n = rewrite_with_rules(g, rules, OPTIONS)
    out.verify()
    assert out.output_names == ["output.0", "output.1"] and "Neg" not in ops(out)
    x = np.arange(3, dtype=f32)
    assert_close(run(out, x)[1], run(g, x)[1])


def test_exclusive_rules_leave_shared_intermediates_alone():
    rule = Rule(op("Mul", op("Exp", X), X), keep("x"), exclusive=True)
    shared = traced(lambda x: (np.exp(x) * x, np.exp(x) + 1), np.ones(3, f32))
    from kiln.optim import eliminate_common_subexpressions

    shared, _ = eliminate_common_subexpressions(shared)
    assert rewrite_with_rules(shared, [rule], OPTIONS)[1] == 0
    alone = traced(lambda x: np.exp(x) * x, np.ones(3, f32))
    assert rewrite_with_rules(alone, [rule], OPTIONS)[1] == 1


def test_rules_that_undo_each_other_raise_instead_of_looping():
    def swap(m, b, options):
        return b.op("Add", m["b"], m["a"])

    rule = Rule(op("Add", var("a"), var("b")), swap, "swap")
    g = traced(lambda x, y: x + y, np.ones(3, f32), np.ones(3, f32))
    with pytest.raises(RewriteLoopError, match="swap"):
        rewrite_with_rules(g, [rule], OPTIONS)


def test_a_pattern_needs_an_operator_at_its_root():
    with pytest.raises(ValueError, match="operator"):
        rewrite_with_rules(traced(lambda x: x + 1, np.ones(2, f32)), [Rule(X, keep("x"))], OPTIONS)


def test_two_outputs_replaced_by_one_new_value_stay_in_topological_order():
    # issue 10 item 6: v = (b - 1.5) ** 2; return v * 1, v. Pow(v, 2) -> Mul(v, v) makes a new
    # value that replaces both outputs: one output renames it, the other copies it, and the
    # copy must read the renamed value.
    rules = [
        Rule(op("Pow", X, const(2.0)), lambda m, b, o: b.op("Mul", m["x"], m["x"])),  # x**2 -> x*x
        Rule(op("Mul", X, const(1.0)), keep("x")),  # x * 1 -> x
    ]

    def target(b):
        v = np.power(b - 1.5, 2)  # a Pow node (b ** 2 is np.square, a Mul, as ndarray's)
        return v * 1.0, v

    g = traced(target, np.ones(3))
    out, n = rewrite_with_rules(g, rules, OPTIONS)
    out.verify()
    assert n >= 2 and out.output_names == g.output_names
    b = np.array([0.0, 1.5, -2.0])
    for got in run(out, b):
        assert_close(got, (b - 1.5) ** 2)
