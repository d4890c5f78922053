"""Creation functions that may compute: ``kiln.zeros``, ``kiln.full``, ``kiln.arange``, ...

Eagerly, with static sizes, they build a NumPy array and wrap it (as :func:`kiln.asarray`
does). Inside a capture (a tracer is installed) every array they create is *recorded* instead:
a fresh, writable tensor that the graph computes, never a graph constant that a later write
would have to refuse or copy. ``zeros``/``ones``/``full``/``empty`` and the ``*_like`` functions
record a ``ConstantOfShape`` (over a constant shape, or over the recorded sizes of a dynamic
axis, so ``zeros_like(x)`` stays dynamic); ``arange``, ``linspace`` and ``eye`` record a
``Range`` and the arithmetic NumPy does on it. A size or bound that is symbolic or a tensor
records the same way (:func:`~kiln.functions.shape.constant_of_shape`,
:func:`~kiln.functions.shape.range_`). ``kiln.tensor`` and ``kiln.asarray``, which only wrap
data, live with ``Tensor`` in :mod:`kiln.tensor`.
"""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import dtypes
from ..device import PlaceLike
from ..errors import ArgumentError, ArgumentTypeError, OpArgumentError
from ..ops.dispatch import handler_now
from ..spec import MAX_SIZE
from ..symbolic import SymDim
from ..tensor import Tensor, asarray, call, check_place, check_supported, unwrap
from .numpy_protocol import implements
from .operands import cast, constant, shape_tensor
from .shape import constant_of_shape, range_

if TYPE_CHECKING:
    from ..dtypes import DTypeLike

__all__ = [
    "zeros",
    "ones",
    "full",
    "empty",
    "arange",
    "linspace",
    "eye",
    "identity",
    "zeros_like",
    "ones_like",
    "full_like",
    "empty_like",
]

_INT64 = np.dtype(np.int64)
_FLOAT64 = np.dtype(np.float64)
_ORDERS = ("C", "F", "A", "K")


def _dims(where: str, shape: Any) -> tuple[Any, ...]:
    """``shape`` (a size or a sequence of sizes) as a tuple of ints, symbolic sizes or integer
    tensors, or an error naming the entry that is none of those (as NumPy's TypeError)."""
    if isinstance(shape, (int, np.integer, SymDim, Tensor)):
        entries: tuple[Any, ...] = (shape,)
    elif isinstance(shape, (str, bytes)) or not hasattr(shape, "__iter__"):
        raise ArgumentTypeError(
            f"{where}: 'shape' must be an int or a sequence of ints, got "
            f"{type(shape).__name__} {shape!r}"
        )
    else:
        entries = tuple(shape)
    dims: list[Any] = []
    static = 1
    for d in entries:
        if isinstance(d, SymDim) or (isinstance(d, Tensor) and d.dtype.kind in "iu"):
            dims.append(d)
            continue
        if isinstance(d, (bool, np.bool_)) or not hasattr(d, "__index__"):
            raise ArgumentTypeError(
                f"{where}: 'shape' entries must be ints, got {type(d).__name__} {d!r} in "
                f"{entries!r}"
            )
        size = operator.index(d)
        if size < 0:
            raise OpArgumentError(f"{where}: negative size in shape {entries}")
        static *= size
        if size > MAX_SIZE or static > MAX_SIZE:
            raise ArgumentError(
                f"{where}: shape {entries} holds more than {MAX_SIZE} (2**63 - 1) elements, "
                "more than any array can"
            )
        dims.append(size)
    return tuple(dims)


def _check_order(where: str, order: Any) -> None:
    if not (isinstance(order, str) and order.upper() in _ORDERS):
        raise ValueError(f"{where}: order must be one of 'C', 'F', 'A', or 'K' (got {order!r})")


def fresh(t: Tensor) -> Tensor:
    """A recorded copy of ``t`` (an ``Identity``): inside a capture, a tensor that the graph
    computes and whose values are not the memory of ``t`` (a constant, a view)."""
    return call("Identity", t)


