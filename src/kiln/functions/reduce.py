"""Reduction front doors: ``kiln.sum``, ``kiln.mean``, ``kiln.max`` ... and NumPy's versions.

Each function has NumPy 2's name, signature and result dtype, and lowers onto the ``Reduce*``,
``ArgMax``/``ArgMin``, ``CumSum`` and ``TopK`` operators (:mod:`kiln.ops.reduce`), inserting a
``Cast`` where NumPy computes in another dtype: ``sum``/``prod``/``cumsum`` of bool and small
integers accumulate in int64 (unsigned: uint64), ``mean``/``var``/``std`` of integers in float64,
and ``mean`` of float16 in float32. Where an operator does not take a dtype that NumPy accepts
(``ReduceSum`` of int8, ``ArgMax`` of bool) the front door widens it losslessly and casts back.

``axis`` may be ``None`` (every axis), an int, a negative int, or a tuple of them; ``()`` reduces
nothing. The ufunc reduce methods are registered too: ``np.add.reduce(t)`` is ``sum(t, axis=0)``.

NumPy's ``where=`` mask and ``initial=`` value are recorded exactly: the masked-out elements are
replaced by the reduction's identity (or ``initial``) before reducing, and ``initial`` joins the
result (``sum``/``prod``/``max``/``min``/``any``/``all``/``mean`` and the ufunc reduce methods).
"""

from __future__ import annotations

import builtins
import operator
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import dtypes
from ..errors import OpArgumentError, OpTypeError, UnsupportedOperationError
from ..ops.reduce import ACCUMULATE_DTYPES, ORDERED_DTYPES
from ..ops.rules import normalize_axis
from ..symbolic import Dim, SymDim, decide, describe, floordiv, specialize
from ..symbolic import prod as dim_prod
from ..tensor import Tensor, call, dispatch, eager_plan
from .elementwise import add, multiply, subtract
from .numpy_protocol import implements
from .operands import (
    as_tensor,
    cast,
    constant,
    int_vector,
    shape_tensor,
    size_scalar,
    ufunc_operands,
)

__all__ = [
    "sum",
    "prod",
    "mean",
    "max",
    "min",
    "amax",
    "amin",
    "argmax",
    "argmin",
    "var",
    "std",
    "any",
    "all",
    "count_nonzero",
    "cumsum",
    "logsumexp",
    "topk",
    "median",
    "percentile",
    "quantile",
]


class _Unset:
    """Marks an argument the caller did not pass (NumPy's ``<no value>``)."""

    def __repr__(self) -> str:
        return "<no value>"


_UNSET: Any = _Unset()
_ARGMAX_DTYPES = frozenset(dtypes.NUMERIC_DTYPES)
_TOPK_DTYPES = frozenset(dtypes.NUMERIC_DTYPES)
_ELEMENTWISE_ORDERED = ORDERED_DTYPES - {dtypes.bool_}  # what Max/Min take


# -- helpers -------------------------------------------------------------------------------


def _reject(name: str, **options: Any) -> None:
    """Raise for NumPy options kiln does not implement (given and not at their default); a
    NumPy call on kiln tensors then falls back (see :mod:`kiln.functions.numpy_protocol`)."""
    if options.get("out") is not None:
        raise TypeError(f"{name}(..., out=...): recorded on ufuncs only (NumPy runs it)")
    for option in ("initial", "where", "mean"):
        value = options.get(option, _UNSET)
        if value is _UNSET or (option == "where" and value is True):
            continue
        raise UnsupportedOperationError(
            f"{name}(..., {option}=...) is not supported by kiln; compute it from the plain "
            f"reduction instead (e.g. kiln.where before reducing, or combine afterwards)"
        )


def _given(option: Any) -> bool:
    return option is not _UNSET


def _mask(name: str, x: Tensor, where: Any) -> Tensor:
    """NumPy's ``where=`` mask as a bool tensor, checked to broadcast to ``x``'s shape."""
    mask = as_tensor(where)
    if mask.dtype != dtypes.bool_:
        mask = cast(mask, dtypes.bool_)
    if mask.ndim > x.ndim or builtins.any(
        not (isinstance(m, int) and m == 1) and m != d
        for m, d in zip(mask.shape[::-1], x.shape[::-1], strict=False)
    ):
        raise ValueError(
            f"{name}: the where= mask of shape {describe(mask.shape)} does not broadcast to the "
            f"input's shape {describe(x.shape)}"
        )
    return mask


def _masked(name: str, x: Tensor, where: Any, fill: Any) -> Tensor:
    """``x`` with the elements outside NumPy's ``where=`` mask replaced by ``fill`` (the
    reduction's identity or ``initial``), so that reducing it reduces the masked elements."""
    if where is _UNSET or where is True:
        return x
    mask = _mask(name, x, where)
    if tuple(mask.shape) != tuple(x.shape):
        mask = call("Expand", mask, call("Shape", x))
    return call("Where", mask, x, constant(np.asarray(fill).astype(x.dtype)))


def _masked_reduce(
    name: str, ufunc: str, x: Tensor, where: Any, axes: tuple[int, ...] | None, keepdims: bool
) -> Tensor | None:
    """NumPy's masked sum or product of floats (``where=``), as NumPy computes it: each run of
    selected elements reduced apart (kiln.MaskedReduce); None where the mask selects all, or
    for other dtypes (integers: the masked array reduced whole is exact)."""
    if where is _UNSET or where is True:
        return None
    if (
        not (dtypes.is_floating(x.dtype) or dtypes.is_complex(x.dtype))
        or x.dtype == dtypes.bfloat16
    ):
        return None
    return call(
        "kiln.MaskedReduce",
        x,
        _mask(name, x, where),
        ufunc=ufunc,
        axes=None if axes is None else list(axes),
        keepdims=int(keepdims),
    )


