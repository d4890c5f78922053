"""Elementwise front-door functions: ``kiln.add``, ``kiln.exp``, ... and their NumPy ufuncs.

Each function takes tensors, arrays or Python scalars, resolves dtypes exactly as the NumPy ufunc
of the same name would (:func:`~kiln.functions.operands.ufunc_operands`), and lowers onto
registry operators through :func:`~kiln.tensor.call`. Each is registered for NumPy's
protocol with :func:`~kiln.functions.numpy_protocol.implements`, so ``np.exp(t)`` runs it.

Where Python/NumPy semantics differ from the ONNX operator's, the lowering composes operators
to get NumPy's answer: ``//`` floors (ONNX ``Div`` truncates integers), ``%`` takes the
divisor's sign, ``-`` on unsigned integers wraps, bool arithmetic is logic.
"""

from __future__ import annotations

import builtins
import math
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import dtypes
from ..errors import OpArgumentError, OpTypeError
from ..symbolic import broadcast_shapes
from ..tensor import Tensor, call, eager_plan
from .numpy_protocol import implements
from .operands import (
    as_tensor,
    cast,
    constant,
    new_array,
    same_dtype_operands,
    ufunc_operands,
)
from .shape import nonzero

__all__ = [
    "add",
    "subtract",
    "multiply",
    "divide",
    "true_divide",
    "floor_divide",
    "remainder",
    "mod",
    "power",
    "pow",
    "negative",
    "positive",
    "absolute",
    "abs",
    "sign",
    "exp",
    "exp2",
    "expm1",
    "log",
    "log2",
    "log10",
    "log1p",
    "sqrt",
    "square",
    "reciprocal",
    "floor",
    "ceil",
    "trunc",
    "rint",
    "round",
    "around",
    "sin",
    "cos",
    "tan",
    "arcsin",
    "arccos",
    "arctan",
    "sinh",
    "cosh",
    "tanh",
    "erf",
    "arcsinh",
    "arccosh",
    "arctanh",
    "asin",
    "acos",
    "atan",
    "asinh",
    "acosh",
    "atanh",
    "radians",
    "deg2rad",
    "degrees",
    "rad2deg",
    "equal",
    "not_equal",
    "less",
    "less_equal",
    "greater",
    "greater_equal",
    "logical_and",
    "logical_or",
    "logical_xor",
    "logical_not",
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
    "invert",
    "bitwise_not",
    "bitwise_invert",
    "maximum",
    "minimum",
    "isnan",
    "isinf",
    "isfinite",
    "hypot",
    "where",
    "clip",
    "astype",
]

_BOOL = dtypes.bool_


# The operands cast to the dtypes the ufunc computes in, and its output dtype. A Python bool
# acts as ``np.bool_`` (NEP 50), which ``ufunc_operands`` already resolves it as; the
# resolution is cached per (ufunc, operand dtypes), part of the eager fast path.
_resolve = ufunc_operands


def _is_half(dtype: np.dtype) -> bool:
    return dtype in (dtypes.float16, dtypes.bfloat16)


def _widen(*tensors: Tensor) -> tuple[list[Tensor], np.dtype]:
    """Half-precision operands cast to float32, and the dtype to cast the result back to.

    NumPy computes its float16 (and ml_dtypes its bfloat16) loops of composite functions in
    float32 and rounds once; the lowerings below do the same.
    """
    dtype = tensors[0].dtype
    if _is_half(dtype):
        return [cast(t, dtypes.float32) for t in tensors], dtype
    return list(tensors), dtype


def _real_only(name: str, a: Tensor) -> None:
    """Raise for a complex operand of a lowering that is exact on real numbers only (a NumPy
    call then falls back)."""
    if dtypes.is_complex(a.dtype):
        raise OpTypeError(f"{name}: no exact {a.dtype} lowering in kiln")


def _parts(a: Tensor) -> tuple[Tensor, Tensor]:
    """The real and imaginary parts of a complex tensor."""
    return call("kiln.Real", a), call("kiln.Imag", a)


def _scalar(value: float, like: Tensor) -> Tensor:
    """A 0-d constant of ``like``'s dtype."""
    return constant(value, like.dtype)


# -- arithmetic ----------------------------------------------------------------------------


@implements(np.add)
@eager_plan(2)
def add(x: Any, y: Any) -> Tensor:
    """``x + y`` elementwise, with NumPy broadcasting and promotion (bool: logical or).

    Example:
        >>> import kiln
        >>> kiln.add(kiln.tensor([1.0, 2.0], dtype="float32"), 1).tolist()
        [2.0, 3.0]
    """
    (a, b), out = _resolve(np.add, x, y)
    return call("Or" if out == _BOOL else "Add", a, b)


@implements(np.subtract)
@eager_plan(2)
def subtract(x: Any, y: Any) -> Tensor:
    """``x - y`` elementwise; bools raise ``TypeError`` as in NumPy.

    Example:
        >>> import kiln
        >>> kiln.subtract(5, kiln.tensor([1, 2], dtype="int8")).tolist()
        [4, 3]
    """
    (a, b), _ = _resolve(np.subtract, x, y)
    return call("Sub", a, b)


@implements(np.multiply)
@eager_plan(2)
def multiply(x: Any, y: Any) -> Tensor:
    """``x * y`` elementwise (bool: logical and).

    Example:
        >>> import kiln
        >>> kiln.multiply(kiln.tensor([1.5, 2.0], dtype="float32"), 2.0).tolist()
        [3.0, 4.0]
    """
    (a, b), out = _resolve(np.multiply, x, y)
    return call("And" if out == _BOOL else "Mul", a, b)


@implements(np.divide)
@eager_plan(2)
def divide(x: Any, y: Any) -> Tensor:
    """True division ``x / y``: integers divide in float64, as NumPy.

    Example:
        >>> import kiln
        >>> kiln.divide(kiln.tensor([1, 3]), 2).tolist()
        [0.5, 1.5]
    """
    (a, b), _ = _resolve(np.divide, x, y)
    return call("Div", a, b)


