"""Finite differences: ``kiln.gradient`` (NumPy's ``np.gradient``).

The lowering is NumPy's own algorithm on kiln tensors: each axis' result joins (``Concat``)
the one-sided differences at the two edges and the central differences inside, each piece
computed with NumPy's arithmetic and promotion (so a float32 field with a Python float spacing
stays float32, with a NumPy float64 spacing computes in float64 and rounds) and cast to the
result's dtype, as NumPy's assignment into its ``out`` array does. The spacing may be a scalar
(Python, NumPy, or a float argument kiln.compile made a graph input) or, per axis, the
coordinates as host values (a NumPy array or a list); their differences are computed here as
NumPy computes them.
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from .. import dtypes
from ..errors import UnsupportedOperationError
from ..ops.rules import normalize_axis
from ..symbolic import SymDim, decide, specialize
from ..tensor import Tensor, call
from .numpy_protocol import implements
from .operands import as_tensor, cast, constant

__all__ = ["gradient"]


def _slice(t: Tensor, axis: int, start: int, stop: int | None) -> Tensor:
    end = np.iinfo(np.int64).max if stop is None else stop
    starts = constant(np.asarray([start], dtype=np.int64))
    ends = constant(np.asarray([end], dtype=np.int64))
    return call("Slice", t, starts, ends, constant(np.asarray([axis], dtype=np.int64)))


def _ndim(v: Any) -> int:
    """``np.ndim(v)`` without reading a recorded value (a tensor, a float argument kiln.compile
    made a graph input)."""
    if isinstance(v, Tensor):
        return v.ndim
    if isinstance(v, (int, float, np.generic)):
        return 0
    return int(np.ndim(v))


def _spacing(distances: Any, size: int, name: str) -> Any:
    """One axis' spacing as NumPy's ``gradient`` holds it: a scalar as given, or the
    differences of 1-D coordinates (collapsed to their first when all equal)."""
    if isinstance(distances, Tensor):
        if distances.ndim == 0:
            return distances
        if distances._data is None or distances._trace is not None:
            raise UnsupportedOperationError(
                f"{name}: coordinates given as a recorded tensor; kiln records coordinates "
                "given as host values (a NumPy array or a list) or a scalar spacing"
            )
        distances = distances._data
    if _ndim(distances) == 0:
        return distances
    array = np.asanyarray(distances)
    if array.ndim != 1:
        raise ValueError("distances must be either scalars or 1d")
    if len(array) != size:
        raise ValueError("when 1d, distances must match the length of the corresponding dimension")
    if np.issubdtype(array.dtype, np.integer):
        array = array.astype(np.float64)
    diffx = np.diff(array)
    if (diffx == diffx[0]).all():
        return diffx[0]
    return diffx


def _combine(terms: list[tuple[Any, Tensor]]) -> Tensor:
    """``c0 * f0 + c1 * f1 + ...`` with NumPy's promotion (coefficients host values)."""
    result: Any = None
    for coef, f in terms:
        term = _mul(coef, f)
        result = term if result is None else result + term
    return result


def _mul(coef: Any, f: Tensor) -> Tensor:
    if isinstance(coef, np.ndarray) and coef.ndim:
        return as_tensor(coef) * f
    return coef * f


