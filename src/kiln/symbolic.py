"""Symbolic dimensions: sizes that are not known until a graph runs.

A dynamic axis has a :class:`SymDim` as its size. SymDims are integer expressions over named
symbols (``B``, ``S``) closed under ``+ - * // %`` with ints and with each other, so shape
arithmetic such as ``x.shape[0] * 4`` or ``(h + 2 * p - k) // s + 1`` stays symbolic. An
expression is kept in a canonical form (a sum of monomials with integer coefficients), so equal
expressions compare and hash equal: ``(B * 12) // B == 12`` and ``B + B == 2 * B``. Division
that is not exact, ``%``, ``max``, ``min`` and broadcasting stay as opaque terms that are
evaluated when the symbols are bound.

A :data:`Dim` is an ``int`` or a ``SymDim``; an expression that folds to a constant *is* an int,
so code can test ``isinstance(d, int)`` for "static".
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping
from typing import Union

__all__ = [
    "SymDim",
    "Dim",
    "Shape",
    "symbol",
    "fresh_symbol",
    "floordiv",
    "mod",
    "is_static",
    "evaluate",
    "broadcast_dim",
    "broadcast_shapes",
    "dim_max",
    "dim_min",
    "prod",
    "format_shape",
]

Dim = Union[int, "SymDim"]
Shape = tuple[Dim, ...]

# An atom is a named symbol (a str) or an opaque operation ("//", "%", "max", "min", "bcast")
# over dims. A monomial is a sorted tuple of (atom, power); the constant monomial is ().
Atom = Union[str, tuple]
Monomial = tuple[tuple[Atom, int], ...]


def _atom_key(atom: Atom) -> tuple:
    return (0, atom) if isinstance(atom, str) else (1, repr(atom))


class SymDim:
    """A symbolic, non-negative integer size.

    Build one with :func:`symbol` and combine with ints and other SymDims.

    Example:
        >>> b = symbol("B")
        >>> str(b * 4 + 1)
        '4*B + 1'
        >>> (b * 12) // b
        12
        >>> evaluate(b * 4 + 1, {"B": 2})
        9
    """

    __slots__ = ("_terms", "_hash")

    def __init__(self, terms: Mapping[Monomial, int]) -> None:
        items = tuple(sorted(((m, c) for m, c in terms.items() if c != 0), key=_term_key))
        self._terms: tuple[tuple[Monomial, int], ...] = items
        self._hash = hash(items)

    # -- construction helpers -------------------------------------------------------------

    @staticmethod
    def _make(terms: Mapping[Monomial, int]) -> Dim:
        nonzero = {m: c for m, c in terms.items() if c != 0}
        if not nonzero:
            return 0
        if set(nonzero) == {()}:
            return nonzero[()]
        return SymDim(nonzero)

    @staticmethod
    def _terms_of(value: Dim) -> dict[Monomial, int]:
        if isinstance(value, SymDim):
            return dict(value._terms)
        return {(): int(value)}

    # -- arithmetic -----------------------------------------------------------------------

    def __add__(self, other: Dim) -> Dim:
        if not isinstance(other, (int, SymDim)):
            return NotImplemented
        terms = self._terms_of(self)
        for m, c in self._terms_of(other).items():
            terms[m] = terms.get(m, 0) + c
        return self._make(terms)

    __radd__ = __add__

    def __neg__(self) -> Dim:
        return self._make({m: -c for m, c in self._terms})

    def __sub__(self, other: Dim) -> Dim:
        if not isinstance(other, (int, SymDim)):
            return NotImplemented
        return self + (-other)

    def __rsub__(self, other: Dim) -> Dim:
        if not isinstance(other, (int, SymDim)):
            return NotImplemented
        return (-self) + other

    def __mul__(self, other: Dim) -> Dim:
        if not isinstance(other, (int, SymDim)):
            return NotImplemented
        terms: dict[Monomial, int] = {}
        for m1, c1 in self._terms_of(self).items():
            for m2, c2 in self._terms_of(other).items():
                m = _mono_mul(m1, m2)
                terms[m] = terms.get(m, 0) + c1 * c2
        return self._make(terms)

    __rmul__ = __mul__

    def __floordiv__(self, other: Dim) -> Dim:
        if not isinstance(other, (int, SymDim)):
            return NotImplemented
        return floordiv(self, other)

    def __rfloordiv__(self, other: Dim) -> Dim:
        if not isinstance(other, int):
            return NotImplemented
        return floordiv(other, self)

    def __mod__(self, other: Dim) -> Dim:
        if not isinstance(other, (int, SymDim)):
            return NotImplemented
        return mod(self, other)

    def __rmod__(self, other: Dim) -> Dim:
        if not isinstance(other, int):
            return NotImplemented
        return mod(other, self)

    # -- identity -------------------------------------------------------------------------

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SymDim) and self._terms == other._terms

    def __hash__(self) -> int:
        return self._hash

    def __bool__(self) -> bool:
        raise TypeError(
            f"the truth value of the symbolic size {self} is not known until the graph runs; "
            "compare shapes with static sizes, or mark the axis static"
        )

    def __index__(self) -> int:
        raise TypeError(
            f"the symbolic size {self} has no value until the graph runs, so it cannot be used "
            "as a Python int (range(), list length, ...); keep the axis static or use tensor ops"
        )

    __int__ = __index__

    # -- inspection -----------------------------------------------------------------------

    @property
    def symbols(self) -> frozenset[str]:
        """The names of the symbols this expression depends on."""
        names: set[str] = set()
        for m, _ in self._terms:
            for atom, _ in m:
                _collect_symbols(atom, names)
        return frozenset(names)

    def is_symbol(self) -> bool:
        """True when this is a bare named symbol such as ``B``."""
        return len(self._terms) == 1 and self._terms[0][1] == 1 and _is_bare(self._terms[0][0])

    @property
    def name(self) -> str:
        """The symbol's name for a bare symbol, else the printed expression."""
        return str(self)

    def evaluate(self, bindings: Mapping[str, int]) -> int:
        """The value of this expression with each symbol bound to a size."""
        total = 0
        for m, c in self._terms:
            value = c
            for atom, power in m:
                value *= _eval_atom(atom, bindings) ** power
            total += value
        return total

    def __str__(self) -> str:
        parts: list[str] = []
        for m, c in reversed(self._terms):  # highest degree first, constant last
            body = "*".join(_atom_str(a) if p == 1 else f"{_atom_str(a)}**{p}" for a, p in m)
            if not body:
                parts.append(str(c))
            elif c == 1:
                parts.append(body)
            elif c == -1:
                parts.append(f"-{body}")
            else:
                parts.append(f"{c}*{body}")
        text = " + ".join(parts)
        return text.replace("+ -", "- ")

    def __repr__(self) -> str:
        return f"SymDim({str(self)!r})"


