"""Reduction operators: ReduceSum ... ReduceLogSumExp, ArgMax/ArgMin, CumSum and TopK.

Every ``Reduce*`` operator has the ONNX opset-18 form: the axes are an optional ``int64`` *input*
tensor (not an attribute), with the attributes ``keepdims=1`` and ``noop_with_empty_axes=0``.
Absent or empty axes reduce every axis, unless ``noop_with_empty_axes`` is set: then the reduction
runs over the empty set of axes, so each output element is the reduction of the single input
element (``x`` for Sum/Mean/Max, ``|x|`` for L1, ``x*x`` for SumSquare) -- NumPy's ``axis=()``.

``infer`` reads the *contents* of the axes input (its ``TensorType.value``) where they are known,
because they decide the output shape. Axes computed at run time (a graph input, a data-dependent
value) decide it only when the graph runs: the output rank follows from their number (the same
rank with ``keepdims=1``), and each size that may change is a fresh symbolic size, as TopK's
along its axis when ``K`` is computed at run time. The kernels check such values as ``infer``
checks constants (an axis out of range or repeated, K beyond the axis).

Reducing over an empty set of values gives the identity of the reduction: 0 for Sum/L1/L2/
SumSquare, 1 for Prod, -inf for LogSum/LogSumExp, NaN for Mean, and for ReduceMax (ReduceMin) minus
(plus) infinity, or the smallest (largest) value of an integer dtype, or False (True) for bool.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from .. import dtypes
from ..errors import OpArgumentError, OpTypeError
from ..symbolic import Dim, Shape, SymDim, format_shape, fresh_symbol
from . import batching
from .complex import COMPLEX
from .registry import (
    NEW_ARRAY,
    PURE,
    REDUCTION,
    Attr,
    EngineLimit,
    Input,
    KernelCall,
    OpDef,
    Sample,
    TensorType,
    Typed,
    any_limit,
    float64_differs,
    float_input,
    register,
)
from .rules import FLOATS, NUMERIC, broadcast, normalize_axis, require, require_dtype
from .sampling import sample_array

__all__ = [
    "reduce_axes",
    "reduced_shape",
    "topk_values",
    "ACCUMULATE_DTYPES",
    "ORDERED_DTYPES",
]

# ONNX's type constraint of ReduceSum/Mean/Prod/L1/L2/SumSquare/LogSum/LogSumExp and CumSum.
ACCUMULATE_DTYPES = FLOATS | {dtypes.int32, dtypes.int64, dtypes.uint32, dtypes.uint64}
# ReduceMax/ReduceMin take 8-bit integers too, and bool since opset 20.
ORDERED_DTYPES = ACCUMULATE_DTYPES | {dtypes.int8, dtypes.uint8, dtypes.bool_}

_INT_INDEX = frozenset({dtypes.int32, dtypes.int64})


# -- shared infer helpers ------------------------------------------------------------------


def _axes_value(op: str, axes: TensorType | None) -> tuple[int, ...]:
    """The contents of the optional ``axes`` input; ``()`` when it is absent or empty."""
    if axes is None:
        return ()
    if axes.dtype != dtypes.int64:
        raise OpTypeError(f"{op}: input 'axes' must be int64, got {axes.dtype}")
    if axes.ndim > 1:
        raise OpArgumentError(
            f"{op}: input 'axes' must be a 1-D tensor, got shape {format_shape(axes.shape)}"
        )
    if axes.value is None:
        if axes.shape == (0,):
            return ()
        raise OpArgumentError(
            f"{op}: the value of input 'axes' ({axes}) must be known when the graph is built "
            "(a constant), because it decides the output shape; got a tensor computed at run time"
        )
    values = []
    for v in axes.value:
        if not isinstance(v, int):
            raise OpArgumentError(
                f"{op}: input 'axes' must hold constant integers, got the symbolic size {v}"
            )
        values.append(v)
    return tuple(values)


def reduce_axes(
    op: str, data: TensorType, axes: TensorType | None, noop_with_empty_axes: int
) -> tuple[int, ...]:
    """The normalised axes a ``Reduce*`` call reduces (``()`` for a no-op reduction).

    Example:
        >>> import numpy as np
        >>> t = TensorType(np.dtype("float32"), (2, 3))
        >>> reduce_axes("ReduceSum", t, None, 0)
        (0, 1)
    """
    given = _axes_value(op, axes)
    if not given:
        return () if noop_with_empty_axes else tuple(range(data.ndim))
    rank = data.ndim
    normalised = tuple(normalize_axis(op, a, rank, "axes", scalar=False) for a in given)
    if len(set(normalised)) != len(normalised):
        raise OpArgumentError(f"{op}: axes={list(given)} repeats an axis")
    return tuple(sorted(normalised))


def reduced_shape(shape: Shape, axes: Sequence[int], keepdims: bool) -> Shape:
    """``shape`` with ``axes`` set to 1 (``keepdims``) or removed."""
    out: list[Dim] = []
    for i, d in enumerate(shape):
        if i in axes:
            if keepdims:
                out.append(1)
        else:
            out.append(d)
    return tuple(out)


def _runtime_reduced_shape(
    op: str, data: TensorType, axes: TensorType | None, attrs: Mapping[str, Any]
) -> Shape | None:
    """The output shape of a reduction whose ``axes`` are computed at run time (None when
    they are absent or known): which axes are reduced is unknown, so every size that may
    change is a fresh size known when the graph runs. The rank is known from the number of
    axes (a repeated axis is refused when it runs), except when even that is unknown."""
    if axes is None or axes.value is not None or axes.shape == (0,):
        return None
    if axes.dtype != dtypes.int64:
        raise OpTypeError(f"{op}: input 'axes' must be int64, got {axes.dtype}")
    count = axes.shape[0] if axes.ndim == 1 else None
    if not isinstance(count, int):
        raise OpArgumentError(
            f"{op}: input 'axes' ({axes}) is computed at run time and its number of entries "
            "is not known when the graph is built, so the rank of the output is unknown (kiln "
            "knows every rank before a graph runs). Pass its value when loading "
            "(kiln.io.load(model, constant_inputs={name: value})) or give it a static length"
        )
    if count > data.ndim:
        raise OpArgumentError(
            f"{op}: input 'axes' has {count} entries, more than the {data.ndim} axes of the "
            f"input {format_shape(data.shape)}"
        )
    if attrs["keepdims"]:  # each size stays or becomes 1
        return tuple(
            d if isinstance(d, int) and d == 1 else fresh_symbol(op.lower()) for d in data.shape
        )
    return tuple(fresh_symbol(op.lower()) for _ in range(data.ndim - count))


def _kernel_axes(
    ndim: int, axes: np.ndarray | None, noop: int, op: str = "the reduction"
) -> tuple[int, ...]:
    if axes is None or axes.size == 0:
        return () if noop else tuple(range(ndim))
    given = [int(a) for a in axes.reshape(-1)]
    if ndim and any(not -ndim <= a < ndim for a in given):  # known only now: check as infer
        raise OpArgumentError(f"{op}: input 'axes' {given} is out of range for rank {ndim}")
    resolved = tuple(a % ndim for a in given) if ndim else tuple(given)
    if len(set(resolved)) != len(resolved):
        raise OpArgumentError(f"{op}: input 'axes' {given} repeats an axis")
    return resolved


def _native(x: np.ndarray) -> np.ndarray:
    # ml_dtypes' bfloat16 lacks some NumPy loops (einsum) and accumulates badly: use float32.
    return x.astype(np.float32) if x.dtype == dtypes.bfloat16 else x


# -- the Reduce* operators -----------------------------------------------------------------

ReduceFn = Callable[[np.ndarray, tuple[int, ...], bool], np.ndarray]


def _empty_data(
    inputs: Sequence[Typed | None], outputs: Sequence[Typed], attrs: Mapping[str, Any]
) -> bool:
    data = inputs[0]
    return data is not None and 0 in data.shape


# Where onnxruntime 1.x departs from the ONNX semantics (found by tests/exec/test_engines.py
# against the reference executor).
# (on_empty: also a call whose symbolic sizes make the data empty runs on the NumPy plan;
# onnxruntime's mean of an empty tensor is 0, NumPy's NaN: fuzz 27:3670)
_ORT_EMPTY = {"onnxruntime": EngineLimit("of an empty tensor", on_empty=True)}
# onnxruntime's max/min reductions and ArgMax/ArgMin skip NaN, where NumPy returns NaN (its
# index) (issue 10: tests/exec/test_engine_exactness.py).
_ORT_DROPS_NAN = EngineLimit("on floating-point input (onnxruntime skips NaN)", float_input)
_ORT_EMPTY_OR_NAN = {"onnxruntime": any_limit(_ORT_EMPTY["onnxruntime"], _ORT_DROPS_NAN)}
# The sign of a zero maximum: NumPy's maximum.reduce keeps the zero its own (vectorized)
# order meets last, XLA's reduce gives +0.0 for any pair of zeros (fuzz 33:1408), and no
# lowering can know NumPy's order. So XLA refuses float max/min reductions.
_MAX_MIN_LIMITS = {
    **_ORT_EMPTY_OR_NAN,
    "jax": EngineLimit("on floating-point input (the sign of a zero result is XLA's)", float_input),
}


def _integer_data(
    inputs: Sequence[Typed | None], outputs: Sequence[Typed], attrs: Mapping[str, Any]
) -> bool:
    data = inputs[0]
    return data is not None and data.dtype.kind in "iu"


# onnxruntime's integer sums and products are not NumPy's wrapping integer arithmetic: an
# int64 ReduceSum past 2**53 rounds, a ReduceProd that overflows saturates (fuzz 25:112).
_ORT_ROUNDS_INTEGERS = EngineLimit(
    "on integer input (onnxruntime's large integer sums round and products saturate; NumPy wraps)",
    _integer_data,
)
_ORT_EMPTY_OR_INTEGER = {"onnxruntime": any_limit(_ORT_EMPTY["onnxruntime"], _ORT_ROUNDS_INTEGERS)}


def _reduction(
    name: str,
    doc: str,
    fn: ReduceFn,
    allowed: frozenset[np.dtype],
    reference: Callable[[list[Any], np.dtype], Any],
    sample_dtypes: Sequence[np.dtype],
    sample_range: tuple[float, float] = (-3.0, 3.0),
    ufunc: np.ufunc | None = None,
    initial: Callable[[np.dtype], Any] | None = None,
    fast: Callable[[Sequence[Typed | None], Sequence[Typed], Mapping[str, Any]], KernelCall | None]
    | None = None,
    whole: Callable[[np.ndarray, bool], np.ndarray] | None = None,
    bit_exact: bool = False,
) -> OpDef:
    """Register ``name``: reduce ``data`` over ``axes`` with ``fn(x, axes, keepdims)``.

    ``reference(values, dtype)`` reduces one lane of input values (Python numbers) and is what
    the samples check the kernel against. ``ufunc`` is given where ``fn`` is exactly
    ``ufunc.reduce`` in the data's dtype (with ``initial(dtype)`` as its start value): the NumPy
    engine then calls that reduce directly, with the axes resolved once. ``whole(x,
    keepdims)``, where given, computes a float input's reduction when the axes input is absent
    (every axis), as the NumPy function recorded that way does (ReduceL2: ``np.linalg.norm``).
    """

    def infer(inputs: Sequence[TensorType | None], attrs: Mapping[str, Any]) -> list[TensorType]:
        data = require(name, "data", inputs[0])
        require_dtype(name, "data", data, allowed)
        axes_type = inputs[1] if len(inputs) > 1 else None
        runtime = _runtime_reduced_shape(name, data, axes_type, attrs)
        if runtime is not None:
            return [TensorType(data.dtype, runtime)]
        axes = reduce_axes(name, data, axes_type, attrs["noop_with_empty_axes"])
        return [TensorType(data.dtype, reduced_shape(data.shape, axes, bool(attrs["keepdims"])))]

    def kernel(
        data: np.ndarray,
        axes: np.ndarray | None = None,
        *,
        keepdims: int = 1,
        noop_with_empty_axes: int = 0,
    ) -> np.ndarray:
        # Floating-point warnings are silenced by the caller (run_kernel, the plans).
        if whole is not None and axes is None and data.dtype.kind == "f":
            return whole(_native(data), bool(keepdims))
        resolved = _kernel_axes(data.ndim, axes, noop_with_empty_axes, name)
        result = fn(_native(data), resolved, bool(keepdims))
        return _to_dtype(np.asarray(result), data.dtype)

    return register(
        OpDef(
            name=name,
            bit_exact=bit_exact,
            doc=doc,
            inputs=(Input("data"), Input("axes", values_only=True, optional=True)),
            outputs=("reduced",),
            attrs={"keepdims": Attr("int", 1), "noop_with_empty_axes": Attr("int", 0)},
            infer=infer,
            kernel=kernel,
            traits=frozenset({REDUCTION, PURE}),
            batch=batching.axes_input(),
            fast_kernel=fast or (None if ufunc is None else _reduce_fast(ufunc, initial)),
            samples=_reduce_samples(reference, tuple(sample_dtypes), sample_range),
            since_version=18,
            engine_limits=_MAX_MIN_LIMITS
            if name in ("ReduceMax", "ReduceMin")
            # float64 exp/log differ from NumPy's by ulps (tools/engine_ulps.py; issue 10)
            else float64_differs(_ORT_EMPTY_OR_INTEGER, onnxruntime=2)
            if name == "ReduceLogSumExp"
            else _ORT_EMPTY_OR_INTEGER,
        )
    )


def _reduce_fast(
    ufunc: np.ufunc, initial: Callable[[np.dtype], Any] | None
) -> Callable[[Sequence[Typed | None], Sequence[Typed], Mapping[str, Any]], KernelCall | None]:
    """The NumPy engine's call for a reduction whose axes are known at plan time:
    ``ufunc.reduce(x, axes, dtype, None, keepdims[, initial])``, what the kernel's ``fn`` runs,
    without resolving the axes on every run."""

    def fast(
        inputs: Sequence[Typed | None], outputs: Sequence[Typed], attrs: Mapping[str, Any]
    ) -> KernelCall | None:
        data = inputs[0]
        if data is None or data.dtype == dtypes.bfloat16:
            return None
        axes = _known_axes(len(data.shape), inputs[1] if len(inputs) > 1 else None, attrs)
        if axes is None:
            return None
        keep = bool(attrs["keepdims"])
        if initial is None:
            return KernelCall(
                "{b0}({0}, {b1}, {b2}, None, {b3})", (ufunc.reduce, axes, data.dtype, keep)
            )
        start = initial(data.dtype)
        return KernelCall(
            "{b0}({0}, {b1}, None, None, {b2}, {b3})", (ufunc.reduce, axes, keep, start)
        )

    return fast


def _squares_fast(
    root: bool,
) -> Callable[[Sequence[Typed | None], Sequence[Typed], Mapping[str, Any]], KernelCall | None]:
    """ReduceSumSquare (``root``: ReduceL2) of a float with plan-time axes:
    ``np.add.reduce(x * x, axes, dtype, None, keepdims)`` (under ``np.sqrt``), what the
    kernel computes, in one expression."""

    def fast(
        inputs: Sequence[Typed | None], outputs: Sequence[Typed], attrs: Mapping[str, Any]
    ) -> KernelCall | None:
        data = inputs[0]
        if data is None or data.dtype == dtypes.bfloat16 or not dtypes.is_floating(data.dtype):
            return None
        whole = len(inputs) < 2 or inputs[1] is None
        if root and whole:  # np.linalg.norm(x): its own dot (see l2_whole)
            return KernelCall("{b0}({0}, {b1})", (l2_whole, bool(attrs["keepdims"])))
        axes = _known_axes(len(data.shape), inputs[1] if len(inputs) > 1 else None, attrs)
        if axes is None:
            return None
        call = "{b0}({b1}({0}, {0}), {b2}, {b3}, None, {b4})"
        binds: tuple[Any, ...] = (np.add.reduce, np.multiply, axes, data.dtype)
        if root:
            call, binds = "{b5}(" + call + ")", (*binds, bool(attrs["keepdims"]), np.sqrt)
        else:
            binds = (*binds, bool(attrs["keepdims"]))
        return KernelCall(call, binds)

    return fast


def _mean_fast(
    inputs: Sequence[Typed | None], outputs: Sequence[Typed], attrs: Mapping[str, Any]
) -> KernelCall | None:
    """ReduceMean of a float or complex with plan-time axes: what :func:`_mean` computes, the
    sum in the dtype over the count as a float64 (cast back where the quotient is wider), in
    one expression. The count is a plan-time constant, or read off the data's shape where a
    reduced size is symbolic."""
    data = inputs[0]
    if data is None or data.dtype == dtypes.bfloat16:
        return None
    if not (dtypes.is_floating(data.dtype) or data.dtype.kind == "c"):
        return None
    axes = _known_axes(len(data.shape), inputs[1] if len(inputs) > 1 else None, attrs)
    if axes is None:
        return None
    sizes = [data.shape[a] for a in axes]
    if all(isinstance(d, int) for d in sizes):
        count: Any = np.float64(math.prod(sizes))
        total = "{b0}({0}, {b1}, {b2}, None, {b3}) / {b4}"
    else:  # a symbolic size: the count read off the data's shape, as a float64
        count = np.float64
        total = "{b0}({0}, {b1}, {b2}, None, {b3}) / {b4}(" + _shape_product(axes) + ")"
    binds = (np.add.reduce, axes, data.dtype, bool(attrs["keepdims"]), count)
    if data.dtype not in (dtypes.float64, dtypes.complex128):
        total = "(" + total + ").astype({b2})"  # the quotient is float64 or complex128
    return KernelCall(total, binds)


def _shape_product(axes: tuple[int, ...]) -> str:
    """The source of the product of the data's sizes along ``axes`` (``1`` for none)."""
    return " * ".join(f"{{0}}.shape[{a}]" for a in axes) or "1"