# sum and prod: NumPy's ufunc for a masked float reduction, the reduction operator, the
# identity the masked-out elements take otherwise.
_ACCUMULATIONS = {"sum": ("add", "ReduceSum", 0), "prod": ("multiply", "ReduceProd", 1)}


def _accumulate(
    name: str, x: Tensor, axes: tuple[int, ...] | None, keepdims: bool, where: Any
) -> Tensor:
    """``x`` summed (``name`` "sum") or multiplied over ``axes``, within the ``where=`` mask."""
    ufunc, op, identity = _ACCUMULATIONS[name]
    total = _masked_reduce(name, ufunc, x, where, axes, keepdims)
    if total is not None:
        return total
    x = _masked(name, x, where, identity)
    return _in_supported(x, ACCUMULATE_DTYPES, lambda t: _reduce(op, t, axes, keepdims))


def _with_initial(op: str, result: Tensor, initial: Any, supported: frozenset[np.dtype]) -> Tensor:
    """``op(result, initial)``: NumPy's ``initial=`` joining a reduction's result."""
    if initial is _UNSET:
        return result
    value = np.asarray(initial).astype(result.dtype)

    def combine(t: Tensor) -> Tensor:
        return call(op, t, constant(value.astype(t.dtype)))

    return _in_supported(result, supported, combine)


def _check_initial(initial: Any) -> None:
    if initial is not _UNSET and (initial is None or np.ndim(initial) != 0):
        raise UnsupportedOperationError(
            f"initial={initial!r}: kiln records a scalar initial value only"
        )


def normalize_axis_arg(name: str, axis: Any, ndim: int) -> tuple[int, ...] | None:
    """NumPy's ``axis`` argument as sorted non-negative axes, or ``None`` for every axis.

    A 0-d input accepts axis 0 and -1 (as NumPy does) and reduces nothing.

    Example:
        >>> normalize_axis_arg("sum", (-1, 0), 3)
        (0, 2)
    """
    if axis is None:
        return None
    items = tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)
    result: list[int] = []
    for item in items:
        try:
            a = operator.index(item)
        except TypeError:
            raise TypeError(
                f"{name}: axis must be an int or a tuple of ints, got {type(item).__name__}"
            ) from None
        if ndim == 0 and a in (0, -1):
            continue
        result.append(normalize_axis(name, a, ndim, scalar=False, numpy_wording=True))
    if len(set(result)) != len(result):
        raise OpArgumentError(f"{name}: duplicate value in 'axis': {axis}")
    return tuple(sorted(result))


def _reduce(op: str, x: Tensor, axes: tuple[int, ...] | None, keepdims: bool) -> Tensor:
    """``op`` over ``axes`` (``None``: every axis; ``()``: none, each element on its own)."""
    if axes is None:
        return call(op, x, keepdims=int(keepdims))
    # One shared read-only tensor per axes: a tracer finds its graph constant by identity
    # (an unrolled loop reducing over the same axes builds no new constant each time).
    axes_t = int_vector(tuple(int(a) for a in axes))
    return call(op, x, axes_t, keepdims=int(keepdims), noop_with_empty_axes=int(not axes))


def _wide(dtype: np.dtype) -> np.dtype:
    """A dtype every reduction operator takes, holding ``dtype``'s values (mod 2**bits)."""
    if dtypes.is_floating(dtype) or dtypes.is_complex(dtype):
        return dtype  # complex: the operators that take it (Sum, Prod, Mean), others refuse
    if dtype in dtypes.UNSIGNED_DTYPES:
        return dtypes.uint64
    return dtypes.int64


def _in_supported(
    x: Tensor, supported: frozenset[np.dtype], compute: Callable[[Tensor], Tensor]
) -> Tensor:
    """``compute(x)``, widening ``x`` first (and narrowing the result back) when ``compute``'s
    operator does not take ``x.dtype``.

    Wrapping integer sums and products are exact this way: arithmetic modulo 2**64 reduces to
    arithmetic modulo 2**8 etc. when cast back.
    """
    if x.dtype in supported:
        return compute(x)
    return cast(compute(cast(x, _wide(x.dtype))), x.dtype)


def _accumulator(dtype: np.dtype) -> np.dtype:
    """The dtype NumPy's add/multiply reductions use: bool and small ints grow to 64 bits."""
    if dtype == dtypes.bool_ or dtype in dtypes.SIGNED_DTYPES:
        return dtypes.int64
    if dtype in dtypes.UNSIGNED_DTYPES:
        return dtypes.uint64
    return dtype


def _float_result(dtype: np.dtype) -> np.dtype:
    """The dtype NumPy's mean/var give: bool and integers become float64."""
    return dtype if dtypes.is_floating(dtype) or dtypes.is_complex(dtype) else dtypes.float64


def _reduced_dims(x: Tensor, axes: tuple[int, ...] | None) -> tuple[list[Dim], list[Dim]]:
    shape = x.shape
    red = range(len(shape)) if axes is None else axes
    reduced = [shape[i] for i in red]
    kept = [d for i, d in enumerate(shape) if i not in red]
    return reduced, kept


def _check_not_empty(name: str, ufunc: str, x: Tensor, axes: tuple[int, ...] | None) -> None:
    """Raise as NumPy does for a reduction without identity over an empty axis.

    A symbolic size is judged by the call being captured, and the answer becomes a shape guard
    (the graph refuses, and ``kiln.compile`` re-captures, a call where the axis is empty), so
    the graph never gives ONNX's identity (-inf/+inf) where NumPy raises.
    """
    reduced, _ = _reduced_dims(x, axes)
    count = dim_prod(reduced)
    if decide(count, "==", 0, assume=False, what=f"{name}: the size of the reduced axes {count}"):
        raise OpArgumentError(
            f"{name}: zero-size array to reduction operation {ufunc} which has no identity "
            f"(input shape {describe(x.shape)}, axis {_describe(axes, x.ndim)})"
        )


