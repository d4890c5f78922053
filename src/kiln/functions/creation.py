"""Creation functions that may compute: ``kiln.zeros``, ``kiln.full``, ``kiln.arange``, ...

With static sizes they build a NumPy array and wrap it (as :func:`kiln.asarray` does). A size or
bound that is symbolic (inside a trace) or a tensor makes the result a computation instead: a
recorded ``ConstantOfShape`` or ``Range`` (:func:`~kiln.functions.shape.constant_of_shape`,
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
from ..spec import MAX_SIZE
from ..symbolic import SymDim
from ..tensor import Tensor, asarray, check_place, check_supported, unwrap
from .shape import constant_of_shape, range_

if TYPE_CHECKING:
    from ..dtypes import DTypeLike

__all__ = [
    "zeros",
    "ones",
    "full",
    "empty",
    "arange",
    "zeros_like",
    "ones_like",
    "full_like",
    "empty_like",
]


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


def full(
    shape: Any, fill_value: Any, dtype: DTypeLike | None = None, device: PlaceLike = None
) -> Tensor:
    """A tensor of ``shape`` filled with ``fill_value`` (NumPy's default dtypes).

    Sizes may be symbolic inside a trace (``kiln.zeros((x.shape[0], 4))``): the tensor is then
    computed by a recorded ``ConstantOfShape``.
    """
    check_place(device)
    want = None if dtype is None else dtypes.as_dtype(dtype)
    dims = _dims("full", shape)
    if not all(isinstance(d, int) for d in dims):
        return constant_of_shape(dims, fill_value, want)
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
    """A tensor of ``shape``; kiln tensors are immutable, so it is zero-filled."""
    return zeros(shape, dtype, device)


def _like(t: Any, dtype: DTypeLike | None) -> tuple[Any, np.dtype]:
    t = asarray(t)
    return t.shape, (t.dtype if dtype is None else dtypes.as_dtype(dtype))


def zeros_like(t: Any, dtype: DTypeLike | None = None) -> Tensor:
    """Zeros with the shape of ``t`` and its dtype (or ``dtype``), as ``np.zeros_like``."""
    shape, dt = _like(t, dtype)
    return full(shape, 0, dt)


def ones_like(t: Any, dtype: DTypeLike | None = None) -> Tensor:
    """Ones with the shape of ``t`` and its dtype (or ``dtype``), as ``np.ones_like``."""
    shape, dt = _like(t, dtype)
    return full(shape, 1, dt)


def full_like(t: Any, fill_value: Any, dtype: DTypeLike | None = None) -> Tensor:
    """``fill_value`` in the shape of ``t``, with its dtype (or ``dtype``), as ``np.full_like``."""
    shape, dt = _like(t, dtype)
    return full(shape, fill_value, dt)


def empty_like(t: Any, dtype: DTypeLike | None = None) -> Tensor:
    """``zeros_like``: kiln tensors are immutable, so an "empty" one is zero-filled."""
    return zeros_like(t, dtype)


def arange(
    start: Any,
    stop: Any = None,
    step: Any = 1,
    dtype: DTypeLike | None = None,
    device: PlaceLike = None,
) -> Tensor:
    """Evenly spaced values in ``[start, stop)``, as ``np.arange``."""
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
    return Tensor._wrap(array)