true_divide = divide


def _float_divmod(a: Tensor, b: Tensor, want: str) -> Tensor:
    """NumPy's float floor division (``want="quotient"``) or remainder from ONNX operators,
    step for step as NumPy's ``npy_divmod`` computes them (so signed zeros, infinities and
    NaN come out as NumPy's):

    * ``mod = fmod(a, b)`` (the dividend's sign); ``b == 0``: the remainder is that ``mod``
      (NaN) and the quotient ``a / b``;
    * ``div = (a - mod) / b``; where ``mod`` is non-zero and its sign differs from ``b``'s,
      ``mod += b`` and ``div -= 1``; where ``mod`` is zero it takes ``b``'s sign;
    * the quotient is ``floor(div)``, plus one where ``div - floor(div) > 0.5``; where ``div``
      is zero it is a zero with the sign of ``a / b``.
    """
    (a, b), back = _widen(a, b)
    zero = _scalar(0, a)
    mod = call("Mod", a, b, fmod=1)
    mod_zero = call("Equal", mod, zero)
    b_negative = call("Less", b, zero)
    fix = call("And", call("Not", mod_zero), call("Xor", call("Less", mod, zero), b_negative))
    b_zero = call("Equal", b, zero)
    if want == "remainder":
        # copysign(0, b): b is non-zero here, so its sign is b < 0.
        signed_zero = call("Where", b_negative, _scalar(-0.0, a), zero)
        result = call("Where", fix, call("Add", mod, b), call("Where", mod_zero, signed_zero, mod))
        return cast(call("Where", b_zero, mod, result), back)
    quotient = call("Div", a, b)
    div = call("Div", call("Sub", a, mod), b)
    div = call("Where", fix, call("Sub", div, _scalar(1, a)), div)
    low = call("Floor", div)
    snap = call("Greater", call("Sub", div, low), _scalar(0.5, a))
    floor_div = call("Where", snap, call("Add", low, _scalar(1, a)), low)
    # copysign(0, a / b): the quotient is finite here, so 1 / quotient has its sign (-0.0 too).
    negative = call("Less", call("Div", _scalar(1, a), quotient), zero)
    signed_zero = call("Where", negative, _scalar(-0.0, a), zero)
    result = call("Where", call("Equal", div, zero), signed_zero, floor_div)
    return cast(call("Where", b_zero, quotient, result), back)


@implements(np.floor_divide)
@eager_plan(2)
def floor_divide(x: Any, y: Any) -> Tensor:
    """``x // y``: the floor of the quotient, for negative operands too (Python semantics).

    Integers stay exact (no float round trip); ``x // 0`` is 0 for integers, as NumPy.

    Example:
        >>> import kiln
        >>> kiln.floor_divide(kiln.tensor([7, -7]), 2).tolist()
        [3, -4]
        >>> kiln.floor_divide(kiln.tensor([1.0]), 0.1).tolist()
        [9.0]
    """
    (a, b), out = _resolve(np.floor_divide, x, y)
    if dtypes.is_floating(out):
        return _float_divmod(a, b, "quotient")
    if not dtypes.is_signed_integer(out):
        return call("Div", a, b)  # unsigned: truncation is floor
    # Truncating Div is one too high exactly where the C remainder (fmod=1) differs from the
    # Python one (fmod=0), i.e. where it is non-zero and the signs differ.
    q = call("Div", a, b)
    same = call("Equal", call("Mod", a, b, fmod=1), call("Mod", a, b, fmod=0))
    return call("Where", same, q, call("Sub", q, _scalar(1, q)))


@implements(np.remainder)
@eager_plan(2)
def remainder(x: Any, y: Any) -> Tensor:
    """``x % y`` with the sign of the divisor (Python / ``np.remainder`` semantics).

    Example:
        >>> import kiln
        >>> kiln.remainder(kiln.tensor([7, -7]), 3).tolist()
        [1, 2]
        >>> kiln.remainder(kiln.tensor([-1.5]), 1.0).tolist()
        [0.5]
    """
    (a, b), out = _resolve(np.remainder, x, y)
    if dtypes.is_floating(out):
        return _float_divmod(a, b, "remainder")
    return call("Mod", a, b, fmod=0)


mod = remainder

# ONNX Pow takes these base dtypes; narrower integers compute in a wider one and wrap back,
# which is exact because integer multiplication wraps the same in every width.
_POW_WIDE = {
    dtypes.int8: dtypes.int32,
    dtypes.int16: dtypes.int32,
    dtypes.uint8: dtypes.int32,
    dtypes.uint16: dtypes.int32,
    dtypes.uint32: dtypes.int64,
    dtypes.uint64: dtypes.int64,
}


@implements(np.power)
@eager_plan(2)
def power(x: Any, y: Any) -> Tensor:
    """``x ** y``. An integer base to a known negative integer exponent raises ``ValueError``
    as NumPy does.

    Example:
        >>> import kiln
        >>> kiln.power(kiln.tensor([2.0, 3.0], dtype="float32"), 2).tolist()
        [4.0, 9.0]
    """
    (a, b), out = _resolve(np.power, x, y)
    if dtypes.is_integer(out):
        known = b.type.value
        shape = broadcast_shapes(a.shape, b.shape)  # (an empty result raises nothing)
        sized = all(isinstance(d, int) for d in shape) and 0 not in shape
        if sized and known is not None and any(isinstance(v, int) and v < 0 for v in known):
            raise OpArgumentError(
                "power: integers to negative integer powers are not allowed "
                f"(exponent {list(known)}); use a float base, e.g. x.astype(float) ** y"
            )
        wide = _POW_WIDE.get(out)
        if wide is not None:
            return cast(call("Pow", cast(a, wide), b), out)
    return call("Pow", a, b)


pow = power  # noqa: A001 - NumPy 2's name


# The dtypes NumPy's scalar ** computes with libm's pow (half precision through float).
_SCALAR_POW_DTYPES = frozenset({dtypes.float16, dtypes.float32, dtypes.float64})