def _check_lanes(name: str, x: Tensor, length: Dim, axis: str) -> None:
    """Raise as NumPy does for an arg-reduction over an empty lane (a symbolic length is a
    shape guard of the capture, as in :func:`_check_not_empty`)."""
    if decide(length, "==", 0, assume=False, what=f"{name}: the length {length} of {axis}"):
        raise OpArgumentError(
            f"{name}: attempt to get {name} of an empty sequence (input shape "
            f"{describe(x.shape)}, {axis})"
        )


def _describe(axes: tuple[int, ...] | None, ndim: int) -> str:
    return "None" if axes is None else str(axes[0] if len(axes) == 1 else axes)


def _flatten(x: Tensor) -> Tensor:
    return x if x.ndim == 1 else call("Reshape", x, shape_tensor([-1]))


def _count(x: Tensor, axes: tuple[int, ...] | None) -> Dim:
    reduced, _ = _reduced_dims(x, axes)
    return dim_prod(reduced)


def _size_as(size: Dim, dtype: np.dtype) -> Tensor:
    """A 0-d tensor of ``dtype`` holding ``size`` (recorded from the shape when symbolic)."""
    if isinstance(size, int):
        return constant(np.asarray(size, dtype=dtype))
    flat = cast(shape_tensor([size]), dtype)
    return call("Reshape", flat, shape_tensor([]))


# -- sum, prod, mean -----------------------------------------------------------------------


@implements(np.sum)
@eager_plan(1)
def sum(  # noqa: A001 - NumPy's name
    a: Any,
    axis: Any = None,
    dtype: Any = None,
    out: Any = None,
    keepdims: bool = False,
    initial: Any = _UNSET,
    where: Any = _UNSET,
) -> Tensor:
    """The sum over ``axis`` (NumPy's ``np.sum``; bool and small integers sum in int64).

    Example:
        >>> import kiln
        >>> t = kiln.tensor([[1, 2], [3, 4]], dtype="int8")
        >>> kiln.sum(t, axis=-1).tolist(), kiln.sum(t).dtype
        ([3, 7], dtype('int64'))
    """
    _reject("sum", out=out)
    _check_initial(initial)
    x = as_tensor(a)
    target = dtypes.as_dtype(dtype) if dtype is not None else _accumulator(x.dtype)
    axes = normalize_axis_arg("sum", axis, x.ndim)
    total = _accumulate("sum", cast(x, target), axes, keepdims, where)
    return _with_initial("Add", total, initial, ACCUMULATE_DTYPES)


@implements(np.prod)
@eager_plan(1)
def prod(
    a: Any,
    axis: Any = None,
    dtype: Any = None,
    out: Any = None,
    keepdims: bool = False,
    initial: Any = _UNSET,
    where: Any = _UNSET,
) -> Tensor:
    """The product over ``axis`` (NumPy's ``np.prod``; small integers multiply in int64).

    Example:
        >>> import kiln
        >>> kiln.prod(kiln.tensor([[1, 2], [3, 4]]), axis=0).tolist()
        [3, 8]
    """
    _reject("prod", out=out)
    _check_initial(initial)
    x = as_tensor(a)
    target = dtypes.as_dtype(dtype) if dtype is not None else _accumulator(x.dtype)
    axes = normalize_axis_arg("prod", axis, x.ndim)
    total = _accumulate("prod", cast(x, target), axes, keepdims, where)
    return _with_initial("Mul", total, initial, ACCUMULATE_DTYPES)


@implements(np.mean)
@eager_plan(1)
def mean(
    a: Any,
    axis: Any = None,
    dtype: Any = None,
    out: Any = None,
    keepdims: bool = False,
    *,
    where: Any = _UNSET,
) -> Tensor:
    """The arithmetic mean over ``axis`` (NumPy's ``np.mean``).

    Integers and bool give float64; float16 is accumulated in float32 and returned as float16,
    as NumPy does. The mean of an empty axis is NaN.

    Example:
        >>> import kiln
        >>> kiln.mean(kiln.tensor([[1, 2], [3, 4]]), axis=1).tolist()
        [1.5, 3.5]
    """
    _reject("mean", out=out)
    x = as_tensor(a)
    if dtype is not None:
        compute = result = dtypes.as_dtype(dtype)
    else:
        result = _float_result(x.dtype)
        compute = dtypes.float32 if result == dtypes.float16 else result
    axes = normalize_axis_arg("mean", axis, x.ndim)
    if where is not _UNSET and where is not True:
        return _masked_mean(x, axes, keepdims, where, compute, result)
    reduced = _in_supported(
        cast(x, compute), ACCUMULATE_DTYPES, lambda t: _reduce("ReduceMean", t, axes, keepdims)
    )
    return cast(reduced, result)


def _masked_mean(
    x: Tensor,
    axes: tuple[int, ...] | None,
    keepdims: bool,
    where: Any,
    compute: np.dtype,
    result: np.dtype,
) -> Tensor:
    """NumPy's ``mean(..., where=mask)``: the masked sum over the number of masked elements
    (NaN where that is 0), divided in float64 for an integer count as NumPy does."""
    if not dtypes.is_floating(compute):
        raise UnsupportedOperationError(f"mean(..., dtype={compute}, where=...)")
    total = sum(x, axis=axes, dtype=compute, keepdims=keepdims, where=where)
    ones = call("Expand", constant(np.asarray(1, dtype=np.int64)), call("Shape", x))
    count = sum(ones, axis=axes, keepdims=keepdims, where=where)
    wide = dtypes.float64 if compute.itemsize <= 8 else compute
    quotient = call("Div", cast(total, wide), cast(count, wide))
    return cast(quotient, result)


# -- max, min ------------------------------------------------------------------------------