def _axis_gradient(f: Tensor, axis: int, dx: Any, edge_order: int, otype: np.dtype) -> Tensor:
    uniform = _ndim(dx) == 0
    shape = [1] * f.ndim

    def along(values: np.ndarray) -> np.ndarray:
        shape[axis] = -1
        return values.reshape(shape)

    def part(lo: int, hi: int | None) -> Tensor:
        return _slice(f, axis, lo, hi)

    # Interior: second order central differences.
    if uniform:
        inner = (part(2, None) - part(0, -2)) / (2.0 * dx)
    else:
        dx1, dx2 = dx[0:-1], dx[1:]
        a = -(dx2) / (dx1 * (dx1 + dx2))
        b = (dx2 - dx1) / (dx1 * dx2)
        c = dx1 / (dx2 * (dx1 + dx2))
        inner = _combine(
            [(along(a), part(0, -2)), (along(b), part(1, -1)), (along(c), part(2, None))]
        )
    if edge_order == 1:
        first = (part(1, 2) - part(0, 1)) / (dx if uniform else dx[0])
        last = (part(-1, None) - part(-2, -1)) / (dx if uniform else dx[-1])
    else:
        if uniform:
            a, b, c = -1.5 / dx, 2.0 / dx, -0.5 / dx
        else:
            dx1, dx2 = dx[0], dx[1]
            a = -(2.0 * dx1 + dx2) / (dx1 * (dx1 + dx2))
            b = (dx1 + dx2) / (dx1 * dx2)
            c = -dx1 / (dx2 * (dx1 + dx2))
        first = _combine([(a, part(0, 1)), (b, part(1, 2)), (c, part(2, 3))])
        if uniform:
            a, b, c = 0.5 / dx, -2.0 / dx, 1.5 / dx
        else:
            dx1, dx2 = dx[-2], dx[-1]
            a = (dx2) / (dx1 * (dx1 + dx2))
            b = -(dx2 + dx1) / (dx1 * dx2)
            c = (2.0 * dx2 + dx1) / (dx2 * (dx1 + dx2))
        last = _combine([(a, part(-3, -2)), (b, part(-2, -1)), (c, part(-1, None))])
    pieces = [cast(as_tensor(p), otype) for p in (first, inner, last)]
    return call("Concat", *pieces, axis=axis)


@implements(np.gradient)
def gradient(f: Any, *varargs: Any, axis: Any = None, edge_order: int = 1) -> Any:
    """The gradient of ``f`` by second order central differences inside and first (or, with
    ``edge_order=2``, second) order one-sided differences at the edges: NumPy's
    ``np.gradient``, bit-identical. One result per axis (a tuple when there are several),
    each of ``f``'s shape; integers give float64.

    Example:
        >>> import kiln
        >>> kiln.gradient(kiln.tensor([1.0, 2.0, 4.0, 7.0])).tolist()
        [1.0, 1.5, 2.5, 3.0]
    """
    t = as_tensor(f)
    ndim = t.ndim
    if axis is None:
        axes = tuple(range(ndim))
    else:
        items = tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)
        axes = tuple(
            normalize_axis("gradient", operator.index(a), ndim, scalar=False, numpy_wording=True)
            for a in items
        )
        if len(set(axes)) != len(axes):
            raise ValueError("repeated axis")
    # A dynamic axis keeps one graph (the edges are slices counted from either end) unless
    # coordinates must match its length.
    coordinates = len(varargs) == len(axes) and any(_ndim(v) for v in varargs)
    sizes: list[Any] = []
    for ax in axes:
        d = t.shape[ax]
        if isinstance(d, SymDim) and coordinates:
            d = specialize(d, f"gradient: the length {d} of axis {ax} against its coordinates")
        sizes.append(d)
    count = len(varargs)
    if count == 0:
        spacings: list[Any] = [1.0] * len(axes)
    elif count == 1 and _ndim(varargs[0]) == 0:
        spacings = list(varargs) * len(axes)
    elif count == len(axes):
        spacings = [_spacing(v, n, "gradient") for v, n in zip(varargs, sizes)]
    else:
        raise TypeError("invalid number of arguments")
    if edge_order > 2:
        raise ValueError("'edge_order' greater than 2 not supported")
    otype = t.dtype
    if not dtypes.is_floating(otype):
        if dtypes.is_integer(otype):
            t = cast(t, dtypes.float64)
        otype = dtypes.float64
    results = []
    for ax, n, dx in zip(axes, sizes, spacings):
        what = f"gradient: the length {n} of axis {ax}"
        if not decide(n, ">=", edge_order + 1, assume=True, what=what):
            raise ValueError(
                "Shape of array too small to calculate a numerical gradient, "
                "at least (edge_order + 1) elements are required."
            )
        results.append(_axis_gradient(t, ax, dx, edge_order, otype))
    if len(axes) == 1:
        return results[0]
    return tuple(results)