def _zero_d(v: Any) -> bool:
    """Whether ``v`` is a scalar operand: a 0-d tensor (what a NumPy program holds as a
    scalar, almost always: not one marked as a 0-d array, ``Tensor._array``), a NumPy or
    Python number. A NumPy array, even 0-d, is an array: ``np.float32(2) ** np.array(1.7,
    np.float32)`` is the array loop's."""
    if isinstance(v, Tensor):
        return v.ndim == 0 and not getattr(v, "_array", False)
    if isinstance(v, np.generic):
        return True
    return isinstance(v, (bool, int, float))


def power_operator(x: Any, y: Any) -> Tensor:
    """``x ** y`` as NumPy's ``ndarray.__pow__`` computes it (``Tensor.__pow__``): for an
    array base and a Python exponent, ``** 2`` is ``np.square`` for every dtype (so
    ``bool ** 2`` is int8, where ``np.power`` gives int64), and on floats ``** -1`` is
    ``np.reciprocal`` and ``** 0.5`` is ``np.sqrt`` (``-0.0 ** 0.5`` is -0.0, not 0.0);
    anything else is :func:`power`. Two 0-d operands are what NumPy programs hold as
    *scalars* (``np.sum(a)``, ``a[0, 0]``), whose ``**`` is NumPy's scalar math: no array fast
    path (``np.True_ ** 2`` is int64, ``np.float32(-0.0) ** 0.5`` is +0.0), and on floats
    libm's ``pow`` (``kiln.ScalarPow``), not the array loop ``np.power`` runs.

    Example:
        >>> import kiln
        >>> (kiln.tensor([True, False]) ** 2).dtype
        dtype('int8')
    """
    if _zero_d(x) and _zero_d(y):
        (a, b), out = _resolve(np.power, x, y)
        if out in _SCALAR_POW_DTYPES and a.dtype == b.dtype == out:
            return call("kiln.ScalarPow", a, b)
        return power(x, y)
    if isinstance(x, (Tensor, np.ndarray)):
        floating = dtypes.is_floating(x.dtype) or dtypes.is_complex(x.dtype)
        if type(y) is int and y == 2:
            return square(x)
        if type(y) is int and y == -1 and floating:
            return reciprocal(x)
        if type(y) is float and y == 0.5 and floating:
            return sqrt(x)
    return power(x, y)


@implements(np.negative)
@eager_plan(1)
def negative(x: Any) -> Tensor:
    """``-x``; unsigned integers wrap around as NumPy (``-uint8(1) == 255``).

    Example:
        >>> import kiln
        >>> kiln.negative(kiln.tensor([1, 2], dtype="uint8")).tolist()
        [255, 254]
    """
    (a,), out = _resolve(np.negative, x)
    if out in dtypes.UNSIGNED_DTYPES:
        return call("Sub", _scalar(0, a), a)
    return call("Neg", a)


@implements(np.positive)
@eager_plan(1)
def positive(x: Any) -> Tensor:
    """``+x``: a new tensor with the same values (as NumPy's, a copy).

    Example:
        >>> import kiln
        >>> kiln.positive(kiln.tensor([-1.0])).tolist()
        [-1.0]
    """
    (a,), _ = _resolve(np.positive, x)
    return new_array(a)  # a write into it must not reach x


@implements(np.absolute)
@eager_plan(1)
def absolute(x: Any) -> Tensor:
    """``|x|``; unsigned integers and bools are returned unchanged.

    Example:
        >>> import kiln
        >>> kiln.absolute(kiln.tensor([-1.5, 2.0])).tolist()
        [1.5, 2.0]
    """
    (a,), out = _resolve(np.absolute, x)
    if out == _BOOL or out in dtypes.UNSIGNED_DTYPES:
        return new_array(a)
    if a.dtype.kind == "c":
        return call("kiln.ComplexAbs", a)  # the magnitude, in the parts' dtype
    return call("Abs", a)


abs = absolute  # noqa: A001 - NumPy's name


@implements(np.sign)
@eager_plan(1)
def sign(x: Any) -> Tensor:
    """-1, 0 or 1 by the sign of each element (NaN stays NaN).

    Example:
        >>> import kiln
        >>> kiln.sign(kiln.tensor([-2, 0, 3])).tolist()
        [-1, 0, 1]
    """
    (a,), _ = _resolve(np.sign, x)
    return call("Sign", a)


@implements(np.square)
@eager_plan(1)
def square(x: Any) -> Tensor:
    """``x * x``.

    Example:
        >>> import kiln
        >>> kiln.square(kiln.tensor([3, -2], dtype="int8")).tolist()
        [9, 4]
    """
    (a,), _ = _resolve(np.square, x)
    return call("Mul", a, a)


@implements(np.reciprocal)
@eager_plan(1)
def reciprocal(x: Any) -> Tensor:
    """``1 / x`` in ``x``'s dtype (integers: ``1.0 / x`` truncated, so 0 for ``|x| > 1``).

    Example:
        >>> import kiln
        >>> kiln.reciprocal(kiln.tensor([2.0, 4.0])).tolist()
        [0.5, 0.25]
    """
    (a,), out = _resolve(np.reciprocal, x)
    if dtypes.is_floating(out) or dtypes.is_complex(out):
        return call("Reciprocal", a)
    # NumPy's integer loop is ``out = 1.0 / in`` converted back: 0 for |x| > 1, and for
    # x == 0 whatever the platform's conversion of inf gives (what a Cast gives too).
    wide = cast(a, dtypes.float64)
    return cast(call("Div", constant(1.0, dtypes.float64), wide), out)


# -- exponentials and logarithms -----------------------------------------------------------