def _extreme(
    name: str,
    op: str,
    ufunc: str,
    a: Any,
    axis: Any,
    keepdims: bool,
    out: Any,
    initial: Any,
    where: Any,
) -> Tensor:
    _reject(name, out=out)
    _check_initial(initial)
    x = as_tensor(a)
    axes = normalize_axis_arg(name, axis, x.ndim)
    if initial is _UNSET:
        if where is not _UNSET and where is not True:
            raise ValueError(
                f"reduction operation '{ufunc}' does not have an identity, so to use a where "
                "mask one has to specify 'initial'"
            )
        if axes != ():
            _check_not_empty(name, ufunc, x, axes)
        return _in_supported(x, ORDERED_DTYPES, lambda t: _reduce(op, t, axes, keepdims))
    if axes != () and decide(
        _count(x, axes), "==", 0, assume=False, what=f"{name}: the size of the reduced axes"
    ):
        # Nothing to reduce: every result is ``initial`` (np.max(empty, initial=0) is 0).
        reduced = set(range(x.ndim)) if axes is None else set(axes)
        kept = (
            [1 if i in reduced else d for i, d in enumerate(x.shape)]
            if keepdims
            else [d for i, d in enumerate(x.shape) if i not in reduced]
        )
        value = constant(np.asarray(initial).astype(x.dtype))
        return call("Expand", value, shape_tensor(kept)) if kept else value
    x = _masked(name, x, where, initial)
    extreme = _in_supported(x, ORDERED_DTYPES, lambda t: _reduce(op, t, axes, keepdims))
    return _with_initial(op.removeprefix("Reduce"), extreme, initial, _ELEMENTWISE_ORDERED)


@implements(np.max, np.amax)
@eager_plan(1)
def max(  # noqa: A001 - NumPy's name
    a: Any,
    axis: Any = None,
    out: Any = None,
    keepdims: bool = False,
    initial: Any = _UNSET,
    where: Any = _UNSET,
) -> Tensor:
    """The maximum over ``axis`` (NumPy's ``np.max``/``np.amax``).

    Raises ``ValueError`` for an empty axis, as NumPy does.

    Example:
        >>> import kiln
        >>> kiln.max(kiln.tensor([[1, 5], [3, 4]]), axis=0).tolist()
        [3, 5]
    """
    return _extreme(
        "max", "ReduceMax", "maximum", a, axis, keepdims, out=out, initial=initial, where=where
    )


@implements(np.min, np.amin)
@eager_plan(1)
def min(  # noqa: A001 - NumPy's name
    a: Any,
    axis: Any = None,
    out: Any = None,
    keepdims: bool = False,
    initial: Any = _UNSET,
    where: Any = _UNSET,
) -> Tensor:
    """The minimum over ``axis`` (NumPy's ``np.min``/``np.amin``).

    Raises ``ValueError`` for an empty axis, as NumPy does.

    Example:
        >>> import kiln
        >>> kiln.min(kiln.tensor([[1, 5], [3, 4]]), axis=1).tolist()
        [1, 3]
    """
    return _extreme(
        "min", "ReduceMin", "minimum", a, axis, keepdims, out=out, initial=initial, where=where
    )


amax = max
amin = min


# -- argmax, argmin ------------------------------------------------------------------------


def _arg(name: str, op: str, a: Any, axis: Any, keepdims: bool, out: Any) -> Tensor:
    _reject(name, out=out)
    x = as_tensor(a)
    if x.dtype not in _ARGMAX_DTYPES:  # bool: ArgMax wants numbers; 0/1 keeps the order
        x = cast(x, dtypes.uint8)
    if axis is not None:
        ax = operator.index(axis)
        if x.ndim == 0 and ax in (0, -1):
            axis = None  # NumPy allows axis 0 of a 0-d array
        else:
            ax = normalize_axis(name, ax, x.ndim, scalar=False, numpy_wording=True)
            _check_lanes(name, x, x.shape[ax], f"axis {ax}")
            return call(op, x, axis=ax, keepdims=int(keepdims))
    _check_lanes(name, x, dim_prod(x.shape), "axis None")
    # axis=None: the index into the flattened array.
    flat = call("Reshape", x, shape_tensor([-1]))
    index = call(op, flat, axis=0, keepdims=0)
    if keepdims:
        index = call("Reshape", index, shape_tensor([1] * x.ndim))
    return index


@implements(np.argmax)
@eager_plan(1)
def argmax(a: Any, axis: Any = None, out: Any = None, *, keepdims: bool = False) -> Tensor:
    """The int64 index of the maximum along ``axis`` (``None``: of the flattened array); the
    first one among equal values.

    Example:
        >>> import kiln
        >>> kiln.argmax(kiln.tensor([[1, 5], [7, 4]])).item()
        2
    """
    return _arg("argmax", "ArgMax", a, axis, keepdims, out)


@implements(np.argmin)
@eager_plan(1)
def argmin(a: Any, axis: Any = None, out: Any = None, *, keepdims: bool = False) -> Tensor:
    """The int64 index of the minimum along ``axis`` (``None``: of the flattened array); the
    first one among equal values.

    Example:
        >>> import kiln
        >>> kiln.argmin(kiln.tensor([[1, 5], [7, 0]]), axis=1).tolist()
        [0, 1]
    """
    return _arg("argmin", "ArgMin", a, axis, keepdims, out)


# -- var, std ------------------------------------------------------------------------------


def _variance(
    name: str,
    a: Any,
    axis: Any,
    dtype: Any,
    out: Any,
    ddof: Any,
    keepdims: bool,
    where: Any,
    mean: Any,
    correction: Any,
) -> Tensor:
    _reject(name, out=out, where=where, mean=mean)
    if correction is not _UNSET:
        if ddof != 0:
            raise ValueError(f"{name}: ddof and correction can't be provided simultaneously.")
        ddof = correction
    x = as_tensor(a)
    compute = dtypes.as_dtype(dtype) if dtype is not None else _float_result(x.dtype)
    if not dtypes.is_floating(compute):
        raise OpTypeError(f"{name}: dtype={compute} is not supported; use a floating dtype")
    axes = normalize_axis_arg(name, axis, x.ndim)
    xf = cast(x, compute)
    # NumPy's two-pass formula: sum((x - mean)**2) / max(n - ddof, 0).
    centre = _reduce("ReduceMean", xf, axes, True)
    deviation = call("Sub", xf, centre)
    squares = _reduce("ReduceSumSquare", deviation, axes, keepdims)
    count = _count(x, axes)
    if isinstance(count, int):
        denominator = _size_as(builtins.max(count - ddof, 0), compute)
    else:
        denominator = _size_as(count - ddof if ddof else count, compute)
    return call("Div", squares, denominator)


