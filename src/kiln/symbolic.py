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

Comparisons: ``==`` between expressions is "the same expression" for kiln's own code. A user's
comparison or truth test of a size during a capture (``x.shape[0] == 1``, ``n > 2``, ``bool(n)``,
``int(n)``) is answered by the :class:`GuardHook` the capture installs (:func:`guard_scope`),
from the sizes of the call being recorded, and becomes a :class:`ShapeGuard` of the graph.
"""

from __future__ import annotations

import contextlib
import itertools
import numbers
import operator
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextvars import ContextVar
from typing import Any, NoReturn, Protocol, Union

__all__ = [
    "SymDim",
    "Dim",
    "Shape",
    "symbol",
    "fresh_symbol",
    "is_fresh",
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
    "ShapeGuard",
    "GuardHook",
    "guard_scope",
    "decide",
    "specialize",
    "substitute",
    "describe",
    "python_source",
    "SOURCE_FUNCTIONS",
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
            return self._real(other, operator.add, "+", False)
        terms = self._terms_of(self)
        for m, c in self._terms_of(other).items():
            terms[m] = terms.get(m, 0) + c
        return self._make(terms)

    def __radd__(self, other: Dim) -> Dim:
        if not isinstance(other, (int, SymDim)):
            return self._real(other, operator.add, "+", True)
        return self + other

    def __neg__(self) -> Dim:
        return self._make({m: -c for m, c in self._terms})

    def __sub__(self, other: Dim) -> Dim:
        if not isinstance(other, (int, SymDim)):
            return self._real(other, operator.sub, "-", False)
        return self + (-other)

    def __rsub__(self, other: Dim) -> Dim:
        if not isinstance(other, (int, SymDim)):
            return self._real(other, operator.sub, "-", True)
        return (-self) + other

    def __mul__(self, other: Dim) -> Dim:
        if not isinstance(other, (int, SymDim)):
            return self._real(other, operator.mul, "*", False)
        terms: dict[Monomial, int] = {}
        for m1, c1 in self._terms_of(self).items():
            for m2, c2 in self._terms_of(other).items():
                m = _mono_mul(m1, m2)
                terms[m] = terms.get(m, 0) + c1 * c2
        return self._make(terms)

    def __rmul__(self, other: Dim) -> Dim:
        if not isinstance(other, (int, SymDim)):
            return self._real(other, operator.mul, "*", True)
        return self * other

    def _real(self, other: object, fn: Callable[[Any, Any], Any], sign: str, reflected: bool):
        """``self sign other`` with a number that is not a Python int: a NumPy integer stays
        symbolic; a float (Python computes the result) specializes the size (a guard)."""
        if isinstance(other, numbers.Integral) and _from_kiln(2):
            value = int(other)  # kiln's own size arithmetic with a NumPy integer
            return fn(value, self) if reflected else fn(self, value)
        if not isinstance(other, numbers.Real) or _from_kiln(2):
            return NotImplemented
        if hasattr(other, "dtype"):  # a NumPy scalar is strongly typed: record as NumPy does
            return self._numpy_op(fn.__name__, other, reflected)
        what = f"{other} {sign} {self}" if reflected else f"{self} {sign} {other}"
        n = specialize(self, what)
        return fn(other, n) if reflected else fn(n, other)

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

    # -- identity and comparison -------------------------------------------------------------

    def __eq__(self, other: object) -> bool:
        if isinstance(other, SymDim) and other._terms == self._terms:
            return True
        return _is_dim(other) and _compare(self, "==", other)  # type: ignore[arg-type]

    def __ne__(self, other: object) -> bool:
        if isinstance(other, SymDim) and other._terms == self._terms:
            return False
        return not _is_dim(other) or _compare(self, "!=", other)  # type: ignore[arg-type]

    def __lt__(self, other: Dim) -> bool:
        return _compare(self, "<", other) if _is_dim(other) else NotImplemented

    def __le__(self, other: Dim) -> bool:
        return _compare(self, "<=", other) if _is_dim(other) else NotImplemented

    def __gt__(self, other: Dim) -> bool:
        return _compare(self, ">", other) if _is_dim(other) else NotImplemented

    def __ge__(self, other: Dim) -> bool:
        return _compare(self, ">=", other) if _is_dim(other) else NotImplemented

    def __hash__(self) -> int:
        return self._hash

    def __bool__(self) -> bool:
        return _compare(self, "!=", 0, what=f"bool({self})")

    def __index__(self) -> int:
        # The user's int(n), range(n), and kiln's own code where an operator needs a concrete
        # int (np.tile reps, np.pad widths): the capture specializes the size with a guard.
        return specialize(self, f"int({self})")

    __int__ = __index__

    def __float__(self) -> float:
        return float(specialize(self, f"float({self})"))

    # -- a size as a Python number (the user's code, inside a capture) --------------------
    #
    # Python needs a concrete number for true division, powers and arithmetic with floats:
    # the size is specialized to the call's value and guarded (``B == 5``). NumPy calls
    # (``np.arange(n)``, ``np.sqrt(n)``, ``array * n``) go to the capture, which records them
    # with the size computed from the inputs' shapes where it can (see GuardHook.array_ufunc).

    def _numpy_op(self, name: str, other: object, reflected: bool) -> object:
        """``self <name> other`` with a NumPy scalar, recorded by the capture as the NumPy
        ufunc (``np.int64`` is strong: ``float32 * (n + np.int64(1))`` is float64)."""
        import numpy as np

        ufunc = {"add": np.add, "sub": np.subtract, "mul": np.multiply}.get(name)
        ufunc = ufunc or {"truediv": np.true_divide, "pow": np.power}[name]
        operands = (other, self) if reflected else (self, other)
        hook = _GUARD_HOOK.get()
        if hook is None:
            return _no_value(self)
        return hook.array_ufunc(ufunc, "__call__", operands, {})

    def _number(self, other: object, what: str) -> tuple[int, object] | None:
        """``(value of self, other)`` with the sizes specialized, for arithmetic with a
        number that Python computes; None (NotImplemented) for other operands and for
        kiln's own code."""
        if not isinstance(other, (SymDim, numbers.Real)) or _from_kiln(2):
            return None
        if isinstance(other, SymDim):
            other = specialize(other, what)
        return specialize(self, what), other

    def __truediv__(self, other: object) -> object:
        if hasattr(other, "dtype") and isinstance(other, numbers.Real) and not _from_kiln(1):
            return self._numpy_op("truediv", other, False)
        pair = self._number(other, f"{self} / {other}")
        return NotImplemented if pair is None else operator.truediv(*pair)

    def __rtruediv__(self, other: object) -> object:
        if hasattr(other, "dtype") and isinstance(other, numbers.Real) and not _from_kiln(1):
            return self._numpy_op("truediv", other, True)
        pair = self._number(other, f"{other} / {self}")
        return NotImplemented if pair is None else operator.truediv(pair[1], pair[0])

    def __pow__(self, other: object) -> object:
        if hasattr(other, "dtype") and isinstance(other, numbers.Real) and not _from_kiln(1):
            return self._numpy_op("pow", other, False)
        pair = self._number(other, f"{self} ** {other}")
        return NotImplemented if pair is None else operator.pow(*pair)

    def __rpow__(self, other: object) -> object:
        if hasattr(other, "dtype") and isinstance(other, numbers.Real) and not _from_kiln(1):
            return self._numpy_op("pow", other, True)
        pair = self._number(other, f"{other} ** {self}")
        return NotImplemented if pair is None else operator.pow(pair[1], pair[0])

    def __pos__(self) -> SymDim:
        return self

    def __abs__(self) -> SymDim:
        return self  # sizes are non-negative

    def __array__(self, dtype: object = None, copy: object = None) -> object:
        """The size as a 0-d NumPy array, for NumPy functions that take Python numbers
        (``np.arange(n)``): specialized to the call's value and guarded."""
        import numpy as np  # only NumPy's own calls get here

        return np.asarray(specialize(self, f"np.asarray({self})"), dtype=dtype)

    def __array_ufunc__(self, ufunc: object, method: str, *inputs: object, **kwargs: object):
        """A NumPy ufunc over a size (``np.sqrt(n)``, ``array * n``): recorded by the
        capture with the size computed from the inputs' shapes."""
        hook = _GUARD_HOOK.get()
        if hook is None or _from_kiln(1):
            return NotImplemented
        return hook.array_ufunc(ufunc, method, inputs, kwargs)

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
        if self.is_symbol():
            return self._terms[0][0][0][0]  # type: ignore[return-value]
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