def _float_unary(
    name: str, ufunc: np.ufunc, op: str, summary: str, example: str, result: str
) -> Callable[[Any], Tensor]:
    """A front door for a ufunc that maps 1:1 onto a float operator (integers compute in the
    float dtype NumPy picks: float16 for int8/uint8/bool, float64 for wider ones)."""

    def fn(x: Any) -> Tensor:
        (a,), _ = _resolve(ufunc, x)
        return call(op, a)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = (
        f"{summary}\n\n    Example:\n        >>> import kiln\n"
        f"        >>> kiln.{name}(kiln.tensor({example})).tolist()\n        {result}\n"
    )
    return implements(ufunc)(eager_plan(1)(fn))


exp = _float_unary("exp", np.exp, "Exp", "e to the power of each element.", "[0.0]", "[1.0]")
log = _float_unary("log", np.log, "Log", "The natural logarithm.", "[1.0]", "[0.0]")
sqrt = _float_unary("sqrt", np.sqrt, "Sqrt", "The non-negative square root.", "[4.0]", "[2.0]")
sin = _float_unary("sin", np.sin, "Sin", "The sine (radians).", "[0.0]", "[0.0]")
cos = _float_unary("cos", np.cos, "Cos", "The cosine (radians).", "[0.0]", "[1.0]")
tan = _float_unary("tan", np.tan, "Tan", "The tangent (radians).", "[0.0]", "[0.0]")
arcsin = _float_unary("arcsin", np.arcsin, "Asin", "The inverse sine.", "[0.0]", "[0.0]")
arccos = _float_unary("arccos", np.arccos, "Acos", "The inverse cosine.", "[1.0]", "[0.0]")
arctan = _float_unary("arctan", np.arctan, "Atan", "The inverse tangent.", "[0.0]", "[0.0]")
sinh = _float_unary("sinh", np.sinh, "Sinh", "The hyperbolic sine.", "[0.0]", "[0.0]")
cosh = _float_unary("cosh", np.cosh, "Cosh", "The hyperbolic cosine.", "[0.0]", "[1.0]")
tanh = _float_unary("tanh", np.tanh, "Tanh", "The hyperbolic tangent.", "[0.0]", "[0.0]")


def erf(x: Any) -> Tensor:
    """The error function (NumPy has none; dtypes resolve as for ``np.tanh``).

    Example:
        >>> import kiln
        >>> kiln.erf(kiln.tensor([0.0])).tolist()
        [0.0]
    """
    (a,), _ = _resolve(np.tanh, x)
    return call("Erf", a)


arcsinh = _float_unary(
    "arcsinh", np.arcsinh, "Asinh", "The inverse hyperbolic sine.", "[0.0]", "[0.0]"
)
arccosh = _float_unary(
    "arccosh", np.arccosh, "Acosh", "The inverse hyperbolic cosine.", "[1.0]", "[0.0]"
)
arctanh = _float_unary(
    "arctanh", np.arctanh, "Atanh", "The inverse hyperbolic tangent.", "[0.0]", "[0.0]"
)
# NumPy 2's array-API spellings of the same ufuncs.
asin, acos, atan = arcsin, arccos, arctan
asinh, acosh, atanh = arcsinh, arccosh, arctanh

# NumPy's degree/radian factors (npy_math: ``x * (NPY_PI / 180.0)``, the float loop with the
# constant computed in float32, the half loop through the float one), so results are
# bit-identical.
_TO_RADIANS = {
    dtypes.float64: np.float64(np.pi / 180.0),
    dtypes.float32: np.float32(np.pi) / np.float32(180.0),
}
_TO_DEGREES = {
    dtypes.float64: np.float64(180.0 / np.pi),
    dtypes.float32: np.float32(180.0) / np.float32(np.pi),
}


def _scaled(name: str, ufunc: np.ufunc, x: Any, factors: dict[np.dtype, np.floating]) -> Tensor:
    (a,), _ = _resolve(ufunc, x, name=name)
    (a,), back = _widen(a)
    factor = factors.get(a.dtype)
    if factor is None:
        raise OpTypeError(f"{name}: no {a.dtype} loop in kiln (float16/32/64 only)")
    return cast(call("Mul", a, constant(factor)), back)


@implements(np.radians)
@eager_plan(1)
def radians(x: Any) -> Tensor:
    """Degrees to radians: ``x * (pi / 180)`` with NumPy's constant (bit-identical to
    ``np.radians``; integers compute in the float dtype NumPy picks).

    Example:
        >>> import kiln
        >>> kiln.radians(kiln.tensor([180.0])).tolist()
        [3.141592653589793]
    """
    return _scaled("radians", np.radians, x, _TO_RADIANS)


@implements(np.deg2rad)
@eager_plan(1)
def deg2rad(x: Any) -> Tensor:
    """Degrees to radians (``np.deg2rad``, the same as :func:`radians`).

    Example:
        >>> import kiln
        >>> kiln.deg2rad(kiln.tensor([90.0])).tolist()
        [1.5707963267948966]
    """
    return _scaled("deg2rad", np.deg2rad, x, _TO_RADIANS)


@implements(np.degrees)
@eager_plan(1)
def degrees(x: Any) -> Tensor:
    """Radians to degrees: ``x * (180 / pi)`` with NumPy's constant (bit-identical to
    ``np.degrees``).

    Example:
        >>> import kiln
        >>> kiln.degrees(kiln.tensor([np.pi])).tolist()
        [180.0]
    """
    return _scaled("degrees", np.degrees, x, _TO_DEGREES)


@implements(np.rad2deg)
@eager_plan(1)
def rad2deg(x: Any) -> Tensor:
    """Radians to degrees (``np.rad2deg``, the same as :func:`degrees`).

    Example:
        >>> import kiln
        >>> kiln.rad2deg(kiln.tensor([np.pi / 2])).tolist()
        [90.0]
    """
    return _scaled("rad2deg", np.rad2deg, x, _TO_DEGREES)