def _term_key(term: tuple[Monomial, int]) -> tuple:
    mono = term[0]
    return (sum(p for _, p in mono), [(_atom_key(a), p) for a, p in mono])


def _is_bare(mono: Monomial) -> bool:
    return len(mono) == 1 and mono[0][1] == 1 and isinstance(mono[0][0], str)


def _mono_mul(m1: Monomial, m2: Monomial) -> Monomial:
    powers: dict[Atom, int] = dict(m1)
    for atom, p in m2:
        powers[atom] = powers.get(atom, 0) + p
    return tuple(sorted(powers.items(), key=lambda item: _atom_key(item[0])))


def _mono_div(m: Monomial, d: Monomial) -> Monomial | None:
    powers: dict[Atom, int] = dict(m)
    for atom, p in d:
        have = powers.get(atom, 0)
        if have < p:
            return None
        if have == p:
            del powers[atom]
        else:
            powers[atom] = have - p
    return tuple(sorted(powers.items(), key=lambda item: _atom_key(item[0])))


def _collect_symbols(atom: Atom, names: set[str]) -> None:
    if isinstance(atom, str):
        names.add(atom)
        return
    for arg in atom[1:]:
        if isinstance(arg, SymDim):
            names.update(arg.symbols)


def _eval_atom(atom: Atom, bindings: Mapping[str, int]) -> int:
    if isinstance(atom, str):
        try:
            return int(bindings[atom])
        except KeyError:
            raise KeyError(f"symbolic size {atom!r} is not bound") from None
    kind, *args = atom
    values = [evaluate(a, bindings) for a in args]
    return _OPAQUE[kind](*values)


def _bcast_values(a: int, b: int) -> int:
    if a == b or b == 1:
        return a
    if a == 1:
        return b
    raise ValueError(f"sizes {a} and {b} do not broadcast")


_OPAQUE: dict[str, Callable[..., int]] = {
    "//": lambda a, b: a // b,
    "%": lambda a, b: a % b,
    "max": max,
    "min": min,
    "bcast": _bcast_values,
}


def _atom_str(atom: Atom) -> str:
    if isinstance(atom, str):
        return atom
    kind, a, b = atom
    if kind in ("//", "%"):
        return f"({_paren(a)}{kind}{_paren(b)})"
    return f"{kind}({a}, {b})"


def _paren(d: Dim) -> str:
    text = str(d)
    return f"({text})" if isinstance(d, SymDim) and not d.is_symbol() else text


def _opaque(kind: str, a: Dim, b: Dim) -> SymDim:
    return SymDim({(((kind, a, b), 1),): 1})