@implements(np.var)
@eager_plan(1)
def var(
    a: Any,
    axis: Any = None,
    dtype: Any = None,
    out: Any = None,
    ddof: Any = 0,
    keepdims: bool = False,
    *,
    where: Any = _UNSET,
    mean: Any = _UNSET,
    correction: Any = _UNSET,
) -> Tensor:
    """The variance over ``axis``: ``sum((x - x.mean())**2) / (n - ddof)`` (NumPy's ``np.var``;
    integers give float64).

    Example:
        >>> import kiln
        >>> kiln.var(kiln.tensor([1.0, 2.0, 3.0, 4.0])).item()
        1.25
    """
    return _variance("var", a, axis, dtype, out, ddof, keepdims, where, mean, correction)


@implements(np.std)
@eager_plan(1)
def std(
    a: Any,
    axis: Any = None,
    dtype: Any = None,
    out: Any = None,
    ddof: Any = 0,
    keepdims: bool = False,
    *,
    where: Any = _UNSET,
    mean: Any = _UNSET,
    correction: Any = _UNSET,
) -> Tensor:
    """The standard deviation over ``axis``, the square root of :func:`var` (NumPy's ``np.std``).

    Example:
        >>> import kiln
        >>> kiln.std(kiln.tensor([1.0, 3.0])).item()
        1.0
    """
    variance = _variance("std", a, axis, dtype, out, ddof, keepdims, where, mean, correction)
    return call("Sqrt", variance)


# -- any, all, count_nonzero ---------------------------------------------------------------


@implements(np.any)
@eager_plan(1)
def any(  # noqa: A001 - NumPy's name
    a: Any, axis: Any = None, out: Any = None, keepdims: bool = False, *, where: Any = _UNSET
) -> Tensor:
    """Whether any element along ``axis`` is true (nonzero); bool result, False when empty.

    Example:
        >>> import kiln
        >>> kiln.any(kiln.tensor([[0, 0], [0, 3]]), axis=1).tolist()
        [False, True]
    """
    _reject("any", out=out)
    x = _masked("any", cast(as_tensor(a), dtypes.bool_), where, False)
    return _reduce("ReduceMax", x, normalize_axis_arg("any", axis, x.ndim), keepdims)


@implements(np.all)
@eager_plan(1)
def all(  # noqa: A001 - NumPy's name
    a: Any, axis: Any = None, out: Any = None, keepdims: bool = False, *, where: Any = _UNSET
) -> Tensor:
    """Whether every element along ``axis`` is true (nonzero); bool result, True when empty.

    Example:
        >>> import kiln
        >>> kiln.all(kiln.tensor([[1, 0], [2, 3]]), axis=1).tolist()
        [False, True]
    """
    _reject("all", out=out)
    x = _masked("all", cast(as_tensor(a), dtypes.bool_), where, True)
    return _reduce("ReduceMin", x, normalize_axis_arg("all", axis, x.ndim), keepdims)


@implements(np.count_nonzero)
@eager_plan(1)
def count_nonzero(a: Any, axis: Any = None, *, keepdims: bool = False) -> Tensor:
    """The number of nonzero elements along ``axis``, as int64.

    Example:
        >>> import kiln
        >>> kiln.count_nonzero(kiln.tensor([[0, 1], [2, 3]])).item()
        3
    """
    x = cast(cast(as_tensor(a), dtypes.bool_), dtypes.int64)
    return _reduce("ReduceSum", x, normalize_axis_arg("count_nonzero", axis, x.ndim), keepdims)


# -- cumsum --------------------------------------------------------------------------------


@implements(np.cumsum)
@eager_plan(1)
def cumsum(a: Any, axis: Any = None, dtype: Any = None, out: Any = None) -> Tensor:
    """Running sums along ``axis`` (``None``: of the flattened array), NumPy's ``np.cumsum``;
    bool and small integers sum in int64.

    Example:
        >>> import kiln
        >>> kiln.cumsum(kiln.tensor([[1, 2], [3, 4]])).tolist()
        [1, 3, 6, 10]
    """
    _reject("cumsum", out=out)
    x = as_tensor(a)
    target = dtypes.as_dtype(dtype) if dtype is not None else _accumulator(x.dtype)
    if axis is None:
        x = _flatten(x)
        ax = 0
    else:
        ax = operator.index(axis)
        ax = normalize_axis("cumsum", ax, x.ndim, scalar=False, numpy_wording=True)
    axis_t = constant(np.asarray(ax % x.ndim, dtype=np.int64))
    return _in_supported(cast(x, target), ACCUMULATE_DTYPES, lambda t: call("CumSum", t, axis_t))


# -- kiln-only: logsumexp, topk ------------------------------------------------------------


def logsumexp(x: Any, axis: Any = None, keepdims: bool = False) -> Tensor:
    """``log(sum(exp(x)))`` over ``axis``, computed stably (like ``scipy.special.logsumexp``):
    large inputs do not overflow. Integers give float64; an empty axis gives -inf.

    Example:
        >>> import kiln
        >>> round(kiln.logsumexp(kiln.tensor([1000.0, 1000.0])).item(), 4)
        1000.6931
    """
    t = as_tensor(x)
    t = cast(t, _float_result(t.dtype))
    axes = normalize_axis_arg("logsumexp", axis, t.ndim)
    return _reduce("ReduceLogSumExp", t, axes, keepdims)