@implements(np.exp2)
@eager_plan(1)
def exp2(x: Any) -> Tensor:
    """``2 ** x``.

    Example:
        >>> import kiln
        >>> kiln.exp2(kiln.tensor([3.0])).tolist()
        [8.0]
    """
    (a,), _ = _resolve(np.exp2, x)
    _real_only("exp2", a)  # NumPy's complex exp2 is exp(x * ln 2), not a power
    if a.dtype != dtypes.bfloat16:  # NumPy's own loop (a power of 2 rounds otherwise)
        return call("kiln.Exp2", a)
    return call("Pow", _scalar(2, a), a)


@implements(np.expm1)
@eager_plan(1)
def expm1(x: Any) -> Tensor:
    """``exp(x) - 1``, accurate near 0: NumPy's own ``expm1`` (``kiln.Expm1``, whose ONNX form
    is ``tanh(x / 2) * (exp(x) + 1)`` near 0).

    Example:
        >>> import kiln
        >>> kiln.expm1(kiln.tensor([1e-10])).tolist()  # doctest: +ELLIPSIS
        [1.00000000005e-10]
    """
    (a,), _ = _resolve(np.expm1, x)
    return call("kiln.Expm1", a)


@implements(np.log1p)
@eager_plan(1)
def log1p(x: Any) -> Tensor:
    """``log(1 + x)``, accurate near 0: NumPy's own ``log1p`` (``kiln.Log1p``, whose ONNX
    form is Goldberg's correction ``log(u) * x / (u - 1)`` for ``u = 1 + x``).

    Example:
        >>> import kiln
        >>> kiln.log1p(kiln.tensor([1e-20])).tolist()
        [1e-20]
    """
    (a,), _ = _resolve(np.log1p, x)
    return call("kiln.Log1p", a)


def _log_base(name: str, ufunc: np.ufunc, x: Any, base: float) -> Tensor:
    (a,), _ = _resolve(ufunc, x, name=name)
    _real_only(name, a)  # NumPy scales the parts of a complex log; a division differs
    if a.dtype != dtypes.bfloat16:  # NumPy's own loop (kiln.Log2, kiln.Log10)
        return call("kiln.Log2" if base == 2.0 else "kiln.Log10", a)
    (a,), back = _widen(a)
    return cast(call("Div", call("Log", a), _scalar(math.log(base), a)), back)


@implements(np.log2)
@eager_plan(1)
def log2(x: Any) -> Tensor:
    """The base-2 logarithm.

    Example:
        >>> import kiln
        >>> kiln.log2(kiln.tensor([8.0])).tolist()
        [3.0]
    """
    return _log_base("log2", np.log2, x, 2.0)


@implements(np.log10)
@eager_plan(1)
def log10(x: Any) -> Tensor:
    """The base-10 logarithm.

    Example:
        >>> import kiln
        >>> kiln.log10(kiln.tensor([100.0])).tolist()
        [2.0]
    """
    return _log_base("log10", np.log10, x, 10.0)


# -- rounding ------------------------------------------------------------------------------


def _integral(name: str, ufunc: np.ufunc, op: str, x: Any) -> Tensor:
    (a,), out = _resolve(ufunc, x, name=name)
    if not dtypes.is_floating(out):
        return new_array(a)  # already integral (NumPy 2 keeps the dtype)
    return call(op, a)


@implements(np.floor)
@eager_plan(1)
def floor(x: Any) -> Tensor:
    """The largest integer <= each element (integers unchanged, dtype kept).

    Example:
        >>> import kiln
        >>> kiln.floor(kiln.tensor([-1.5, 1.5])).tolist()
        [-2.0, 1.0]
    """
    return _integral("floor", np.floor, "Floor", x)


@implements(np.ceil)
@eager_plan(1)
def ceil(x: Any) -> Tensor:
    """The smallest integer >= each element (integers unchanged, dtype kept).

    Example:
        >>> import kiln
        >>> kiln.ceil(kiln.tensor([-1.5, 1.5])).tolist()
        [-1.0, 2.0]
    """
    return _integral("ceil", np.ceil, "Ceil", x)


@implements(np.trunc)
@eager_plan(1)
def trunc(x: Any) -> Tensor:
    """Each element rounded toward zero (integers unchanged, dtype kept).

    Example:
        >>> import kiln
        >>> kiln.trunc(kiln.tensor([-1.5, 1.5])).tolist()
        [-1.0, 1.0]
    """
    (a,), out = _resolve(np.trunc, x)
    if not dtypes.is_floating(out):
        return new_array(a)
    return call("Where", call("Less", a, _scalar(0, a)), call("Ceil", a), call("Floor", a))


@implements(np.rint)
@eager_plan(1)
def rint(x: Any) -> Tensor:
    """Each element rounded to the nearest integer, halves to even (integers become floats,
    as NumPy).

    Example:
        >>> import kiln
        >>> kiln.rint(kiln.tensor([0.5, 1.5, 2.5])).tolist()
        [0.0, 2.0, 2.0]
    """
    (a,), _ = _resolve(np.rint, x)
    return call("Round", a)


def _round_impl(a: Any, decimals: int = 0, out: Any = None) -> Tensor:
    if out is not None:
        raise TypeError("round(..., out=...): recorded on ufuncs only")
    decimals = int(decimals)
    t = as_tensor(a)
    if t.dtype == _BOOL:
        if decimals != 0:
            raise OpTypeError(f"round: decimals={decimals} is not supported for dtype bool")
        return rint(t)
    if dtypes.is_integer(t.dtype):
        if decimals >= 0:
            return new_array(t)  # integers have no fractional digits (a new array, as NumPy)
        # As NumPy: scale down in float64, round, scale up, cast back.
        wide = cast(t, dtypes.float64)
        scale = constant(10.0 ** (-decimals), dtypes.float64)
        return cast(call("Mul", call("Round", call("Div", wide, scale)), scale), t.dtype)
    if decimals == 0:
        return call("Round", t)
    # As NumPy: multiply by 10**decimals in the tensor's dtype, round half to even, divide.
    scale = constant(10.0 ** builtins.abs(decimals), t.dtype)
    if decimals > 0:
        return call("Div", call("Round", call("Mul", t, scale)), scale)
    return call("Mul", call("Round", call("Div", t, scale)), scale)