def _fill_scalar(fill_value: Any, dtype: np.dtype | None) -> np.ndarray:
    """``fill_value`` as the 0-d array of ``dtype`` that NumPy's ``full`` writes (an unsafe
    cast, as its ``copyto``); ``dtype=None`` takes the value's own dtype."""
    want = np.asarray(fill_value).dtype if dtype is None else dtype
    out = np.empty((), dtype=want)
    np.copyto(out, fill_value, casting="unsafe")  # a Python int out of range: OverflowError
    return out


def _recorded_full(dims: tuple[Any, ...], fill_value: Any, want: np.dtype | None) -> Tensor:
    """``full`` as recorded computations: ``ConstantOfShape`` for a scalar fill, the fill
    broadcast (``Expand``) and copied otherwise."""
    if isinstance(fill_value, float) and hasattr(fill_value, "__kiln_tensor__"):
        fill_value = constant(fill_value)  # a float argument made a graph input: its tensor
    if isinstance(fill_value, Tensor):
        target = fill_value.dtype if want is None else want
        return fresh(call("Expand", cast(fill_value, target), shape_tensor(list(dims))))
    value = np.asarray(unwrap(fill_value))
    if value.ndim:  # an array fill, broadcast to the shape as NumPy's copyto does
        target = value.dtype if want is None else want
        return fresh(call("Expand", constant(value.astype(target)), shape_tensor(list(dims))))
    scalar = _fill_scalar(unwrap(fill_value), want)
    check_supported(scalar)
    return constant_of_shape(dims, scalar, scalar.dtype)


def full(
    shape: Any, fill_value: Any, dtype: DTypeLike | None = None, device: PlaceLike = None
) -> Tensor:
    """A tensor of ``shape`` filled with ``fill_value`` (NumPy's default dtypes).

    Inside a capture the tensor is recorded (a ``ConstantOfShape``, sizes symbolic or not), so
    it is a fresh array the function may write into.
    """
    check_place(device)
    want = None if dtype is None else dtypes.as_dtype(dtype)
    dims = _dims("full", shape)
    if handler_now() is not None or not all(isinstance(d, int) for d in dims):
        return _recorded_full(dims, fill_value, want)
    array = np.full(dims, unwrap(fill_value), dtype=want)
    check_supported(array)
    return Tensor._wrap(array)


def zeros(shape: Any, dtype: DTypeLike | None = None, device: PlaceLike = None) -> Tensor:
    """A tensor of zeros (float64 unless ``dtype`` says otherwise, as NumPy)."""
    return full(shape, 0, dtypes.float64 if dtype is None else dtype, device)


def ones(shape: Any, dtype: DTypeLike | None = None, device: PlaceLike = None) -> Tensor:
    """A tensor of ones (float64 unless ``dtype`` says otherwise, as NumPy)."""
    return full(shape, 1, dtypes.float64 if dtype is None else dtype, device)


def empty(shape: Any, dtype: DTypeLike | None = None, device: PlaceLike = None) -> Tensor:
    """A tensor of ``shape``: NumPy leaves its contents unspecified; kiln zero-fills it."""
    return zeros(shape, dtype, device)


def _like(t: Any, dtype: DTypeLike | None, shape: Any) -> tuple[Any, np.dtype]:
    """The shape (symbolic axes kept) and dtype of a ``*_like`` result."""
    if not isinstance(t, Tensor):
        t = asarray(t)
    dt = t.dtype if dtype is None else dtypes.as_dtype(dtype)
    return (t.shape if shape is None else shape), dt


@implements(np.zeros_like)
def zeros_like(
    t: Any,
    dtype: DTypeLike | None = None,
    order: str = "K",
    subok: bool = True,
    shape: Any = None,
    *,
    device: PlaceLike = None,
) -> Tensor:
    """Zeros with the shape of ``t`` and its dtype (or ``dtype``), as ``np.zeros_like``.
    Inside a capture a dynamic axis of ``t`` stays dynamic (its size is read by ``Shape``)."""
    _check_order("zeros_like", order)
    size, dt = _like(t, dtype, shape)
    return full(size, 0, dt, device)