def topk(x: Any, k: Dim | int, axis: int = -1, largest: bool = True) -> tuple[Tensor, Tensor]:
    """The ``k`` largest (or smallest) elements along ``axis``, sorted, and their int64 indices;
    among equal values the lower index comes first.

    Example:
        >>> import kiln
        >>> values, indices = kiln.topk(kiln.tensor([3, 1, 4, 1, 5]), 2)
        >>> values.tolist(), indices.tolist()
        ([5, 4], [4, 2])
    """
    t = as_tensor(x)
    if not isinstance(k, SymDim):
        k = operator.index(k)
    original = t.dtype
    if original not in _TOPK_DTYPES:  # bool
        t = cast(t, dtypes.uint8)
    k_t = shape_tensor([k])
    values, indices = dispatch("TopK", [t, k_t], {"axis": axis, "largest": int(largest)})
    return cast(values, original), indices


# -- median, percentile, quantile ----------------------------------------------------------
#
# NumPy partitions each lane and reads the order statistics it needs; kiln sorts each lane
# (``TopK`` with ``largest=0`` and K the lane length, one node for every median and percentile
# of an array once the optimizer merges them), takes the positions NumPy reads (``Slice``,
# ``Gather``) and combines them with NumPy's own arithmetic: ``mean`` of the one or two middle
# values for the median, NumPy's ``_lerp`` (``a + (b - a) * t``, or ``b - (b - a) * (1 - t)``
# when ``t >= 0.5``) for the "linear" quantile. For a static lane length the positions and
# weights are computed here as NumPy computes them; for a dynamic one the same arithmetic is
# recorded from the input's shape. A lane holding a NaN gives NaN, as in NumPy (found with
# ``IsNaN``, not from where a sort puts NaNs).


def _lanes(name: str, x: Tensor, axis: Any) -> tuple[Tensor, int, tuple[int, ...] | None]:
    """``x`` with the reduced axes merged into one last axis (NumPy's ``_ureduce``): the
    tensor, that axis, and the reduced axes (None: all) for ``keepdims``."""
    if axis is None:
        return (x if x.ndim == 1 else _flatten(x)), 0, None
    items = tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)
    axes = tuple(
        sorted(
            normalize_axis(name, operator.index(a), x.ndim, scalar=False, numpy_wording=True)
            for a in items
        )
    )
    if len(set(axes)) != len(axes):
        raise OpArgumentError(f"{name}: repeated axis in {axis}")
    if len(axes) == 1:
        return x, axes[0], axes
    keep = [i for i in range(x.ndim) if i not in axes]
    if keep + list(axes) != list(range(x.ndim)):
        x = call("Transpose", x, perm=(*keep, *axes))
    merged = call("Reshape", x, shape_tensor([*(x.shape[i] for i in range(len(keep))), -1]))
    return merged, len(keep), axes


def _keep_dims(result: Tensor, ndim: int, axes: tuple[int, ...] | None, lead: int) -> Tensor:
    """``result`` with size-1 axes where ``axes`` were reduced (after the ``lead`` axes of
    ``q``), as NumPy's ``keepdims=True``."""
    reduced = range(ndim) if axes is None else axes
    if not ndim:
        return result
    where = np.asarray([lead + i for i in reduced], dtype=np.int64)
    return call("Unsqueeze", result, constant(where))


def _sorted(x: Tensor, axis: int, n: Dim) -> Tensor:
    """Each lane of ``x`` along ``axis`` (of length ``n``) sorted ascending. The whole lane
    always, though fewer positions are read: a median and percentiles of one array then sort
    it once (one ``TopK`` node, the same for all, merged by the optimizer)."""
    values, _ = topk(x, n, axis=axis, largest=False)
    return values


def _nan_lanes(x: Tensor, axis: int, result: Tensor) -> Tensor:
    """``result`` with NaN where the lane of ``x`` along ``axis`` holds a NaN (the lanes
    broadcast against ``result``'s last axes)."""
    if not dtypes.is_floating(x.dtype):
        return result
    flags = call("ReduceMax", call("IsNaN", x), _axes_tensor([axis]), keepdims=0)
    return call("Where", flags, constant(np.asarray(np.nan, dtype=result.dtype)), result)


def _axes_tensor(axes: list[int]) -> Tensor:
    return int_vector(tuple(int(a) for a in axes))


@implements(np.median)
def median(
    a: Any, axis: Any = None, out: Any = None, overwrite_input: bool = False, keepdims: bool = False
) -> Tensor:
    """The median along ``axis`` (NumPy's ``np.median``): the mean of the one or two middle
    values of each sorted lane (so integers give float64), NaN for a lane holding a NaN and for
    an empty lane. ``axis`` may be a tuple; ``overwrite_input`` changes nothing in kiln.

    Example:
        >>> import kiln
        >>> kiln.median(kiln.tensor([[3, 1, 2, 10], [4, 6, 5, 0]]), axis=1).tolist()
        [2.5, 4.5]
    """
    _reject("median", out=out)
    x = as_tensor(a)
    if x.ndim == 0 and axis is None:
        return mean(x)
    lanes, ax, axes = _lanes("median", x, axis)
    n = lanes.shape[ax]
    what = f"median: the length {n} of the reduced axis"
    if isinstance(n, SymDim) and not decide(n, ">", 0, assume=True, what=what):
        n = 0
    if n == 0:
        result = mean(lanes, axis=ax)  # NaN, as NumPy's mean of nothing
    else:
        # The one or two middle positions: (n - 1) // 2 to n // 2 (computed from the input's
        # shape when the axis is dynamic, so one graph serves odd and even lengths).
        low, stop = floordiv(n - 1, 2), floordiv(n, 2) + 1
        middle = _slice(_sorted(lanes, ax, n), ax, low, stop)
        result = _nan_lanes(lanes, ax, mean(middle, axis=ax))
    return _keep_dims(result, x.ndim, axes, 0) if keepdims else result


