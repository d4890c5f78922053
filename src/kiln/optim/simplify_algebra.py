"""Algebraic simplification: identities of arithmetic, casts and layout operators.

Every rule replaces a value by one with exactly its dtype and shape (``x * 1`` where the ``1``
broadcasts ``x`` to a bigger shape is *not* ``x``, and is left alone: the driver checks), and,
unless ``DefaultsOptions.allow_reassociation`` is set, by one with exactly its values in
IEEE arithmetic, NaN, infinities, signed zeros and integer wrap-around included (audit in
docs/design.md, "Outputs never alias; IEEE identities"):

* ``x * 1``, ``x / 1``, ``x ** 1``, ``-(-x)``: exact for every dtype;
* ``x - 0`` is ``x`` for ``+0.0`` only (``-0.0 - -0.0`` is ``+0.0``), ``x + 0`` for ``-0.0``
  only (``-0.0 + 0.0`` is ``+0.0``); both exact for integers;
* ``x ** 2`` is ``x * x`` (NumPy's power squares exactly); ``x ** 3`` is ``(x * x) * x`` for
  integers only (for floats it rounds twice: 1 ulp off in a quarter of cases);
* casts: to the same dtype, or through a dtype that holds every value exactly;
* layout (transpose, reshape) chains: no arithmetic at all.

A rule that returns one of the node's inputs makes the output share the input's buffer; the
plans copy such outputs (see :func:`kiln.exec.plan.output_copies`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import dtypes
from ..dtypes import dtype_from_onnx_code
from ..ir.graph import ModelGraph, Value
from ..ops.folding import fold
from ..ops.registry import get_op
from .pattern import Builder, Match, Replacement, Rule, const, op, rewrite_with_rules, var
from .transform import DefaultsOptions, transform

__all__ = ["simplify_algebra", "SIMPLIFY_RULES", "exact_cast"]

X = var("x")
# Operators that only re-shape their input in row-major order.
RESHAPES = ("Reshape", "Flatten", "Squeeze", "Unsqueeze")


def _reshaped(name: str) -> list:
    """Patterns for a reshape-like node of ``x`` (each arity of each operator)."""
    return [
        op("Reshape", X, var(), name=name),
        op("Flatten", X, name=name),
        op("Squeeze", X, name=name),
        op("Squeeze", X, var(), name=name),
        op("Unsqueeze", X, var(), name=name),
    ]


# -- builders -----------------------------------------------------------------------------


def _square(m: Match, b: Builder, options: DefaultsOptions) -> Replacement:
    if not _integer_power_is_exact(m):
        return None
    return b.op("Mul", m["x"], m["x"])


def _cube(m: Match, b: Builder, options: DefaultsOptions) -> Replacement:
    # pow(x, 3) rounds once, (x * x) * x twice: for floats only under relaxed float rules.
    if not _integer_power_is_exact(m):
        return None
    if dtypes.is_floating(m["x"].dtype) and not options.allow_reassociation:
        return None
    return b.op("Mul", b.op("Mul", m["x"], m["x"]), m["x"])


def _signed_zero(negative: bool):  # type: ignore[no-untyped-def]
    """``x + z -> x`` (``negative``) or ``x - z -> x``: exact for integers, and for floats
    only when every element of the zero ``z`` has the given sign: ``-0.0 + 0.0`` is ``+0.0``,
    ``x + -0.0`` is ``x``; ``x - 0.0`` is ``x``, ``-0.0 - -0.0`` is ``+0.0``."""

    def build(m: Match, b: Builder, options: DefaultsOptions) -> Replacement:
        x = m["x"]
        if dtypes.is_floating(x.dtype) and not options.allow_reassociation:
            zero = m.data("zero")
            if zero is None or not bool(np.all(np.signbit(zero) == negative)):
                return None
        return _new_array(m, b)

    return build


# Operators whose NumPy plan may hand back their input itself, whatever its layout.
_PASS_THROUGH = frozenset({"Identity", "Cast"})


def _new_array(m: Match, b: Builder, name: str = "x") -> Value:
    """The value captured as ``name`` in place of a removed operator whose NumPy result is a
    new array of the same values (``x * 1``, ``x.astype(x.dtype)``, a copy): NumPy lays that
    array out densely, in the order of the input's strides, and a later float sum adds in
    memory order (a strided view of more than 8,192 elements sums otherwise than its dense
    copy: NumPy's reduction buffers strided operands in chunks). So when the value may be a
    strided view at run time (a graph input, a view operator's result), a float or complex
    value is read through ``kiln.Contiguous(batch_axes=0)``: the value itself when already
    dense, else that copy."""
    x = m[name]
    if not (dtypes.is_floating(x.dtype) or dtypes.is_complex(x.dtype)):
        return x  # integers and booleans: exact in any layout
    if m.data(name) is not None:
        return x  # a constant: dense
    node = m.producer(name)
    if node is not None and not node.opdef.is_view and node.op not in _PASS_THROUGH:
        return x  # a new array
    return b.op("kiln.Contiguous", x, batch_axes=0)


def _keep_new(m: Match, b: Builder, options: DefaultsOptions) -> Replacement:
    """``keep("x")`` for an operator whose NumPy result is a new array (see _new_array)."""
    return _new_array(m, b)


def _integer_power_is_exact(m: Match) -> bool:
    # An integer base to a float exponent goes through float64 (and truncation), which is not
    # repeated multiplication for large values; an integer exponent wraps like multiplication.
    return dtypes.is_floating(m["x"].dtype) or m["p"].dtype.kind in "iu"


def _sqrt(m: Match, b: Builder, options: DefaultsOptions) -> Replacement:
    # pow(x, 0.5) and sqrt(x) differ at -0.0 and -inf, so only under relaxed float rules.
    if not options.allow_reassociation or not dtypes.is_floating(m["x"].dtype):
        return None
    return b.op("Sqrt", m["x"])


def _noop_cast(m: Match, b: Builder, options: DefaultsOptions) -> Replacement:
    if dtype_from_onnx_code(m.attrs("cast")["to"]) != m["x"].dtype:
        return None
    return _new_array(m, b)


# Significand bits (with the implicit one) of each float dtype: integers up to 2**bits are exact.
_MANTISSA_BITS = {dtypes.float16: 11, dtypes.bfloat16: 8, dtypes.float32: 24, dtypes.float64: 53}


def exact_cast(source: np.dtype, target: np.dtype) -> bool:
    """True when every value of ``source`` converts to ``target`` exactly (no rounding, no
    overflow), so a later cast of the result equals a direct cast of the original.

    Example:
        >>> exact_cast(np.dtype("float32"), np.dtype("float64"))
        True
        >>> exact_cast(np.dtype("int64"), np.dtype("float64"))
        False
    """
    source, target = np.dtype(source), np.dtype(target)
    if source == target or source == np.bool_:
        return True
    if target == np.bool_:
        return False
    if dtypes.is_integer(source) and dtypes.is_integer(target):
        return bool(np.can_cast(source, target, "safe"))
    if dtypes.is_integer(source) and dtypes.is_floating(target):
        mantissa = _MANTISSA_BITS[target]
        bits = source.itemsize * 8 - (1 if source.kind == "i" else 0)
        return bits <= mantissa
    if dtypes.is_floating(source) and dtypes.is_floating(target):
        if source == dtypes.bfloat16:
            return target in (dtypes.float32, dtypes.float64)
        return target != dtypes.bfloat16 and target.itemsize > source.itemsize
    return False


def _cast_of_cast(m: Match, b: Builder, options: DefaultsOptions) -> Replacement:
    x = m["x"]
    middle = dtype_from_onnx_code(m.attrs("inner")["to"])
    attrs = m.attrs("outer")
    if not exact_cast(x.dtype, middle):
        return None
    if dtype_from_onnx_code(attrs["to"]) == x.dtype:
        return x
    return b.op("Cast", x, **attrs)


def _perm(attrs: dict, rank: int) -> tuple[int, ...]:
    perm = attrs["perm"]
    return tuple(reversed(range(rank))) if perm is None else tuple(perm)


def _identity_transpose(m: Match, b: Builder, options: DefaultsOptions) -> Replacement:
    x = m["x"]
    if _perm(m.attrs("t"), len(x.shape)) != tuple(range(len(x.shape))):
        return None
    return x


def _transpose_of_transpose(m: Match, b: Builder, options: DefaultsOptions) -> Replacement:
    x = m["x"]
    rank = len(x.shape)
    first = _perm(m.attrs("inner"), rank)
    second = _perm(m.attrs("outer"), rank)
    combined = tuple(first[i] for i in second)  # out[i] = inner[second[i]] = x[first[second[i]]]
    if combined == tuple(range(rank)):
        return x
    return b.op("Transpose", x, perm=combined)


def _same_shape(m: Match, b: Builder, options: DefaultsOptions) -> Replacement:
    # Reshaping (or expanding) to the shape the value already has changes nothing, unless
    # the reshape can raise: NumPy refuses a -1 when the array is empty (size 0 with a
    # dynamic size), so keep it unless its target has no -1 or the size is static and nonzero.
    x, root = m["x"], m.root
    if tuple(root.outputs[0].shape) != tuple(x.shape):
        return None
    if root.op == "Reshape" and not _reshape_cannot_raise(root, x):
        return None
    return x


def _reshape_cannot_raise(root: Any, x: Any) -> bool:
    """Whether a Reshape of ``x`` to its own shape surely succeeds: NumPy refuses a -1 whose
    size is ambiguous (the other target entries multiply to 0), which an empty array of
    dynamic size can meet."""
    if all(isinstance(d, int) for d in x.shape) and 0 not in x.shape:
        return True
    known = root.inputs[1].type.value if root.inputs[1] is not None else None
    if known is None:
        return False
    if not any(isinstance(d, int) and d == -1 for d in known):
        return True
    others = [d for d in known if not (isinstance(d, int) and d == -1)]
    return all(isinstance(d, int) and d != 0 for d in others)


def _reshape_of_reshape(m: Match, b: Builder, options: DefaultsOptions) -> Replacement:
    """Two row-major reshapes are one: the outer's target applied to the original input."""
    x, root = m["x"], m.root
    shape = root.outputs[0].shape
    if tuple(shape) == tuple(x.shape):
        return x
    if root.op == "Reshape":
        return b.op("Reshape", x, root.inputs[1], **m.attrs("outer"))
    if all(isinstance(d, int) for d in shape):
        target = b.const(np.array(shape, dtype=np.int64), "shape")
        return b.op("Reshape", x, target)
    return None


def _fold_constants_of(kind: str):  # type: ignore[no-untyped-def]
    """``(x op c1) op c2 -> x op (c1 op c2)`` for Add or Mul: exact for integers, a reordering
    of float math otherwise (only under ``allow_reassociation``)."""

    def build(m: Match, b: Builder, options: DefaultsOptions) -> Replacement:
        x = m["x"]
        if not dtypes.is_integer(x.dtype) and not options.allow_reassociation:
            return None  # floats and complex numbers round
        c1, c2 = m.data("c1"), m.data("c2")
        assert c1 is not None and c2 is not None
        # The optimizer's folding limit: a bigger combined constant would grow the graph.
        folded = fold(get_op(kind), [c1, c2], {}, limit=options.constant_folding_limit)
        if folded is None:
            return None
        return b.op(kind, x, b.const(folded[0]))

    return build


# -- the rules ----------------------------------------------------------------------------

SIMPLIFY_RULES: list[Rule] = [
    Rule(op("Mul", X, const(1)), _keep_new, "mul-one"),  # x * 1 -> x, 1 * x -> x
    # x + (-0.0) -> x, (-0.0) + x -> x; x + 0 -> x for integers  [+0.0: relaxed]
    Rule(op("Add", X, const(0, "zero")), _signed_zero(negative=True), "add-zero"),
    # x - 0.0 -> x; x - 0 -> x for integers  [-0.0: relaxed]
    Rule(op("Sub", X, const(0, "zero")), _signed_zero(negative=False), "sub-zero"),
    Rule(op("Div", X, const(1)), _keep_new, "div-one"),  # x / 1 -> x
    Rule(op("Pow", X, const(1)), _keep_new, "pow-one"),  # x ** 1 -> x
    Rule(op("Pow", X, const(2, "p")), _square, "pow-two"),  # x ** 2 -> x * x
    Rule(op("Pow", X, const(3, "p")), _cube, "pow-three"),  # x ** 3 -> (x * x) * x  [ints]
    Rule(op("Pow", X, const(0.5)), _sqrt, "pow-half"),  # x ** 0.5 -> sqrt(x)  [relaxed]
    Rule(op("Neg", op("Neg", X)), _keep_new, "neg-neg"),  # -(-x) -> x
    Rule(op("Identity", X), _keep_new, "identity"),  # identity(x) -> x
    Rule(op("Cast", X, name="cast"), _noop_cast, "cast-same"),  # cast(x: T, to=T) -> x
    # cast(cast(x, T1), T2) -> cast(x, T2) when T1 holds every value of x exactly
    Rule(op("Cast", op("Cast", X, name="inner"), name="outer"), _cast_of_cast, "cast-cast"),
    Rule(op("Transpose", X, name="t"), _identity_transpose, "transpose-id"),  # perm 0..n -> x
    # transpose(transpose(x, p), q) -> transpose(x, p[q]) (or x when that is the identity)
    Rule(
        op("Transpose", op("Transpose", X, name="inner"), name="outer"),
        _transpose_of_transpose,
        "transpose-transpose",
    ),
    # reshape(reshape(x, s1), s2) -> reshape(x, s2) (any mix of Reshape/Flatten/(Un)Squeeze)
    *[
        Rule(op(outer, inner, *extra, name="outer"), _reshape_of_reshape, "reshape-reshape")
        for outer, extra in (
            ("Reshape", (var(),)),
            ("Flatten", ()),
            ("Squeeze", ()),
            ("Squeeze", (var(),)),
            ("Unsqueeze", (var(),)),
        )
        for inner in _reshaped("inner")
    ],
    Rule(op("Reshape", X, var()), _same_shape, "reshape-same"),  # reshape(x, x.shape) -> x
    Rule(op("Expand", X, var()), _same_shape, "expand-same"),  # expand(x, x.shape) -> x
    Rule(op("Squeeze", X, var()), _same_shape, "squeeze-same"),  # squeeze of no axis -> x
    Rule(op("Squeeze", X), _same_shape, "squeeze-same"),  # squeeze without size-1 axes -> x
    Rule(op("Flatten", X), _same_shape, "flatten-same"),  # flatten of a matrix at 1 -> x
    # (x + c1) + c2 -> x + (c1 + c2), (x * c1) * c2 -> x * (c1 * c2)  [exact for ints]
    Rule(op("Add", op("Add", X, const(name="c1")), const(name="c2")), _fold_constants_of("Add")),
    Rule(op("Mul", op("Mul", X, const(name="c1")), const(name="c2")), _fold_constants_of("Mul")),
]


@transform("simplify_algebra")
def simplify_algebra(graph: ModelGraph, options: DefaultsOptions) -> tuple[ModelGraph, int]:
    """Apply the algebraic identities of :data:`SIMPLIFY_RULES` until none applies: ``x*1``,
    ``x+(-0.0)``, ``x-0.0``, ``x/1``, ``x**1`` to ``x``; ``x**2`` (and integer ``x**3``) to
    multiplications;
    ``--x``, Identity, casts to the same dtype, exact cast chains, transpose and reshape chains,
    reshapes and expands to the same shape."""
    return rewrite_with_rules(graph, SIMPLIFY_RULES, options)