@implements(np.ones_like)
def ones_like(
    t: Any,
    dtype: DTypeLike | None = None,
    order: str = "K",
    subok: bool = True,
    shape: Any = None,
    *,
    device: PlaceLike = None,
) -> Tensor:
    """Ones with the shape of ``t`` and its dtype (or ``dtype``), as ``np.ones_like``."""
    _check_order("ones_like", order)
    size, dt = _like(t, dtype, shape)
    return full(size, 1, dt, device)


@implements(np.full_like)
def full_like(
    t: Any,
    fill_value: Any,
    dtype: DTypeLike | None = None,
    order: str = "K",
    subok: bool = True,
    shape: Any = None,
    *,
    device: PlaceLike = None,
) -> Tensor:
    """``fill_value`` in the shape of ``t``, with its dtype (or ``dtype``), as ``np.full_like``
    (the value cast unsafely, as NumPy: ``full_like(int_array, 2.7)`` holds 2)."""
    _check_order("full_like", order)
    size, dt = _like(t, dtype, shape)
    return full(size, fill_value, dt, device)


@implements(np.empty_like)
def empty_like(
    t: Any,
    dtype: DTypeLike | None = None,
    order: str = "K",
    subok: bool = True,
    shape: Any = None,
    *,
    device: PlaceLike = None,
) -> Tensor:
    """``zeros_like``: NumPy leaves an "empty" array's contents unspecified; kiln zero-fills."""
    return zeros_like(t, dtype, order, subok, shape, device=device)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float, np.number)) and not isinstance(v, (bool, np.bool_))


def _recorded_range(values: np.ndarray, start: Any, step: Any) -> Tensor:
    """``values`` (NumPy's ``arange``/``linspace`` result, computed once on the host) as the
    recorded ``Range`` and arithmetic that give exactly those values: ``start + i * delta``
    for a float range (NumPy's fill), a cast ``Range`` for an integer one. Anything the
    arithmetic does not reproduce bit for bit is recorded as a copied constant."""
    dt = values.dtype
    n = values.shape[0]
    if dt.kind in "iu" and all(isinstance(v, (int, np.integer)) for v in (start, step)):
        result = range_(int(start), int(start) + n * int(step), int(step), dt)
    elif dt.kind == "f" and n >= 2:
        first, delta = values[0], values[1] - values[0]
        index = cast(range_(0, n, 1, _INT64), dt)
        result = call("Add", call("Mul", index, constant(delta)), constant(first))
    else:
        return fresh(constant(values))
    data = result._data
    if data is not None and not np.array_equal(data, values, equal_nan=dt.kind == "f"):
        return fresh(constant(values))  # not NumPy's values to the last bit: the constant
    return result


def arange(
    start: Any,
    stop: Any = None,
    step: Any = 1,
    dtype: DTypeLike | None = None,
    device: PlaceLike = None,
) -> Tensor:
    """Evenly spaced values in ``[start, stop)``, as ``np.arange``.

    Inside a capture the values are recorded (``Range``, and for a float range NumPy's
    ``start + i * delta``), not stored as a constant.
    """
    check_place(device)
    if stop is None:
        start, stop = 0, start
    want = None if dtype is None else dtypes.as_dtype(dtype)
    if isinstance(step, (int, float, np.number)) and step == 0:
        raise ArgumentError(f"arange: 'step' must not be 0 (start={start!r}, stop={stop!r})")
    if not all(isinstance(v, (int, float, np.number)) for v in (start, stop, step)):
        return range_(start, stop, step, want)  # symbolic bounds: a recorded Range
    try:
        array = np.arange(start, stop, step, dtype=want)
    except (ValueError, ZeroDivisionError) as exc:  # an infinite, NaN or too long range
        raise ArgumentError(
            f"arange({start!r}, {stop!r}, {step!r}): {exc}; the bounds and the step must be "
            "finite and give at most 2**63 - 1 values"
        ) from exc
    check_supported(array)
    if handler_now() is not None:
        return _recorded_range(array, start, step)
    return Tensor._wrap(array)