def _slice(x: Tensor, axis: int, start: Dim, stop: Dim) -> Tensor:
    return call("Slice", x, shape_tensor([start]), shape_tensor([stop]), _axes_tensor([axis]))


def _host_quantiles(q: Any, name: str) -> Any:
    """``q`` as given, which must be host values: its values decide which elements are read.
    A tensor (an input, an implicit input, an array the function made) may change between
    calls, so it is refused (the call falls back)."""
    if isinstance(q, Tensor) or hasattr(q, "__kiln_tensor__"):
        raise UnsupportedOperationError(
            f"{name}: q given as a tensor or a changing float argument; kiln records q given "
            "as Python numbers or lists (their values decide which elements are read)"
        )
    return q


def _lerp(low: Tensor, high: Tensor, t: Any, at_least_half: bool) -> Tensor:
    """NumPy's ``_lerp``: ``a + (b - a) * t``, or ``b - (b - a) * (1 - t)`` where
    ``t >= 0.5``, with NumPy's promotion (``t`` a Python float when ``q`` was one)."""
    diff = subtract(high, low)
    if at_least_half:
        return subtract(high, multiply(diff, 1 - t))
    return add(low, multiply(diff, t))


def _quantile(
    name: str,
    a: Any,
    qs: np.ndarray,
    weak: bool,
    axis: Any,
    out: Any,
    method: str,
    keepdims: bool,
    weights: Any,
) -> Tensor:
    """NumPy's ``_quantile`` with ``method="linear"``, ``qs`` already checked."""
    _reject(name, out=out)
    if method != "linear":
        raise UnsupportedOperationError(f"{name}(..., method={method!r}): kiln records 'linear'")
    if weights is not None:
        raise UnsupportedOperationError(f"{name}(..., weights=...) is not supported by kiln")
    if qs.ndim > 2:
        raise ValueError("q must be a scalar or 1d")
    if qs.size == 0:
        raise UnsupportedOperationError(f"{name}: an empty q is not supported by kiln")
    x = as_tensor(a)
    lanes, ax, axes = _lanes(name, x, axis)
    if lanes.ndim == 0:
        lanes = call("Reshape", lanes, _axes_tensor([1]))
    n = lanes.shape[ax]
    if isinstance(n, SymDim):
        what = f"{name}: the length {n} of the reduced axis"
        if not decide(n, ">", 0, assume=True, what=what):
            n = 0
        elif qs.dtype not in (dtypes.float32, dtypes.float64):
            n = specialize(n, what)
    if n == 0:
        raise IndexError(
            f"{name}: index -1 is out of bounds for axis 0 with size 0 (the reduced axes of "
            f"the input of shape {describe(x.shape)} are empty)"
        )
    ordered = _sorted(lanes, ax, n)
    if isinstance(n, SymDim):
        results = _dynamic_quantiles(ordered, ax, n, qs, weak)
    else:
        results = _static_quantiles_at(ordered, ax, n, qs, weak)
    if qs.ndim == 0:
        result = results[0]
    else:
        zero = _axes_tensor([0])
        joined = call("Concat", *(call("Unsqueeze", r, zero) for r in results), axis=0)
        result = call("Reshape", joined, shape_tensor([*qs.shape, *joined.shape[1:]]), allowzero=1)
    result = _nan_lanes(lanes, ax, result)
    return _keep_dims(result, x.ndim, axes, qs.ndim) if keepdims else result


def _static_quantiles_at(
    ordered: Tensor, ax: int, n: int, qs: np.ndarray, weak: bool
) -> list[Tensor]:
    """The quantiles ``qs`` of the sorted lanes ``ordered`` (length ``n``), each lane's axis
    removed: positions and weights computed here as NumPy's ``_get_indexes`` and
    ``_get_gamma`` do, then ``Gather`` and NumPy's ``_lerp``."""
    virtual = np.asanyarray((n - 1) * qs)
    if virtual.dtype.kind in "iu":  # integer q: the elements themselves
        return [_gather(ordered, ax, int(p) % n) for p in virtual.ravel()]
    previous = np.array(np.floor(virtual))
    following = np.array(previous + 1)
    above = virtual >= n - 1
    previous[above] = following[above] = -1
    below = virtual < 0
    previous[below] = following[below] = 0
    previous, following = previous.astype(np.intp), following.astype(np.intp)
    gamma = np.asanyarray(virtual - previous, dtype=virtual.dtype)
    results = []
    for low, high, g in zip(previous.ravel(), following.ravel(), gamma.ravel()):
        a, b = _gather(ordered, ax, int(low) % n), _gather(ordered, ax, int(high) % n)
        t = float(g) if weak else np.asarray(g, dtype=gamma.dtype)
        results.append(_lerp(a, b, t, bool(g >= 0.5)))
    return results


def _gather(x: Tensor, axis: int, index: Any) -> Tensor:
    where = constant(np.int64(index)) if isinstance(index, int) else index
    return call("Gather", x, where, axis=axis)


