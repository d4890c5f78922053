"""The rewrite driver's shortcuts change nothing: rules whose operators a graph lacks are not
tried, and a binding-free structural check turns nodes away before matching (issue 13). The
optimized graphs are exactly those of the driver that tries every rule at every node."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kiln.optim import DefaultsOptions, pattern
from kiln.optim.pattern import Builder, Match, Rule, const, keep, op, rewrite_with_rules, var

from .graphs import traced

f32 = np.float32
RNG = np.random.default_rng(3)


def rand(*shape):
    return RNG.standard_normal(shape).astype(f32)


W1, B1, W2 = rand(16, 32), rand(32), rand(32, 16)


def layer_norm(x):
    mu = x.mean(axis=-1, keepdims=True)
    var_ = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var_ + 1e-5)


def gelu_mlp(x):
    h = x @ W1 + B1
    h = 0.5 * h * (1 + np.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h**3)))
    return layer_norm(h @ W2)


def gelu_swapped(x):
    """GELU with every commutative product and sum in the other order than the rules'."""
    inner = (x * x * x * 0.044715 + x) * math.sqrt(2 / math.pi)
    return (np.tanh(inner) + 1) * (x * 0.5)


def attention(x):
    s = x @ x.T / 4.0
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)) @ x


def rows(x):
    out = np.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = np.tanh(x[i] * 2.0) + 1.0 - 0.0
    return out


def chain(x):
    y = x
    for k in range(20):
        y = (y * 1.0) ** 2 * 0.5 + np.sin(y) - (k % 2) * 0.0
    return np.negative(np.negative(y))


def _unfiltered(monkeypatch):
    """The driver without its shortcuts: every rule rooted at a node's operator is matched."""
    monkeypatch.setattr(pattern, "_required_ops", lambda p, skipped=frozenset(): frozenset())
    monkeypatch.setattr(pattern, "_names_agree", lambda p: False)
    monkeypatch.setattr(pattern, "_is_flat", lambda p: False)


@pytest.mark.parametrize("fn", [gelu_mlp, gelu_swapped, attention, rows, chain])
def test_the_optimized_graph_is_the_unfiltered_drivers(fn, monkeypatch):
    x = rand(6, 16)
    fast = traced(fn, x)
    fast_report = fast.optimize()
    _unfiltered(monkeypatch)
    slow = traced(fn, x)
    slow_report = slow.optimize()
    assert str(fast) == str(slow)
    assert fast_report.rewrites == slow_report.rewrites
    fast.verify()


def test_a_rule_needing_an_operator_a_replacement_adds_applies_in_the_same_sweep(monkeypatch):
    # exp(x) -> sigmoid(x) makes the graph's only Sigmoid; -(sigmoid(x)) -> x needs it. One
    # sweep rewrites both and one confirms: a third would raise RewriteLoopError.
    monkeypatch.setattr(pattern, "MAX_SWEEPS", 2)
    rules = [
        Rule(op("Neg", op("Sigmoid", var("x"))), keep("x"), "neg-sigmoid"),
        Rule(op("Exp", var("x")), lambda m, b, o: b.op("Sigmoid", m["x"]), "exp-sigmoid"),
    ]
    g = traced(lambda x: -np.exp(x), rand(3))
    g, count = rewrite_with_rules(g, rules, DefaultsOptions())
    assert count == 2 and [n.op for n in g.nodes] == ["Identity"]  # the output's copy of x


def test_a_name_bound_twice_checks_the_second_place_only_by_identity():
    # "c" binds x at the first input; at the second the matcher only asks for the same value,
    # so x * x matches although x is not a constant: the shortcuts must not refuse it.
    def square(m: Match, b: Builder, o: DefaultsOptions):
        return b.op("Pow", m["c"], b.const(np.array(2.0, f32)))

    rules = [Rule(op("Mul", var("c"), const(1.0, name="c")), square, "odd")]
    g = traced(lambda x: x * x, rand(3))
    g, count = rewrite_with_rules(g, rules, DefaultsOptions())
    assert count == 1 and [n.op for n in g.nodes] == ["Pow"]


def test_a_name_bound_twice_with_other_operators_needs_only_those_of_one_place():
    # "e" binds Exp(x) at the first input; the second place (a Sigmoid) is only compared by
    # identity, so exp(x) * exp(x) matches in a graph without any Sigmoid: the operators the
    # rule needs must not include it. (The Add a rule needs is required: no Add, no match.)
    def double(m: Match, b: Builder, o: DefaultsOptions):
        return b.op("Add", m["e"], m["e"])

    pattern_ = op("Mul", op("Exp", var("x"), name="e"), op("Sigmoid", var("x"), name="e"))
    rules = [Rule(pattern_, double, "repeated")]

    def f(x):
        e = np.exp(x)
        return e * e

    g = traced(f, rand(3))
    g, count = rewrite_with_rules(g, rules, DefaultsOptions())
    assert count == 1 and [n.op for n in g.nodes] == ["Exp", "Add"]
    needs_add = [Rule(op("Add", pattern_, var("y")), keep("y"), "needs-add")]
    g = traced(f, rand(3))
    assert rewrite_with_rules(g, needs_add, DefaultsOptions())[1] == 0
    assert pattern._required_ops(needs_add[0].pattern, pattern._repeated(pattern_)) == {
        frozenset({"Add"}),
        frozenset({"Mul"}),
    }


