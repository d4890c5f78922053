"""Elementwise operators: unary math, activations, arithmetic, comparison, logic, Cast, Where.

Each operator is one record. Most are built by three small factories, :func:`unary`,
:func:`binary` and :func:`variadic`, which fix the shared rules (NumPy broadcasting, ONNX's
"inputs share one dtype" constraint, the dtype sets each operator accepts, how a known integer
``value`` flows through); the record still states the operator's own kernel, dtypes and samples
in one place.

Kernels run with NumPy's floating-point warnings silenced: an ONNX runtime computes ``1 / 0``
or ``log(-1)`` without complaint, and so does a graph replayed by kiln.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from .. import dtypes
from ..dtypes import dtype_from_onnx_code, onnx_dtype_code
from ..errors import OpArgumentError
from ..symbolic import Dim, dim_max, dim_min, floordiv, format_shape, mod
from . import batching
from .complex import COMPLEX
from .registry import (
    COMMUTATIVE,
    ELEMENTWISE,
    PURE,
    Attr,
    EngineLimit,
    ExpandFn,
    Input,
    KernelCall,
    NodeBuilder,
    NodeRule,
    OpDef,
    Sample,
    TensorType,
    Typed,
    first_input_dtype,
    float64_differs,
    float_input,
    integer_input,
    register,
    same_dtype,
)
from .rules import (
    ALL,
    BOOL,
    FLOATS,
    INTEGERS,
    NUMERIC,
    SIGNED,
    broadcast,
    require,
    require_dtype,
    require_same_dtype,
)
from .sampling import sample_array

__all__ = ["unary", "binary", "variadic", "erf"]

_F16 = (dtypes.float16, dtypes.bfloat16)
_HALVES = frozenset(_F16)
_UNSIGNED = frozenset(dtypes.UNSIGNED_DTYPES)
_F32_F64 = (dtypes.float32, dtypes.float64)

# -- value propagation ---------------------------------------------------------------------
#
# A small integer tensor's TensorType may carry its contents (``value``): Shape(x) of a (B, 3)
# input is (B, 3). Arithmetic on such tensors computes the result's value too, so that
# ``Reshape(x, Concat(Shape(x)[0] * 4, -1))`` still knows its target shape symbolically.

ValueFn = Callable[..., Dim]


def _wrap_int(v: Dim, dtype: np.dtype) -> Dim:
    """``v`` wrapped into ``dtype``'s range as the kernel would (symbolic sizes unchanged)."""
    if not isinstance(v, int):
        return v
    info = np.iinfo(dtype)
    span = int(info.max) - int(info.min) + 1
    return (v - int(info.min)) % span + int(info.min)


def _propagate(
    fn: ValueFn,
    out: np.dtype,
    shape: Sequence[Dim],
    inputs: Sequence[TensorType],
    attrs: Mapping[str, Any],
) -> tuple[Dim, ...] | None:
    """The output's contents from the inputs' known contents (``None`` when any is unknown)."""
    if not dtypes.is_integer(out) or len(shape) > 1 or not all(isinstance(d, int) for d in shape):
        return None
    values = [t.value for t in inputs]
    if any(v is None for v in values):
        return None
    size = 1 if not shape else int(shape[0])
    columns: list[tuple[Dim, ...]] = []
    for v in values:
        assert v is not None
        if len(v) == size:
            columns.append(v)
        elif len(v) == 1:
            columns.append(v * size)  # a 0-d or (1,) input broadcast against a 1-d one
        else:
            return None
    try:
        return tuple(_wrap_int(fn(*args, **attrs), out) for args in zip(*columns))
    except ZeroDivisionError:
        return None  # the kernel defines x / 0, but no size arithmetic should rely on it


def _value_div(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        if b == 0:
            raise ZeroDivisionError
        quotient = abs(a) // abs(b)  # integer Div truncates toward zero, as C
        return quotient if (a < 0) == (b < 0) else -quotient
    return floordiv(a, b)  # sizes are non-negative, so truncation is floor


def _value_mod(a: Dim, b: Dim, *, fmod: int) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        if b == 0:
            raise ZeroDivisionError
        if fmod:
            return a - b * _value_div(a, b)  # sign of the dividend, as C fmod
        return a % b  # sign of the divisor, as Python
    return mod(a, b)


# -- samples -------------------------------------------------------------------------------

# Shapes every elementwise op is sampled on: scalar, size 0, size 1, a plain matrix.
_UNARY_SHAPES: tuple[tuple[int, ...], ...] = ((), (0,), (1,), (3, 4))
# Pairs exercising broadcasting, size 0 and size 1.
_BINARY_SHAPES: tuple[tuple[tuple[int, ...], tuple[int, ...]], ...] = (
    ((3, 4), (3, 4)),
    ((2, 1, 4), (3, 1)),
    ((), (5,)),
    ((0, 3), (1, 3)),
    ((1,), (1,)),
)
# Input lists for variadic ops: one input, two and three with broadcasting, size 0.
_VARIADIC_SHAPES: tuple[tuple[tuple[int, ...], ...], ...] = (
    ((3, 4),),
    ((2, 1, 4), (3, 1)),
    ((2, 1, 4), (3, 1), (4,)),
    ((), (5,), (1,)),
    ((0, 3), (1, 3), (3,)),
)


def _nonzero(x: np.ndarray) -> np.ndarray:
    """``x`` with its zeros (and, for floats, values too close to zero) replaced by 1."""
    if x.dtype == dtypes.bool_:
        return x
    small = np.abs(x.astype(np.float64)) < (0.5 if dtypes.is_floating(x.dtype) else 1)
    return np.where(small, x.dtype.type(1), x)


def _unary_samples(
    dts: Iterable[np.dtype],
    low: float,
    high: float,
    reference: Callable[..., Any] | None,
    attrs: Sequence[Mapping[str, Any]],
) -> Callable[[], list[Sample]]:
    def make() -> list[Sample]:
        out = []
        for dt in dts:
            for shape in _UNARY_SHAPES:
                for a in attrs:
                    x = sample_array(shape, dt, low, high)
                    out.append(Sample((x,), a, reference, name=f"{dt.name}{shape}{_tag(a)}"))
        return out

    return make


def _binary_samples(
    dts: Iterable[np.dtype],
    low: float,
    high: float,
    reference: Callable[..., Any] | None,
    rhs_low: float | None = None,
    rhs_nonzero: bool = False,
    attrs: Sequence[Mapping[str, Any]] = ({},),
) -> Callable[[], list[Sample]]:
    def make() -> list[Sample]:
        out = []
        for dt in dts:
            for sa, sb in _BINARY_SHAPES:
                for at in attrs:
                    a = sample_array(sa, dt, low, high)
                    b = sample_array(sb, dt, low if rhs_low is None else rhs_low, high)
                    if rhs_nonzero:
                        b = _nonzero(b)
                    out.append(Sample((a, b), at, reference, name=f"{dt.name}{sa}{sb}{_tag(at)}"))
        return out

    return make


def _tag(attrs: Mapping[str, Any]) -> str:
    return "".join(f"-{k}={v}" for k, v in attrs.items())


# -- independent references ----------------------------------------------------------------


def _pointwise(
    fn: Callable[..., Any], out: np.dtype | None = None, arity: int | None = None
) -> Callable[..., np.ndarray]:
    """A reference applying the Python function ``fn`` element by element.

    Floats are handed to ``fn`` as Python floats (float64), integers as Python ints and bools
    as bools; each result is rounded or wrapped once into the output dtype. ``arity`` limits
    how many leading arguments are element arrays (the rest are attributes).
    """

    def reference(*arrays: np.ndarray | None, **attrs: Any) -> np.ndarray:
        present = [a for a in arrays[:arity] if a is not None]
        shape = np.broadcast_shapes(*(a.shape for a in present))
        columns = []
        for a in present:
            wide = a.astype(np.float64) if dtypes.is_floating(a.dtype) else a
            columns.append(np.broadcast_to(wide, shape).reshape(-1).tolist())
        results = [fn(*args, **attrs) for args in zip(*columns)]
        dtype = out if out is not None else present[0].dtype
        if dtypes.is_integer(dtype):
            results = [_wrap_int(int(r), dtype) for r in results]
            return np.array(results, dtype=dtype).reshape(shape)
        return (
            np.array(results, dtype=np.float64 if dtype != np.bool_ else bool)
            .reshape(shape)
            .astype(dtype)
        )

    return reference


def _int_trunc_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


# -- kernels -------------------------------------------------------------------------------


def _in_float(fn: Callable[[np.ndarray], np.ndarray], wide: Any = np.float32) -> Callable:
    """A kernel computing ``fn`` in float32 (or ``wide``) for float16/bfloat16 inputs, so a
    composite formula rounds once, as NumPy does for its own half-precision loops."""

    def kernel(x: np.ndarray, **attrs: Any) -> np.ndarray:
        if x.dtype in _HALVES or (wide is np.float64 and x.dtype != dtypes.float64):
            return np.asarray(fn(x.astype(wide), **attrs)).astype(x.dtype)
        return fn(x, **attrs)

    return kernel


@functools.cache
def _erf_tables() -> tuple[np.ndarray, list[tuple[float, float, np.ndarray]]]:
    """Coefficients for :func:`erf`, derived once from :mod:`math`.

    For ``|x| <= 1`` the Maclaurin series ``erf(x) = 2/sqrt(pi) * sum (-1)^n x^(2n+1) /
    (n! (2n+1))`` (19 terms reach float64 precision, and keep relative accuracy near 0). For
    ``1 < |x| < 6`` a polynomial fit (Chebyshev interpolation) of the smooth function
    ``erfc(x) * exp(x^2)`` on two intervals; ``erf = 1 - exp(-x^2) * fit``. Beyond 6,
    ``erf(x)`` rounds to +-1 in float64.
    """
    series = np.array(
        [(-1) ** n / (math.factorial(n) * (2 * n + 1)) * 2 / math.sqrt(math.pi) for n in range(19)]
    )

    def scaled_erfc(xs: np.ndarray) -> np.ndarray:
        return np.array([math.erfc(v) * math.exp(v * v) for v in xs])

    pieces = []
    for lo, hi, deg in ((1.0, 3.0, 22), (3.0, 6.0, 18)):
        cheb = np.polynomial.Chebyshev.interpolate(scaled_erfc, deg, domain=[lo, hi])
        poly = cheb.convert(kind=np.polynomial.Polynomial, domain=[lo, hi], window=[-1, 1])
        pieces.append((lo, hi, poly.coef))
    return series, pieces


def _horner(coef: np.ndarray, u: np.ndarray) -> np.ndarray:
    result = np.full_like(u, coef[-1])
    for c in coef[-2::-1]:
        result *= u
        result += c
    return result


def erf(x: np.ndarray) -> np.ndarray:
    """The error function of each element, in ``x``'s dtype (computed in float64).

    Example:
        >>> float(erf(np.array(0.5)))  # doctest: +ELLIPSIS
        0.5204998778...
    """
    x = np.asarray(x)
    wide = np.asarray(x, dtype=np.float64)
    series, pieces = _erf_tables()
    out = wide.copy()  # NaN stays NaN: it falls in no interval below
    mag = np.abs(wide)
    with np.errstate(all="ignore"):
        small = mag <= 1.0
        if small.any():
            v = wide[small]
            out[small] = v * _horner(series, v * v)
        for lo, hi, coef in pieces:
            inside = (mag > lo) & (mag <= hi)
            if inside.any():
                m = mag[inside]
                u = (m - (lo + hi) / 2) / ((hi - lo) / 2)
                out[inside] = np.copysign(1.0 - np.exp(-m * m) * _horner(coef, u), wide[inside])
        big = mag > pieces[-1][1]
        out[big] = np.copysign(1.0, wide[big])
    return out.astype(x.dtype) if x.dtype != np.float64 else out


def _sigmoid(x: np.ndarray) -> np.ndarray:
    # exp of a non-positive argument only: no overflow for large |x|.
    z = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + z), z / (1 + z))