def linspace(
    start: Any,
    stop: Any,
    num: int = 50,
    endpoint: bool = True,
    retstep: bool = False,
    dtype: DTypeLike | None = None,
    axis: int = 0,
    *,
    device: PlaceLike = None,
) -> Any:
    """``num`` evenly spaced values from ``start`` to ``stop``, as ``np.linspace`` (scalar
    bounds; inside a capture recorded as ``Range`` and NumPy's arithmetic on it)."""
    check_place(device)
    if not (_is_number(start) and _is_number(stop)):
        raise ArgumentTypeError(
            f"linspace: kiln takes scalar bounds, got start={start!r}, stop={stop!r}; use "
            "np.linspace on arrays outside a compiled function"
        )
    want = None if dtype is None else dtypes.as_dtype(dtype)
    values, step = np.linspace(start, stop, num, endpoint, retstep=True, dtype=want, axis=axis)
    check_supported(values)
    if handler_now() is None:
        result = Tensor._wrap(values)
    else:
        result = _recorded_linspace(values, start, stop, endpoint)
    return (result, step) if retstep else result


def _recorded_linspace(values: np.ndarray, start: Any, stop: Any, endpoint: bool) -> Tensor:
    """NumPy's ``linspace`` arithmetic, recorded: ``i * step + start`` in the computation dtype
    (``result_type(start, stop, float(num))``), the last value set to ``stop`` (``endpoint``),
    floored for an integer dtype, cast; checked bit for bit against ``values`` (NumPy's result,
    computed once on the host), else recorded as a copied constant."""
    n = values.shape[0]
    div = n - 1 if endpoint else n
    if div <= 0 or values.dtype.kind not in "iuf":
        return fresh(constant(values))
    comp = np.result_type(start, stop, float(n))
    delta = np.subtract(stop, start, dtype=comp)
    step = delta / div
    index = range_(0, n, 1, _INT64)
    y = call("Mul", cast(index, comp), constant(np.asarray(step, comp)))
    y = call("Add", y, constant(np.asarray(start, comp)))
    if endpoint:
        last = call("Equal", index, constant(np.int64(n - 1)))
        y = call("Where", last, constant(np.asarray(stop, comp)), y)
    if values.dtype.kind in "iu":
        y = call("Floor", y)
    result = cast(y, values.dtype)
    data = result._data
    if data is not None and not np.array_equal(data, values, equal_nan=True):
        return fresh(constant(values))  # not NumPy's values to the last bit: the constant
    return result


def eye(
    N: Any,  # noqa: N803 - NumPy's name
    M: Any = None,  # noqa: N803 - NumPy's name
    k: int = 0,
    dtype: DTypeLike | None = dtypes.float64,
    device: PlaceLike = None,
) -> Tensor:
    """A 2-D tensor with ones on the ``k``-th diagonal and zeros elsewhere, as ``np.eye``.

    Inside a capture (or with a symbolic size) it is recorded: two ``Range``s compared
    (``Equal(row + k, column)``) and cast to ``dtype``.
    """
    check_place(device)
    want = _FLOAT64 if dtype is None else dtypes.as_dtype(dtype)
    rows = N
    cols = N if M is None else M
    k = operator.index(k)
    static = all(isinstance(d, (int, np.integer)) for d in (rows, cols))
    if static and handler_now() is None:
        array = np.eye(operator.index(rows), operator.index(cols), k, dtype=want)
        check_supported(array)
        return Tensor._wrap(array)
    _dims("eye", (rows, cols))
    r = call("Unsqueeze", range_(0, rows, 1, _INT64), constant(np.asarray([1], _INT64)))
    c = call("Unsqueeze", range_(0, cols, 1, _INT64), constant(np.asarray([0], _INT64)))
    if k:
        r = call("Add", r, constant(np.int64(k)))
    mask = call("Equal", r, c)
    return mask if want == dtypes.bool_ else cast(mask, want)


def identity(n: Any, dtype: DTypeLike | None = None, device: PlaceLike = None) -> Tensor:
    """The ``n`` x ``n`` identity matrix (float64 unless ``dtype``), as ``np.identity``."""
    return eye(n, dtype=dtype, device=device)