def _dynamic_quantiles(
    ordered: Tensor, ax: int, n: SymDim, qs: np.ndarray, weak: bool
) -> list[Tensor]:
    """:func:`_static_quantiles_at` for a lane length known when the graph runs: the same
    arithmetic recorded from the input's shape (``(n - 1) * q`` in ``q``'s dtype, its floor,
    the weight), and both of ``_lerp``'s forms selected by ``t >= 0.5``."""
    qd = qs.dtype
    last = size_scalar(n - 1)  # int64, 0-d
    last_q = cast(last, qd)  # NumPy's weak Python int (n - 1) in q's dtype
    results = []
    for q in qs.ravel():
        virtual = call("Mul", last_q, constant(np.asarray(q, dtype=qd)))
        above = call("GreaterOrEqual", virtual, last_q)
        floor = cast(call("Floor", virtual), dtypes.int64)
        low = call("Where", above, last, floor)
        high = call("Where", above, last, call("Add", floor, constant(np.int64(1))))
        # NumPy's previous index is -1 above the last position; gamma = virtual - previous,
        # computed in float64 (float - intp) and cast back to q's dtype.
        previous = call("Where", above, constant(np.int64(-1)), floor)
        wide = call("Sub", cast(virtual, dtypes.float64), cast(previous, dtypes.float64))
        gamma = cast(wide, qd)
        a, b = _gather(ordered, ax, low), _gather(ordered, ax, high)
        diff = subtract(b, a)
        if weak:  # a Python float t: NumPy converts it (and 1 - t, in float64) to the loop
            _, loop = ufunc_operands(np.multiply, diff, 0.5)
            t = cast(gamma, loop)
            rest = cast(call("Sub", constant(np.float64(1.0)), cast(gamma, dtypes.float64)), loop)
        else:
            t, rest = gamma, subtract(1, gamma)
        lower = add(a, multiply(diff, t))
        upper = subtract(b, multiply(diff, rest))
        half = call("GreaterOrEqual", gamma, constant(np.asarray(0.5, dtype=qd)))
        results.append(call("Where", half, upper, lower))
    return results


@implements(np.percentile)
def percentile(
    a: Any,
    q: Any,
    axis: Any = None,
    out: Any = None,
    overwrite_input: bool = False,
    method: str = "linear",
    keepdims: bool = False,
    *,
    weights: Any = None,
    interpolation: Any = None,
) -> Tensor:
    """The ``q``-th percentiles (0 to 100) along ``axis``, NumPy's ``np.percentile`` with its
    default ``method="linear"``, bit-identical: the sorted neighbours of each virtual index
    ``(n - 1) * q / 100`` interpolated as NumPy's ``_lerp`` does. ``q`` may be a number or a
    sequence (its axes lead the result); NaN in a lane gives NaN.

    Example:
        >>> import kiln
        >>> kiln.percentile(kiln.tensor([1.0, 2.0, 3.0, 4.0]), [25, 50]).tolist()
        [1.75, 2.5]
    """
    if interpolation is not None:
        raise UnsupportedOperationError("percentile(..., interpolation=...) is deprecated")
    q = _host_quantiles(q, "percentile")
    weak = type(q) in (int, float)
    qs = np.true_divide(q, 100, out=...)
    if not _quantile_valid(qs):
        raise ValueError("Percentiles must be in the range [0, 100]")
    return _quantile("percentile", a, qs, weak, axis, out, method, keepdims, weights)


@implements(np.quantile)
def quantile(
    a: Any,
    q: Any,
    axis: Any = None,
    out: Any = None,
    overwrite_input: bool = False,
    method: str = "linear",
    keepdims: bool = False,
    *,
    weights: Any = None,
    interpolation: Any = None,
) -> Tensor:
    """The ``q``-th quantiles (0 to 1) along ``axis``, NumPy's ``np.quantile`` with
    ``method="linear"`` (see :func:`percentile`); integer ``q`` reads the elements themselves.

    Example:
        >>> import kiln
        >>> kiln.quantile(kiln.tensor([1.0, 2.0, 3.0, 4.0]), 0.5).tolist()
        2.5
    """
    if interpolation is not None:
        raise UnsupportedOperationError("quantile(..., interpolation=...) is deprecated")
    q = _host_quantiles(q, "quantile")
    weak = type(q) in (int, float)
    qs = np.asanyarray(q)
    if not _quantile_valid(qs):
        raise ValueError("Quantiles must be in the range [0, 1]")
    return _quantile("quantile", a, qs, weak, axis, out, method, keepdims, weights)


def _quantile_valid(qs: np.ndarray) -> bool:
    return bool(qs.size == 0 or (qs.min() >= 0 and qs.max() <= 1))


# -- ufunc.reduce methods ------------------------------------------------------------------


def _ufunc_reduce(
    name: str, impl: Callable[..., Tensor], has_dtype: bool, accepts_initial: bool = True
) -> Callable[..., Tensor]:
    def reduce(
        array: Any,
        axis: Any = 0,
        dtype: Any = None,
        out: Any = None,
        keepdims: bool = False,
        initial: Any = _UNSET,
        where: Any = _UNSET,
    ) -> Tensor:
        _reject(name, out=out)
        options = {"where": where} if _given(where) else {}
        if _given(initial):
            if not accepts_initial:
                raise UnsupportedOperationError(f"{name}(..., initial=...)")
            options["initial"] = initial
        if has_dtype:
            return impl(array, axis=axis, dtype=dtype, keepdims=keepdims, **options)
        x = as_tensor(array)
        if dtype is not None:
            x = cast(x, dtypes.as_dtype(dtype))
        return impl(x, axis=axis, keepdims=keepdims, **options)

    reduce.__name__ = reduce.__qualname__ = name.replace(".", "_")
    reduce.__doc__ = (
        f"``{name}(array, axis=0, dtype=None, keepdims=False)`` on kiln tensors "
        f"(``axis=None`` reduces every axis)."
    )
    return reduce


implements(np.add, method="reduce")(_ufunc_reduce("np.add.reduce", sum, True))
implements(np.multiply, method="reduce")(_ufunc_reduce("np.multiply.reduce", prod, True))
implements(np.maximum, method="reduce")(_ufunc_reduce("np.maximum.reduce", max, False))
implements(np.minimum, method="reduce")(_ufunc_reduce("np.minimum.reduce", min, False))
implements(np.logical_or, method="reduce")(
    _ufunc_reduce("np.logical_or.reduce", any, False, accepts_initial=False)
)
implements(np.logical_and, method="reduce")(
    _ufunc_reduce("np.logical_and.reduce", all, False, accepts_initial=False)
)