# -- comparisons and shape guards -------------------------------------------------------------

_OPERATORS: dict[str, Callable[[int, int], bool]] = {
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
_NEGATED = {"==": "!=", "!=": "==", "<": ">=", "<=": ">", ">": "<=", ">=": "<"}


class ShapeGuard:
    """A fact about symbolic sizes that a graph was recorded under: ``left op right``.

    A capture that compares a symbolic size (``x.shape[0] == 1``, ``n > 2``, ``bool(n)``,
    ``int(n)``) takes the branch the call's sizes give and records the comparison as a guard, so
    the graph holds exactly for the sizes that give the same answer; the graph's input check
    evaluates its guards and refuses other sizes.

    Example:
        >>> g = ShapeGuard(symbol("B"), "!=", 1)
        >>> str(g), g.holds({"B": 4}), g.holds({"B": 1})
        ('B != 1', True, False)
    """

    __slots__ = ("left", "op", "right", "where", "what")

    def __init__(self, left: Dim, op: str, right: Dim, where: str = "", what: str = "") -> None:
        if op not in _OPERATORS:
            raise ValueError(f"a shape guard compares with one of {sorted(_OPERATORS)}, not {op!r}")
        self.left, self.op, self.right = left, op, right
        self.where = where  # the user's source line
        self.what = what  # the comparison as the code wrote it, or the check kiln made

    @property
    def symbols(self) -> frozenset[str]:
        """The names of the sizes the guard depends on."""
        names: set[str] = set()
        for d in (self.left, self.right):
            if isinstance(d, SymDim):
                names.update(d.symbols)
        return frozenset(names)

    def holds(self, bindings: Mapping[str, int]) -> bool:
        """Whether the guard is true with each symbol bound to a size."""
        return _OPERATORS[self.op](evaluate(self.left, bindings), evaluate(self.right, bindings))

    def bind(self, bindings: Mapping[str, int]) -> ShapeGuard:
        """The guard with the sizes in ``bindings`` substituted (:func:`substitute`)."""
        left, right = substitute(self.left, bindings), substitute(self.right, bindings)
        return ShapeGuard(left, self.op, right, self.where, self.what)

    def negated(self) -> ShapeGuard:
        """The opposite guard (``==`` for ``!=``, ``>=`` for ``<``)."""
        return ShapeGuard(self.left, _NEGATED[self.op], self.right, self.where, self.what)

    def python_source(self, names: Mapping[str, str]) -> str:
        """The guard as a Python expression (:func:`python_source` of both sides)."""
        return f"{python_source(self.left, names)} {self.op} {python_source(self.right, names)}"

    def is_static(self) -> bool:
        """True when no symbol is left: :meth:`holds` then needs no bindings."""
        return isinstance(self.left, int) and isinstance(self.right, int)

    def __str__(self) -> str:
        return f"{self.left} {self.op} {self.right}"

    def __repr__(self) -> str:
        return f"ShapeGuard({str(self)!r})"


class GuardHook(Protocol):
    """What answers comparisons of symbolic sizes during a capture (installed by the tracer
    with :func:`guard_scope`). The symbolic layer asks; the capture layer knows the sizes of
    the call being recorded and records the guard."""

    def compare(self, left: Dim, op: str, right: Dim, what: str, assume: bool | None) -> bool:
        """The answer of ``left op right`` (recording a guard), or ``assume`` (also recorded)
        when the sizes are not known; raise when neither is possible."""
        ...

    def size(self, dim: SymDim, what: str) -> int | None:
        """The value of ``dim`` for the call being recorded (recording ``dim == value``), or
        None when it is not known."""
        ...

    def known(self, dim: SymDim) -> int | None:
        """The value of ``dim`` for the call being recorded, without a guard (for messages)."""
        ...

    def array_ufunc(self, ufunc: object, method: str, inputs: tuple, kwargs: dict) -> object:
        """A NumPy ufunc with symbolic sizes among ``inputs`` (``np.sqrt(n)``), recorded
        with each size computed from the graph's inputs."""
        ...


_GUARD_HOOK: ContextVar[GuardHook | None] = ContextVar("kiln_guard_hook", default=None)


@contextlib.contextmanager
def guard_scope(hook: GuardHook | None) -> Iterator[None]:
    """Route comparisons of symbolic sizes to ``hook`` inside the block (None: no hook)."""
    token = _GUARD_HOOK.set(hook)
    try:
        yield
    finally:
        _GUARD_HOOK.reset(token)


def _is_dim(x: object) -> bool:
    return isinstance(x, (SymDim, numbers.Integral))


def _from_kiln(depth: int) -> bool:
    """Whether the code that made the comparison (the frame ``depth`` levels above the caller,
    or the first frame above it outside NumPy) is kiln's own."""
    frame = sys._getframe(depth + 1)
    name = frame.f_globals.get("__name__", "")
    while (name == "numpy" or name.startswith("numpy.")) and frame.f_back is not None:
        frame = frame.f_back
        name = frame.f_globals.get("__name__", "")
    return name == "kiln" or name.startswith("kiln.")


def _decided(a: Dim, op: str, b: Dim) -> bool | None:
    """The answer of ``a op b`` when it holds for every size (sizes are non-negative), or
    None when it depends on the sizes."""
    diff = a - b
    if isinstance(diff, int):
        return _OPERATORS[op](diff, 0)
    if not all(isinstance(atom, str) for mono, _ in diff._terms for atom, _ in mono):
        return None  # an opaque term (//, %, max, ...) may be negative
    coefficients = [c for _, c in diff._terms]
    constant = dict(diff._terms).get((), 0)
    if all(c >= 0 for c in coefficients):  # diff >= constant >= 0
        low_answers = {">=": True, "<": False}
        if constant > 0:
            low_answers.update({"==": False, "!=": True, ">": True, "<=": False})
        return low_answers.get(op)
    if all(c <= 0 for c in coefficients):  # diff <= constant <= 0
        high_answers = {"<=": True, ">": False}
        if constant < 0:
            high_answers.update({"==": False, "!=": True, "<": True, ">=": False})
        return high_answers.get(op)
    return None


def _compare(a: SymDim, op: str, b: Dim, what: str | None = None) -> bool:
    """``a op b`` for the comparison operators of :class:`SymDim` (called from them).

    A comparison whose answer does not depend on the sizes is answered. Otherwise, inside a
    capture (a :class:`GuardHook` is installed) the user's comparison is answered from the
    sizes of the call being recorded and becomes a guard. kiln's own code compares sizes as
    expressions (``==`` is "the same expression"; it asks :func:`decide` when it needs an
    answer that holds at run time), so its bookkeeping never adds guards.
    """
    b = b if isinstance(b, SymDim) else int(b)  # type: ignore[arg-type]
    hook = _GUARD_HOOK.get()
    user = hook is not None and not _from_kiln(2)
    if what is None and op in ("==", "!=") and not user:
        return op == "!="  # as expressions: not the same expression (the caller checked that)
    known = _decided(a, op, b)
    if known is not None:
        return known
    if user:
        return hook.compare(a, op, b, what or f"{a} {op} {b}", None)  # type: ignore[union-attr]
    text = what or f"{a} {op} {b}"
    raise TypeError(
        f"{text}: the symbolic size {a} has no value until the graph runs, so the answer is "
        "not known here; compare inside kiln.compile/kiln.trace with example inputs (the "
        "answer then becomes a shape guard), or mark the axis static"
    )


def decide(a: Dim, op: str, b: Dim, *, assume: bool | None = None, what: str = "") -> bool:
    """``a op b`` where kiln's own code needs an answer that holds when the graph runs (sizes
    that must agree, an axis that must not be empty).

    Static sizes are compared. Inside a capture with example inputs the call's sizes answer and
    the comparison becomes a shape guard; without sizes (a trace from a signature) ``assume``
    is taken and recorded as a guard, so the graph refuses sizes that break it.

    Example:
        >>> decide(3, "==", 3), decide(symbol("B") + 1, ">", 0)
        (True, True)
        >>> decide(symbol("B"), "==", symbol("C"), assume=True)
        True
    """
    if isinstance(a, int) and isinstance(b, int):
        return _OPERATORS[op](a, b)
    known = _decided(a, op, b)
    if known is not None:
        return known
    hook = _GUARD_HOOK.get()
    if hook is not None:
        return hook.compare(a, op, b, what or f"{a} {op} {b}", assume)
    if assume is not None:
        return assume
    raise TypeError(f"{a} {op} {b}: the answer depends on sizes not known until the graph runs")


def specialize(dim: Dim, what: str) -> int:
    """The value of ``dim`` in the call being captured, where the user's code needs a Python
    number (``int(n)``, ``len(x)``, ``range(n)``, ``n / 2``, ``np.arange(n)``): the capture
    records the guard ``dim == value``, so the graph holds for that size only and another
    size re-captures. Outside a capture a symbolic size has no value: ``TypeError``.

    Example:
        >>> specialize(4, "int(4)")
        4
    """
    if isinstance(dim, int):
        return dim
    hook = _GUARD_HOOK.get()
    if hook is not None:
        value = hook.size(dim, what)
        if value is not None:
            return value
    return _no_value(dim)


def _no_value(dim: SymDim) -> NoReturn:
    raise TypeError(
        f"the symbolic size {dim} has no value until the graph runs, so it cannot be used "
        "as a Python int (range(), list length, ...); keep the axis static or use tensor ops"
    )


def describe(shape: Dim | Iterable[Dim]) -> str:
    """A size or a shape as text, with the sizes of the call being recorded where they are
    known (for error messages): ``s0=5``, ``(s0=5, 2, s1=1)``.

    Example:
        >>> describe((symbol("B"), 3)), describe(4)
        ('(B, 3)', '4')
    """
    if isinstance(shape, (int, SymDim)):
        hook = _GUARD_HOOK.get()
        value = None if hook is None or isinstance(shape, int) else hook.known(shape)
        return str(shape) if value is None else f"{shape}={value}"
    entries = [describe(d) for d in shape]
    return "(" + ", ".join(entries) + ("," if len(entries) == 1 else "") + ")"


def substitute(dim: Dim, bindings: Mapping[str, int]) -> Dim:
    """``dim`` with the symbols in ``bindings`` replaced by their sizes (others kept).

    Example:
        >>> str(substitute(symbol("B") * symbol("S") + 1, {"S": 3}))
        '3*B + 1'
    """
    if isinstance(dim, int):
        return dim
    total: Dim = 0
    for mono, coef in dim._terms:
        term: Dim = coef
        for atom, power in mono:
            factor = _substitute_atom(atom, bindings)
            for _ in range(power):
                term = term * factor
        total = total + term
    return total


def _substitute_atom(atom: Atom, bindings: Mapping[str, int]) -> Dim:
    if isinstance(atom, str):
        return int(bindings[atom]) if atom in bindings else symbol(atom)
    kind, a, b = atom
    a, b = substitute(a, bindings), substitute(b, bindings)
    rebuild: dict[str, Callable[[Dim, Dim], Dim]] = {
        "//": floordiv,
        "%": mod,
        "max": dim_max,
        "min": dim_min,
        "bcast": broadcast_dim,
    }
    return rebuild[kind](a, b)


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


# The functions :func:`python_source` text calls, by the names it uses.
SOURCE_FUNCTIONS: dict[str, Callable[..., int]] = {"_bcast": _bcast_values}


def python_source(dim: Dim, names: Mapping[str, str]) -> str:
    """A Python expression computing ``dim``, with each symbol written as ``names[symbol]`` (an
    expression, e.g. ``"x.shape[0]"``); it calls the functions of :data:`SOURCE_FUNCTIONS` by
    their names there. A run-time check compiles it once instead of evaluating the expression
    tree on every call. Raises ``KeyError`` for a symbol ``names`` lacks.

    Example:
        >>> b = symbol("B")
        >>> python_source(2 * b + 1, {"B": "n"})
        '(1 + 2*(n))'
        >>> eval(python_source(mod(b, 2), {"B": "n"}), {"n": 7})
        1
    """
    if isinstance(dim, int):
        return str(dim)
    terms = []
    for mono, c in dim._terms:
        factors = [str(c)] if c != 1 or not mono else []
        for atom, power in mono:
            text = _atom_source(atom, names)
            factors.append(text if power == 1 else f"{text}**{power}")
        terms.append("*".join(factors))
    return "(" + " + ".join(terms) + ")"


def _atom_source(atom: Atom, names: Mapping[str, str]) -> str:
    if isinstance(atom, str):
        return f"({names[atom]})"
    kind, a, b = atom
    left, right = python_source(a, names), python_source(b, names)
    if kind in ("//", "%"):
        return f"({left}{kind}{right})"
    return f"{'_bcast' if kind == 'bcast' else kind}({left}, {right})"


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
_fresh_names: set[str] = set()  # the names fresh_symbol issued (sizes known at run time only)


def fresh_symbol(hint: str) -> SymDim:
    """A new symbol no other call returns, for a size that depends on data (NonZero's count).

    Example:
        >>> fresh_symbol("nonzero") == fresh_symbol("nonzero")
        False
    """
    name = f"{hint}_{next(_fresh_ids)}"
    _fresh_names.add(name)
    return symbol(name)


def checked_at_run_time(d: object) -> bool:
    """True when the size ``d`` holds a broadcast of two symbolic sizes: evaluating it checks
    that they broadcast (NumPy's error otherwise), so the node that made it can raise.

    Example:
        >>> checked_at_run_time(broadcast_dim(symbol("A"), symbol("B"))), checked_at_run_time(4)
        (True, False)
    """
    if not isinstance(d, SymDim):
        return False
    pending: list[SymDim] = [d]
    while pending:
        for monomial, _ in pending.pop()._terms:
            for atom, _ in monomial:
                if isinstance(atom, tuple):
                    if atom[0] == "bcast":
                        return True
                    pending.extend(a for a in atom[1:] if isinstance(a, SymDim))
    return False


def is_fresh(d: object) -> bool:
    """True for a size made by :func:`fresh_symbol`: it stands for a size only the run knows,
    so a value recorded with any other size of the same rank may be its output.

    Example:
        >>> is_fresh(fresh_symbol("slice")), is_fresh(symbol("B"))
        (True, False)
    """
    return isinstance(d, SymDim) and d.is_symbol() and d.name in _fresh_names


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
    # bcast is associative, commutative and idempotent where it is valid: a size already
    # broadcast into the other is absorbed (bcast(bcast(B, C), C) is bcast(B, C)).
    leaves_a, leaves_b = _bcast_leaves(a), _bcast_leaves(b)
    if leaves_b <= leaves_a:
        return a
    if leaves_a <= leaves_b:
        return b
    return _opaque("bcast", *sorted((a, b), key=repr))


def _bcast_leaves(d: SymDim) -> frozenset[SymDim]:
    """The sizes a nest of ``bcast`` broadcasts together (``{d}`` for any other size)."""
    if len(d._terms) == 1:
        mono, coef = d._terms[0]
        if coef == 1 and len(mono) == 1 and mono[0][1] == 1:
            atom = mono[0][0]
            if isinstance(atom, tuple) and atom[0] == "bcast":
                return frozenset().union(
                    *(_bcast_leaves(x) if isinstance(x, SymDim) else {x} for x in atom[1:])
                )
    return frozenset({d})


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