def _softplus(x: np.ndarray) -> np.ndarray:
    # log(1 + exp(x)) = max(x, 0) + log1p(exp(-|x|)), stable for large |x|.
    return np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x)))


def _gelu(x: np.ndarray, approximate: str) -> np.ndarray:
    one = x.dtype.type(1)
    if approximate == "tanh":
        # 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x**3))), with x**3 as x*x*x (NumPy's
        # power is ~20x slower) and the temporaries reused in place.
        inner = np.multiply(x, x, out=np.empty_like(x))  # an array even for 0-d x
        inner *= x
        inner *= x.dtype.type(0.044715)
        inner += x
        inner *= x.dtype.type(math.sqrt(2 / math.pi))
        np.tanh(inner, out=inner)
    else:
        inner = np.array(erf(x / x.dtype.type(math.sqrt(2))), dtype=x.dtype)
    inner += one
    inner *= x
    inner *= x.dtype.type(0.5)
    return inner


def _int_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Integer division truncating toward zero (C semantics); ``x / 0`` gives 0 as NumPy."""
    q = np.floor_divide(a, b)
    if a.dtype.kind == "i":
        r = np.remainder(a, b)
        q = q + ((r != 0) & ((a < 0) != (b < 0))).astype(q.dtype)
    return q


def _div_kernel(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return _int_div(a, b) if a.dtype.kind in "iu" else np.divide(a, b)


def _mod_kernel(a: np.ndarray, b: np.ndarray, *, fmod: int) -> np.ndarray:
    return np.fmod(a, b) if fmod else np.remainder(a, b)


def _pow_kernel(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    out = x.dtype
    if out.kind == "c":  # NumPy's complex loop, in the base's dtype
        return np.power(x, y.astype(out, copy=False))
    if dtypes.is_floating(out):
        if y.dtype == out:
            return np.power(x, y)
        wide = np.result_type(np.float32 if out in _HALVES else out, y.dtype)
        if not np.issubdtype(wide, np.floating):
            wide = np.float64
        return np.power(x.astype(wide), y.astype(wide)).astype(out)
    if y.dtype.kind in "iub":
        # Integer power, wrapping like repeated multiplication; a negative exponent raises
        # NumPy's ValueError (issue 10), checked here since the exponent is known at run time
        # (not for an empty result, whose loop NumPy never runs: fuzz 39:1503).
        empty = 0 in np.broadcast_shapes(x.shape, y.shape)
        if y.dtype.kind == "i" and not empty and y.min() < 0:
            raise OpArgumentError(
                "Integers to negative integer powers are not allowed (Pow: an integer base "
                f"{out.name} to the negative exponent {int(y.min())}); use a float base, e.g. "
                "x.astype(float) ** y"
            )
        return np.power(x, y.astype(out, copy=False))
    # Integer base, float exponent: compute in float64 and truncate toward zero like Cast.
    return np.trunc(np.power(x.astype(np.float64), y.astype(np.float64))).astype(out)


def _is_inf(x: np.ndarray, *, detect_negative: int, detect_positive: int) -> np.ndarray:
    positive = np.isposinf(x) if detect_positive else np.zeros(x.shape, dtype=bool)
    negative = np.isneginf(x) if detect_negative else np.zeros(x.shape, dtype=bool)
    return positive | negative


# -- faster calls for the NumPy engine (OpDef.fast_kernel) ---------------------------------
# The registry kernels also cover integer semantics, bfloat16 and 0-d results; on the float
# dtypes NumPy computes natively, NumPy's own function does the same work without them.

_NATIVE_FLOATS: frozenset[np.dtype] = frozenset({dtypes.float32, dtypes.float64})
_NATIVE_FLOATS_HALF: frozenset[np.dtype] = _NATIVE_FLOATS | {dtypes.float16}


def _two_input_ufunc(
    ufunc: np.ufunc, allowed: frozenset[np.dtype] | None = None
) -> NodeRule[KernelCall | None]:
    """A fast kernel: ``ufunc`` itself on two inputs of the output's dtype (one of ``allowed``,
    when given), which the plan may also let write into a dead input buffer."""
    call = KernelCall("{b0}({0}, {1})", (ufunc,), ufunc=ufunc)

    def fast(
        inputs: Sequence[Typed | None], outputs: Sequence[Typed], attrs: Mapping[str, Any]
    ) -> KernelCall | None:
        if len(inputs) != 2 or not same_dtype(inputs, outputs):
            return None
        if allowed is not None and outputs[0].dtype not in allowed:
            return None
        return call

    return fast


def _relu_fast(
    inputs: Sequence[Typed | None], outputs: Sequence[Typed], attrs: Mapping[str, Any]
) -> KernelCall | None:
    """``np.maximum(x, 0)`` with the zero bound once, in the dtype (no lambda per run)."""
    dtype = outputs[0].dtype
    if dtype not in _NATIVE_FLOATS_HALF:
        return None
    return KernelCall("{b0}({0}, {b1})", (np.maximum, dtype.type(0)))


_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    """tanh-GELU in one buffer: x**3 as two multiplies (np.power is ~10x slower), in place."""
    y = np.multiply(x, x)
    y *= x
    y *= 0.044715
    y += x
    y *= _SQRT_2_OVER_PI
    np.tanh(y, out=y)
    y += 1.0
    y *= x
    y *= 0.5
    return y


def _gelu_fast(
    inputs: Sequence[Typed | None], outputs: Sequence[Typed], attrs: Mapping[str, Any]
) -> KernelCall | None:
    """:func:`_gelu_tanh` for a tanh-GELU of float32/float64 with at least one axis (it skips
    the registry kernel's dtype round trip and 0-d handling)."""
    out = outputs[0]
    if attrs["approximate"] != "tanh" or out.dtype not in _NATIVE_FLOATS or not out.shape:
        return None
    return KernelCall("{b0}({0})", (_gelu_tanh,))


# onnxruntime 1.x computes these in float32 even for float64 inputs (found by
# tests/exec/test_engines.py against the reference executor).
_ORT_FLOAT64 = EngineLimit("on float64 (computed in lower precision)", first_input_dtype("float64"))
# onnxruntime fails on an integer division or remainder by zero, where NumPy gives 0 with a
# warning (issue 10); the jax lowerings guard the divisor instead (kiln.exec.jax_engine).
_ORT_INT_DIVISION = {
    "onnxruntime": EngineLimit(
        "on integers (onnxruntime fails on a zero divisor; NumPy gives 0)", integer_input
    )
}

# onnxruntime's Max/Min/Clip pick the sign of a zero result differently from NumPy (which
# returns the second operand of equal values; float16 the first) when an input broadcasts,
# and its Where turns a -0.0 taken from X into +0.0 (issue 10, tests/exec/test_engine_exactness.py).
_ORT_ZERO_SIGN_EXTREMA = EngineLimit(
    "on floating-point input (onnxruntime's sign of a zero result differs from NumPy's)",
    float_input,
)


def _float_output(
    inputs: Sequence[Typed | None], outputs: Sequence[Typed], attrs: Mapping[str, Any]
) -> bool:
    return bool(outputs) and (outputs[0].dtype.kind == "f" or outputs[0].dtype.name == "bfloat16")


# The engines whose float64 results differ from the NumPy plan's, by operator: the most ulps
# seen over 20,000 values each (tools/engine_ulps.py; issue 10). Those nodes stay off that
# engine on float64 (OpDef.engine_limits, via float64_differs). XLA's float64 Sin/Cos/Log
# agree with NumPy bit for bit; onnxruntime's float64 Sin/Cos lose digits near their zeros.
FLOAT64_ULPS: dict[str, dict[str, int]] = {
    "Acos": {"jax": 1},
    "Acosh": {"jax": 3},
    "Asin": {"jax": 1},
    "Asinh": {"jax": 2},
    "Atan": {"jax": 1},
    "Atanh": {"jax": 128},
    "Cos": {"onnxruntime": 2260},
    "Cosh": {"jax": 2},
    "Elu": {"jax": 3},
    "Erf": {"jax": 15},
    "Exp": {"jax": 2, "onnxruntime": 2},
    "Exp2": {"jax": 1, "onnxruntime": 1},  # (their expansion, a Pow, as Pow)
    "Gelu": {"jax": 4033},
    "HardSigmoid": {"jax": 65536},
    "Log": {"jax": 1, "onnxruntime": 1},
    "Log10": {"jax": 1, "onnxruntime": 1},  # (their expansion: a Log and a division)
    "Log2": {"jax": 1, "onnxruntime": 1},
    "Mish": {"jax": 5},
    "Pow": {"jax": 1, "onnxruntime": 1},
    "Selu": {"jax": 256},
    "Shrink": {"onnxruntime": 268428438},
    "Sigmoid": {"jax": 3, "onnxruntime": 46},
    "Sin": {"onnxruntime": 36145},
    "Sinh": {"jax": 5},
    "Softplus": {"jax": 3},
    "Tan": {"jax": 1},
    "Tanh": {"jax": 4, "onnxruntime": 5},
}


# -- factories -----------------------------------------------------------------------------


def unary(
    name: str,
    doc: str,
    kernel: Callable[..., np.ndarray],
    allowed: Iterable[np.dtype] = NUMERIC,
    *,
    bit_exact: bool | NodeRule[bool] = False,
    attrs: Mapping[str, Attr] | None = None,
    out_dtype: np.dtype | None = None,
    value_fn: ValueFn | None = None,
    check: Callable[[Mapping[str, Any]], None] | None = None,
    io_names: tuple[str, str] = ("X", "Y"),
    sample_dtypes: Iterable[np.dtype] = _F32_F64,
    sample_range: tuple[float, float] = (-3.0, 3.0),
    sample_attrs: Sequence[Mapping[str, Any]] = ({},),
    reference: Callable[..., Any] | None = None,
    cost: float = 1,
    fast_kernel: NodeRule[KernelCall | None] | None = None,
    engine_limits: Mapping[str, EngineLimit] | None = None,
    domain: str = "",
    expand: ExpandFn | None = None,
    batch: batching.BatchRule | None = None,
) -> OpDef:
    """Register a one-input elementwise operator whose output has the input's shape.

    ``out_dtype`` fixes the output dtype (IsNaN: bool); ``value_fn`` computes one output
    element from one input element for known integer contents (Neg: ``lambda a: -a``);
    ``check`` validates the bound attributes. ``cost``, ``fast_kernel``, ``engine_limits``,
    ``domain`` and ``expand`` (a kiln-domain operator's ONNX form) are the record's fields of
    those names (see :class:`~kiln.ops.registry.OpDef`).
    """
    allowed = frozenset(allowed)
    in_name = io_names[0]

    def infer(inputs: Sequence[TensorType | None], attrs: Mapping[str, Any]) -> list[TensorType]:
        x = require(name, in_name, inputs[0])
        require_dtype(name, in_name, x, allowed)
        if check is not None:
            check(attrs)
        dtype = out_dtype or x.dtype
        value = None
        if value_fn is not None:
            value = _propagate(value_fn, dtype, x.shape, [x], {})
        return [TensorType(dtype, x.shape, value)]

    return register(
        OpDef(
            name=name,
            bit_exact=bit_exact,
            doc=doc,
            inputs=(Input(in_name),),
            outputs=(io_names[1],),
            attrs=attrs or {},
            infer=infer,
            kernel=kernel,
            traits=frozenset({ELEMENTWISE, PURE}),
            samples=_unary_samples(
                tuple(sample_dtypes), *sample_range, reference, tuple(sample_attrs)
            ),
            cost=cost,
            fast_kernel=fast_kernel,
            engine_limits=float64_differs(engine_limits, **FLOAT64_ULPS.get(name, {})),
            domain=domain,
            expand=expand,
            batch=batch,
        )
    )


def binary(
    name: str,
    doc: str,
    kernel: Callable[..., np.ndarray],
    allowed: Iterable[np.dtype] = NUMERIC,
    *,
    bit_exact: bool | NodeRule[bool] = False,
    attrs: Mapping[str, Attr] | None = None,
    out_dtype: np.dtype | None = None,
    value_fn: ValueFn | None = None,
    check: Callable[[TensorType, Mapping[str, Any]], None] | None = None,
    commutative: bool = False,
    sample_dtypes: Iterable[np.dtype] = (dtypes.float32, dtypes.int32),
    sample_range: tuple[float, float] = (-3.0, 3.0),
    rhs_low: float | None = None,
    rhs_nonzero: bool = False,
    sample_attrs: Sequence[Mapping[str, Any]] = ({},),
    reference: Callable[..., Any] | None = None,
    extra_samples: Callable[[], list[Sample]] | None = None,
    fast_kernel: NodeRule[KernelCall | None] | None = None,
    engine_limits: Mapping[str, EngineLimit] | None = None,
    cost: float = 1,
    domain: str = "",
    expand: ExpandFn | None = None,
) -> OpDef:
    """Register a two-input elementwise operator with NumPy broadcasting and one shared dtype.

    ``value_fn(a, b, **attrs)`` computes one output element for known integer contents;
    ``check(a_type, attrs)`` validates what the dtype rule alone cannot (Mod's ``fmod``);
    ``fast_kernel``, ``cost``, ``domain`` and ``expand`` are the record's fields of those names
    (see :class:`~kiln.ops.registry.OpDef`).
    """
    allowed = frozenset(allowed)

    def infer(inputs: Sequence[TensorType | None], attrs: Mapping[str, Any]) -> list[TensorType]:
        a = require(name, "A", inputs[0])
        b = require(name, "B", inputs[1])
        require_dtype(name, "A", a, allowed)
        require_same_dtype(name, (a, b), ("A", "B"))
        if check is not None:
            check(a, attrs)
        dtype = out_dtype or a.dtype
        shape = broadcast(name, a.shape, b.shape)
        value = None
        if value_fn is not None:
            value = _propagate(value_fn, dtype, shape, [a, b], attrs)
        return [TensorType(dtype, shape, value)]

    traits = {ELEMENTWISE, PURE} | ({COMMUTATIVE} if commutative else set())
    generic = _binary_samples(
        tuple(sample_dtypes), *sample_range, reference, rhs_low, rhs_nonzero, tuple(sample_attrs)
    )

    def samples() -> list[Sample]:
        return generic() + (extra_samples() if extra_samples is not None else [])

    return register(
        OpDef(
            name=name,
            bit_exact=bit_exact,
            doc=doc,
            inputs=(Input("A"), Input("B")),
            outputs=("C",),
            attrs=attrs or {},
            infer=infer,
            kernel=kernel,
            traits=frozenset(traits),
            samples=samples,
            cost=cost,
            fast_kernel=fast_kernel,
            engine_limits=engine_limits or {},
            domain=domain,
            expand=expand,
        )
    )


def variadic(
    name: str,
    doc: str,
    kernel: Callable[[np.ndarray, np.ndarray], np.ndarray],
    allowed: Iterable[np.dtype] = NUMERIC,
    *,
    bit_exact: bool | NodeRule[bool] = False,
    finish: Callable[[np.ndarray, int], np.ndarray] | None = None,
    value_fn: Callable[[Dim, Dim], Dim] | None = None,
    output: str = "out",
    sample_dtypes: Iterable[np.dtype] = (dtypes.float32, dtypes.int32),
    reference: Callable[..., Any] | None = None,
    fast_kernel: NodeRule[KernelCall | None] | None = None,
    engine_limits: Mapping[str, EngineLimit] | None = None,
) -> OpDef:
    """Register an operator over one or more inputs, all broadcast together (Max, Sum, ...).

    ``kernel`` combines two arrays and is folded over the inputs; ``finish(result, count)``
    post-processes the fold (Mean divides by the count). ``value_fn`` folds known integer
    contents the same way. ``fast_kernel`` is the record's field (see
    :class:`~kiln.ops.registry.OpDef`).
    """
    allowed = frozenset(allowed)

    def infer(inputs: Sequence[TensorType | None], attrs: Mapping[str, Any]) -> list[TensorType]:
        if not inputs:
            raise OpArgumentError(f"{name} takes one or more inputs 'data_0...'; got none")
        types = [require(name, f"data_{i}", t) for i, t in enumerate(inputs)]
        require_dtype(name, "data_0", types[0], allowed)
        require_same_dtype(name, types, [f"data_{i}" for i in range(len(types))])
        shape = broadcast(name, *(t.shape for t in types))
        value = None
        if value_fn is not None:
            fold = value_fn

            def combine(*elements: Dim) -> Dim:
                return functools.reduce(fold, elements)

            value = _propagate(combine, types[0].dtype, shape, types, {})
        return [TensorType(types[0].dtype, shape, value)]

    def run(*arrays: np.ndarray) -> np.ndarray:
        result = functools.reduce(kernel, arrays)
        shape = np.broadcast_shapes(*(a.shape for a in arrays))
        if result.shape != shape:  # (one input: a read-only view of it, copied by the caller)
            result = np.broadcast_to(result, shape)
        return finish(result, len(arrays)) if finish is not None else result

    def make() -> list[Sample]:
        out = []
        for dt in sample_dtypes:
            for shapes in _VARIADIC_SHAPES:
                arrays = tuple(sample_array(s, dt, -3.0, 3.0) for s in shapes)
                label = "".join(str(s) for s in shapes)
                out.append(Sample(arrays, {}, reference, name=f"{dt.name}{label}"))
        return out

    return register(
        OpDef(
            name=name,
            bit_exact=bit_exact,
            doc=doc,
            inputs=(Input("data_0", variadic=True),),
            outputs=(output,),
            infer=infer,
            kernel=run,
            traits=frozenset({ELEMENTWISE, PURE, COMMUTATIVE}),
            samples=make,
            fast_kernel=fast_kernel,
            engine_limits=engine_limits or {},
        )
    )


# -- unary operators -----------------------------------------------------------------------

unary(
    "Identity",
    "The input, unchanged.",
    lambda x: x,
    ALL,
    value_fn=lambda a: a,
    io_names=("input", "output"),
    sample_dtypes=(dtypes.float32, dtypes.int64, dtypes.bool_),
    reference=lambda x: x.copy(),
    bit_exact=True,
)


def _contiguous(x: np.ndarray, *, batch_axes: int = 1, order: str = "strides") -> np.ndarray:
    """``x`` laid out one batch element (an index into its first ``batch_axes`` axes) after
    another, each contiguous with its axes in the order of ``x``'s strides (largest first;
    ties keep their order): ``x`` itself when it already is, else a copy seen through a
    transpose back. ``order="C"``: a new C-ordered copy, always (``ndarray.copy()``)."""
    if order == "C":
        return np.array(x, order="C", copy=True)
    if x.flags.c_contiguous:  # (its axes are in the order of its strides: the common case)
        return x
    lead = min(batch_axes, x.ndim)
    if x.ndim - lead <= 0:
        return x
    rest = sorted(range(lead, x.ndim), key=lambda a: -abs(x.strides[a]))
    order = (*range(lead), *rest)
    moved = x.transpose(order)
    if moved.flags.c_contiguous:
        return x
    return np.ascontiguousarray(moved).transpose(np.argsort(order))


def _check_order(attrs: Mapping[str, Any]) -> None:
    if attrs["order"] not in ("strides", "C"):
        raise OpArgumentError(f"Contiguous: order must be 'strides' or 'C', got {attrs['order']!r}")


def _identity_expand(
    builder: NodeBuilder, inputs: Sequence[Any], attrs: Mapping[str, Any], outputs: Sequence[Any]
) -> None:
    builder.add("Identity", [inputs[0]], outputs=[outputs[0]])


unary(
    "Contiguous",
    "The input, laid out one batch element (an index into its first ``batch_axes`` axes) "
    "after another, each contiguous with its axes in the order of the input's strides (no "
    "copy when it already is). Values "
    "are unchanged; the order a later sum adds them in is NumPy's for such arrays: the loop "
    "vectorizer puts one before a batched float reduction, each of whose iterations reduced "
    "a fresh contiguous array laid out as its inputs were. With ``batch_axes=0`` the whole "
    "array is one element: dense, with positive strides, which NumPy's SIMD loops take (the "
    "vectorizer puts one before a batched operator that rounds otherwise on strided "
    "operands: kiln.ops.layout). With ``order='C'``: a new C-ordered copy whatever the "
    "input's layout, as ``ndarray.copy()`` makes (a later sum of a transpose's copy adds in "
    "C order, not in the transpose's). ONNX form: Identity.",
    _contiguous,
    ALL,
    attrs={
        "batch_axes": Attr("int", 1),
        "order": Attr("str", "strides", "'strides' (the input's axis order) or 'C'"),
    },
    check=_check_order,
    io_names=("input", "output"),
    sample_dtypes=(dtypes.float32, dtypes.int64, dtypes.bool_),
    sample_attrs=({}, {"order": "C"}),
    reference=lambda x, **attrs: x.copy(),
    bit_exact=True,
    domain="kiln",
    expand=_identity_expand,
    batch=batching.more_batch_axes,
)
unary(
    "Neg",
    "-x (integers wrap around).",
    np.negative,
    SIGNED | COMPLEX,
    value_fn=lambda a: -a,
    sample_dtypes=(dtypes.float32, dtypes.float16, dtypes.int32, dtypes.int8),
    reference=_pointwise(lambda v: -v),
    bit_exact=True,
)
unary(
    "Abs",
    "|x| (the most negative integer stays itself, as in two's complement).",
    np.abs,
    NUMERIC,
    sample_dtypes=(dtypes.float32, dtypes.bfloat16, dtypes.int32, dtypes.uint8),
    reference=_pointwise(abs),
    bit_exact=True,
)
unary(
    "Sign",
    "-1, 0 or 1 by the sign of x (NaN stays NaN).",
    np.sign,
    NUMERIC,
    io_names=("input", "output"),
    sample_dtypes=(dtypes.float32, dtypes.float64, dtypes.int32, dtypes.uint8),
    reference=_pointwise(lambda v: (v > 0) - (v < 0)),
    bit_exact=True,
)

# Floating-point math: (name, doc, kernel, domain, reference).
_FLOAT_MATH: tuple[tuple[str, str, Callable[..., Any], tuple[float, float], Callable], ...] = (
    ("Log", "Natural logarithm.", np.log, (0.1, 5.0), math.log),
    ("Sqrt", "Square root.", np.sqrt, (0.0, 5.0), math.sqrt),
    ("Reciprocal", "1 / x.", np.reciprocal, (0.5, 4.0), lambda v: 1.0 / v),
    ("Floor", "Largest integer <= x.", np.floor, (-3.0, 3.0), math.floor),
    ("Ceil", "Smallest integer >= x.", np.ceil, (-3.0, 3.0), math.ceil),
    # Python's round() rounds half to even, as ONNX Round.
    ("Round", "Nearest integer, halves to even.", np.round, (-4.0, 4.0), round),
    ("Sin", "Sine (radians).", np.sin, (-4.0, 4.0), math.sin),
    ("Cos", "Cosine (radians).", np.cos, (-4.0, 4.0), math.cos),
    ("Tan", "Tangent (radians).", np.tan, (-1.2, 1.2), math.tan),
    ("Asin", "Inverse sine.", np.arcsin, (-0.99, 0.99), math.asin),
    ("Acos", "Inverse cosine.", np.arccos, (-0.99, 0.99), math.acos),
    ("Atan", "Inverse tangent.", np.arctan, (-4.0, 4.0), math.atan),
    ("Sinh", "Hyperbolic sine.", np.sinh, (-3.0, 3.0), math.sinh),
    ("Cosh", "Hyperbolic cosine.", np.cosh, (-3.0, 3.0), math.cosh),
    ("Asinh", "Inverse hyperbolic sine.", np.arcsinh, (-4.0, 4.0), math.asinh),
    ("Acosh", "Inverse hyperbolic cosine (x >= 1).", np.arccosh, (1.0, 5.0), math.acosh),
    ("Atanh", "Inverse hyperbolic tangent.", np.arctanh, (-0.95, 0.95), math.atanh),
    ("Tanh", "Hyperbolic tangent.", np.tanh, (-4.0, 4.0), math.tanh),
)
# The ones NumPy also computes on complex numbers (its own loops: the kernels are NumPy's).
_COMPLEX_MATH = {"Log", "Sqrt", "Reciprocal", "Sin", "Cos", "Tan", "Tanh"}
_COMPLEX_MATH |= {"Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh"}
# A few representative ops are also sampled in half precision.
_HALF_SAMPLED = {"Log", "Sqrt", "Floor", "Round", "Sin", "Tanh"}

unary(
    "Exp",
    "e raised to each element.",
    np.exp,
    FLOATS | COMPLEX,
    sample_dtypes=(*_F32_F64, *_F16),
    reference=_pointwise(math.exp),
    cost=4,
)
# IEEE 754 rounds these correctly (one rounding of the exact result), so every engine agrees
# with NumPy bit for bit (OpDef.bit_exact); the others are each library's approximation.
_CORRECTLY_ROUNDED = {"Sqrt", "Reciprocal", "Floor", "Ceil", "Round"}
# NumPy's time relative to an add, where it is more than one (OpDef.cost).
_FLOAT_MATH_COST = {"Log": 4, "Sqrt": 2, "Tanh": 6}
for _name, _doc, _kernel, _domain, _ref in _FLOAT_MATH:
    unary(
        _name,
        _doc,
        _kernel,
        FLOATS | COMPLEX if _name in _COMPLEX_MATH else FLOATS,
        sample_dtypes=_F32_F64 + (_F16 if _name in _HALF_SAMPLED else ()),
        sample_range=_domain,
        reference=_pointwise(lambda v, f=_ref: float(f(v))),
        cost=_FLOAT_MATH_COST.get(_name, 1),
        bit_exact=_name in _CORRECTLY_ROUNDED,
    )

# -- log1p and expm1: NumPy's own ufuncs; ONNX has neither --------------------------------------


def _widened(builder: NodeBuilder, x: Any) -> tuple[Any, np.dtype]:
    """``x`` in the dtype the ONNX forms below compute in (half precision in float32, float32
    in float64 where asked), and its own dtype to cast back to."""
    dtype = x.dtype
    if dtype in (dtypes.float16, dtypes.bfloat16):
        (x,) = builder.add("Cast", [x], {"to": onnx_dtype_code(dtypes.float32)})
    return x, dtype


def _narrowed(builder: NodeBuilder, x: Any, dtype: np.dtype, out: Any) -> None:
    if x.dtype == dtype:
        builder.add("Identity", [x], outputs=[out])
    else:
        builder.add("Cast", [x], {"to": onnx_dtype_code(dtype)}, outputs=[out])


def _constant(builder: NodeBuilder, value: float, like: Any) -> Any:
    (c,) = builder.add("Constant", [], {"value": np.asarray(value, like.dtype)})
    return c


def _log1p_expand(
    builder: NodeBuilder, inputs: Sequence[Any], attrs: Mapping[str, Any], outputs: Sequence[Any]
) -> None:
    """Goldberg's form: for ``u = 1 + x`` (rounded), ``log(u) * x / (u - 1)``, exact to
    rounding; ``log(u)`` where ``u`` is infinite; ``x`` where ``u == 1``."""
    x, dtype = _widened(builder, inputs[0])
    one = _constant(builder, 1.0, x)
    (u,) = builder.add("Add", [one, x])
    (log_u,) = builder.add("Log", [u])
    (u_1,) = builder.add("Sub", [u, one])
    (ratio,) = builder.add("Div", [x, u_1])
    (corrected,) = builder.add("Mul", [log_u, ratio])
    (inf,) = builder.add("IsInf", [u])
    (result,) = builder.add("Where", [inf, log_u, corrected])
    (unit,) = builder.add("Equal", [u, one])
    (result,) = builder.add("Where", [unit, x, result])
    _narrowed(builder, result, dtype, outputs[0])


def _expm1_expand(
    builder: NodeBuilder, inputs: Sequence[Any], attrs: Mapping[str, Any], outputs: Sequence[Any]
) -> None:
    """``tanh(x / 2) * (exp(x) + 1)`` for ``|x| < 1`` (``exp(x) - 1`` without its
    cancellation), ``exp(x) - 1`` elsewhere; float32 computes in float64 and rounds once."""
    x, dtype = _widened(builder, inputs[0])
    if x.dtype == dtypes.float32:
        (x,) = builder.add("Cast", [x], {"to": onnx_dtype_code(dtypes.float64)})
    one = _constant(builder, 1.0, x)
    (exp,) = builder.add("Exp", [x])
    (small,) = builder.add("Less", [builder.add("Abs", [x])[0], one])
    (half,) = builder.add("Mul", [x, _constant(builder, 0.5, x)])
    (tanh,) = builder.add("Tanh", [half])
    (near_zero,) = builder.add("Mul", [tanh, builder.add("Add", [exp, one])[0]])
    (far,) = builder.add("Sub", [exp, one])
    (result,) = builder.add("Where", [small, near_zero, far])
    _narrowed(builder, result, dtype, outputs[0])


def _log_base_expand(
    base: float,
) -> Callable[[NodeBuilder, Sequence[Any], Mapping[str, Any], Sequence[Any]], None]:
    """The ONNX form of a base-``base`` logarithm: ``log(x) / log(base)`` (half precision
    computed in float32 and rounded once, as NumPy's loops do)."""

    def expand(
        builder: NodeBuilder,
        inputs: Sequence[Any],
        attrs: Mapping[str, Any],
        outputs: Sequence[Any],
    ) -> None:
        x, dtype = _widened(builder, inputs[0])
        (log,) = builder.add("Log", [x])
        (result,) = builder.add("Div", [log, _constant(builder, math.log(base), x)])
        _narrowed(builder, result, dtype, outputs[0])

    return expand


def _exp2_expand(
    builder: NodeBuilder, inputs: Sequence[Any], attrs: Mapping[str, Any], outputs: Sequence[Any]
) -> None:
    """The ONNX form of ``2 ** x``: a ``Pow`` of a constant 2."""
    x, dtype = _widened(builder, inputs[0])
    (result,) = builder.add("Pow", [_constant(builder, 2.0, x), x])
    _narrowed(builder, result, dtype, outputs[0])


# NumPy's own log2, log10 and exp2 loops: ONNX has no such operator, and log(x) / log(2) or a
# power of 2 round otherwise (an ulp, in about one float32 value in ten).
for _name, _base, _ufunc, _exact in (
    ("Log2", 2.0, np.log2, math.log2),
    ("Log10", 10.0, np.log10, math.log10),
):
    unary(
        _name,
        f"The base-{_base:g} logarithm (NumPy's {_ufunc.__name__}; ONNX form: log(x) / "
        f"log({_base:g})).",
        _ufunc,
        FLOATS - {dtypes.bfloat16},
        sample_dtypes=(*_F32_F64, dtypes.float16),
        sample_range=(0.1, 8.0),
        reference=_pointwise(_exact),
        cost=2,
        domain="kiln",
        expand=_log_base_expand(_base),
    )
unary(
    "Exp2",
    "2 ** x (NumPy's exp2; ONNX form: Pow(2, x)).",
    np.exp2,
    FLOATS - {dtypes.bfloat16},
    sample_dtypes=(*_F32_F64, dtypes.float16),
    reference=_pointwise(lambda v: 2.0**v),
    cost=2,
    domain="kiln",
    expand=_exp2_expand,
)
unary(
    "Log1p",
    "log(1 + x), accurate near 0 (NumPy's log1p; ONNX form: Goldberg's correction).",
    np.log1p,
    FLOATS,
    sample_dtypes=(*_F32_F64, *_F16),
    sample_range=(-0.9, 3.0),
    reference=_pointwise(math.log1p),
    cost=4,
    domain="kiln",
    expand=_log1p_expand,
)
unary(
    "Expm1",
    "exp(x) - 1, accurate near 0 (NumPy's expm1; ONNX form: a tanh identity near 0).",
    np.expm1,
    FLOATS,
    sample_dtypes=(*_F32_F64, *_F16),
    reference=_pointwise(math.expm1),
    cost=4,
    domain="kiln",
    expand=_expm1_expand,
)

unary(
    "Sigmoid",
    "1 / (1 + exp(-x)).",
    _sigmoid,
    FLOATS,
    sample_dtypes=(*_F32_F64, *_F16),
    sample_range=(-6.0, 6.0),
    reference=_pointwise(lambda v: 1.0 / (1.0 + math.exp(-v))),
    cost=6,
)
unary(
    "Erf",
    "The Gauss error function.",
    erf,
    FLOATS,
    io_names=("input", "output"),
    sample_dtypes=(*_F32_F64, dtypes.float16),
    sample_range=(-4.0, 4.0),
    reference=_pointwise(math.erf),
    cost=8,
)
unary(
    "Relu",
    "max(x, 0).",
    lambda x: np.maximum(x, x.dtype.type(0)),
    NUMERIC - _UNSIGNED,
    sample_dtypes=(*_F32_F64, dtypes.bfloat16, dtypes.int32),
    reference=lambda x: np.where(x > 0, x, np.zeros_like(x)),
    fast_kernel=_relu_fast,
    engine_limits={
        "onnxruntime": EngineLimit(
            "on float32/float64 (onnxruntime keeps relu(-0.0) = -0.0; NumPy's maximum gives +0.0)",
            first_input_dtype("float32", "float64"),
        )
    },
    bit_exact=True,
)
unary(
    "LeakyRelu",
    "x for x >= 0, alpha * x below.",
    lambda x, *, alpha: np.where(x >= 0, x, alpha * x).astype(x.dtype),
    FLOATS,
    attrs={"alpha": Attr("float", 0.01)},
    sample_attrs=({}, {"alpha": 0.2}),
    reference=_pointwise(lambda v, alpha: v if v >= 0 else alpha * v),
    bit_exact=True,
)
unary(
    "Elu",
    "x for x >= 0, alpha * (exp(x) - 1) below.",
    lambda x, *, alpha: np.where(x >= 0, x, alpha * np.expm1(np.minimum(x, 0))).astype(x.dtype),
    FLOATS,
    attrs={"alpha": Attr("float", 1.0)},
    sample_attrs=({}, {"alpha": 0.5}),
    reference=_pointwise(lambda v, alpha: v if v >= 0 else alpha * (math.exp(v) - 1.0)),
)
_SELU_ALPHA = 1.67326319217681884765625
_SELU_GAMMA = 1.05070102214813232421875
unary(
    "Selu",
    "gamma * x for x > 0, gamma * (alpha * exp(x) - alpha) otherwise.",
    _in_float(
        lambda x, *, alpha, gamma: np.where(
            x > 0, gamma * x, gamma * (alpha * np.exp(np.minimum(x, 0)) - alpha)
        )
    ),
    FLOATS,
    attrs={"alpha": Attr("float", _SELU_ALPHA), "gamma": Attr("float", _SELU_GAMMA)},
    sample_attrs=({}, {"alpha": 1.5, "gamma": 2.0}),
    reference=_pointwise(
        lambda v, alpha, gamma: gamma * v if v > 0 else gamma * (alpha * math.exp(v) - alpha)
    ),
)
unary(
    "Softplus",
    "log(exp(x) + 1), computed without overflow.",
    _in_float(_softplus),
    FLOATS,
    sample_dtypes=(*_F32_F64, dtypes.float16),
    sample_range=(-5.0, 5.0),
    reference=_pointwise(lambda v: math.log(math.exp(v) + 1.0)),
    cost=8,
)
unary(
    "Softsign",
    "x / (1 + |x|).",
    lambda x: x / (1 + np.abs(x)),
    FLOATS,
    reference=_pointwise(lambda v: v / (1.0 + abs(v))),
)
unary(
    "HardSigmoid",
    "max(0, min(1, alpha * x + beta)).",
    lambda x, *, alpha, beta: np.clip(alpha * x + beta, 0, 1).astype(x.dtype),
    FLOATS,
    attrs={"alpha": Attr("float", 0.2), "beta": Attr("float", 0.5)},
    sample_attrs=({}, {"alpha": 0.5, "beta": 0.25}),
    sample_range=(-5.0, 5.0),
    reference=_pointwise(lambda v, alpha, beta: max(0.0, min(1.0, alpha * v + beta))),
)
unary(
    "HardSwish",
    "x * max(0, min(1, x / 6 + 1 / 2)).",
    _in_float(lambda x: x * np.clip(x / 6 + 0.5, 0, 1)),
    FLOATS,
    sample_dtypes=(*_F32_F64, dtypes.float16),
    sample_range=(-5.0, 5.0),
    reference=_pointwise(lambda v: v * max(0.0, min(1.0, v / 6.0 + 0.5))),
)


def _check_gelu(attrs: Mapping[str, Any]) -> None:
    if attrs["approximate"] not in ("none", "tanh"):
        raise OpArgumentError(
            f"Gelu: attribute 'approximate' must be 'none' or 'tanh', got {attrs['approximate']!r}"
        )


def _gelu_reference(v: float, approximate: str) -> float:
    if approximate == "tanh":
        return 0.5 * v * (1.0 + math.tanh(math.sqrt(2.0 / math.pi) * (v + 0.044715 * v**3)))
    return 0.5 * v * (1.0 + math.erf(v / math.sqrt(2.0)))


unary(
    "Gelu",
    "x * Phi(x), Phi the standard normal CDF; approximate='tanh' uses the tanh formula.",
    _in_float(_gelu),
    FLOATS,
    attrs={"approximate": Attr("str", "none")},
    check=_check_gelu,
    sample_dtypes=(*_F32_F64, *_F16),
    sample_range=(-4.0, 4.0),
    sample_attrs=({}, {"approximate": "tanh"}),
    reference=_pointwise(_gelu_reference),
    cost=12,
    fast_kernel=_gelu_fast,
    engine_limits={"onnxruntime": _ORT_FLOAT64},
)
unary(
    "Mish",
    "x * tanh(softplus(x)).",
    _in_float(lambda x: x * np.tanh(_softplus(x))),
    FLOATS,
    sample_range=(-5.0, 5.0),
    reference=_pointwise(lambda v: v * math.tanh(math.log1p(math.exp(v)))),
    cost=12,
)
unary(
    "Celu",
    "max(0, x) + min(0, alpha * (exp(x / alpha) - 1)).",
    _in_float(lambda x, *, alpha: np.maximum(x, 0) + np.minimum(0, alpha * np.expm1(x / alpha))),
    FLOATS,
    attrs={"alpha": Attr("float", 1.0)},
    sample_attrs=({}, {"alpha": 2.0}),
    reference=_pointwise(
        lambda v, alpha: max(0.0, v) + min(0.0, alpha * (math.exp(v / alpha) - 1.0))
    ),
)
unary(
    "ThresholdedRelu",
    "x where x > alpha, else 0.",
    lambda x, *, alpha: np.where(x > alpha, x, x.dtype.type(0)),
    FLOATS,
    attrs={"alpha": Attr("float", 1.0)},
    sample_attrs=({}, {"alpha": 0.5}),
    reference=_pointwise(lambda v, alpha: v if v > alpha else 0.0),
    bit_exact=True,
)


def _shrink_kernel(x: np.ndarray, *, bias: float, lambd: float) -> np.ndarray:
    # the comparisons and the bias in float64, so integer inputs take float attributes exactly
    wide = x.astype(np.float64)
    out = np.where(wide < -lambd, wide + bias, np.where(wide > lambd, wide - bias, 0.0))
    return out.astype(x.dtype)


unary(
    "Shrink",
    "x - bias where x > lambd, x + bias where x < -lambd, else 0.",
    _shrink_kernel,
    NUMERIC,
    attrs={"bias": Attr("float", 0.0), "lambd": Attr("float", 0.5)},
    sample_dtypes=(dtypes.float32, dtypes.int32),  # onnxruntime's double Shrink rounds to float
    sample_attrs=({}, {"bias": 1.5, "lambd": 1.5}),
    io_names=("input", "output"),
    reference=_pointwise(
        lambda v, bias, lambd: v - bias if v > lambd else (v + bias if v < -lambd else 0)
    ),
)
unary(
    "IsNaN",
    "True where x is NaN.",
    np.isnan,
    FLOATS,
    out_dtype=dtypes.bool_,
    sample_dtypes=(*_F32_F64, dtypes.float16),
    reference=_pointwise(math.isnan, dtypes.bool_),
)
unary(
    "IsInf",
    "True where x is +inf (detect_positive) or -inf (detect_negative).",
    _is_inf,
    FLOATS,
    attrs={"detect_negative": Attr("int", 1), "detect_positive": Attr("int", 1)},
    out_dtype=dtypes.bool_,
    sample_attrs=({}, {"detect_negative": 0}, {"detect_positive": 0}),
    reference=_pointwise(
        lambda v, detect_negative, detect_positive: (
            math.isinf(v) and ((v > 0 and detect_positive == 1) or (v < 0 and detect_negative == 1))
        ),
        dtypes.bool_,
    ),
)
unary(
    "Not",
    "Logical not.",
    np.logical_not,
    BOOL,
    sample_dtypes=(dtypes.bool_,),
    reference=_pointwise(lambda v: not v),
)
unary(
    "BitwiseNot",
    "~x, every bit flipped.",
    np.invert,
    INTEGERS,
    sample_dtypes=(dtypes.int32, dtypes.uint8, dtypes.int64),
    reference=_pointwise(lambda v: ~v),
)


# -- Clip ----------------------------------------------------------------------------------


def _clip_infer(inputs: Sequence[TensorType | None], attrs: Mapping[str, Any]) -> list[TensorType]:
    x = require("Clip", "input", inputs[0])
    require_dtype("Clip", "input", x, NUMERIC)
    bounds = list(inputs[1:3]) + [None] * (3 - len(inputs))
    require_same_dtype("Clip", [x, *bounds[:2]], ("input", "min", "max"))
    for arg, bound in zip(("min", "max"), bounds):
        if bound is not None and not (bound.ndim == 0 or (bound.ndim == 1 and bound.shape[0] == 1)):
            raise OpArgumentError(
                f"Clip: input {arg!r} must be a scalar (shape ()), got shape {bound.shape}; "
                "use Max/Min for bounds that broadcast"
            )
    return [TensorType(x.dtype, x.shape)]


def _clip_kernel(
    x: np.ndarray, lo: np.ndarray | None = None, hi: np.ndarray | None = None
) -> np.ndarray:
    # maximum then minimum: NaN propagates, and min > max gives max, as ONNX says. With both
    # bounds np.clip itself, which keeps x where it equals a bound (-0.0 stays -0.0).
    if lo is not None and hi is not None:
        return np.asarray(np.clip(x, lo.reshape(()), hi.reshape(())), dtype=x.dtype)
    out = x if lo is None else np.maximum(x, lo.reshape(()))
    out = out if hi is None else np.minimum(out, hi.reshape(()))
    return np.asarray(out, dtype=x.dtype)


try:  # NumPy's clip ufunc (what np.clip calls with both bounds)
    from numpy._core.umath import clip as _clip_ufunc
except ImportError:  # pragma: no cover - NumPy 1
    from numpy.core.umath import clip as _clip_ufunc


def _clip_fast(
    inputs: Sequence[Typed | None], outputs: Sequence[Typed], attrs: Mapping[str, Any]
) -> KernelCall | None:
    """Both bounds given as 0-d values: NumPy's clip ufunc itself (what the kernel calls), which
    the plan may let write into a dead input buffer."""
    if len(inputs) != 3 or any(b is None or tuple(b.shape) != () for b in inputs[1:]):
        return None
    return KernelCall("{b0}({0}, {1}, {2})", (_clip_ufunc,), ufunc=_clip_ufunc)


def _clip_reference(
    x: np.ndarray, lo: np.ndarray | None = None, hi: np.ndarray | None = None
) -> np.ndarray:
    low = None if lo is None else lo.reshape(()).item()
    high = None if hi is None else hi.reshape(()).item()

    def one(v: Any) -> Any:
        if low is not None and v < low:
            v = low
        if high is not None and v > high:
            v = high
        return v

    return _pointwise(one, arity=1)(x)


def _clip_samples() -> list[Sample]:
    out = []
    for dt in (dtypes.float32, dtypes.int32, dtypes.uint8):
        lo = np.asarray(-1 if dt != dtypes.uint8 else 1, dtype=dt)
        hi = np.asarray(2, dtype=dt)
        for shape in _UNARY_SHAPES:
            x = (
                sample_array(shape, dt, -3.0, 3.0)
                if dt != dtypes.uint8
                else (sample_array(shape, dt, 0, 5))
            )
            for bounds, tag in (((lo, hi), "both"), ((lo,), "min"), ((None, hi), "max")):
                out.append(Sample((x, *bounds), {}, _clip_reference, name=f"{dt.name}{shape}{tag}"))
    x = sample_array((3, 4), dtypes.float32)
    out.append(Sample((x,), {}, _clip_reference, name="no-bounds"))
    out.append(
        Sample(
            (x, np.asarray(1.0, np.float32), np.asarray(-1.0, np.float32)),
            {},
            lambda x, lo, hi: np.full_like(x, -1.0),  # min > max: everything becomes max
            name="min>max",
        )
    )
    return out


register(
    OpDef(
        name="Clip",
        bit_exact=True,
        doc="Each element limited to [min, max]; min and max are optional scalar inputs.",
        inputs=(Input("input"), Input("min", optional=True), Input("max", optional=True)),
        outputs=("output",),
        infer=_clip_infer,
        kernel=_clip_kernel,
        traits=frozenset({ELEMENTWISE, PURE}),
        batch=batching.elementwise_first_only,
        fast_kernel=_clip_fast,
        samples=_clip_samples,
        engine_limits={"onnxruntime": _ORT_ZERO_SIGN_EXTREMA},
    )
)


# -- Cast ----------------------------------------------------------------------------------
#
# Strings (ONNX data type 8) are NumPy object arrays of str (``dtypes.string``); they exist only
# in imported ONNX models, as the input or output of Cast and CastLike. Numbers become strings
# as NumPy writes them (``astype(str)``: the shortest text that reads back to the same value,
# "nan", "inf", "-inf"), as onnx's reference does. Strings become numbers as ONNX's Cast reads
# them: plain or scientific notation, "INF", "+INF", "-INF" and "NaN" in any case; an integer
# target takes an integer literal as it is and truncates a decimal one toward zero ("100.5"
# gives 100); bool takes "true"/"false" (any case) or a number (nonzero is True).

_STRING = dtypes.string
_CASTABLE = ALL | {_STRING}


def _cast_infer(inputs: Sequence[TensorType | None], attrs: Mapping[str, Any]) -> list[TensorType]:
    x = require("Cast", "input", inputs[0])
    require_dtype("Cast", "input", x, _CASTABLE)
    target = dtype_from_onnx_code(attrs["to"])
    keep = dtypes.is_integer(target) and x.dtype != _STRING
    return [TensorType(target, x.shape, x.value if keep else None)]


def _cast(x: np.ndarray, target: np.dtype, op: str) -> np.ndarray:
    """``x`` converted to ``target`` with ONNX Cast's semantics (strings included)."""
    if target == _STRING:
        if x.dtype == _STRING:
            return np.array(x, dtype=object)  # a copy, as astype gives
        if x.dtype == dtypes.bfloat16:  # NumPy writes no text for ml_dtypes' bfloat16
            texts = [_shortest_bfloat16(v) for v in x.astype(np.float64).reshape(-1).tolist()]
            return np.array(texts, dtype=object).reshape(x.shape)
        return x.astype(np.str_).astype(object)
    if x.dtype == _STRING or x.dtype.kind in "SU":
        return _parse_strings(x, target, op)
    if x.dtype.kind == "c" and target.kind not in "cb":
        x = x.real  # NumPy's astype drops the imaginary part (the front door warns as NumPy)
    return x.astype(target)


def _shortest_bfloat16(value: float) -> str:
    """The shortest decimal that reads back to the same bfloat16, written as NumPy writes a
    float ("0.1", "3.0", "1e-05", "nan")."""
    for digits in range(1, 10):
        short = float(f"{value:.{digits}g}")
        if np.asarray(short).astype(dtypes.bfloat16) == np.asarray(value).astype(dtypes.bfloat16):
            return str(np.float64(short))
    return str(np.float64(value))  # NaN (never equal to itself)


def _parse_strings(x: np.ndarray, target: np.dtype, op: str) -> np.ndarray:
    texts = [v.decode() if isinstance(v, bytes) else v for v in x.reshape(-1).tolist()]
    numbers: list[Any] = []
    for i, text in enumerate(texts):
        try:
            numbers.append(_parse_number(text, target))
        except (TypeError, ValueError):
            raise OpArgumentError(
                f"{op}: element {i} of the string input, {text!r}, is not a number; expected "
                "plain or scientific notation, INF, +INF, -INF or NaN"
                + (" (or true/false)" if target == dtypes.bool_ else "")
            ) from None
    if all(isinstance(v, (bool, int)) for v in numbers) and target != dtypes.bool_:
        try:
            return np.array(numbers, dtype=target).reshape(x.shape)
        except OverflowError:
            raise OpArgumentError(
                f"{op}: an integer of the string input is out of the range of {target.name}"
            ) from None
    with np.errstate(invalid="ignore", over="ignore"):
        return np.array(numbers, dtype=np.float64).astype(target).reshape(x.shape)


def _parse_number(text: Any, target: np.dtype) -> float | int | bool:
    if not isinstance(text, str):
        raise TypeError(text)
    stripped = text.strip()
    if target == dtypes.bool_:
        if stripped.lower() in ("true", "false"):
            return stripped.lower() == "true"
        return bool(float(stripped))
    if dtypes.is_integer(target):
        try:
            return int(stripped)
        except ValueError:
            value = float(stripped)
            return int(value) if math.isfinite(value) else value
    return float(stripped)


def _cast_kernel(
    x: np.ndarray, *, to: int, saturate: int = 1, round_mode: str = "up"
) -> np.ndarray:
    return _cast(x, dtype_from_onnx_code(to), "Cast")


def _cast_fast(
    inputs: Sequence[Typed | None], outputs: Sequence[Typed], attrs: Mapping[str, Any]
) -> KernelCall | None:
    """``x.astype(dtype)`` for a cast between real numbers (no text, no complex to drop)."""
    x = inputs[0]
    target = outputs[0].dtype
    if x is None or x.dtype == _STRING or target == _STRING or "c" in (x.dtype.kind, target.kind):
        return None
    return KernelCall("{0}.astype({b0})", (target,))


def _involves_strings(
    inputs: Sequence[Typed | None], outputs: Sequence[Typed], attrs: Mapping[str, Any]
) -> bool:
    return any(v is not None and v.dtype == _STRING for v in (*inputs, *outputs))


# XLA has no string type; onnxruntime writes and reads numbers in its own way ("NaN", the
# precision of its streams), so a Cast to or from strings stays on NumPy.
_STRING_LIMITS = {
    "jax": EngineLimit("to or from strings (XLA has no string type)", _involves_strings),
    "onnxruntime": EngineLimit(
        "to or from strings (onnxruntime formats numbers in its own way)", _involves_strings
    ),
}


def _cast_samples() -> list[Sample]:
    out = []
    for src in (dtypes.float32, dtypes.int64, dtypes.bool_, dtypes.float16):
        for dst in (dtypes.float64, dtypes.int32, dtypes.bool_, dtypes.bfloat16):
            x = sample_array((2, 3), src, -5, 5)
            out.append(
                Sample(
                    (x,),
                    {"to": onnx_dtype_code(dst)},
                    lambda x, to, **_: x.astype(dtype_from_onnx_code(to)),
                    name=f"{src.name}->{dst.name}",
                )
            )
    return out


register(
    OpDef(
        name="Cast",
        bit_exact=True,
        doc="Each element converted to the dtype ``to`` (an ONNX data type number; 8, string, "
        "for a model's string tensors).",
        inputs=(Input("input"),),
        outputs=("output",),
        attrs={"to": Attr("int"), "saturate": Attr("int", 1), "round_mode": Attr("str", "up")},
        infer=_cast_infer,
        kernel=_cast_kernel,
        fast_kernel=_cast_fast,
        traits=frozenset({ELEMENTWISE, PURE}),
        samples=_cast_samples,
        engine_limits=_STRING_LIMITS,
    )
)


# -- CastLike ------------------------------------------------------------------------------


def _cast_like_infer(
    inputs: Sequence[TensorType | None], attrs: Mapping[str, Any]
) -> list[TensorType]:
    x = require("CastLike", "input", inputs[0])
    like = require("CastLike", "target_type", inputs[1])
    require_dtype("CastLike", "input", x, _CASTABLE)
    require_dtype("CastLike", "target_type", like, _CASTABLE)
    value = x.value if dtypes.is_integer(like.dtype) and dtypes.is_integer(x.dtype) else None
    return [TensorType(like.dtype, x.shape, value)]


def _cast_like_kernel(
    x: np.ndarray, like: np.ndarray, *, saturate: int = 1, round_mode: str = "up"
) -> np.ndarray:
    return _cast(x, like.dtype, "CastLike")


def _cast_like_samples() -> list[Sample]:
    def reference(x: np.ndarray, like: np.ndarray, **_: Any) -> np.ndarray:
        # element by element through Python scalars: int() truncates toward zero, as Cast
        flat = x.reshape(-1).tolist()
        if like.dtype == np.bool_:
            wide = np.array([bool(v) for v in flat], dtype=np.bool_)
        elif dtypes.is_integer(like.dtype):
            wide = np.array([int(v) for v in flat], dtype=np.int64)
        else:
            wide = np.array([float(v) for v in flat], dtype=np.float64)
        return wide.astype(like.dtype).reshape(x.shape)

    out = []
    for src in (dtypes.float32, dtypes.int64, dtypes.bool_, dtypes.float16):
        for dst in (dtypes.float64, dtypes.int32, dtypes.bool_, dtypes.bfloat16):
            for shape, like_shape in (((2, 3), (1,)), ((0,), ()), ((1,), (4, 2))):
                x = sample_array(shape, src, -5, 5)
                like = sample_array(like_shape, dst)
                out.append(Sample((x, like), {}, reference, name=f"{src.name}->{dst.name}{shape}"))
    return out


register(
    OpDef(
        name="CastLike",
        bit_exact=True,
        doc="Each element of ``input`` converted to the dtype of ``target_type`` (whose "
        "contents and shape are not used), as Cast.",
        inputs=(Input("input"), Input("target_type")),
        outputs=("output",),
        attrs={"saturate": Attr("int", 1), "round_mode": Attr("str", "up")},
        infer=_cast_like_infer,
        kernel=_cast_like_kernel,
        traits=frozenset({PURE}),
        samples=_cast_like_samples,
        since_version=21,
        engine_limits=_STRING_LIMITS,
    )
)


# -- binary arithmetic ---------------------------------------------------------------------

_ARITH_SAMPLES = (dtypes.float32, dtypes.float64, dtypes.int32, dtypes.int8)

binary(
    "Add",
    "a + b.",
    np.add,
    NUMERIC | COMPLEX,
    value_fn=lambda a, b: a + b,
    commutative=True,
    sample_dtypes=(*_ARITH_SAMPLES, dtypes.float16, dtypes.uint8),
    reference=_pointwise(lambda a, b: a + b),
    bit_exact=True,
)
binary(
    "Sub",
    "a - b.",
    np.subtract,
    NUMERIC | COMPLEX,
    value_fn=lambda a, b: a - b,
    sample_dtypes=(*_ARITH_SAMPLES, dtypes.uint8),
    reference=_pointwise(lambda a, b: a - b),
    bit_exact=True,
)
binary(
    "Mul",
    "a * b.",
    np.multiply,
    NUMERIC | COMPLEX,
    value_fn=lambda a, b: a * b,
    commutative=True,
    sample_dtypes=(*_ARITH_SAMPLES, dtypes.bfloat16),
    reference=_pointwise(lambda a, b: a * b),
    bit_exact=True,
)
binary(
    "Div",
    "a / b; integer division truncates toward zero (C semantics).",
    _div_kernel,
    NUMERIC | COMPLEX,
    value_fn=_value_div,
    sample_dtypes=(*_ARITH_SAMPLES, dtypes.uint8, dtypes.float16),
    rhs_nonzero=True,
    reference=_pointwise(lambda a, b: _int_trunc_div(a, b) if isinstance(a, int) else a / b),
    fast_kernel=_two_input_ufunc(np.divide, _NATIVE_FLOATS_HALF),
    engine_limits=_ORT_INT_DIVISION,
    bit_exact=True,
)


def _check_mod(a: TensorType, attrs: Mapping[str, Any]) -> None:
    fmod = attrs["fmod"]
    if fmod not in (0, 1):
        raise OpArgumentError(f"Mod: attribute 'fmod' must be 0 or 1, got {fmod}")


def _mod_reference(a: Any, b: Any, *, fmod: int) -> Any:
    if isinstance(a, float):
        # Python's float % is A - floor(A / B) * B with the divisor's sign (ONNX Mod-28 fmod=0)
        return math.fmod(a, b) if fmod else a % b
    return a - b * _int_trunc_div(a, b) if fmod else a % b


binary(
    "Mod",
    "Remainder: fmod=0 is A - floor(A / B) * B (the divisor's sign, as Python; defined for "
    "floats since opset 28), fmod=1 is A - trunc(A / B) * B (the dividend's sign, as C fmod).",
    _mod_kernel,
    NUMERIC,
    attrs={"fmod": Attr("int", 0)},
    value_fn=_value_mod,
    check=_check_mod,
    sample_dtypes=(dtypes.int32, dtypes.int8),
    rhs_nonzero=True,
    sample_attrs=({}, {"fmod": 1}),
    reference=_pointwise(_mod_reference),
    extra_samples=_binary_samples(
        (dtypes.float32, dtypes.float64, dtypes.float16),
        -5.0,
        5.0,
        _pointwise(_mod_reference),
        rhs_nonzero=True,
        attrs=({"fmod": 1},),  # float fmod=0 (Mod-28): tests/ops/test_elementwise.py
    ),
    engine_limits=_ORT_INT_DIVISION,
)


# -- hypot ---------------------------------------------------------------------------------
#
# NumPy's float64 hypot is the C library's; its ONNX form below follows glibc's (e_hypot.c,
# Borges' "MyHypot3" without FMA): the scaling thresholds and the one correction step, each
# operation rounded on its own, so that an engine running it gives glibc's bits.
_HYPOT_SCALE = 2.0**-600
_HYPOT_LARGE = 2.0**511
_HYPOT_TINY = 2.0**-459
_HYPOT_EPS = 2.0**-54


class _Emitter:
    """Adds one ONNX node per call to an ``expand`` hook's builder, so that a long formula
    reads as the math: ``op("Add", a, b)``, ``k(2.0)`` a constant of ``like``'s dtype."""

    def __init__(self, builder: NodeBuilder, like: Any) -> None:
        self._builder = builder
        self._like = like

    def __call__(self, op: str, *inputs: Any) -> Any:
        return self._builder.add(op, list(inputs))[0]

    def k(self, value: float) -> Any:
        return _constant(self._builder, value, self._like)


def _hypot_kernel_form(op: _Emitter, ax: Any, ay: Any) -> Any:
    """glibc's kernel for ``ax >= ay >= 0`` (scaled): ``sqrt(ax*ax + ay*ay)`` corrected by
    the rounding error of the squares."""
    k = op.k
    h = op("Sqrt", op("Add", op("Mul", ax, ax), op("Mul", ay, ay)))
    near = op("LessOrEqual", h, op("Mul", k(2.0), ay))
    # h <= 2 ay: delta = h - ay; t1 = ax (2 delta - ax); t2 = (delta - 2 (ax - ay)) delta
    d1 = op("Sub", h, ay)
    t1a = op("Mul", ax, op("Sub", op("Mul", k(2.0), d1), ax))
    t2a = op("Mul", op("Sub", d1, op("Mul", k(2.0), op("Sub", ax, ay))), d1)
    # else: delta = h - ax; t1 = 2 delta (ax - 2 ay); t2 = (4 delta - ay) ay + delta delta
    d2 = op("Sub", h, ax)
    t1b = op("Mul", op("Mul", k(2.0), d2), op("Sub", ax, op("Mul", k(2.0), ay)))
    t2b = op("Add", op("Mul", op("Sub", op("Mul", k(4.0), d2), ay), ay), op("Mul", d2, d2))
    t = op("Add", op("Where", near, t1a, t1b), op("Where", near, t2a, t2b))
    return op("Sub", h, op("Div", t, op("Mul", k(2.0), h)))


def _hypot64_form(op: _Emitter, x: Any, y: Any) -> Any:
    k = op.k
    ax0, ay0 = op("Abs", x), op("Abs", y)
    ax, ay = op("Max", ax0, ay0), op("Min", ax0, ay0)
    big = op("Greater", ax, k(_HYPOT_LARGE))
    tiny = op("And", op("Not", big), op("Less", ay, k(_HYPOT_TINY)))
    # Scale by powers of two (exact): down when ax is huge, up when ay is tiny.
    up = op("Where", big, k(_HYPOT_SCALE), op("Where", tiny, k(1 / _HYPOT_SCALE), k(1.0)))
    back = op("Where", big, k(1 / _HYPOT_SCALE), op("Where", tiny, k(_HYPOT_SCALE), k(1.0)))
    scaled = op("Mul", _hypot_kernel_form(op, op("Mul", ax, up), op("Mul", ay, up)), back)
    # ay too small to matter: ax + ay (the tiny branch compares ax >= ay / EPS).
    negligible = op(
        "Or",
        op("And", tiny, op("GreaterOrEqual", ax, op("Div", ay, k(_HYPOT_EPS)))),
        op("And", op("Not", tiny), op("LessOrEqual", ay, op("Mul", ax, k(_HYPOT_EPS)))),
    )
    finite = op("Where", negligible, op("Add", ax, ay), scaled)
    # Not finite: inf if either is infinite (even with a NaN), else NaN (x + y).
    infinite = op("Or", op("IsInf", x), op("IsInf", y))
    nan = op("Or", op("IsNaN", x), op("IsNaN", y))
    return op("Where", infinite, k(math.inf), op("Where", nan, op("Add", x, y), finite))


def _hypot_expand(
    builder: NodeBuilder, inputs: Sequence[Any], attrs: Mapping[str, Any], outputs: Sequence[Any]
) -> None:
    """float64: glibc's algorithm. float32 (glibc's hypotf) and half precision (through the
    float loop): the float64 square root of the exact float64 squares' sum, rounded to
    float32, then to the output's dtype."""
    x, y = inputs
    dtype = x.dtype
    if dtype != dtypes.float64:
        to64 = {"to": onnx_dtype_code(dtypes.float64)}
        (x,) = builder.add("Cast", [x], to64)
        (y,) = builder.add("Cast", [y], to64)
    op = _Emitter(builder, x)
    if dtype == dtypes.float64:
        builder.add("Identity", [_hypot64_form(op, x, y)], outputs=[outputs[0]])
        return
    root = op("Sqrt", op("Add", op("Mul", x, x), op("Mul", y, y)))
    root = op("Where", op("Or", op("IsInf", x), op("IsInf", y)), op.k(math.inf), root)
    (single,) = builder.add("Cast", [root], {"to": onnx_dtype_code(dtypes.float32)})
    _narrowed(builder, single, dtype, outputs[0])


binary(
    "Hypot",
    "sqrt(a**2 + b**2) without overflow or underflow (NumPy's hypot, the C library's; ONNX "
    "form: glibc's algorithm for float64, float64 arithmetic rounded once for narrower "
    "floats).",
    np.hypot,
    FLOATS,
    sample_dtypes=(dtypes.float32, dtypes.float64, dtypes.float16),
    reference=_pointwise(math.hypot),
    commutative=True,
    fast_kernel=_two_input_ufunc(np.hypot, _NATIVE_FLOATS_HALF),
    cost=4,
    domain="kiln",
    expand=_hypot_expand,
)


# -- PRelu ---------------------------------------------------------------------------------

_PRELU_DTYPES = frozenset(
    {*dtypes.FLOAT_DTYPES, dtypes.int32, dtypes.int64, dtypes.uint32, dtypes.uint64}
)


def _prelu_infer(inputs: Sequence[TensorType | None], attrs: Mapping[str, Any]) -> list[TensorType]:
    x = require("PRelu", "X", inputs[0])
    slope = require("PRelu", "slope", inputs[1])
    require_dtype("PRelu", "X", x, _PRELU_DTYPES)
    require_same_dtype("PRelu", (x, slope), ("X", "slope"))
    # unidirectional broadcasting: slope stretches to X's shape, never the other way
    if broadcast("PRelu", x.shape, slope.shape) != tuple(x.shape) or slope.ndim > x.ndim:
        raise OpArgumentError(
            f"PRelu: input 'slope' has shape {format_shape(slope.shape)}; expected a shape "
            f"that broadcasts to X's {format_shape(x.shape)} (unidirectional broadcasting)"
        )
    return [TensorType(x.dtype, x.shape)]


def _prelu_kernel(x: np.ndarray, slope: np.ndarray) -> np.ndarray:
    return np.where(x < 0, x * slope, x).astype(x.dtype, copy=False)


def _prelu_samples() -> list[Sample]:
    reference = _pointwise(lambda v, a: a * v if v < 0 else v)
    shapes = (
        ((2, 3, 4, 2), (3, 1, 1)),  # one slope per channel, as torch.nn.PReLU
        ((2, 3, 4), (4,)),
        ((3, 4), ()),
        ((0, 3), (3,)),
        ((1,), (1,)),
        ((2, 5), (2, 5)),
        ((2, 1, 3), (1, 3)),
        ((4,), (1,)),
    )
    out = []
    for dt in (dtypes.float32, dtypes.float16, dtypes.float64, dtypes.int32):
        for sx, ss in shapes:
            x = sample_array(sx, dt, -4.0, 4.0)
            slope = sample_array(ss, dt, 0.0, 3.0)
            out.append(Sample((x, slope), {}, reference, name=f"{dt.name}{sx}{ss}"))
    return out


register(
    OpDef(
        name="PRelu",
        bit_exact=True,
        doc="x for x >= 0, slope * x below; slope broadcasts unidirectionally to X.",
        inputs=(Input("X"), Input("slope")),
        outputs=("Y",),
        infer=_prelu_infer,
        kernel=_prelu_kernel,
        traits=frozenset({ELEMENTWISE, PURE}),
        batch=batching.elementwise_into_first,
        samples=_prelu_samples,
    )
)


# -- Pow -----------------------------------------------------------------------------------

_POW_BASES = frozenset({dtypes.int32, dtypes.int64, *dtypes.FLOAT_DTYPES, *COMPLEX})


def _pow_infer(inputs: Sequence[TensorType | None], attrs: Mapping[str, Any]) -> list[TensorType]:
    x = require("Pow", "X", inputs[0])
    y = require("Pow", "Y", inputs[1])
    require_dtype("Pow", "X", x, _POW_BASES)
    require_dtype("Pow", "Y", y, NUMERIC | COMPLEX)
    # ONNX lets the exponent have its own dtype; the result has the base's.
    return [TensorType(x.dtype, broadcast("Pow", x.shape, y.shape))]


def _pow_reference(x: Any, y: Any) -> Any:
    if isinstance(x, int):
        if isinstance(y, float):
            return int(math.pow(x, y))  # int() truncates toward zero, as Cast
        if y < 0:
            return _int_trunc_div(1, x ** (-y))
        return x**y
    return math.pow(x, y)


def _pow_raises(inputs: Sequence[Any], outputs: Sequence[Any], attrs: Mapping[str, Any]) -> bool:
    """An ``OpDef.raises_on_values`` rule: an integer base to a signed integer exponent
    raises NumPy's ValueError when an exponent is negative."""
    x, y = inputs[0], inputs[1]
    return x is not None and y is not None and x.dtype.kind in "iu" and y.dtype.kind == "i"


def _pow_samples() -> list[Sample]:
    reference = _pointwise(_pow_reference)
    pairs = (
        (dtypes.float32, dtypes.float32, (0.5, 3.0), (-2.0, 3.0)),
        (dtypes.float64, dtypes.float64, (0.5, 3.0), (-2.0, 3.0)),
        (dtypes.float16, dtypes.float16, (0.5, 2.0), (-2.0, 3.0)),
        (dtypes.float32, dtypes.int32, (-3.0, 3.0), (0.0, 4.0)),
        (dtypes.float64, dtypes.float32, (0.5, 3.0), (-2.0, 3.0)),
        (dtypes.int64, dtypes.int64, (-4.0, 5.0), (0.0, 5.0)),
        (dtypes.int32, dtypes.int8, (-4.0, 5.0), (0.0, 4.0)),
        (dtypes.int32, dtypes.float32, (1.0, 5.0), (0.0, 3.0)),
    )
    out = []
    for base, exp, (blo, bhi), (elo, ehi) in pairs:
        for sa, sb in _BINARY_SHAPES:
            x = _nonzero(sample_array(sa, base, blo, bhi))  # no 0 ** negative
            y = sample_array(sb, exp, elo, ehi)
            out.append(Sample((x, y), {}, reference, name=f"{base.name}^{exp.name}{sa}{sb}"))
    return out


register(
    OpDef(
        name="Pow",
        doc="x ** y; the exponent may have another dtype, the result has the base's. An integer "
        "base to a negative integer exponent raises ValueError, as NumPy.",
        inputs=(Input("X"), Input("Y")),
        outputs=("Z",),
        infer=_pow_infer,
        kernel=_pow_kernel,
        traits=frozenset({ELEMENTWISE, PURE}),
        samples=_pow_samples,
        cost=6,
        fast_kernel=_two_input_ufunc(np.power, _NATIVE_FLOATS_HALF),
        raises_on_values=_pow_raises,
        engine_limits=float64_differs(
            {
                engine: EngineLimit(
                    f"on integers ({why}; NumPy wraps, and raises for a negative exponent)",
                    integer_input,
                )
                for engine, why in (
                    ("onnxruntime", "onnxruntime gives -2**31 for 6**36 in int32"),
                    ("jax", "the jax lowering covers floating-point bases only"),
                )
            },
            **FLOAT64_ULPS["Pow"],
        ),
    )
)


# -- kiln.ScalarPow: ``s ** p`` of NumPy scalars -------------------------------------------------


def _scalar_pow_kernel(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """NumPy's *scalar* power, per element: ``x[()] ** y[()]`` is libm's ``pow`` (the array
    loop may be a vectorized approximation, an ulp apart in about one case in 25, and takes
    fast paths such as ``sqrt`` for ``** 0.5``: ``(-inf) ** 0.5`` is inf here, NaN there).
    Batched by the loop vectorizer, each element still takes the scalar's path."""
    if x.ndim == 0 and y.ndim == 0:
        return np.asarray(x[()] ** y[()])
    xs, ys = np.broadcast_arrays(x, y)
    out = np.empty(xs.shape, x.dtype)
    for index in np.ndindex(xs.shape):
        out[index] = xs[index] ** ys[index]
    return out


def _scalar_pow_infer(
    inputs: Sequence[TensorType | None], attrs: Mapping[str, Any]
) -> list[TensorType]:
    x = require("kiln.ScalarPow", "X", inputs[0])
    y = require("kiln.ScalarPow", "Y", inputs[1])
    require_dtype("kiln.ScalarPow", "X", x, _NATIVE_FLOATS_HALF)
    require_same_dtype("kiln.ScalarPow", (x, y), ("X", "Y"))
    return [TensorType(x.dtype, broadcast("kiln.ScalarPow", x.shape, y.shape))]


def _scalar_pow_samples() -> list[Sample]:
    out = []
    for dt in (dtypes.float32, dtypes.float64, dtypes.float16):
        for shape in ((), (5,)):
            x = np.abs(sample_array(shape, dt, 0.5, 3.0))
            y = np.asarray(sample_array(shape, dt, -2.0, 2.0))
            reference = _pointwise(lambda a, b: a**b)
            out.append(Sample((np.asarray(x), y), {}, reference, name=f"{dt.name}{shape}"))
    return out


def _scalar_pow_expand(
    builder: NodeBuilder, inputs: Sequence[Any], attrs: Mapping[str, Any], outputs: Sequence[Any]
) -> None:
    builder.add("Pow", list(inputs), {}, outputs=[outputs[0]])


register(
    OpDef(
        name="ScalarPow",
        doc="``x ** y`` as NumPy computes it for scalars (libm's pow per element; the ``**`` "
        "of a NumPy scalar such as ``np.sum(a) ** 1.7``); ONNX: Pow.",
        inputs=(Input("X"), Input("Y")),
        outputs=("Z",),
        infer=_scalar_pow_infer,
        kernel=_scalar_pow_kernel,
        samples=_scalar_pow_samples,
        domain="kiln",
        expand=_scalar_pow_expand,
        cost=8,
        batch=batching.elementwise,
    )
)


# -- comparison, logic, bitwise ------------------------------------------------------------

_COMPARE = (
    ("Equal", "a == b.", np.equal, ALL, lambda a, b: a == b),
    ("Less", "a < b.", np.less, NUMERIC, lambda a, b: a < b),
    ("LessOrEqual", "a <= b.", np.less_equal, NUMERIC, lambda a, b: a <= b),
    ("Greater", "a > b.", np.greater, NUMERIC, lambda a, b: a > b),
    ("GreaterOrEqual", "a >= b.", np.greater_equal, NUMERIC, lambda a, b: a >= b),
)
for _name, _doc, _kernel, _allowed, _ref in _COMPARE:
    binary(
        _name,
        _doc,
        _kernel,
        _allowed,
        out_dtype=dtypes.bool_,
        commutative=_name == "Equal",
        sample_dtypes=(dtypes.float32, dtypes.int32, dtypes.uint8)
        + ((dtypes.bool_,) if _name == "Equal" else ()),
        # A narrow integer range makes equal pairs common.
        sample_range=(-2.0, 2.0),
        reference=_pointwise(_ref, dtypes.bool_),
    )

_LOGIC = (
    ("And", "Logical and.", np.logical_and, lambda a, b: a and b),
    ("Or", "Logical or.", np.logical_or, lambda a, b: a or b),
    ("Xor", "Logical exclusive or.", np.logical_xor, lambda a, b: a != b),
)
for _name, _doc, _kernel, _ref in _LOGIC:
    binary(
        _name,
        _doc,
        _kernel,
        BOOL,
        commutative=True,
        sample_dtypes=(dtypes.bool_,),
        reference=_pointwise(_ref, dtypes.bool_),
    )

_BITWISE = (
    ("BitwiseAnd", "a & b, bit by bit.", np.bitwise_and, lambda a, b: a & b),
    ("BitwiseOr", "a | b, bit by bit.", np.bitwise_or, lambda a, b: a | b),
    ("BitwiseXor", "a ^ b, bit by bit.", np.bitwise_xor, lambda a, b: a ^ b),
)
for _name, _doc, _kernel, _ref in _BITWISE:
    binary(
        _name,
        _doc,
        _kernel,
        INTEGERS,
        commutative=True,
        sample_dtypes=(dtypes.int32, dtypes.uint8, dtypes.int8, dtypes.uint64),
        sample_range=(-100.0, 100.0),
        reference=_pointwise(_ref),
    )


# -- variadic ------------------------------------------------------------------------------


def _fold_reference(fn: Callable[..., Any]) -> Callable[..., np.ndarray]:
    def reference(*arrays: np.ndarray) -> np.ndarray:
        return _pointwise(lambda *vs: fn(vs))(*arrays)

    return reference


def _nan_max(values: Sequence[Any]) -> Any:
    if any(isinstance(v, float) and math.isnan(v) for v in values):
        return math.nan
    return max(values)


def _nan_min(values: Sequence[Any]) -> Any:
    if any(isinstance(v, float) and math.isnan(v) for v in values):
        return math.nan
    return min(values)


# Max/Min propagate NaN as NumPy's maximum/minimum and the ONNX reference evaluator do (and
# ONNX Runtime since 1.19).
variadic(
    "Max",
    "The elementwise maximum of the inputs (NaN if any is NaN).",
    np.maximum,
    NUMERIC,
    value_fn=dim_max,
    output="max",
    sample_dtypes=(dtypes.float32, dtypes.int32, dtypes.float16),
    reference=_fold_reference(_nan_max),
    fast_kernel=_two_input_ufunc(np.maximum),  # NaN propagates, as the fold does
    engine_limits={"onnxruntime": _ORT_ZERO_SIGN_EXTREMA},
    bit_exact=True,
)
variadic(
    "Min",
    "The elementwise minimum of the inputs (NaN if any is NaN).",
    np.minimum,
    NUMERIC,
    value_fn=dim_min,
    output="min",
    sample_dtypes=(dtypes.float32, dtypes.int32, dtypes.uint8),
    reference=_fold_reference(_nan_min),
    fast_kernel=_two_input_ufunc(np.minimum),
    engine_limits={"onnxruntime": _ORT_ZERO_SIGN_EXTREMA},
    bit_exact=True,
)


def _two_inputs(
    inputs: Sequence[Typed | None], outputs: Sequence[Typed], attrs: Mapping[str, Any]
) -> bool:
    """A sum of two inputs is one rounding; of more, the order of the additions matters."""
    return len(inputs) <= 2


# ONNX types Sum for floats; kiln also accepts integers so that shape arithmetic can add sizes.
variadic(
    "Sum",
    "The elementwise sum of the inputs.",
    np.add,
    NUMERIC,
    value_fn=lambda a, b: a + b,
    output="sum",
    sample_dtypes=(dtypes.float32, dtypes.float64, dtypes.int64),
    reference=_fold_reference(sum),
    fast_kernel=_two_input_ufunc(np.add),
    bit_exact=_two_inputs,
)
variadic(
    "Mean",
    "The elementwise mean of the inputs.",
    np.add,
    FLOATS,
    finish=lambda total, count: total / total.dtype.type(count),
    output="mean",
    sample_dtypes=(dtypes.float32, dtypes.float64),
    reference=_fold_reference(lambda vs: sum(vs) / len(vs)),
)


# -- Where ---------------------------------------------------------------------------------


def _where_infer(inputs: Sequence[TensorType | None], attrs: Mapping[str, Any]) -> list[TensorType]:
    cond = require("Where", "condition", inputs[0])
    x = require("Where", "X", inputs[1])
    y = require("Where", "Y", inputs[2])
    require_dtype("Where", "condition", cond, BOOL)
    require_dtype("Where", "X", x, ALL)
    require_same_dtype("Where", (x, y), ("X", "Y"))
    return [TensorType(x.dtype, broadcast("Where", cond.shape, x.shape, y.shape))]


def _where_reference(c: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    shape = np.broadcast_shapes(c.shape, x.shape, y.shape)
    cs, xs, ys = (np.broadcast_to(a, shape).reshape(-1) for a in (c, x, y))
    picked = [xs[i] if cs[i] else ys[i] for i in range(cs.size)]
    return np.array(picked, dtype=x.dtype).reshape(shape)


def _where_samples() -> list[Sample]:
    reference = _where_reference
    shapes = (
        ((3, 4), (3, 4), (3, 4)),
        ((3, 1), (1, 4), ()),
        ((), (2, 3), (3,)),
        ((0, 1), (1, 2), (2,)),
        ((1,), (1,), (1,)),
    )
    out = []
    for dt in (dtypes.float32, dtypes.int64, dtypes.bool_, dtypes.bfloat16):
        for sc, sx, sy in shapes:
            c = sample_array(sc, dtypes.bool_)
            x = sample_array(sx, dt, -3.0, 3.0)
            y = sample_array(sy, dt, 5.0, 9.0)
            out.append(Sample((c, x, y), {}, reference, name=f"{dt.name}{sc}{sx}{sy}"))
    return out


register(
    OpDef(
        name="Where",
        bit_exact=True,
        doc="X where condition is true, else Y; all three broadcast together.",
        inputs=(Input("condition"), Input("X"), Input("Y")),
        outputs=("output",),
        infer=_where_infer,
        kernel=np.where,
        traits=frozenset({ELEMENTWISE, PURE}),
        # np.where itself, which always returns a new array (a plan may write into it later)
        fast_kernel=lambda inputs, outputs, attrs: KernelCall("{b0}({0}, {1}, {2})", (np.where,)),
        samples=_where_samples,
        engine_limits={
            "onnxruntime": EngineLimit(
                "on floating-point values (onnxruntime gives +0.0 where X is -0.0)", _float_output
            )
        },
    )
)
