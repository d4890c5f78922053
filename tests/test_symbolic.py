"""Symbolic sizes: canonical arithmetic, evaluation, broadcasting and the static/symbolic line."""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import kiln
from kiln import symbolic
from kiln.symbolic import (
    SymDim,
    broadcast_dim,
    broadcast_shapes,
    dim_max,
    dim_min,
    evaluate,
    format_shape,
    fresh_symbol,
    is_static,
    prod,
    symbol,
)

B = symbol("B")
S = symbol("S")


def test_symbol_basics() -> None:
    assert isinstance(B, SymDim) and kiln.SymDim is SymDim
    assert B == symbol("B") and hash(B) == hash(symbol("B"))
    assert B != S and B != 1
    assert B.is_symbol() and not (B + 1).is_symbol() and not (2 * B).is_symbol()
    assert B.name == "B" and str(B) == "B" and repr(B) == "SymDim('B')"
    assert (B * S + 1).symbols == frozenset({"B", "S"})
    assert ((B + 1) // S).symbols == frozenset({"B", "S"})


@pytest.mark.parametrize("bad", ["", 3, None])
def test_symbol_needs_a_name(bad: Any) -> None:
    with pytest.raises(ValueError, match="non-empty str name"):
        symbol(bad)


def test_arithmetic_with_ints_and_symbols() -> None:
    bindings = {"B": 6, "S": 4}
    cases = [
        (B + 1, 7),
        (1 + B, 7),
        (B - 1, 5),
        (10 - B, 4),
        (B * 3, 18),
        (3 * B, 18),
        (B * S, 24),
        (B + S, 10),
        (B - S, 2),
        (B // 4, 1),
        (20 // B, 3),
        (B % 4, 2),
        (20 % B, 2),
        (B // S, 1),
        (B % S, 2),
        (-B, -6),
        ((B + 2 * S - 3) // 2 + 1, 6),
    ]
    for expr, expected in cases:
        assert isinstance(expr, SymDim), expr
        assert evaluate(expr, bindings) == expected, str(expr)
        assert expr.evaluate(bindings) == expected


def test_unsupported_operands_are_refused() -> None:
    with pytest.raises(TypeError):
        B + 1.5  # type: ignore[operator]
    with pytest.raises(TypeError):
        B * "x"  # type: ignore[operator]
    with pytest.raises(TypeError):
        _ = B < 3  # type: ignore[operator]


def test_canonical_forms_compare_and_hash_equal() -> None:
    equal_pairs = [
        (B + B, 2 * B),
        (B * S, S * B),
        (B + S + 1, 1 + S + B),
        ((B + 1) * (B - 1), B * B - 1),
        (B * (S + 2), B * S + 2 * B),
        ((B * 4) // 2, 2 * B),
        ((B + 1) // 7, (1 + B) // 7),
    ]
    for left, right in equal_pairs:
        assert left == right, (str(left), str(right))
        assert hash(left) == hash(right)
    assert len({B + B, 2 * B, B * 2}) == 1


def test_expressions_that_fold_to_constants_are_ints() -> None:
    folded = {
        "(B*12)//B": ((B * 12) // B, 12),
        "(2*B)%2": ((2 * B) % 2, 0),
        "B-B": (B - B, 0),
        "B*0": (B * 0, 0),
        "(B*S)//(S*B)": ((B * S) // (S * B), 1),
        "(2*B+2)//(B+1)": ((2 * B + 2) // (B + 1), 2),
        "(B*S)%B": ((B * S) % B, 0),
        "0//B": (0 // B, 0),
        "0%B": (0 % B, 0),
        "(2*(S//3))%2": ((2 * (S // 3)) % 2, 0),
        "(B+S)%(B+S)": ((B + S) % (B + S), 0),
    }
    for text, (value, expected) in folded.items():
        assert type(value) is int and value == expected, text
    assert (B * S) // B == S
    assert (B * B * 6 + B * 3) // (3 * B) == 2 * B + 1
    assert (B // 1) == B


def test_non_exact_division_stays_opaque_and_evaluates() -> None:
    opaque = [(B + 1) // 2, B // S, (3 * B) // (2 * B), (B + 1) % 2, 7 // B, (B * B - 1) // (B - 1)]
    for expr in opaque:
        assert isinstance(expr, SymDim)
    assert evaluate((B + 1) // 2, {"B": 4}) == 2
    assert evaluate((B + 1) % 2, {"B": 4}) == 1
    assert evaluate(B // S, {"B": 9, "S": 2}) == 4
    assert evaluate((3 * B) // (2 * B), {"B": 5}) == 1
    assert evaluate(7 // B, {"B": 3}) == 2
    assert evaluate((B * B - 1) // (B - 1), {"B": 4}) == 5
    # Opaque terms are still values: they combine and compare canonically.
    half = (B + 1) // 2
    assert half + half == 2 * ((B + 1) // 2)
    assert evaluate(half * 2 + (B + 1) % 2, {"B": 9}) == 10


def test_division_by_zero() -> None:
    with pytest.raises(ZeroDivisionError):
        B // 0
    with pytest.raises(ZeroDivisionError):
        B % 0
    with pytest.raises(ZeroDivisionError):
        B // (S - S)


def test_evaluate() -> None:
    assert evaluate(5, {}) == 5
    assert evaluate(B * B * S, {"B": 3, "S": 2}) == 18
    assert evaluate(B, {"B": 0}) == 0
    with pytest.raises(KeyError, match="'S' is not bound"):
        evaluate(B + S, {"B": 1})


def test_str_forms() -> None:
    assert str(B * 4 + 1) == "4*B + 1"
    assert str(B - 1) == "B - 1"
    assert str(1 - B) == "-B + 1"
    assert str(B * B) == "B**2"
    assert str(B * S) == "B*S"
    assert str(B - 2 * S) in {"B - 2*S", "-2*S + B"}
    assert str((B + 1) // 2) == "((B + 1)//2)"
    assert str(B // S) == "(B//S)"
    assert str(B % 3) == "(B%3)"
    assert str(dim_max(B, S)) == "max(B, S)"
    assert repr(B + 1) == "SymDim('B + 1')"


@pytest.mark.parametrize(
    ("conversion", "match"),
    [
        (bool, r"bool\(B\): the symbolic size B has no value"),
        (int, "no value until the graph runs"),
    ],
)
def test_python_conversions_refuse(conversion: Callable[[Any], Any], match: str) -> None:
    with pytest.raises(TypeError, match=match):
        conversion(B)


def test_index_refuses() -> None:
    with pytest.raises(TypeError, match="cannot be used as a Python int"):
        operator.index(B + 1)
    with pytest.raises(TypeError):
        range(B)  # type: ignore[call-overload]


def test_broadcast_dim() -> None:
    assert broadcast_dim(3, 3) == 3
    assert broadcast_dim(1, 4) == 4 and broadcast_dim(4, 1) == 4
    with pytest.raises(ValueError, match="sizes 3 and 4 do not broadcast"):
        broadcast_dim(3, 4)
    # symbolic vs 1: the symbol; vs itself: itself; vs static: the static size wins.
    assert broadcast_dim(B, 1) == B and broadcast_dim(1, B) == B
    assert broadcast_dim(B, B) == B
    assert broadcast_dim(B, 5) == 5 and broadcast_dim(5, B) == 5


def test_broadcast_of_two_symbols_is_checked_when_bound() -> None:
    both = broadcast_dim(B, S)
    assert isinstance(both, SymDim)
    assert both == broadcast_dim(S, B)  # canonical regardless of order
    assert str(both) == "bcast(B, S)"
    assert evaluate(both, {"B": 4, "S": 4}) == 4
    assert evaluate(both, {"B": 1, "S": 7}) == 7
    assert evaluate(both, {"B": 7, "S": 1}) == 7
    with pytest.raises(ValueError, match="sizes 3 and 4 do not broadcast"):
        evaluate(both, {"B": 3, "S": 4})


def test_broadcast_shapes() -> None:
    assert broadcast_shapes((B, 1, 4), (3, 1)) == (B, 3, 4)
    assert broadcast_shapes((2, 3), (3,), ()) == (2, 3)
    assert broadcast_shapes() == ()
    assert broadcast_shapes((1, S), (B, 1)) == (B, S)
    assert broadcast_shapes((B,), (S,)) == (broadcast_dim(B, S),)
    with pytest.raises(ValueError, match="do not broadcast"):
        broadcast_shapes((2, 3), (4,))


def test_dim_max_min() -> None:
    assert dim_max(2, 5) == 5 and dim_min(2, 5) == 2
    assert dim_max(B, B) == B and dim_min(B, B) == B
    assert dim_max(B, S) == dim_max(S, B)
    assert dim_min(B, 3) == dim_min(3, B)
    assert evaluate(dim_max(B, S), {"B": 2, "S": 9}) == 9
    assert evaluate(dim_min(B, S), {"B": 2, "S": 9}) == 2
    assert evaluate(dim_max(B + 1, 4), {"B": 1}) == 4


def test_prod_and_is_static() -> None:
    assert prod([]) == 1 and prod([2, 3, 4]) == 24
    assert prod([B, 2, S]) == 2 * B * S
    assert prod([B, 0]) == 0
    assert is_static((1, 2)) and is_static(()) and not is_static((1, B))


def test_format_shape() -> None:
    assert format_shape(()) == "()"
    assert format_shape((3,)) == "(3,)"
    assert format_shape((B, 3, 4 * S)) == "(B, 3, 4*S)"
    assert format_shape([B + 1]) == "(B + 1,)"


def test_fresh_symbols_are_unique() -> None:
    made = [fresh_symbol("nonzero") for _ in range(20)]
    assert len(set(made)) == 20
    assert all(d.is_symbol() and d.name.startswith("nonzero") for d in made)
    assert fresh_symbol("n") != fresh_symbol("n")


def test_helpers_are_exported() -> None:
    for name in symbolic.__all__:
        assert hasattr(symbolic, name), name


# -- property: symbolic arithmetic agrees with integer arithmetic ------------------------------

_OPS: dict[str, Callable[[Any, Any], Any]] = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "//": operator.floordiv,
    "%": operator.mod,
}

_expressions = st.recursive(
    st.one_of(st.sampled_from(["B", "S"]), st.integers(min_value=0, max_value=6)),
    lambda children: st.tuples(st.sampled_from(sorted(_OPS)), children, children),
    max_leaves=8,
)


def _build(tree: Any, leaf: Callable[[str], Any]) -> Any:
    """The value of ``tree`` with symbols read through ``leaf``; ZeroDivisionError propagates."""
    if isinstance(tree, str):
        return leaf(tree)
    if isinstance(tree, int):
        return tree
    op, left, right = tree
    return _OPS[op](_build(left, leaf), _build(right, leaf))


@given(
    tree=_expressions,
    b=st.integers(min_value=0, max_value=9),
    s=st.integers(min_value=0, max_value=9),
)
def test_symbolic_expressions_evaluate_like_ints(tree: Any, b: int, s: int) -> None:
    bindings = {"B": b, "S": s}
    try:
        expected = _build(tree, bindings.__getitem__)
    except ZeroDivisionError:
        assume(False)
    expr = _build(tree, symbol)  # a divisor that is identically 0 has a 0 value too: not here
    assert evaluate(expr, bindings) == expected, str(expr)
    # Building the same expression twice gives an equal, equally hashed value.
    again = _build(tree, symbol)
    assert expr == again and hash(expr) == hash(again)
    assert isinstance(expr, (int, SymDim)) and not isinstance(expr, bool)


# -- comparisons and shape guards ----------------------------------------------------------


class _RecordingHook:
    """A GuardHook that answers from fixed sizes and keeps what it was asked."""

    def __init__(self, sizes: dict[str, int]) -> None:
        self.sizes = sizes
        self.asked: list[tuple[str, bool | None]] = []

    def compare(self, left: Any, op: str, right: Any, what: str, assume: bool | None) -> bool:
        self.asked.append((f"{left} {op} {right}", assume))
        return symbolic.ShapeGuard(left, op, right).holds(self.sizes)

    def size(self, dim: SymDim, what: str) -> int | None:
        self.asked.append((f"int({dim})", None))
        return evaluate(dim, self.sizes)

    def known(self, dim: SymDim) -> int | None:
        return evaluate(dim, self.sizes)


def test_comparisons_that_hold_for_every_size_need_no_sizes() -> None:
    assert B + 1 > 0 and B >= 0 and 0 <= B and not B < 0 and B + 2 != 1
    assert 2 * B + S >= B and not (B + 1 == B) and B - B - 1 < 0
    for undecided in (lambda: B > 0, lambda: B < S, lambda: B - S >= 0, lambda: (B // 2) >= 0):
        with pytest.raises(TypeError, match="no value until the graph runs"):
            undecided()


def test_expressions_compare_as_expressions_without_a_hook() -> None:
    assert not (B == 1) and B != 1 and not (B == S) and B != S and B == symbol("B")
    assert (B == "B") is False and B != None  # noqa: E711 - not a size


def test_hook_answers_the_users_comparisons() -> None:
    hook = _RecordingHook({"B": 1, "S": 4})
    with symbolic.guard_scope(hook):
        assert B == 1 and not (B != 1) and 1 == B and S > 2 and 3 < S and B <= S and not bool(B - 1)
        assert list(range(S)) == [0, 1, 2, 3] and operator.index(S) == 4
        assert B + 1 > 0  # decided without asking
    assert [text for text, _ in hook.asked] == [
        "B == 1",
        "B != 1",
        "B == 1",
        "S > 2",
        "S > 3",
        "B <= S",
        "B - 1 != 0",
        "int(S)",
        "int(S)",
    ]


def test_hook_is_not_asked_for_kilns_own_comparisons() -> None:
    hook = _RecordingHook({"B": 1, "S": 1})
    with symbolic.guard_scope(hook):
        assert broadcast_dim(B, 1) == B and str(broadcast_dim(B, S)) == "bcast(B, S)"
        assert str(symbolic.floordiv(B, 2)) == "(B//2)"
    assert hook.asked == []


def test_decide_asks_the_hook_and_assumes_without_one() -> None:
    assert symbolic.decide(3, "==", 3) and symbolic.decide(B + 1, ">", 0)
    assert symbolic.decide(B, "==", S, assume=True)
    with pytest.raises(TypeError):
        symbolic.decide(B, "==", S)
    hook = _RecordingHook({"B": 2, "S": 3})
    with symbolic.guard_scope(hook):
        assert not symbolic.decide(B, "==", S, assume=True)
    assert hook.asked == [("B == S", True)]


def test_shape_guard() -> None:
    guard = symbolic.ShapeGuard(B * S, "<", 10, "f.py:3", "n < 10")
    assert str(guard) == "B*S < 10" and repr(guard) == "ShapeGuard('B*S < 10')"
    assert guard.symbols == frozenset({"B", "S"})
    assert guard.holds({"B": 2, "S": 4}) and not guard.holds({"B": 2, "S": 5})
    bound = guard.bind({"S": 5})
    assert str(bound) == "5*B < 10" and bound.where == "f.py:3" and not bound.is_static()
    static = guard.bind({"B": 1, "S": 3})
    assert static.is_static() and static.holds({})
    assert str(guard.negated()) == "B*S >= 10" and guard.negated().what == "n < 10"
    with pytest.raises(ValueError, match="compares with one of"):
        symbolic.ShapeGuard(B, "=", 1)


def test_substitute_and_describe() -> None:
    assert symbolic.substitute(B * S + 1, {"S": 3}) == 3 * B + 1
    assert symbolic.substitute(symbolic.floordiv(B, S), {"B": 7, "S": 2}) == 3
    assert symbolic.substitute(dim_max(B, S), {"S": 2}) == dim_max(B, 2)
    assert symbolic.substitute(4, {"B": 1}) == 4
    assert symbolic.describe((B, 3)) == "(B, 3)" and symbolic.describe(B) == "B"
    with symbolic.guard_scope(_RecordingHook({"B": 5})):
        assert symbolic.describe((B, 3)) == "(B=5, 3)"
        assert symbolic.describe((B + 1,)) == "(B + 1=6,)"


def test_python_source_computes_what_evaluate_does():
    from kiln.symbolic import SOURCE_FUNCTIONS, dim_max, dim_min, floordiv, mod, python_source

    a, b = symbol("a"), symbol("b")
    dims = [a, 2 * a + 1, a * b - 3, -a, mod(a, 3), floordiv(3 * a - 1, 2), dim_max(a, b)]
    dims += [dim_min(a, 2 * b), broadcast_dim(a, b), a * a * b, floordiv(a, b) + mod(b, a)]
    names = {"a": "s[0]", "b": "s[1]"}
    for d in dims:
        code = compile(python_source(d, names), "<dim>", "eval")
        for sizes in ((1, 1), (4, 4), (7, 5), (12, 3)):
            bindings = {"a": sizes[0], "b": sizes[1]}
            try:
                want = evaluate(d, bindings)
            except ValueError:  # sizes that do not broadcast raise alike
                with pytest.raises(ValueError):
                    eval(code, dict(SOURCE_FUNCTIONS, s=sizes))  # noqa: S307
                continue
            assert eval(code, dict(SOURCE_FUNCTIONS, s=sizes)) == want, (d, sizes)  # noqa: S307
    with pytest.raises(KeyError):
        python_source(a + b, {"a": "n"})