@implements(np.round)
@eager_plan(1)
def round(a: Any, decimals: int = 0, out: Any = None) -> Tensor:  # noqa: A001 - NumPy's name
    """Each element rounded to ``decimals`` decimal places, halves to even (as ``np.round``).

    Integers are returned unchanged for ``decimals >= 0``.

    Example:
        >>> import kiln
        >>> kiln.round(kiln.tensor([1.25, 2.5]), 1).tolist()
        [1.2, 2.5]
        >>> kiln.round(kiln.tensor([15, 25]), -1).tolist()
        [20, 20]
    """
    return _round_impl(a, decimals, out)


@implements(np.around)
@eager_plan(1)
def around(a: Any, decimals: int = 0, out: Any = None) -> Tensor:
    """:func:`round` under its older NumPy name.

    Example:
        >>> import kiln
        >>> kiln.around(kiln.tensor([0.5, 1.5])).tolist()
        [0.0, 2.0]
    """
    return _round_impl(a, decimals, out)


# -- comparison ----------------------------------------------------------------------------


_COMPARISONS = {
    "Equal": np.equal,
    "Less": np.less,
    "LessOrEqual": np.less_equal,
    "Greater": np.greater,
    "GreaterOrEqual": np.greater_equal,
}


def _compare(name: str, ufunc: np.ufunc, op: str, x: Any, y: Any) -> Tensor:
    known = _out_of_range_comparison(op, x, y)
    if known is not None:
        return known
    (a, b), _ = _resolve(ufunc, x, y, name=name)
    if a.dtype == _BOOL and op != "Equal":
        # ONNX orders numbers only; False < True is 0 < 1.
        a, b = cast(a, dtypes.uint8), cast(b, dtypes.uint8)
    if dtypes.is_complex(a.dtype) and op != "Equal":
        return _complex_order(op, a, b)
    return call(op, a, b)


def _complex_order(op: str, a: Tensor, b: Tensor) -> Tensor:
    """NumPy's lexicographic order of complex numbers (its ``CLT``/``CLE``/``CGT``/``CGE``):
    the real parts decide where neither imaginary part is NaN, the imaginary parts where the
    real parts are equal."""
    ar, ai, br, bi = (call(part, t) for t in (a, b) for part in ("kiln.Real", "kiln.Imag"))
    strict = "Less" if op.startswith("Less") else "Greater"
    neither_nan = call("Not", call("Or", call("IsNaN", ai), call("IsNaN", bi)))
    by_real = call("And", call(strict, ar, br), neither_nan)
    return call("Or", by_real, call("And", call("Equal", ar, br), call(op, ai, bi)))


def _out_of_range_comparison(op: str, x: Any, y: Any) -> Tensor | None:
    """``op`` of an integer tensor and a Python int its dtype cannot hold (``u8 < -3``):
    NumPy 2 compares the true values, so every element gets the same answer; None when
    the operands are not such a pair."""
    for scalar, other in ((y, x), (x, y)):
        if type(scalar) is not int or not isinstance(other, (Tensor, np.ndarray, np.generic)):
            continue
        dtype = as_tensor(other).dtype
        if not dtypes.is_integer(dtype):
            return None
        info = np.iinfo(dtype)
        if info.min <= scalar <= info.max:
            return None
        stand_in = np.inf if scalar > info.max else -np.inf  # any element is on one side
        args = (0.0, stand_in) if scalar is y else (stand_in, 0.0)
        t = as_tensor(other)
        every = call("Equal", t, t)  # integers always equal themselves
        return every if bool(_COMPARISONS[op](*args)) else call("Not", every)
    return None


@implements(np.equal)
@eager_plan(2)
def equal(x: Any, y: Any) -> Tensor:
    """``x == y`` elementwise (NaN equals nothing).

    Example:
        >>> import kiln
        >>> kiln.equal(kiln.tensor([1, 2]), 2).tolist()
        [False, True]
    """
    return _compare("equal", np.equal, "Equal", x, y)


@implements(np.not_equal)
@eager_plan(2)
def not_equal(x: Any, y: Any) -> Tensor:
    """``x != y`` elementwise (NaN differs from everything).

    Example:
        >>> import kiln
        >>> kiln.not_equal(kiln.tensor([1, 2]), 2).tolist()
        [True, False]
    """
    return call("Not", _compare("not_equal", np.not_equal, "Equal", x, y))


@implements(np.less)
@eager_plan(2)
def less(x: Any, y: Any) -> Tensor:
    """``x < y`` elementwise.

    Example:
        >>> import kiln
        >>> kiln.less(kiln.tensor([1, 2]), 2).tolist()
        [True, False]
    """
    return _compare("less", np.less, "Less", x, y)


@implements(np.less_equal)
@eager_plan(2)
def less_equal(x: Any, y: Any) -> Tensor:
    """``x <= y`` elementwise.

    Example:
        >>> import kiln
        >>> kiln.less_equal(kiln.tensor([1, 3]), 2).tolist()
        [True, False]
    """
    return _compare("less_equal", np.less_equal, "LessOrEqual", x, y)


@implements(np.greater)
@eager_plan(2)
def greater(x: Any, y: Any) -> Tensor:
    """``x > y`` elementwise.

    Example:
        >>> import kiln
        >>> kiln.greater(kiln.tensor([1, 3]), 2).tolist()
        [False, True]
    """
    return _compare("greater", np.greater, "Greater", x, y)


@implements(np.greater_equal)
@eager_plan(2)
def greater_equal(x: Any, y: Any) -> Tensor:
    """``x >= y`` elementwise.

    Example:
        >>> import kiln
        >>> kiln.greater_equal(kiln.tensor([1, 2]), 2).tolist()
        [False, True]
    """
    return _compare("greater_equal", np.greater_equal, "GreaterOrEqual", x, y)


# -- logic and bits ------------------------------------------------------------------------