def _known_axes(ndim: int, axes: Typed | None, attrs: Mapping[str, Any]) -> tuple[int, ...] | None:
    """The sorted, non-negative reduction axes when the axes input is absent or a constant
    whose value its type carries; None when they are only known at run time."""
    if axes is None:
        return _kernel_axes(ndim, None, attrs["noop_with_empty_axes"])
    known = getattr(getattr(axes, "type", axes), "value", None)  # an IR value or its type
    if known is None or ndim == 0:
        return None
    values = np.asarray(known).reshape(-1)
    return tuple(sorted(_kernel_axes(ndim, values, attrs["noop_with_empty_axes"])))


def _to_dtype(result: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``result`` in ``dtype``; a float result for an integer dtype (L2, LogSum, LogSumExp) is
    truncated, with NaN as 0 and infinities saturated to the dtype's range."""
    if dtypes.is_integer(dtype) and result.dtype.kind == "f":
        info = np.iinfo(dtype)
        result = np.clip(np.nan_to_num(result, nan=0.0), float(info.min), float(info.max))
        with np.errstate(all="ignore"):
            return np.trunc(result).astype(dtype)
    return result.astype(dtype, copy=False)


def _count(x: np.ndarray, axes: tuple[int, ...]) -> int:
    return math.prod(x.shape[a] for a in axes)


def _sum(x: np.ndarray, axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
    return np.sum(x, axis=axes, keepdims=keepdims, dtype=x.dtype)


def _mean(x: np.ndarray, axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
    if dtypes.is_floating(x.dtype) or x.dtype.kind == "c":
        # The sum in the dtype divided in float64, as NumPy's mean does (no empty-slice warning).
        total = np.sum(x, axis=axes, keepdims=keepdims, dtype=x.dtype)
        return np.asarray(total / np.float64(_count(x, axes))).astype(x.dtype)
    # Integer mean: the sum in the dtype, divided in float64, truncated back (as NumPy's
    # mean(..., dtype=int) and the ONNX reference do).
    # An empty integer mean is 0 (NaN has no integer form).
    total = np.sum(x, axis=axes, keepdims=keepdims, dtype=x.dtype)
    count = _count(x, axes)
    if count == 0:
        return np.zeros_like(total)
    return np.asarray(total / count).astype(x.dtype)


def _lowest(dtype: np.dtype) -> Any:
    if dtype == dtypes.bool_:
        return False
    if dtypes.is_integer(dtype):
        return np.iinfo(dtype).min
    return -np.inf


def _highest(dtype: np.dtype) -> Any:
    if dtype == dtypes.bool_:
        return True
    if dtypes.is_integer(dtype):
        return np.iinfo(dtype).max
    return np.inf


def _max(x: np.ndarray, axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
    # ``initial`` makes an empty reduction give ONNX's identity instead of raising.
    return np.max(x, axis=axes, keepdims=keepdims, initial=_lowest(x.dtype))


def _min(x: np.ndarray, axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
    return np.min(x, axis=axes, keepdims=keepdims, initial=_highest(x.dtype))


def _prod(x: np.ndarray, axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
    return np.prod(x, axis=axes, keepdims=keepdims, dtype=x.dtype)


def _l1(x: np.ndarray, axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
    return np.sum(np.abs(x), axis=axes, keepdims=keepdims, dtype=x.dtype)


def _sum_square(x: np.ndarray, axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
    return np.sum(x * x, axis=axes, keepdims=keepdims, dtype=x.dtype)


def _l2(x: np.ndarray, axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
    # Integers: the square root of the integer sum of squares, truncated back to the dtype.
    return np.sqrt(_sum_square(x, axes, keepdims))


def l2_whole(x: np.ndarray, keepdims: bool) -> np.ndarray:
    """ReduceL2 of a float over every axis, as ``np.linalg.norm(x)`` computes it (``axis``
    None): the square root of the dot product of ``x`` flattened in memory order with itself
    (BLAS's summation order, not ``np.add.reduce``'s pairwise one: the two differ by an ulp
    in about one case in five).

    Example:
        >>> x = np.random.default_rng(0).standard_normal(1000)
        >>> bool(l2_whole(x, False) == np.linalg.norm(x))
        True
    """
    flat = x.ravel(order="K")
    total = np.sqrt(flat.dot(flat))
    return np.asarray(total).reshape((1,) * x.ndim if keepdims else ())


def _log_sum(x: np.ndarray, axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
    return np.log(_sum(x, axes, keepdims))


def _log_sum_exp(x: np.ndarray, axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
    # Stable form: log(sum(exp(x - m))) + m with m the finite maximum of each lane.
    if not dtypes.is_floating(x.dtype):
        x = x.astype(np.float64)
    m = np.max(x, axis=axes, keepdims=True, initial=-np.inf)
    m = np.where(np.isfinite(m), m, np.zeros_like(m))
    result = np.log(np.sum(np.exp(x - m), axis=axes, keepdims=True)) + m
    return result if keepdims else np.squeeze(result, axis=axes)


# -- samples and references for the Reduce* operators ---------------------------------------

# (shape, axes or None for "input omitted", keepdims, noop_with_empty_axes)
_REDUCE_CASES: tuple[tuple[tuple[int, ...], tuple[int, ...] | None, int, int], ...] = (
    ((3, 4), (1,), 1, 0),
    ((3, 4), (-1,), 0, 0),
    ((2, 3, 4), (0, -1), 0, 0),
    ((2, 3, 4), None, 1, 0),
    ((2, 3, 4), (), 0, 0),  # empty axes: reduce everything
    ((2, 3), (), 1, 1),  # empty axes with noop: the reduction of each single element
    ((0, 3), (0,), 1, 0),  # reduces an empty set
    ((0, 3), (1,), 0, 0),  # empty output
    ((1,), (0,), 0, 0),
    ((), None, 0, 0),
)


def _reduce_samples(
    reference: Callable[[list[Any], np.dtype], Any],
    dts: tuple[np.dtype, ...],
    value_range: tuple[float, float],
) -> Callable[[], list[Sample]]:
    def make() -> list[Sample]:
        out = []
        for i, (dt, (shape, axes, keepdims, noop)) in enumerate(
            itertools.product(dts, _REDUCE_CASES)
        ):
            # Only the first dtype runs every case; the others run every other case.
            if dt != dts[0] and i % 2:
                continue
            x = sample_array(shape, dt, *value_range)
            inputs: tuple[np.ndarray | None, ...] = (x,)
            if axes is not None:
                inputs = (x, np.asarray(axes, dtype=np.int64).reshape(len(axes)))
            attrs = {"keepdims": keepdims, "noop_with_empty_axes": noop}
            loose = 2e-2 if dt in (dtypes.float16, dtypes.bfloat16) else None
            out.append(
                Sample(
                    inputs,
                    attrs,
                    _lane_reference(reference),
                    name=f"{dt.name}{shape}axes={axes}keep={keepdims}noop={noop}",
                    rtol=loose,
                    atol=loose,
                )
            )
        return out

    return make


def _lane_reference(
    reduce_lane: Callable[[list[Any], np.dtype], Any],
) -> Callable[..., np.ndarray]:
    """A reference that loops over output positions and reduces each lane of Python numbers."""

    def reference(
        data: np.ndarray,
        axes: np.ndarray | None = None,
        *,
        keepdims: int,
        noop_with_empty_axes: int,
    ) -> np.ndarray:
        ndim = data.ndim
        if axes is None or axes.size == 0:
            red = () if noop_with_empty_axes else tuple(range(ndim))
        else:
            red = tuple(sorted(int(a) % ndim for a in axes))
        kept = [i for i in range(ndim) if i not in red]
        out_shape = tuple(
            1 if i in red else data.shape[i] for i in range(ndim) if keepdims or i not in red
        )
        values: list[Any] = []
        for out_idx in itertools.product(*(range(data.shape[i]) for i in kept)):
            lane = []
            for red_idx in itertools.product(*(range(data.shape[i]) for i in red)):
                full = [0] * ndim
                for i, v in zip(kept, out_idx):
                    full[i] = v
                for i, v in zip(red, red_idx):
                    full[i] = v
                lane.append(data[tuple(full)].item())
            values.append(reduce_lane(lane, data.dtype))
        return (
            np.asarray(values, dtype=np.float64 if _is_float(data) else object)
            .reshape(out_shape)
            .astype(data.dtype)
        )

    return reference


def _is_float(x: np.ndarray) -> bool:
    return dtypes.is_floating(x.dtype)


def _int_result(value: float, dtype: np.dtype) -> Any:
    if dtypes.is_floating(dtype):
        return value
    info = np.iinfo(dtype)
    if math.isnan(value):
        return 0
    if math.isinf(value):
        return int(info.min) if value < 0 else int(info.max)
    return int(value)


def _ref_sum(lane: list[Any], dtype: np.dtype) -> Any:
    return math.fsum(lane) if dtypes.is_floating(dtype) else sum(lane)


def _ref_mean(lane: list[Any], dtype: np.dtype) -> Any:
    if not lane:
        return math.nan if dtypes.is_floating(dtype) else 0
    if dtypes.is_floating(dtype):
        return math.fsum(lane) / len(lane)
    return int(sum(lane) / len(lane))  # truncates toward zero, as the integer kernel


def _ref_max(lane: list[Any], dtype: np.dtype) -> Any:
    return max(lane) if lane else _lowest(dtype)


def _ref_min(lane: list[Any], dtype: np.dtype) -> Any:
    return min(lane) if lane else _highest(dtype)


def _ref_prod(lane: list[Any], dtype: np.dtype) -> Any:
    return math.prod(lane)


def _ref_l1(lane: list[Any], dtype: np.dtype) -> Any:
    return _ref_sum([abs(v) for v in lane], dtype)


def _ref_sum_square(lane: list[Any], dtype: np.dtype) -> Any:
    return _ref_sum([v * v for v in lane], dtype)


def _ref_l2(lane: list[Any], dtype: np.dtype) -> Any:
    return _int_result(math.sqrt(_ref_sum_square(lane, dtype)), dtype)


def _ref_log_sum(lane: list[Any], dtype: np.dtype) -> Any:
    total = _ref_sum(lane, dtype)
    return _int_result(math.log(total) if total > 0 else -math.inf, dtype)


def _ref_log_sum_exp(lane: list[Any], dtype: np.dtype) -> Any:
    total = math.fsum(math.exp(v) for v in lane)
    return _int_result(math.log(total) if total > 0 else -math.inf, dtype)


_F32, _F64, _F16 = dtypes.float32, dtypes.float64, dtypes.float16
_I32, _I64 = dtypes.int32, dtypes.int64

_reduction(
    "ReduceSum",
    "The sum over ``axes``.",
    _sum,
    ACCUMULATE_DTYPES | COMPLEX,
    _ref_sum,
    (_F32, _I64, _F16, _I32),
    ufunc=np.add,
)
_reduction(
    "ReduceMean",
    "The arithmetic mean over ``axes`` (integers: truncated toward zero; empty: NaN).",
    _mean,
    ACCUMULATE_DTYPES | COMPLEX,
    _ref_mean,
    (_F32, _F64, _I32),
    fast=_mean_fast,
)
_reduction(
    "ReduceMax",
    "The maximum over ``axes`` (empty: -inf, the dtype's minimum, or False).",
    _max,
    ORDERED_DTYPES,
    _ref_max,
    (_F32, dtypes.int8, dtypes.bool_, dtypes.uint8, _F16),
    ufunc=np.maximum,
    initial=_lowest,
)
_reduction(
    "ReduceMin",
    "The minimum over ``axes`` (empty: +inf, the dtype's maximum, or True).",
    _min,
    ORDERED_DTYPES,
    _ref_min,
    (_F64, _I64, dtypes.bool_, dtypes.uint32),
    ufunc=np.minimum,
    initial=_highest,
)
_reduction(
    "ReduceProd",
    "The product over ``axes``.",
    _prod,
    ACCUMULATE_DTYPES | COMPLEX,
    _ref_prod,
    (_F64, _I32),
    (-2.0, 3.0),
    ufunc=np.multiply,
)
_reduction(
    "ReduceL1",
    "The sum of absolute values over ``axes``.",
    _l1,
    ACCUMULATE_DTYPES,
    _ref_l1,
    (_F32, _I64),
)
_reduction(
    "ReduceL2",
    "The Euclidean norm over ``axes`` (integers: truncated back to the dtype).",
    _l2,
    ACCUMULATE_DTYPES,
    _ref_l2,
    (_F32, _F64, _I32),
    fast=_squares_fast(root=True),
    whole=l2_whole,
)
_reduction(
    "ReduceSumSquare",
    "The sum of squares over ``axes``.",
    _sum_square,
    ACCUMULATE_DTYPES,
    _ref_sum_square,
    (_F64, _I64, _F16),
    fast=_squares_fast(root=False),
)
_reduction(
    "ReduceLogSum",
    "The natural logarithm of the sum over ``axes``.",
    _log_sum,
    ACCUMULATE_DTYPES,
    _ref_log_sum,
    (_F32, _F64),
    (0.1, 3.0),
)
_reduction(
    "ReduceLogSumExp",
    "log(sum(exp(x))) over ``axes``, computed stably (the maximum is factored out).",
    _log_sum_exp,
    ACCUMULATE_DTYPES,
    _ref_log_sum_exp,
    (_F32, _F64, _I32),
)


# -- ArgMax / ArgMin -----------------------------------------------------------------------


def _arg_reduction(name: str, pick: Callable[..., np.ndarray], doc: str) -> OpDef:
    def infer(inputs: Sequence[TensorType | None], attrs: Mapping[str, Any]) -> list[TensorType]:
        data = require(name, "data", inputs[0])
        require_dtype(name, "data", data, NUMERIC)
        if data.ndim == 0:
            raise OpArgumentError(f"{name}: input 'data' must have rank >= 1, got a 0-d tensor")
        axis = normalize_axis(name, attrs["axis"], data.ndim)
        shape = reduced_shape(data.shape, (axis,), bool(attrs["keepdims"]))
        if data.shape[axis] == 0:
            raise OpArgumentError(
                f"{name}: attempt to get {name.lower()} of an empty sequence: axis {axis} of "
                f"input 'data' (shape {format_shape(data.shape)}) has size 0"
            )
        return [TensorType(dtypes.int64, shape)]

    def kernel(
        data: np.ndarray, *, axis: int = 0, keepdims: int = 1, select_last_index: int = 0
    ) -> np.ndarray:
        data = _native(data)
        axis = axis % data.ndim
        if select_last_index:
            flipped = np.flip(data, axis=axis)
            index = data.shape[axis] - 1 - pick(flipped, axis=axis)
        else:
            index = pick(data, axis=axis)
        index = np.asarray(index, dtype=np.int64)
        return np.expand_dims(index, axis) if keepdims else index

    method = pick.__name__  # ndarray's method of that name: np.argmax without its wrapper

    def fast(
        inputs: Sequence[Typed | None], outputs: Sequence[Typed], attrs: Mapping[str, Any]
    ) -> KernelCall | None:
        # What the kernel computes when the first index is picked: the index in int64
        # (NumPy's intp), with the axis kept as size 1 by the method's keepdims.
        data = inputs[0]
        if data is None or data.dtype == dtypes.bfloat16 or attrs["select_last_index"]:
            return None
        ndim = len(data.shape)
        if not ndim or np.dtype(np.intp) != dtypes.int64:
            return None
        axis = attrs["axis"] % ndim
        if attrs["keepdims"]:
            return KernelCall("{0}." + method + "({b0}, keepdims=True)", (axis,))
        return KernelCall("{0}." + method + "({b0})", (axis,))

    return register(
        OpDef(
            name=name,
            doc=doc,
            inputs=(Input("data"),),
            outputs=("reduced",),
            fast_kernel=fast,
            attrs={
                "axis": Attr("int", 0),
                "keepdims": Attr("int", 1),
                "select_last_index": Attr("int", 0),
            },
            infer=infer,
            kernel=kernel,
            traits=frozenset({REDUCTION, PURE}),
            batch=batching.axis_attr(),
            samples=_arg_samples(largest=name == "ArgMax"),
            engine_limits={"onnxruntime": _ORT_DROPS_NAN},
            since_version=13,
        )
    )


def _arg_reference(largest: bool) -> Callable[..., np.ndarray]:
    def reference(
        data: np.ndarray, *, axis: int, keepdims: int, select_last_index: int
    ) -> np.ndarray:
        moved = np.moveaxis(data, axis, -1)
        lanes = moved.reshape(-1, moved.shape[-1]) if moved.size else moved.reshape(0, 1)
        result = []
        for lane in lanes.tolist():
            best = 0
            for i, v in enumerate(lane):
                better = v > lane[best] if largest else v < lane[best]
                if better or (select_last_index and v == lane[best]):
                    best = i
            result.append(best)
        out = np.asarray(result, dtype=np.int64).reshape(moved.shape[:-1])
        return np.expand_dims(out, axis % data.ndim) if keepdims else out

    return reference


def _arg_samples(largest: bool) -> Callable[[], list[Sample]]:
    def make() -> list[Sample]:
        out = []
        cases = (
            ((3, 4), 1, 1, 0, dtypes.float32),
            ((3, 4), -1, 0, 0, dtypes.int32),
            ((3, 4), 0, 0, 1, dtypes.int8),  # small range: ties, last index
            ((3, 4), 0, 1, 0, dtypes.int8),  # ties, first index
            ((2, 3, 4), -2, 1, 1, dtypes.float64),
            ((1,), 0, 0, 0, dtypes.float16),
            ((0, 3), 1, 0, 0, dtypes.float32),  # empty output, non-empty lanes
            ((2, 5), 1, 1, 1, dtypes.uint8),
        )
        for shape, axis, keepdims, last, dt in cases:
            low, high = (0, 3) if dt in (dtypes.int8, dtypes.uint8) else (-3, 3)
            x = sample_array(shape, dt, low, high)
            attrs = {"axis": axis, "keepdims": keepdims, "select_last_index": last}
            out.append(
                Sample((x,), attrs, _arg_reference(largest), name=f"{dt.name}{shape}axis={axis}")
            )
        return out

    return make


_arg_reduction("ArgMax", np.argmax, "The index of the maximum along ``axis`` (int64).")
_arg_reduction("ArgMin", np.argmin, "The index of the minimum along ``axis`` (int64).")


# -- CumSum --------------------------------------------------------------------------------


def _single_int(op: str, arg: str, t: TensorType) -> Dim | None:
    """The value of a 0-d or one-element integer input, or ``None`` when unknown."""
    require_dtype(op, arg, t, _INT_INDEX)
    if t.ndim > 1 or (t.ndim == 1 and isinstance(t.shape[0], int) and t.shape[0] != 1):
        raise OpArgumentError(
            f"{op}: input {arg!r} must be a 0-d or one-element 1-D tensor, got shape "
            f"{format_shape(t.shape)}"
        )
    if t.value is None:
        return None
    return t.value[0]


def _cumsum_infer(
    inputs: Sequence[TensorType | None], attrs: Mapping[str, Any]
) -> list[TensorType]:
    x = require("CumSum", "x", inputs[0])
    axis_t = require("CumSum", "axis", inputs[1])
    require_dtype("CumSum", "x", x, ACCUMULATE_DTYPES)
    if x.ndim == 0:
        raise OpArgumentError("CumSum: input 'x' must have rank >= 1, got a 0-d tensor")
    axis = _single_int("CumSum", "axis", axis_t)
    if isinstance(axis, SymDim):
        raise OpArgumentError(f"CumSum: input 'axis' must be a constant axis, got {axis}")
    if axis is not None:
        normalize_axis("CumSum", axis, x.ndim)
    # The output shape never depends on the axis, so an axis computed at run time is fine.
    return [TensorType(x.dtype, x.shape)]


def _cumsum_kernel(
    x: np.ndarray, axis: np.ndarray, *, exclusive: int = 0, reverse: int = 0
) -> np.ndarray:
    ax = int(np.asarray(axis).reshape(-1)[0]) % x.ndim
    data = _native(x)
    if reverse:
        data = np.flip(data, axis=ax)
    total = np.cumsum(data, axis=ax, dtype=data.dtype)
    n = x.shape[ax]
    if exclusive and n:
        # Shift by one along the axis: the first sum becomes 0 and the last one is dropped.
        head = np.zeros_like(np.take(total, [0], axis=ax))
        total = np.concatenate([head, np.take(total, np.arange(n - 1), axis=ax)], axis=ax)
    if reverse:
        total = np.flip(total, axis=ax)
    return np.ascontiguousarray(total).astype(x.dtype, copy=False)


def _cumsum_fast(
    inputs: Sequence[Typed | None], outputs: Sequence[Typed], attrs: Mapping[str, Any]
) -> KernelCall | None:
    """CumSum forward and inclusive along a plan-time axis: ``x.cumsum(axis, dtype)``, what
    the kernel computes then (a new contiguous array in the dtype)."""
    x, axis = inputs[0], inputs[1] if len(inputs) > 1 else None
    if x is None or axis is None or x.dtype == dtypes.bfloat16:
        return None
    if attrs["exclusive"] or attrs["reverse"] or not len(x.shape):
        return None
    known = getattr(getattr(axis, "type", axis), "value", None)  # an IR value or its type
    if known is None or len(known) != 1 or not isinstance(known[0], (int, np.integer)):
        return None
    ndim = len(x.shape)
    if not -ndim <= int(known[0]) < ndim:
        return None
    return KernelCall("{0}.cumsum({b0}, {b1})", (int(known[0]) % ndim, x.dtype))


def _cumsum_reference(x: np.ndarray, axis: np.ndarray, *, exclusive: int, reverse: int) -> Any:
    ax = int(np.asarray(axis).reshape(-1)[0]) % x.ndim
    moved = np.moveaxis(x, ax, -1)
    out = np.zeros(moved.shape, dtype=np.float64 if _is_float(x) else np.int64)
    n = moved.shape[-1]
    for idx in itertools.product(*(range(d) for d in moved.shape[:-1])):
        lane = moved[idx].tolist()
        for i in range(n):
            if reverse:
                part = lane[i + 1 :] if exclusive else lane[i:]
            else:
                part = lane[:i] if exclusive else lane[: i + 1]
            out[idx + (i,)] = sum(part)
    return np.moveaxis(out, -1, ax).astype(x.dtype)


def _cumsum_samples() -> list[Sample]:
    out = []
    cases = (
        ((3, 4), 1, 0, 0, dtypes.float32),
        ((3, 4), -1, 1, 0, dtypes.int32),
        ((3, 4), 0, 0, 1, dtypes.float64),
        ((2, 3, 4), 1, 1, 1, dtypes.int64),
        ((5,), 0, 1, 1, dtypes.float32),
        ((1,), 0, 0, 0, dtypes.uint32),
        ((0, 3), 0, 1, 0, dtypes.float32),
        ((2, 0), -1, 0, 1, dtypes.int64),
        ((4, 2), -2, 0, 0, dtypes.float16),
    )
    for shape, axis, exclusive, reverse, dt in cases:
        x = sample_array(shape, dt, 0 if dt == dtypes.uint32 else -3, 3)
        for axis_dtype, axis_shape in ((np.int64, ()), (np.int32, (1,))):
            a = np.asarray(axis, dtype=axis_dtype).reshape(axis_shape)
            out.append(
                Sample(
                    (x, a),
                    {"exclusive": exclusive, "reverse": reverse},
                    _cumsum_reference,
                    name=f"{dt.name}{shape}axis={axis}ex={exclusive}rev={reverse}",
                    rtol=2e-2 if dt == dtypes.float16 else None,
                    atol=2e-2 if dt == dtypes.float16 else None,
                )
            )
    return out


register(
    OpDef(
        name="CumSum",
        doc="Running sums along ``axis`` (an int32/int64 0-d or one-element input); "
        "``exclusive`` leaves out each element itself, ``reverse`` sums from the end.",
        inputs=(Input("x"), Input("axis")),
        outputs=("y",),
        attrs={"exclusive": Attr("int", 0), "reverse": Attr("int", 0)},
        infer=_cumsum_infer,
        kernel=_cumsum_kernel,
        fast_kernel=_cumsum_fast,
        traits=frozenset({PURE}),
        samples=_cumsum_samples,
        since_version=14,
        # XLA sums in a tree, NumPy in sequence: float32 running sums of 1e6 elements differ by
        # 1% (issue 10); integer sums are exact everywhere (onnxruntime's is sequential).
        engine_limits={
            "jax": EngineLimit("on floating-point input (XLA rounds a parallel scan)", float_input)
        },
    )
)


# -- TopK ----------------------------------------------------------------------------------


def _topk_infer(inputs: Sequence[TensorType | None], attrs: Mapping[str, Any]) -> list[TensorType]:
    x = require("TopK", "X", inputs[0])
    k_t = require("TopK", "K", inputs[1])
    require_dtype("TopK", "X", x, NUMERIC)
    if x.ndim == 0:
        raise OpArgumentError("TopK: input 'X' must have rank >= 1, got a 0-d tensor")
    if k_t.dtype != dtypes.int64:
        raise OpTypeError(f"TopK: input 'K' must be int64, got {k_t.dtype}")
    axis = normalize_axis("TopK", attrs["axis"], x.ndim)
    k = _single_int("TopK", "K", k_t)
    if k is None:  # computed at run time: the size along the axis is known then
        k = fresh_symbol("topk")
    if isinstance(k, int):
        size = x.shape[axis]
        if k < 0 or (isinstance(size, int) and k > size):
            raise OpArgumentError(
                f"TopK: K={k} is out of range for axis {axis} of input 'X' (shape "
                f"{format_shape(x.shape)}); expected 0 <= K <= {size}"
            )
    shape = tuple(k if i == axis else d for i, d in enumerate(x.shape))
    return [TensorType(x.dtype, shape), TensorType(dtypes.int64, shape)]


def _topk_kernel(
    x: np.ndarray, k: np.ndarray, *, axis: int = -1, largest: int = 1, sorted: int = 1
) -> tuple[np.ndarray, np.ndarray]:
    count = int(np.asarray(k).reshape(-1)[0])
    ax = axis % x.ndim
    data = _native(x)
    n = x.shape[ax]
    if not 0 <= count <= n:  # K may be known only now (see _topk_infer)
        raise OpArgumentError(
            f"TopK: K={count} is out of range for axis {ax} of input 'X' (shape "
            f"{format_shape(x.shape)}); expected 0 <= K <= {n}"
        )
    if largest:
        # A stable ascending sort of the reversed lane, read backwards, is descending with
        # ties in ascending index order.
        order = np.argsort(np.flip(data, axis=ax), axis=ax, kind="stable")
        order = (n - 1 - np.flip(order, axis=ax)) if n else order
    else:
        order = np.argsort(data, axis=ax, kind="stable")
    indices = np.take(order, np.arange(count), axis=ax).astype(np.int64)
    values = np.take_along_axis(x, indices, axis=ax)
    return values, indices


def topk_values(
    x: np.ndarray, k: np.ndarray, *, axis: int = -1, largest: int = 1, sorted: int = 1
) -> np.ndarray:
    """TopK's values alone, for a graph that never reads the indices: NumPy's (unstable,
    faster) value sort, which gives the stable sort's values bit for bit unless two equal
    values can be told apart (a NaN, or zeros of both signs in the input: then the kernel's
    stable order decides)."""
    count = int(np.asarray(k).reshape(-1)[0])
    ax = axis % x.ndim
    if not 0 <= count <= x.shape[ax] or x.dtype.kind == "c":
        return _topk_kernel(x, k, axis=axis, largest=largest, sorted=sorted)[0]  # (raises)
    data = _native(x)
    if data.dtype.kind == "f":
        zeros = data == 0
        signs = np.signbit(data[zeros]) if zeros.any() else None
        if (signs is not None and signs.any() and not signs.all()) or np.isnan(data).any():
            return _topk_kernel(x, k, axis=axis, largest=largest, sorted=sorted)[0]
    ordered = np.sort(data, axis=ax)
    if largest:
        ordered = np.flip(ordered, axis=ax)
    values = ordered[(slice(None),) * ax + (slice(0, count),)]
    return np.ascontiguousarray(values).astype(x.dtype, copy=False)


def _topk_reference(
    x: np.ndarray, k: np.ndarray, *, axis: int, largest: int, sorted: int
) -> tuple[np.ndarray, np.ndarray]:
    count = int(k.reshape(-1)[0])
    ax = axis % x.ndim
    moved = np.moveaxis(x, ax, -1)
    values = np.zeros(moved.shape[:-1] + (count,), dtype=x.dtype)
    indices = np.zeros(moved.shape[:-1] + (count,), dtype=np.int64)
    for idx in itertools.product(*(range(d) for d in moved.shape[:-1])):
        lane = list(enumerate(moved[idx].tolist()))
        lane.sort(key=lambda p: ((-p[1] if largest else p[1]), p[0]))
        for j, (i, v) in enumerate(lane[:count]):
            values[idx + (j,)] = v
            indices[idx + (j,)] = i
    return np.moveaxis(values, -1, ax), np.moveaxis(indices, -1, ax)


def _topk_samples() -> list[Sample]:
    out = []
    cases = (
        ((3, 5), 2, -1, 1, dtypes.float32),
        ((3, 5), 3, -1, 0, dtypes.float64),
        ((3, 6), 4, 1, 1, dtypes.int32),  # ties: values in {0, 1, 2}
        ((3, 6), 4, 1, 0, dtypes.int64),
        ((4, 3), 2, 0, 1, dtypes.uint8),
        ((2, 3, 4), 1, -2, 1, dtypes.float16),
        ((5,), 5, 0, 1, dtypes.int8),
        ((5,), 0, 0, 1, dtypes.float32),
        ((0, 4), 2, -1, 1, dtypes.float32),
        ((1,), 1, 0, 0, dtypes.float32),
    )
    for shape, k, axis, largest, dt in cases:
        low, high = (0, 3) if dtypes.is_integer(dt) else (-3, 3)
        x = sample_array(shape, dt, low, high)
        out.append(
            Sample(
                (x, np.asarray([k], dtype=np.int64)),
                {"axis": axis, "largest": largest},
                _topk_reference,
                name=f"{dt.name}{shape}k={k}axis={axis}largest={largest}",
            )
        )
    return out


register(
    OpDef(
        name="TopK",
        doc="The ``K`` largest (``largest=1``) or smallest elements along ``axis``, sorted, and "
        "their int64 indices; equal values keep the lower index first.",
        inputs=(Input("X"), Input("K")),
        outputs=("Values", "Indices"),
        attrs={"axis": Attr("int", -1), "largest": Attr("int", 1), "sorted": Attr("int", 1)},
        infer=_topk_infer,
        kernel=_topk_kernel,
        traits=frozenset({PURE, NEW_ARRAY}),
        samples=_topk_samples,
        since_version=11,
    )
)


# -- kiln.MaskedReduce: a sum or product over the elements a where= mask selects --------------

# NumPy's masked reduction (np.sum(x, where=m)) runs its inner loop on each run of selected
# elements apart (pairwise within a run, in sequence across runs), so a masked array summed
# whole rounds differently. The kernel is that reduce itself.
_MASKED_UFUNCS = {"add": np.add, "multiply": np.multiply}
_MASKED_IDENTITY = {"add": 0, "multiply": 1}
_MASKED_EXPANSION = {"add": "ReduceSum", "multiply": "ReduceProd"}


def _masked_infer(
    inputs: Sequence[TensorType | None], attrs: Mapping[str, Any]
) -> list[TensorType]:
    op = "kiln.MaskedReduce"
    data = require(op, "data", inputs[0])
    mask = require(op, "where", inputs[1])
    require_dtype(op, "data", data, FLOATS | COMPLEX)
    require_dtype(op, "where", mask, frozenset({dtypes.bool_}))
    if attrs["ufunc"] not in _MASKED_UFUNCS:
        raise OpArgumentError(f"{op}: ufunc={attrs['ufunc']!r} is not 'add' or 'multiply'")
    if broadcast(op, mask.shape, data.shape) != tuple(data.shape):
        raise OpArgumentError(
            f"{op}: the where mask of shape {format_shape(mask.shape)} does not broadcast to "
            f"the data's shape {format_shape(data.shape)}"
        )
    rank = len(data.shape)
    given = attrs["axes"]
    axes = range(rank) if given is None else [normalize_axis(op, a, rank) for a in given]
    return [TensorType(data.dtype, reduced_shape(data.shape, tuple(axes), bool(attrs["keepdims"])))]


def _masked_kernel(
    data: np.ndarray, where: np.ndarray, *, ufunc: str, axes: Any, keepdims: int
) -> np.ndarray:
    axis = None if axes is None else tuple(axes)
    reduce = _MASKED_UFUNCS[ufunc].reduce
    return np.asarray(reduce(data, axis=axis, where=where, keepdims=bool(keepdims)))


def _masked_reference(
    data: np.ndarray, where: np.ndarray, *, ufunc: str, axes: Any, keepdims: int
) -> np.ndarray:
    """The masked array's reduction, in complex128/float64: what the selected elements give."""
    wide = np.complex128 if data.dtype.kind == "c" else np.float64
    fill = np.asarray(_MASKED_IDENTITY[ufunc], wide)
    masked = np.where(np.broadcast_to(where, data.shape), data.astype(wide), fill)
    axis = None if axes is None else tuple(axes)
    result = _MASKED_UFUNCS[ufunc].reduce(masked, axis=axis, keepdims=bool(keepdims))
    return np.asarray(result).astype(data.dtype)


def _masked_samples() -> list[Sample]:
    cases = (
        ((3, 4), (3, 4), "add", (0,), 0, dtypes.float32),
        ((2, 3, 4), (4,), "add", None, 0, dtypes.float64),
        ((5, 6), (5, 1), "add", (-1,), 1, dtypes.float32),
        ((3, 4), (3, 4), "multiply", (1,), 0, dtypes.float64),
        ((0, 3), (0, 3), "add", (0,), 0, dtypes.float32),
        ((4,), (4,), "add", None, 1, dtypes.complex64),
    )
    out = []
    for shape, mask_shape, ufunc, axes, keepdims, dt in cases:
        data = sample_array(shape, dt, -3, 3)
        mask = sample_array(mask_shape, dtypes.bool_, 0, 1)
        attrs = {"ufunc": ufunc, "axes": axes, "keepdims": keepdims}
        name = f"{dt.name}{shape}{ufunc}axes={axes}"
        rtol = 1e-6 if dt.kind == "c" else None  # the reference sums in complex128
        out.append(Sample((data, mask), attrs, _masked_reference, name=name, rtol=rtol))
    return out


def _masked_expand(
    builder: Any, inputs: Sequence[Any], attrs: Mapping[str, Any], outputs: Sequence[Any]
) -> None:
    """The ONNX form: the masked-out elements set to the identity, then reduced."""
    data, where = inputs
    identity = np.asarray(_MASKED_IDENTITY[attrs["ufunc"]], data.dtype)
    (fill,) = builder.add("Constant", [], {"value": identity})  # nodes: no graph constants
    (masked,) = builder.add("Where", [where, data, fill])
    reduce_inputs = [masked]
    if attrs["axes"] is not None:
        axes = np.asarray(attrs["axes"], np.int64)
        reduce_inputs.append(builder.add("Constant", [], {"value": axes})[0])
    builder.add(
        _MASKED_EXPANSION[attrs["ufunc"]],
        reduce_inputs,
        {"keepdims": attrs["keepdims"]},
        outputs=[outputs[0]],
    )


register(
    OpDef(
        name="MaskedReduce",
        doc="NumPy's masked reduction, ``np.add.reduce(data, axes, where=where)`` (or "
        "multiply): the sum or product of the elements the where mask (broadcast to the data) "
        "selects, each run of selected elements reduced apart as NumPy does.",
        inputs=(Input("data"), Input("where")),
        outputs=("reduced",),
        attrs={
            "ufunc": Attr("str", "add", "'add' (a sum) or 'multiply' (a product)"),
            "axes": Attr("ints", None, "the axes reduced; None: every axis"),
            "keepdims": Attr("int", 0),
        },
        infer=_masked_infer,
        kernel=_masked_kernel,
        traits=frozenset({REDUCTION, PURE}),
        samples=_masked_samples,
        domain="kiln",
        expand=_masked_expand,
    )
)