@pytest.mark.parametrize("fn", [gelu_mlp, gelu_swapped, attention, rows, chain])
def test_flat_patterns_match_as_the_generic_matcher_does(fn, monkeypatch):
    """One operator over leaves (most rules) is matched without the nested generators: every
    rule of the default pipeline, at every node, gives the same matches in the same order."""
    import importlib

    rules = []
    for module in ("simplify_algebra", "fuse_gelu", "fuse_softmax", "fuse_gemm", "fuse_rms_norm"):
        m = importlib.import_module(f"kiln.optim.{module}")
        rules += [r for k, v in vars(m).items() if k.endswith("RULES") for r in v]
    rules += [
        Rule(op("Mul", var("c"), var("c"), name="sq"), keep("c")),  # a name bound twice
        Rule(op("Add", const(name="k"), var("x")), keep("x")),  # commutative, a constant
    ]
    assert any(pattern._is_flat(r.pattern) for r in rules)
    g = traced(fn, rand(6, 16))
    constants = {id(c.value): c.data for c in g.constants}
    producers = {id(v): n for n in g.nodes for v in n.outputs}

    def found(matcher, rule, node):
        return [
            (sorted((k, id(v)) for k, v in m.values.items()), sorted(m.nodes), m.interior)
            for m in matcher.matches(rule.pattern, node)
        ]

    fast = pattern._Matcher(producers, constants)
    flat = [(r, n, found(fast, r, n)) for r in rules for n in g.nodes]
    monkeypatch.setattr(pattern, "_is_flat", lambda p: False)
    slow = pattern._Matcher(producers, constants)
    assert any(f for _, _, f in flat)
    for rule, node, matches in flat:
        assert matches == found(slow, rule, node), (rule.name, node)


# -- what flat rules declined is remembered (pattern._Declined) ----------------------------


def test_a_flat_rule_that_declined_is_not_matched_again_at_the_same_node():
    # Sweep 1 rewrites -(-x) and sees exp(y) decline; sweep 2 only confirms: the rule that
    # declined at the unchanged Exp is not asked again.
    asked = []

    def decline(m: Match, b: Builder, o: DefaultsOptions):
        asked.append(m.root.name)

    rules = [
        Rule(op("Exp", var("x")), decline, "declines"),
        Rule(op("Neg", op("Neg", var("x"))), keep("x"), "neg-neg"),
    ]
    g = traced(lambda x, y: np.negative(np.negative(x)) + np.exp(y), rand(3), rand(3))
    g, count = rewrite_with_rules(g, rules, DefaultsOptions())
    assert count == 1 and asked == ["exp"]


def test_a_declined_rule_applies_once_folding_makes_its_input_a_constant():
    # x * (0.5 + 0.5): mul-one declines while the sum is a node's output; fold_constants then
    # makes that same value a constant, and the next iteration's simplify_algebra must see it.
    from kiln.ir import GraphBuilder
    from kiln.ops.registry import TensorType
    from kiln.optim import fold_constants, simplify_algebra

    b = GraphBuilder()
    x = b.add_input("x", TensorType(np.dtype(f32), (3,)))
    half = np.array(0.5, f32)
    (one,) = b.add("Add", [b.add_constant(half), b.add_constant(half)])
    (y,) = b.add("Mul", [x, one])
    g = b.graph("g", [y])
    report = g.optimize([simplify_algebra, fold_constants])
    assert "Mul" not in [n.op for n in g.nodes]
    assert report.rewrites[0]["simplify_algebra"] == 0
    assert sum(r["simplify_algebra"] for r in report.rewrites) == 1


def test_declines_are_remembered_per_options():
    # x + 0.0 is x only under relaxed float rules: what strict rules declined is not what
    # relaxed ones decline, even while a pipeline keeps the tables.
    from kiln.optim.simplify_algebra import SIMPLIFY_RULES

    g = traced(lambda x: x + f32(0.0), rand(3))
    pattern.remember_declines(True)
    try:
        assert rewrite_with_rules(g, SIMPLIFY_RULES, DefaultsOptions())[1] == 0
        relaxed = DefaultsOptions(allow_reassociation=True)
        assert rewrite_with_rules(g, SIMPLIFY_RULES, relaxed)[1] == 1
    finally:
        pattern.remember_declines(False)
    assert not pattern._DECLINED


def test_a_pruned_graph_is_not_walked_again_while_a_pipeline_runs(monkeypatch):
    def f(x):
        np.exp(x)  # dead
        return x + 1.0

    g = traced(f, rand(3))
    pattern.remember_declines(True)
    try:
        pruned, removed = pattern.prune(g)
        assert removed == 1
        monkeypatch.setattr(pattern, "remove_unused", None)  # (not called again)
        assert pattern.prune(pruned) == (pruned, 0)
    finally:
        pattern.remember_declines(False)
    assert not pattern._PRUNED