def _truth(name: str, ufunc: np.ufunc, *operands: Any) -> list[Tensor]:
    """The operands as bools (non-zero is true, NaN too), after checking NumPy accepts them."""
    tensors, _ = _resolve(ufunc, *operands, name=name)
    return [cast(t, _BOOL) for t in tensors]


@implements(np.logical_and)
@eager_plan(2)
def logical_and(x: Any, y: Any) -> Tensor:
    """The truth value of ``x and y`` elementwise.

    Example:
        >>> import kiln
        >>> kiln.logical_and(kiln.tensor([0, 1, 2]), 1).tolist()
        [False, True, True]
    """
    return call("And", *_truth("logical_and", np.logical_and, x, y))


@implements(np.logical_or)
@eager_plan(2)
def logical_or(x: Any, y: Any) -> Tensor:
    """The truth value of ``x or y`` elementwise.

    Example:
        >>> import kiln
        >>> kiln.logical_or(kiln.tensor([0.0, 2.0]), 0).tolist()
        [False, True]
    """
    return call("Or", *_truth("logical_or", np.logical_or, x, y))


@implements(np.logical_xor)
@eager_plan(2)
def logical_xor(x: Any, y: Any) -> Tensor:
    """The truth value of ``bool(x) != bool(y)`` elementwise.

    Example:
        >>> import kiln
        >>> kiln.logical_xor(kiln.tensor([True, False]), True).tolist()
        [False, True]
    """
    return call("Xor", *_truth("logical_xor", np.logical_xor, x, y))


@implements(np.logical_not)
@eager_plan(1)
def logical_not(x: Any) -> Tensor:
    """The truth value of ``not x`` elementwise.

    Example:
        >>> import kiln
        >>> kiln.logical_not(kiln.tensor([0, 3])).tolist()
        [True, False]
    """
    return call("Not", *_truth("logical_not", np.logical_not, x))


def _bitwise(name: str, ufunc: np.ufunc, logic_op: str, int_op: str, x: Any, y: Any) -> Tensor:
    (a, b), out = _resolve(ufunc, x, y, name=name)
    return call(logic_op if out == _BOOL else int_op, a, b)


@implements(np.bitwise_and)
@eager_plan(2)
def bitwise_and(x: Any, y: Any) -> Tensor:
    """``x & y`` for integers and bools.

    Example:
        >>> import kiln
        >>> kiln.bitwise_and(kiln.tensor([12]), 10).tolist()
        [8]
    """
    return _bitwise("bitwise_and", np.bitwise_and, "And", "BitwiseAnd", x, y)


@implements(np.bitwise_or)
@eager_plan(2)
def bitwise_or(x: Any, y: Any) -> Tensor:
    """``x | y`` for integers and bools.

    Example:
        >>> import kiln
        >>> kiln.bitwise_or(kiln.tensor([12]), 10).tolist()
        [14]
    """
    return _bitwise("bitwise_or", np.bitwise_or, "Or", "BitwiseOr", x, y)


@implements(np.bitwise_xor)
@eager_plan(2)
def bitwise_xor(x: Any, y: Any) -> Tensor:
    """``x ^ y`` for integers and bools.

    Example:
        >>> import kiln
        >>> kiln.bitwise_xor(kiln.tensor([12]), 10).tolist()
        [6]
    """
    return _bitwise("bitwise_xor", np.bitwise_xor, "Xor", "BitwiseXor", x, y)


@implements(np.invert)
@eager_plan(1)
def invert(x: Any) -> Tensor:
    """``~x``: every bit flipped for integers, logical not for bools.

    Example:
        >>> import kiln
        >>> kiln.invert(kiln.tensor([0, 5], dtype="int8")).tolist()
        [-1, -6]
    """
    (a,), out = _resolve(np.invert, x)
    return call("Not" if out == _BOOL else "BitwiseNot", a)


bitwise_not = invert
bitwise_invert = invert


# -- maximum, minimum, predicates ----------------------------------------------------------


@implements(np.maximum)
@eager_plan(2)
def maximum(x: Any, y: Any) -> Tensor:
    """The elementwise maximum; NaN wins, as in NumPy.

    Example:
        >>> import kiln
        >>> kiln.maximum(kiln.tensor([1.0, float("nan")]), 2.0).tolist()
        [2.0, nan]
    """
    (a, b), out = _resolve(np.maximum, x, y)
    # ONNX Max propagates NaN (kiln's kernel, the ONNX reference and ONNX Runtime >= 1.19).
    return call("Or" if out == _BOOL else "Max", a, b)


@implements(np.minimum)
@eager_plan(2)
def minimum(x: Any, y: Any) -> Tensor:
    """The elementwise minimum; NaN wins, as in NumPy.

    Example:
        >>> import kiln
        >>> kiln.minimum(kiln.tensor([1.0, 3.0]), 2.0).tolist()
        [1.0, 2.0]
    """
    (a, b), out = _resolve(np.minimum, x, y)
    return call("And" if out == _BOOL else "Min", a, b)


def _never(a: Tensor) -> Tensor:
    """All-false bools of ``a``'s shape, computed from ``a`` so symbolic shapes carry over
    (an integer always equals itself)."""
    return call("Not", call("Equal", a, a))


@implements(np.isnan)
@eager_plan(1)
def isnan(x: Any) -> Tensor:
    """True where an element is NaN (never for integers and bools).

    Example:
        >>> import kiln
        >>> kiln.isnan(kiln.tensor([1.0, float("nan")])).tolist()
        [False, True]
    """
    (a,), _ = _resolve(np.isnan, x)
    if dtypes.is_complex(a.dtype):  # either part NaN, as NumPy's complex loop
        return call("Or", *(call("IsNaN", p) for p in _parts(a)))
    return call("IsNaN", a) if dtypes.is_floating(a.dtype) else _never(a)