def symbol(name: str) -> SymDim:
    """A named symbolic size. Equal names are the same size.

    Example:
        >>> symbol("B") == symbol("B")
        True
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"a symbolic size needs a non-empty str name, got {name!r}")
    return SymDim({((name, 1),): 1})


_fresh_ids = itertools.count()


def fresh_symbol(hint: str) -> SymDim:
    """A new symbol no other call returns, for a size that depends on data (NonZero's count).

    Example:
        >>> fresh_symbol("nonzero") == fresh_symbol("nonzero")
        False
    """
    return symbol(f"{hint}_{next(_fresh_ids)}")


def floordiv(a: Dim, b: Dim) -> Dim:
    """``a // b`` for sizes, exact where the division is exact.

    Example:
        >>> floordiv(symbol("B") * 12, symbol("B"))
        12
    """
    if isinstance(b, int) and b == 0:
        raise ZeroDivisionError(f"symbolic size {a} divided by zero")
    if isinstance(a, int) and isinstance(b, int):
        return a // b
    quotient = _exact_quotient(a, b)
    return _opaque("//", a, b) if quotient is None else quotient


def mod(a: Dim, b: Dim) -> Dim:
    """``a % b`` for sizes; 0 where the division is exact.

    Example:
        >>> mod(symbol("B") * 2, 2)
        0
    """
    if isinstance(b, int) and b == 0:
        raise ZeroDivisionError(f"symbolic size {a} modulo zero")
    if isinstance(a, int) and isinstance(b, int):
        return a % b
    return _opaque("%", a, b) if _exact_quotient(a, b) is None else 0


def _exact_quotient(a: Dim, b: Dim) -> Dim | None:
    """``q`` with ``a == q * b`` as polynomials (so ``a // b == q`` for every nonzero ``b``),
    or None when no such ``q`` of the forms tried exists."""
    if a == b:
        return 1
    numerator = {m: c for m, c in SymDim._terms_of(a).items() if c != 0}
    if isinstance(b, int):
        if all(c % b == 0 for c in numerator.values()):
            return SymDim._make({m: c // b for m, c in numerator.items()})
        return None
    if not numerator:
        return 0  # 0 // b
    if len(b._terms) == 1:
        # A single monomial divides a sum exactly when it divides every term.
        ((dmono, dcoef),) = b._terms
        quotient: dict[Monomial, int] = {}
        for m, c in numerator.items():
            qm = _mono_div(m, dmono)
            if qm is None or c % dcoef != 0:
                return None
            quotient[qm] = c // dcoef
        return SymDim._make(quotient)
    # A sum divisor: try each one-monomial quotient of a term of ``a`` by the leading term of
    # ``b``, kept only if exact ((2*B + 2) // (B + 1) == 2). Longer quotients stay opaque.
    lead_mono, lead_coef = b._terms[-1]
    for m, c in numerator.items():
        qm = _mono_div(m, lead_mono)
        if qm is not None and c % lead_coef == 0:
            candidate = SymDim._make({qm: c // lead_coef})
            if candidate * b == a:
                return candidate
    return None


def dim_max(a: Dim, b: Dim) -> Dim:
    """``max(a, b)`` for sizes."""
    if isinstance(a, int) and isinstance(b, int):
        return max(a, b)
    if a == b:
        return a
    return _opaque("max", *sorted((a, b), key=repr))


def dim_min(a: Dim, b: Dim) -> Dim:
    """``min(a, b)`` for sizes."""
    if isinstance(a, int) and isinstance(b, int):
        return min(a, b)
    if a == b:
        return a
    return _opaque("min", *sorted((a, b), key=repr))


def is_static(shape: Iterable[Dim]) -> bool:
    """True when every entry of ``shape`` is an int."""
    return all(isinstance(d, int) for d in shape)


def evaluate(dim: Dim, bindings: Mapping[str, int]) -> int:
    """The value of ``dim`` with its symbols bound."""
    return dim if isinstance(dim, int) else dim.evaluate(bindings)


def broadcast_dim(a: Dim, b: Dim) -> Dim:
    """The NumPy broadcast of two sizes; raises ``ValueError`` for two different static sizes.

    A static size other than 1 wins over a symbolic one (the symbol must then be 1 or equal).
    Two different symbolic sizes broadcast to an opaque ``bcast(a, b)`` checked at run time.
    """
    if a == b or b == 1:
        return a
    if a == 1:
        return b
    if isinstance(a, int) and isinstance(b, int):
        raise ValueError(f"sizes {a} and {b} do not broadcast")
    if isinstance(a, int):
        return a
    if isinstance(b, int):
        return b
    return _opaque("bcast", *sorted((a, b), key=repr))


def broadcast_shapes(*shapes: Shape) -> Shape:
    """The NumPy broadcast of several shapes (right-aligned), symbolic sizes allowed.

    Example:
        >>> broadcast_shapes((symbol("B"), 1, 4), (3, 1))
        (SymDim('B'), 3, 4)
    """
    ndim = max((len(s) for s in shapes), default=0)
    result: list[Dim] = [1] * ndim
    for shape in shapes:
        offset = ndim - len(shape)
        for i, d in enumerate(shape):
            result[offset + i] = broadcast_dim(result[offset + i], d)
    return tuple(result)


def prod(dims: Iterable[Dim]) -> Dim:
    """The product of sizes (1 for none)."""
    total: Dim = 1
    for d in dims:
        total = total * d
    return total


def format_shape(shape: Iterable[object]) -> str:
    """A shape as text, symbolic sizes by name: ``(B, 3, 4*S)``."""
    entries = [str(d) for d in shape]
    return "(" + ", ".join(entries) + ("," if len(entries) == 1 else "") + ")"
