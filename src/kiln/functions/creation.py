"""Creation functions that may compute: ``kiln.zeros``, ``kiln.full``, ``kiln.arange``, ...

With static sizes they build a NumPy array and wrap it (as :func:`kiln.asarray` does). A size or
bound that is symbolic (inside a trace) or a tensor makes the result a computation instead: a
recorded ``ConstantOfShape`` or ``Range`` (:func:`~kiln.functions.shape.constant_of_shape`,
:func:`~kiln.functions.shape.range_`). ``kiln.tensor`` and ``kiln.asarray``, which only wrap
data, live with ``Tensor`` in :mod:`kiln.tensor`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .. import dtypes
from ..device import PlaceLike
from ..errors import OpArgumentError
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


def _dims(shape: Any) -> tuple[Any, ...]:
    if isinstance(shape, (int, np.integer, SymDim)):
        return (shape,)
    return tuple(shape)


def full(
    shape: Any, fill_value: Any, dtype: DTypeLike | None = None, device: PlaceLike = None
) -> Tensor:
    """A tensor of ``shape`` filled with ``fill_value`` (NumPy's default dtypes).

    Sizes may be symbolic inside a trace (``kiln.zeros((x.shape[0], 4))``): the tensor is then
    computed by a recorded ``ConstantOfShape``.
    """
    check_place(device)
    want = None if dtype is None else dtypes.as_dtype(dtype)
    dims = _dims(shape)
    if not all(isinstance(d, (int, np.integer)) for d in dims):
        return constant_of_shape(dims, fill_value, want)
    if any(int(d) < 0 for d in dims):
        raise OpArgumentError(f"full: negative size in shape {dims}")
    array = np.full(tuple(int(d) for d in dims), unwrap(fill_value), dtype=want)
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
    if not all(isinstance(v, (int, float, np.number)) for v in (start, stop, step)):
        return range_(start, stop, step, want)  # symbolic bounds: a recorded Range
    array = np.arange(start, stop, step, dtype=want)
    check_supported(array)
    return Tensor._wrap(array)