@implements(np.isinf)
@eager_plan(1)
def isinf(x: Any) -> Tensor:
    """True where an element is +inf or -inf (never for integers and bools).

    Example:
        >>> import kiln
        >>> kiln.isinf(kiln.tensor([1.0, -float("inf")])).tolist()
        [False, True]
    """
    (a,), _ = _resolve(np.isinf, x)
    if dtypes.is_complex(a.dtype):  # either part infinite, as NumPy's complex loop
        return call("Or", *(call("IsInf", p) for p in _parts(a)))
    return call("IsInf", a) if dtypes.is_floating(a.dtype) else _never(a)


@implements(np.isfinite)
@eager_plan(1)
def isfinite(x: Any) -> Tensor:
    """True where an element is neither NaN nor infinite (always for integers and bools).

    Example:
        >>> import kiln
        >>> kiln.isfinite(kiln.tensor([1.0, float("inf")])).tolist()
        [True, False]
    """
    (a,), _ = _resolve(np.isfinite, x)
    if dtypes.is_complex(a.dtype):  # both parts finite
        return call("And", *(isfinite(p) for p in _parts(a)))
    if not dtypes.is_floating(a.dtype):
        return call("Equal", a, a)
    return call("Not", call("Or", call("IsNaN", a), call("IsInf", a)))


@implements(np.hypot)
@eager_plan(2)
def hypot(x: Any, y: Any) -> Tensor:
    """``sqrt(x**2 + y**2)`` without overflow or underflow: NumPy's own ``np.hypot`` loop
    (operator ``kiln.Hypot``). Its ONNX form, which engines and exported models run, follows
    glibc's algorithm (``hypot`` in ``e_hypot.c``) for float64 and rounds the float64 root
    once for narrower floats, as glibc's ``hypotf`` and NumPy's half loop do; other C
    libraries' ``hypot`` may differ from it in the last bit.

    Example:
        >>> import kiln
        >>> kiln.hypot(kiln.tensor([3.0, 1e200]), 4.0).tolist()
        [5.0, 1e+200]
    """
    (a, b), out = _resolve(np.hypot, x, y, name="hypot")
    if not dtypes.is_floating(out):
        raise OpTypeError(f"hypot: no {out} loop in kiln")
    return call("kiln.Hypot", a, b)


# -- where, clip, astype -------------------------------------------------------------------


@implements(np.where)
@eager_plan(3)
def where(condition: Any, x: Any = None, y: Any = None) -> Tensor:
    """``x`` where ``condition`` is true, else ``y``; all three broadcast together, ``x`` and
    ``y`` promote to their NumPy result type.

    ``where(condition)`` with one argument is :func:`kiln.nonzero`, as in NumPy (its output
    shape depends on the data).

    Example:
        >>> import kiln
        >>> kiln.where(kiln.tensor([True, False]), 1.0, kiln.tensor([5, 6])).tolist()
        [1.0, 6.0]
    """
    if x is None and y is None:
        return nonzero(condition)  # type: ignore[return-value]
    if x is None or y is None:
        raise OpArgumentError("where: either both or neither of x and y should be given")
    cond = as_tensor(condition)
    if cond.dtype != _BOOL:
        cond = cast(cond, _BOOL)  # truthiness, as NumPy
    a, b = same_dtype_operands(x, y, name="where")
    return call("Where", cond, a, b)


_CLIP_UFUNC = np._core.umath.clip  # the ufunc np.clip resolves its dtypes with


@implements(np.clip)
@eager_plan(1)
def clip(
    a: Any,
    a_min: Any = None,
    a_max: Any = None,
    out: Any = None,
    *,
    min: Any = None,  # noqa: A002 - NumPy's names
    max: Any = None,  # noqa: A002
) -> Tensor:
    """Each element limited to ``[a_min, a_max]`` (either may be ``None``), as ``np.clip``:
    NaN propagates, and ``a_min > a_max`` gives ``a_max``.

    Example:
        >>> import kiln
        >>> kiln.clip(kiln.tensor([-2.0, 0.5, 3.0]), 0.0, 1.0).tolist()
        [0.0, 0.5, 1.0]
    """
    if out is not None:
        raise TypeError("clip(..., out=...): recorded on ufuncs only")
    if min is not None:
        if a_min is not None:
            raise TypeError("clip: pass the lower bound as a_min or min, not both")
        a_min = min
    if max is not None:
        if a_max is not None:
            raise TypeError("clip: pass the upper bound as a_max or max, not both")
        a_max = max
    if a_min is None and a_max is None:
        return new_array(as_tensor(a))
    if a_max is None:
        return maximum(a, a_min)
    if a_min is None:
        return minimum(a, a_max)
    (t, lo, hi), dtype = _resolve(_CLIP_UFUNC, a, a_min, a_max, name="clip")
    if dtype == _BOOL:
        return call("And", call("Or", t, lo), hi)
    if lo.ndim == 0 and hi.ndim == 0:
        return call("Clip", t, lo, hi)
    # Bounds that broadcast: Clip wants scalars, so Max then Min (also NaN-propagating).
    return call("Min", call("Max", t, lo), hi)


def astype(x: Any, dtype: Any, /, *, copy: bool = True, device: Any = None) -> Tensor:
    """``x`` converted to ``dtype``: a new array, or, with ``copy=False``, ``x`` itself when it
    already has ``dtype`` (NumPy's ``astype``).

    Example:
        >>> import kiln
        >>> kiln.astype(kiln.tensor([1.7, -1.7]), "int32").tolist()
        [1, -1]
    """
    t = as_tensor(x)
    want = dtypes.as_dtype(dtype)
    if t.dtype == want:
        return t if copy is False else call("Identity", t)
    if t.dtype.kind == "c" and want.kind not in "cb":
        warnings.warn(  # as NumPy's astype, which then drops the imaginary part (Cast does)
            "Casting complex values to real discards the imaginary part",
            np.exceptions.ComplexWarning,
            stacklevel=2,
        )
    return cast(t, want, drop_imaginary=True)


if hasattr(np, "astype"):  # NumPy >= 2.1
    implements(np.astype)(astype)
