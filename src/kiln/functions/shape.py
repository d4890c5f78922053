"""Shape and layout front doors (``kiln.reshape``, ``kiln.concatenate``, indexing, ...).

Each function follows its NumPy 2 namesake (signature, dtypes, errors) and lowers onto the
shape-family operators of :mod:`kiln.ops.shape` through :func:`~kiln.tensor.call`, so it is
recorded inside a trace. Sizes may be symbolic there: shape-like operands are built with
:func:`~kiln.functions.operands.shape_tensor` or taken from a recorded ``Shape``, never from
host values, and plain int bounds rely on the operators' clamping, which works for every size.

:func:`getitem` implements NumPy's indexing (``Tensor.__getitem__``) and :func:`index_update`
the functional form of ``c = a.copy(); c[index] = value``.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import dtypes
from ..errors import ArgumentTypeError, OpArgumentError, UnsupportedOperationError
from ..ops.dispatch import current_handler
from ..ops.rules import normalize_axis
from ..ops.shape import INT64_MAX, INT64_MIN
from ..symbolic import (
    Dim,
    Shape,
    SymDim,
    broadcast_shapes,
    decide,
    describe,
    floordiv,
    format_shape,
    specialize,
)
from ..tensor import Tensor, call, eager_plan
from .numpy_protocol import implements
from .operands import (
    as_tensor,
    cast,
    constant,
    int_vector,
    is_scalar,
    new_array,
    new_view,
    same_dtype_operands,
    shape_tensor,
)

__all__ = [
    "reshape",
    "ravel",
    "transpose",
    "matrix_transpose",
    "swapaxes",
    "moveaxis",
    "squeeze",
    "expand_dims",
    "concatenate",
    "stack",
    "hstack",
    "vstack",
    "split",
    "array_split",
    "pad",
    "tile",
    "take",
    "take_along_axis",
    "broadcast_to",
    "flip",
    "tril",
    "triu",
    "atleast_1d",
    "atleast_2d",
    "atleast_3d",
    "roll",
    "diag",
    "diagonal",
    "nonzero",
    "argwhere",
    "constant_of_shape",
    "range_",
    "getitem",
    "index_update",
]

_INT64 = dtypes.int64


# -- small helpers -------------------------------------------------------------------------


def _i64(values: Sequence[int]) -> Tensor:
    """A constant 1-D int64 tensor (shared per contents: an operator's input only)."""
    return int_vector(tuple([operator.index(v) for v in values]))


def _axis(axis: Any, ndim: int) -> int:
    """``axis`` normalised to ``[0, ndim)``, raising AxisError (NumPy's too) otherwise."""
    return normalize_axis("", operator.index(axis), ndim, scalar=False, numpy_wording=True)


def _axes(axis: Any, ndim: int) -> tuple[int, ...]:
    """An int or a sequence of ints normalised; repeats raise ValueError as NumPy does."""
    items = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    result = tuple(_axis(a, ndim) for a in items)
    if len(set(result)) != len(result):
        raise ValueError("repeated axis")
    return result


def _dims(shape: Any) -> tuple[Any, ...]:
    if isinstance(shape, (int, np.integer, SymDim)) or (
        isinstance(shape, Tensor) and shape.ndim == 0
    ):
        return (shape,)
    return tuple(shape)


def _no_out(name: str, out: Any) -> None:
    if out is not None:
        raise TypeError(f"{name}(..., out=...): recorded on ufuncs only")


def _static(d: Dim) -> bool:
    return isinstance(d, int)


# -- reshape and friends -------------------------------------------------------------------


@implements(np.reshape)
@eager_plan(1)
def reshape(
    a: Any, shape: Any = None, order: str = "C", *, newshape: Any = None, copy: Any = None
) -> Tensor:
    """``a`` with a new shape; one entry may be -1. Entries may be ints, symbolic sizes
    (inside a trace) or 0-d integer tensors.

    Example:
        >>> import kiln
        >>> kiln.reshape(kiln.tensor([1, 2, 3, 4, 5, 6]), (2, -1)).shape
        (2, 3)
    """
    if order != "C":
        raise UnsupportedOperationError(f"reshape(order={order!r}): kiln supports order='C' only")
    target = shape if shape is not None else newshape
    if target is None:
        raise ArgumentTypeError("reshape: needs a 'shape' (a size or a sequence of sizes)")
    x = as_tensor(a)
    dims = _reshape_dims(target)
    # NumPy's 0 is a size of zero, ONNX's 0 copies the input size unless allowzero=1.
    return call("Reshape", x, shape_tensor(list(dims)), allowzero=1)


def _reshape_dims(target: Any) -> tuple[Any, ...]:
    """Reshape's target entries checked as NumPy checks them: ints (-1 at most once, the
    operator says), symbolic sizes or integer 0-d / 1-element tensors; anything else is an
    error naming the entry."""
    if (
        isinstance(target, tuple)
        and len(target) == 1
        and isinstance(target[0], (np.ndarray, Tensor))
        and target[0].ndim == 1
    ):
        target = target[0]  # t.reshape(np.array([2, 3])): the method's one argument
    if isinstance(target, np.ndarray):
        target = target.tolist()  # a 0-d array is one size, a 1-d one the sizes
    if isinstance(target, (str, bytes)) or not (
        isinstance(target, (int, np.integer, SymDim, Tensor)) or hasattr(target, "__iter__")
    ):
        raise ArgumentTypeError(
            f"reshape: 'shape' must be an int or a sequence of ints, got "
            f"{type(target).__name__} {target!r}"
        )
    dims = _dims(target)
    for d in dims:
        if isinstance(d, SymDim) or (isinstance(d, Tensor) and d.dtype.kind in "iu"):
            continue
        if isinstance(d, (bool, np.bool_)) or not hasattr(d, "__index__"):
            raise ArgumentTypeError(
                f"reshape: shape entries must be ints (one may be -1), got "
                f"{type(d).__name__} {d!r} in {dims!r}"
            )
        if operator.index(d) < -1:
            raise OpArgumentError(
                f"reshape: negative dimensions other than -1 are not allowed: {dims}"
            )
    return tuple(d if isinstance(d, (SymDim, Tensor)) else operator.index(d) for d in dims)


@implements(np.ravel)
@eager_plan(1)
def ravel(a: Any, order: str = "C") -> Tensor:
    """``a`` flattened to 1-D.

    Example:
        >>> import kiln
        >>> kiln.ravel(kiln.tensor([[1, 2], [3, 4]])).tolist()
        [1, 2, 3, 4]
    """
    return reshape(a, (-1,), order)


@implements(np.transpose)
@eager_plan(1)
def transpose(a: Any, axes: Any = None) -> Tensor:
    """``a`` with its axes permuted (reversed by default); negative axes allowed.

    Example:
        >>> import kiln
        >>> kiln.transpose(kiln.zeros((2, 3, 4)), (1, 0, -1)).shape
        (3, 2, 4)
    """
    x = as_tensor(a)
    if axes is None:
        perm = tuple(reversed(range(x.ndim)))
    else:
        perm = tuple(_axis(p, x.ndim) for p in _dims(axes))
        if sorted(perm) != list(range(x.ndim)):
            raise ValueError(f"axes don't match array: {tuple(_dims(axes))} for rank {x.ndim}")
    if perm == tuple(range(x.ndim)):
        return new_view(x)
    return call("Transpose", x, perm=perm)


@implements(np.matrix_transpose)
@eager_plan(1)
def matrix_transpose(x: Any) -> Tensor:
    """The last two axes swapped (``x.mT``).

    Example:
        >>> import kiln
        >>> kiln.matrix_transpose(kiln.zeros((5, 2, 3))).shape
        (5, 3, 2)
    """
    t = as_tensor(x)
    if t.ndim < 2:
        raise ValueError(f"matrix_transpose needs at least 2 dimensions, got {t.ndim}")
    return swapaxes(t, -1, -2)


@implements(np.swapaxes)
@eager_plan(1)
def swapaxes(a: Any, axis1: int, axis2: int) -> Tensor:
    """``a`` with two axes interchanged.

    Example:
        >>> import kiln
        >>> kiln.swapaxes(kiln.zeros((2, 3, 4)), 0, 2).shape
        (4, 3, 2)
    """
    x = as_tensor(a)
    i, j = _axis(axis1, x.ndim), _axis(axis2, x.ndim)
    perm = list(range(x.ndim))
    perm[i], perm[j] = perm[j], perm[i]
    return transpose(x, perm)


@implements(np.moveaxis)
@eager_plan(1)
def moveaxis(a: Any, source: Any, destination: Any) -> Tensor:
    """``a`` with axes ``source`` moved to positions ``destination`` (others keep their order).

    Example:
        >>> import kiln
        >>> kiln.moveaxis(kiln.zeros((2, 3, 4)), 0, -1).shape
        (3, 4, 2)
    """
    x = as_tensor(a)
    src = _axes(source, x.ndim)
    dst = _axes(destination, x.ndim)
    if len(src) != len(dst):
        raise ValueError(
            "`source` and `destination` arguments must have the same number of elements"
        )
    order = [n for n in range(x.ndim) if n not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return transpose(x, order)


@implements(np.squeeze)
@eager_plan(1)
def squeeze(a: Any, axis: Any = None) -> Tensor:
    """``a`` without size-1 axes (all of them, or those in ``axis``, which must have size 1).

    Example:
        >>> import kiln
        >>> kiln.squeeze(kiln.zeros((1, 3, 1)), axis=0).shape
        (3, 1)
    """
    x = as_tensor(a)
    if axis is None:
        # A symbolic size is judged by the call being captured (a shape guard ``d == 1`` or
        # ``d != 1``), so the graph holds for the sizes that squeeze the same axes.
        axes = tuple(
            i
            for i, d in enumerate(x.shape)
            if decide(d, "==", 1, what=f"squeeze() of shape {format_shape(x.shape)}, axis {i}")
        )
    else:
        axes = _axes(axis, x.ndim)
        for i in axes:
            what = f"squeeze(axis={i}) of shape {format_shape(x.shape)}"
            if not decide(x.shape[i], "==", 1, assume=True, what=what):
                raise ValueError(
                    "cannot select an axis to squeeze out which has size not equal to one"
                )
    if not axes:
        return x  # NumPy hands back the array itself too
    return call("Squeeze", x, _i64(axes))


@implements(np.expand_dims)
@eager_plan(1)
def expand_dims(a: Any, axis: Any) -> Tensor:
    """``a`` with new size-1 axes at positions ``axis`` (int or tuple) of the result.

    Example:
        >>> import kiln
        >>> kiln.expand_dims(kiln.zeros((2, 3)), (0, -1)).shape
        (1, 2, 3, 1)
    """
    x = as_tensor(a)
    n = 1 if isinstance(axis, (int, np.integer)) else len(tuple(axis))
    axes = _axes(axis, x.ndim + n)
    return call("Unsqueeze", x, _i64(sorted(axes)))


# -- joining and splitting -----------------------------------------------------------------


def _promoted(arrays: Sequence[Any], dtype: Any, casting: str, name: str) -> list[Tensor]:
    if not len(arrays):
        raise ValueError("need at least one array to concatenate")
    tensors = same_dtype_operands(*arrays, name=name)
    if dtype is not None:
        want = dtypes.as_dtype(dtype)
        if not np.can_cast(tensors[0].dtype, want, casting=casting):  # type: ignore[arg-type]
            raise TypeError(
                f"{name}: cannot cast from {tensors[0].dtype} to {want} with casting={casting!r}"
            )
        tensors = [cast(t, want) for t in tensors]
    return tensors


@implements(np.concatenate)
@eager_plan(1)
def concatenate(
    arrays: Sequence[Any],
    axis: int | None = 0,
    out: Any = None,
    *,
    dtype: Any = None,
    casting: str = "same_kind",
) -> Tensor:
    """The arrays joined along an existing axis (flattened first when ``axis`` is None),
    promoted to their common dtype.

    Example:
        >>> import kiln
        >>> kiln.concatenate([kiln.tensor([1, 2]), kiln.tensor([3.5])]).tolist()
        [1.0, 2.0, 3.5]
    """
    _no_out("concatenate", out)
    tensors = _promoted(arrays, dtype, casting, "concatenate")
    if axis is None:
        tensors = [ravel(t) for t in tensors]
        axis = 0
    if any(t.ndim == 0 for t in tensors):
        raise ValueError("zero-dimensional arrays cannot be concatenated")
    ndim = tensors[0].ndim
    for i, t in enumerate(tensors):
        if t.ndim != ndim:
            raise ValueError(
                "all the input array dimensions except for the concatenation axis must match "
                f"exactly, but array 0 has {ndim} dimension(s) and array {i} has {t.ndim}"
            )
    a = _axis(axis, ndim)
    if len(tensors) == 1:
        return new_array(tensors[0])
    return call("Concat", *tensors, axis=a)


@implements(np.stack)
@eager_plan(1)
def stack(
    arrays: Sequence[Any],
    axis: int = 0,
    out: Any = None,
    *,
    dtype: Any = None,
    casting: str = "same_kind",
) -> Tensor:
    """The arrays (all of one shape) joined along a new axis.

    Example:
        >>> import kiln
        >>> kiln.stack([kiln.zeros(3), kiln.ones(3)], axis=1).shape
        (3, 2)
    """
    _no_out("stack", out)
    if not len(arrays):
        raise ValueError("need at least one array to stack")
    tensors = _promoted(arrays, dtype, casting, "stack")
    shape = tensors[0].shape
    for t in tensors[1:]:
        if len(t.shape) != len(shape) or any(
            _static(p) and _static(q) and p != q for p, q in zip(t.shape, shape)
        ):
            raise ValueError("all input arrays must have the same shape")
    a = _axis(axis, len(shape) + 1)
    expanded = [call("Unsqueeze", t, _i64([a])) for t in tensors]
    if len(expanded) == 1:
        return new_array(expanded[0])
    return call("Concat", *expanded, axis=a)


def _at_least(t: Tensor, ndim: int) -> Tensor:
    if t.ndim >= ndim:
        return t
    if ndim == 2 and t.ndim == 1:
        return call("Unsqueeze", t, _i64([0]))
    return call("Unsqueeze", t, _i64(list(range(ndim - t.ndim))))


@implements(np.hstack)
@eager_plan(1)
def hstack(tup: Sequence[Any], *, dtype: Any = None, casting: str = "same_kind") -> Tensor:
    """The arrays joined column-wise (along axis 1, or axis 0 for 1-D arrays).

    Example:
        >>> import kiln
        >>> kiln.hstack([kiln.tensor([1]), kiln.tensor([2, 3])]).tolist()
        [1, 2, 3]
    """
    tensors = [_at_least(t, 1) for t in _promoted(tup, dtype, casting, "hstack")]
    return concatenate(tensors, axis=0 if tensors[0].ndim == 1 else 1)


@implements(np.vstack)
@eager_plan(1)
def vstack(tup: Sequence[Any], *, dtype: Any = None, casting: str = "same_kind") -> Tensor:
    """The arrays joined row-wise (1-D arrays become rows).

    Example:
        >>> import kiln
        >>> kiln.vstack([kiln.tensor([1, 2]), kiln.tensor([3, 4])]).shape
        (2, 2)
    """
    tensors = [_at_least(t, 2) for t in _promoted(tup, dtype, casting, "vstack")]
    return concatenate(tensors, axis=0)


def _slice_axis(t: Tensor, axis: int, start: int, stop: int) -> Tensor:
    return call("Slice", t, _i64([start]), _i64([stop]), _i64([axis]))


def _split_points(t: Tensor, points: Sequence[Any], axis: int) -> list[Tensor]:
    """``t`` cut along ``axis`` before each of ``points``: slices, so views of ``t`` (a point
    may be a symbolic size, computed from the input shapes when the graph runs)."""
    bounds = [0, *(p if isinstance(p, SymDim) else operator.index(p) for p in points)]
    bounds.append(INT64_MAX)
    pieces = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        if isinstance(lo, SymDim) or isinstance(hi, SymDim):
            starts, ends = shape_tensor([lo]), shape_tensor([hi])
            pieces.append(call("Slice", t, starts, ends, _i64([axis])))
        else:
            pieces.append(_slice_axis(t, axis, lo, hi))
    return pieces


@implements(np.split)
def split(ary: Any, indices_or_sections: Any, axis: int = 0) -> list[Tensor]:
    """``ary`` cut into equal sections (an int, which must divide the axis) or at the given
    indices. The pieces are views of ``ary``, as NumPy's are (a write into one reaches
    ``ary``); a dynamic size being cut into sections is specialized (and guarded).

    Example:
        >>> import kiln
        >>> [p.tolist() for p in kiln.split(kiln.tensor([1, 2, 3, 4]), 2)]
        [[1, 2], [3, 4]]
    """
    t = as_tensor(ary)
    a = _axis(axis, t.ndim)
    if not isinstance(indices_or_sections, (int, np.integer)):
        return _split_points(t, list(indices_or_sections), a)
    n = int(indices_or_sections)
    if n <= 0:
        raise ValueError("number sections must be larger than 0.")
    d = t.shape[a]
    if isinstance(d, SymDim):  # equal sections: the size must divide (a guard)
        if d % n != 0:
            raise ValueError("array split does not result in an equal division")
        return _split_points(t, [floordiv(d, n) * i for i in range(1, n)], a)
    if d % n:
        raise ValueError("array split does not result in an equal division")
    return _split_points(t, [d // n * i for i in range(1, n)], a)


@implements(np.array_split)
def array_split(ary: Any, indices_or_sections: Any, axis: int = 0) -> list[Tensor]:
    """Like :func:`split`, but an int number of sections need not divide the axis: the first
    ``size % n`` pieces are one longer. The pieces are views of ``ary``, as NumPy's are.

    Example:
        >>> import kiln
        >>> [p.tolist() for p in kiln.array_split(kiln.tensor([1, 2, 3]), 2)]
        [[1, 2], [3]]
    """
    t = as_tensor(ary)
    a = _axis(axis, t.ndim)
    if not isinstance(indices_or_sections, (int, np.integer)):
        return _split_points(t, list(indices_or_sections), a)
    n = int(indices_or_sections)
    if n <= 0:
        raise ValueError("number sections must be larger than 0.")
    d = t.shape[a]
    if isinstance(d, SymDim):
        # Piece i has (d + n - 1 - i) // n entries: the first d % n pieces are one longer.
        sizes: list[Any] = [floordiv(d + (n - 1 - i), n) for i in range(n)]
    else:
        each, extra = divmod(d, n)
        sizes = [each + 1] * extra + [each] * (n - extra)
    return _split_points(t, list(itertools.accumulate(sizes[:-1])), a)


# -- pad, tile, broadcast_to, flip, triangles ---------------------------------------------

_PAD_MODES = ("constant", "reflect", "edge", "wrap")


def _pairs(value: Any, ndim: int, what: str) -> np.ndarray:
    """NumPy's ``pad_width`` forms (int, (before, after), per-axis pairs) as (ndim, 2)."""
    array = np.asarray(value)
    try:
        return np.broadcast_to(array, (ndim, 2))
    except ValueError:
        raise ValueError(
            f"pad: {what} {value!r} cannot be broadcast to ({ndim}, 2) (one (before, after) "
            "pair per axis)"
        ) from None


@implements(np.pad)
def pad(array: Any, pad_width: Any, mode: str = "constant", **kwargs: Any) -> Tensor:
    """``array`` padded by ``pad_width`` (int, (before, after) or one pair per axis), with
    modes constant (``constant_values``), reflect, edge or wrap.

    Example:
        >>> import kiln
        >>> kiln.pad(kiln.tensor([1, 2]), (1, 2), constant_values=9).tolist()
        [9, 1, 2, 9, 9]
    """
    x = as_tensor(array)
    if mode not in _PAD_MODES:
        raise UnsupportedOperationError(
            f"pad(mode={mode!r}) is not implemented by kiln; supported modes: {_PAD_MODES}"
        )
    constant_values = kwargs.pop("constant_values", 0)
    if kwargs.pop("reflect_type", "even") != "even":
        raise UnsupportedOperationError("pad(reflect_type='odd') is not implemented by kiln")
    if kwargs:
        raise TypeError(f"pad: unsupported keyword(s) for mode {mode!r}: {', '.join(kwargs)}")
    widths = _pairs(pad_width, x.ndim, "pad_width")
    if widths.dtype.kind not in "iu":
        raise TypeError("`pad_width` must be of integral type.")
    if (widths < 0).any():
        raise ValueError("index can't contain negative values")
    if x.ndim == 0:
        return call("Identity", x)
    before = [int(v) for v in widths[:, 0]]
    after = [int(v) for v in widths[:, 1]]
    if mode != "constant":
        return call("Pad", x, _i64(before + after), mode=mode)
    if isinstance(constant_values, Tensor) and constant_values.size == 1:
        fill = call("Reshape", cast(constant_values, x.dtype), _i64([]))
        return call("Pad", x, _i64(before + after), fill)
    values = np.asarray(constant_values)
    if values.size == 1:
        fill = constant(values.reshape(()).astype(x.dtype))
        return call("Pad", x, _i64(before + after), fill)
    # Per-axis values: pad one axis (and side) at a time, in axis order, as NumPy does (so a
    # later axis' value fills the corners).
    per_axis = _pairs(values, x.ndim, "constant_values").astype(x.dtype)
    out = x
    for axis in range(x.ndim):
        for side, width in ((0, before[axis]), (1, after[axis])):
            if width:
                pads = [width, 0] if side == 0 else [0, width]
                fill = constant(per_axis[axis, side])
                out = call("Pad", out, _i64(pads), fill, _i64([axis]))
    return out


@implements(np.tile)
def tile(A: Any, reps: Any) -> Tensor:  # noqa: N803 - NumPy's name
    """``A`` repeated ``reps`` times per axis (reps is aligned to the right, as NumPy does).

    Example:
        >>> import kiln
        >>> kiln.tile(kiln.tensor([1, 2]), 2).tolist()
        [1, 2, 1, 2]
    """
    x = as_tensor(A)
    r = [operator.index(v) for v in _dims(reps)]
    if any(v < 0 for v in r):
        raise ValueError(f"tile: negative repetitions {tuple(r)}")
    if len(r) > x.ndim:
        x = call("Unsqueeze", x, _i64(list(range(len(r) - x.ndim))))
    r = [1] * (x.ndim - len(r)) + r
    if x.ndim == 0 or all(v == 1 for v in r):
        return new_array(x)
    return call("Tile", x, _i64(r))


@implements(np.broadcast_to)
@eager_plan(1)
def broadcast_to(array: Any, shape: Any, subok: bool = False) -> Tensor:
    """``array`` broadcast to ``shape`` (which may hold symbolic sizes inside a trace).

    Example:
        >>> import kiln
        >>> kiln.broadcast_to(kiln.tensor([1, 2]), (3, 2)).shape
        (3, 2)
    """
    x = as_tensor(array)
    dims = _dims(shape)
    ok = len(dims) >= x.ndim
    if ok:
        for have, want in zip(x.shape, dims[len(dims) - x.ndim :]):
            if _static(have) and have != 1 and isinstance(want, (int, np.integer)):
                ok = ok and have == int(want)
    if not ok or any(isinstance(d, (int, np.integer)) and int(d) < 0 for d in dims):
        raise ValueError(
            "operands could not be broadcast together with remapped shapes "
            f"[original->remapped]: {format_shape(x.shape)} and requested shape "
            f"{format_shape(dims)}"
        )
    return call("Expand", x, shape_tensor(list(dims)))  # a read-only view, as NumPy's


@implements(np.flip)
@eager_plan(1)
def flip(m: Any, axis: Any = None) -> Tensor:
    """``m`` with the order of elements reversed along ``axis`` (every axis by default).

    Example:
        >>> import kiln
        >>> kiln.flip(kiln.tensor([[1, 2], [3, 4]]), axis=1).tolist()
        [[2, 1], [4, 3]]
    """
    x = as_tensor(m)
    axes = tuple(range(x.ndim)) if axis is None else _axes(axis, x.ndim)
    if not axes:
        return new_view(x)
    k = len(axes)
    return call("Slice", x, _i64([-1] * k), _i64([INT64_MIN] * k), _i64(axes), _i64([-1] * k))


def _triangle(m: Any, k: Any, upper: int, name: str) -> Tensor:
    x = as_tensor(m)
    if x.ndim == 0:
        raise ValueError(f"{name}: the input must be at least 1-D")
    if x.ndim == 1:  # NumPy broadcasts a 1-D input against the (n, n) mask
        n = x.shape[0]
        x = call("Expand", x, shape_tensor([n, n]))
    kk = operator.index(k)
    if kk == 0:
        return call("Trilu", x, upper=upper)
    return call("Trilu", x, constant(np.asarray(kk, dtype=np.int64)), upper=upper)


@implements(np.tril)
def tril(m: Any, k: int = 0) -> Tensor:
    """The lower triangle (on and below diagonal ``k``) of the last two axes; zeros above.

    Example:
        >>> import kiln
        >>> kiln.tril(kiln.tensor([[1, 2], [3, 4]])).tolist()
        [[1, 0], [3, 4]]
    """
    return _triangle(m, k, 0, "tril")


@implements(np.triu)
def triu(m: Any, k: int = 0) -> Tensor:
    """The upper triangle (on and above diagonal ``k``) of the last two axes; zeros below.

    Example:
        >>> import kiln
        >>> kiln.triu(kiln.tensor([[1, 2], [3, 4]])).tolist()
        [[1, 2], [0, 4]]
    """
    return _triangle(m, k, 1, "triu")


# -- atleast_nd, roll, diag ----------------------------------------------------------------


def _atleast(name: str, ndim: int, arys: tuple[Any, ...]) -> Any:
    """NumPy's ``atleast_<ndim>d``: each input with size-1 axes added where NumPy adds them;
    an input with enough axes comes back as it is. One input: one result; several: a tuple."""
    results = []
    for a in arys:
        t = as_tensor(a)
        if t.ndim >= ndim:
            results.append(t)
        elif ndim == 3 and t.ndim > 0:  # (n,) -> (1, n, 1); (m, n) -> (m, n, 1)
            axes = [0, 2] if t.ndim == 1 else [2]
            results.append(call("Unsqueeze", t, _i64(axes)))
        else:
            results.append(_at_least(t, ndim))
    if len(results) == 1:
        return results[0]
    return tuple(results)


@implements(np.atleast_1d)
def atleast_1d(*arys: Any) -> Any:
    """Each input with at least one axis (a 0-d input becomes shape ``(1,)``); several inputs
    give a tuple, as NumPy's.

    Example:
        >>> import kiln
        >>> kiln.atleast_1d(kiln.tensor(3.0)).shape
        (1,)
    """
    return _atleast("atleast_1d", 1, arys)


@implements(np.atleast_2d)
def atleast_2d(*arys: Any) -> Any:
    """Each input with at least two axes (``(n,)`` becomes ``(1, n)``).

    Example:
        >>> import kiln
        >>> kiln.atleast_2d(kiln.tensor([1, 2])).shape
        (1, 2)
    """
    return _atleast("atleast_2d", 2, arys)


@implements(np.atleast_3d)
def atleast_3d(*arys: Any) -> Any:
    """Each input with at least three axes (``(n,)`` becomes ``(1, n, 1)``, ``(m, n)``
    becomes ``(m, n, 1)``).

    Example:
        >>> import kiln
        >>> kiln.atleast_3d(kiln.zeros((2, 3))).shape
        (2, 3, 1)
    """
    return _atleast("atleast_3d", 3, arys)


def _roll_axis(t: Tensor, axis: int, shift: int) -> Tensor:
    """``t`` rolled by ``shift`` along ``axis``: ``Concat(t[n - o:], t[:n - o])`` for the
    offset ``o = shift % n``. A symbolic size larger than ``|shift|`` (a shape guard) rolls
    with bounds counted from the end; any other symbolic size is specialized."""
    d = t.shape[axis]
    if shift == 0:
        return t
    if isinstance(d, SymDim):
        what = f"roll by {shift} along axis {axis} of size {d}"
        if decide(d, ">", abs(shift), assume=True, what=what):
            # 0 < |shift| < n: the cut n - o is -shift, counted from the end for a shift > 0
            cut = -shift
            return call(
                "Concat",
                _slice_axis(t, axis, cut, INT64_MAX),
                _slice_axis(t, axis, 0, cut),
                axis=axis,
            )
        d = specialize(d, what)
    offset = shift % (d or 1)  # an empty axis: nothing moves
    if offset == 0:
        return t
    return call(
        "Concat",
        _slice_axis(t, axis, d - offset, INT64_MAX),
        _slice_axis(t, axis, 0, d - offset),
        axis=axis,
    )


@implements(np.roll)
def roll(a: Any, shift: Any, axis: Any = None) -> Tensor:
    """``a`` with its elements rolled by ``shift`` along ``axis`` (of the flattened array when
    ``axis`` is None); shifts and axes may be tuples, broadcast against each other, and
    repeated axes add up, as NumPy's. Recorded as slices joined by ``Concat``.

    Example:
        >>> import kiln
        >>> kiln.roll(kiln.tensor([1, 2, 3, 4]), 1).tolist()
        [4, 1, 2, 3]
        >>> kiln.roll(kiln.tensor([[1, 2], [3, 4]]), -1, axis=1).tolist()
        [[2, 1], [4, 3]]
    """
    x = as_tensor(a)
    if axis is None:
        flat = roll(ravel(x), shift, 0)
        return call("Reshape", flat, call("Shape", x), allowzero=1)
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    normalized = [_axis(ax, x.ndim) for ax in axes]
    pairs = np.broadcast(np.asarray(shift, dtype=object), np.asarray(normalized, dtype=object))
    if pairs.nd > 1:
        raise ValueError("'shift' and 'axis' should be scalars or 1D sequences")
    shifts = dict.fromkeys(range(x.ndim), 0)
    for sh, ax in pairs:
        shifts[int(ax)] += operator.index(sh)
    out = x
    for ax, sh in shifts.items():
        out = _roll_axis(out, ax, sh)
    if out is x:
        return new_array(x)
    return out


def _static_size(d: Dim, what: str) -> int:
    return d if isinstance(d, int) else specialize(d, what)


@implements(np.diagonal)
def diagonal(a: Any, offset: int = 0, axis1: int = 0, axis2: int = 1) -> Tensor:
    """The diagonal ``offset`` of the 2-D slices over ``axis1``, ``axis2``, on the last axis
    of the result (NumPy's ``np.diagonal``): one strided ``Slice`` of the flattened pairs, read
    only as NumPy's (a write into it raises ``ValueError``).

    Example:
        >>> import kiln
        >>> kiln.diagonal(kiln.tensor([[1, 2, 3], [4, 5, 6]]), 1).tolist()
        [2, 6]
    """
    x = as_tensor(a)
    if x.ndim < 2:
        raise ValueError("diag requires an array of at least two dimensions")
    k = operator.index(offset)
    i, j = _axis(axis1, x.ndim), _axis(axis2, x.ndim)
    if i == j:
        raise ValueError("axis1 and axis2 cannot be the same")
    rest = [n for n in range(x.ndim) if n not in (i, j)]
    if [*rest, i, j] != list(range(x.ndim)):
        x = call("Transpose", x, perm=(*rest, i, j))
    what = f"diagonal({k}) of shape {format_shape(x.shape)}"
    rows = _static_size(x.shape[-2], what)
    cols = _static_size(x.shape[-1], what)
    lead = list(x.shape[:-2])
    # Element (r, r + k) of each (rows, cols) block sits at r * (cols + 1) + k of the flat block
    # (k >= 0), (r - k, r) at r * (cols + 1) - k * cols (k < 0).
    length = max(0, min(rows, cols - k) if k >= 0 else min(rows + k, cols))
    flat = call("Reshape", x, shape_tensor([*lead, -1]) if lead else _i64([-1]), allowzero=0)
    if length == 0:
        picked = _slice_axis(flat, len(lead), 0, 0)
    else:
        start = k if k >= 0 else -k * cols
        stop = start + (length - 1) * (cols + 1) + 1
        steps = _i64([cols + 1])
        picked = call("Slice", flat, _i64([start]), _i64([stop]), _i64([len(lead)]), steps)
    # NumPy's diagonal is a read-only view: a write into it raises. Expand's result is one too.
    return call("Expand", picked, shape_tensor([*lead, length]))


@implements(np.diag)
def diag(v: Any, k: int = 0) -> Tensor:
    """The ``k``-th diagonal of a 2-D input, or a 2-D array with a 1-D input on its ``k``-th
    diagonal and zeros elsewhere (NumPy's ``np.diag``). Building is layout only: each value
    is padded by a row of zeros and the whole shifted into place (``Pad``, ``Reshape``).

    Example:
        >>> import kiln
        >>> kiln.diag(kiln.tensor([1, 2])).tolist()
        [[1, 0], [0, 2]]
        >>> kiln.diag(kiln.tensor([[1, 2], [3, 4]])).tolist()
        [1, 4]
    """
    x = as_tensor(v)
    kk = operator.index(k)
    if x.ndim == 2:
        return diagonal(x, kk)
    if x.ndim != 1:
        raise ValueError("Input must be 1- or 2-d.")
    n = _static_size(x.shape[0], f"diag() of a vector of length {describe(x.shape[0])}")
    m = n + abs(kk)
    # Each value followed by m zeros, flattened: value i lands at i * (m + 1); shifted by the
    # diagonal's first flat position, then cut or padded to m * m.
    rows = call("Pad", call("Unsqueeze", x, _i64([1])), _i64([0, 0, 0, m]))
    flat = call("Reshape", rows, _i64([-1]))
    start = kk if kk >= 0 else -kk * m
    end = m * m - start - n * (m + 1)  # what is left to pad (negative: to cut)
    flat = call("Pad", flat, _i64([start, max(end, 0)]))
    if end < 0:
        flat = _slice_axis(flat, 0, 0, m * m)
    return call("Reshape", flat, _i64([m, m]), allowzero=1)  # (m = 0: a 0 x 0 result)


# -- gathering -----------------------------------------------------------------------------


def _index_array(indices: Any, what: str) -> Tensor:
    """Integer indices as an int64 tensor (bool and float arrays are refused, as NumPy)."""
    if isinstance(indices, Tensor):
        t = indices
    else:
        array = np.asarray(indices)
        if array.size == 0 and array.dtype.kind == "f":
            array = array.astype(np.int64)  # [] is an empty list of indices
        t = constant(array)
    if t.dtype.kind not in "iu":
        raise IndexError(f"{what}: arrays used as indices must be of integer type, got {t.dtype}")
    return cast(t, _INT64)


def _known_indices(t: Tensor) -> np.ndarray | None:
    """The index values where they are known without running anything (a constant, or the
    contents a small tensor's type carries)."""
    value = t.type.value
    if value is not None and all(isinstance(v, int) for v in value):
        return np.asarray(value, dtype=np.int64)
    if t._data is not None and t._trace is None:  # a concrete tensor: its values are at hand
        return t._data.reshape(-1)
    return None


def _check_bounds(t: Tensor, axis: int, size: Dim) -> None:
    """IndexError, worded as NumPy's, for a known index outside ``[-size, size)``."""
    if not _static(size):
        return
    known = _known_indices(t)
    if known is None or not known.size:
        return
    bad = known[(known < -size) | (known >= size)]  # type: ignore[operator]
    if bad.size:
        raise IndexError(f"index {int(bad[0])} is out of bounds for axis {axis} with size {size}")


@implements(np.take)
def take(
    a: Any, indices: Any, axis: int | None = None, out: Any = None, mode: str = "raise"
) -> Tensor:
    """Elements of ``a`` at ``indices`` along ``axis`` (of the flattened array when None).

    Example:
        >>> import kiln
        >>> kiln.take(kiln.tensor([[1, 2], [3, 4]]), [-1, 0], axis=1).tolist()
        [[2, 1], [4, 3]]
    """
    _no_out("take", out)
    if mode != "raise":
        raise UnsupportedOperationError(f"take(mode={mode!r}): kiln supports mode='raise' only")
    x = as_tensor(a)
    if axis is None:
        x, ax = ravel(x), 0
    else:
        ax = _axis(axis, x.ndim)
    idx = _index_array(indices, "take")
    _check_bounds(idx, ax, x.shape[ax])
    return call("Gather", x, idx, axis=ax)


@implements(np.take_along_axis)
def take_along_axis(arr: Any, indices: Any, axis: int | None = -1) -> Tensor:
    """Values of ``arr`` at ``indices`` along ``axis``, matching them element by element
    (the other axes broadcast).

    Example:
        >>> import kiln
        >>> x = kiln.tensor([[10, 30, 20]])
        >>> kiln.take_along_axis(x, kiln.tensor([[0, 2, 1]]), axis=1).tolist()
        [[10, 20, 30]]
    """
    x = as_tensor(arr)
    idx = _index_array(indices, "take_along_axis")
    if axis is None:
        if idx.ndim != 1:
            raise ValueError("when axis=None, `indices` must have a single dimension.")
        x, ax = ravel(x), 0
    else:
        if idx.ndim != x.ndim:
            raise ValueError("`indices` and `arr` must have the same number of dimensions")
        ax = _axis(axis, x.ndim)
    _check_bounds(idx, ax, x.shape[ax])
    # Broadcast the other axes of both to a common shape (GatherElements does not).
    common = list(broadcast_shapes(*[_with(s, ax, 1) for s in (x.shape, idx.shape)]))
    x_want = tuple(_with(common, ax, x.shape[ax]))
    i_want = tuple(_with(common, ax, idx.shape[ax]))
    if tuple(x.shape) != x_want:
        x = call("Expand", x, shape_tensor(list(x_want)))
    if tuple(idx.shape) != i_want:
        idx = call("Expand", idx, shape_tensor(list(i_want)))
    return call("GatherElements", x, idx, axis=ax)


def _with(shape: Sequence[Dim], axis: int, size: Dim) -> Shape:
    s = list(shape)
    s[axis] = size
    return tuple(s)


@implements(np.nonzero)
def nonzero(a: Any) -> tuple[Tensor, ...]:
    """The indices of the non-zero elements: one 1-D int64 tensor per axis.

    Example:
        >>> import kiln
        >>> [i.tolist() for i in kiln.nonzero(kiln.tensor([[0, 1], [2, 0]]))]
        [[0, 1], [1, 0]]
    """
    x = as_tensor(a)
    if x.ndim == 0:
        raise ValueError(
            "Calling nonzero on 0d arrays is not allowed. Use np.atleast_1d(scalar).nonzero() "
            "instead."
        )
    rows = call("NonZero", x)
    return tuple(call("Gather", rows, constant(np.int64(i)), axis=0) for i in range(x.ndim))


@implements(np.argwhere)
def argwhere(a: Any) -> Tensor:
    """The indices of the non-zero elements as an int64 (N, ndim) tensor.

    Example:
        >>> import kiln
        >>> kiln.argwhere(kiln.tensor([0, 3, 4])).tolist()
        [[1], [2]]
    """
    x = as_tensor(a)
    if x.ndim == 0:
        rows = call("Transpose", call("NonZero", reshape(x, (1,))))
        return _slice_axis(rows, 1, 0, 0)
    return call("Transpose", call("NonZero", x))


# -- creation with symbolic sizes ----------------------------------------------------------


def constant_of_shape(dims: Sequence[Any], fill_value: Any, dtype: Any = None) -> Tensor:
    """A tensor of shape ``dims`` (ints or symbolic sizes) filled with ``fill_value``
    (``kiln.full`` calls it when a size is symbolic). ``dtype=None`` takes NumPy's default for
    the fill value.

    Example:
        >>> constant_of_shape((2, 3), 1.5).shape
        (2, 3)
    """
    dims = _dims(dims)
    for d in dims:
        if isinstance(d, (int, np.integer)) and int(d) < 0:
            raise ValueError(f"negative dimensions are not allowed: {format_shape(dims)}")
    shape = shape_tensor(list(dims))
    if isinstance(fill_value, Tensor):
        want = fill_value.dtype if dtype is None else dtypes.as_dtype(dtype)
        return call("Expand", cast(fill_value, want), shape)
    value = np.asarray(fill_value, dtype=None if dtype is None else dtypes.as_dtype(dtype))
    if value.dtype not in dtypes.ALL_DTYPES:
        raise TypeError(f"constant_of_shape: unsupported fill value {fill_value!r}")
    return call("ConstantOfShape", shape, value=value.reshape(1))


_RANGE_DTYPES = (dtypes.int16, dtypes.int32, dtypes.int64, dtypes.float32, dtypes.float64)


def _is_float_bound(v: Any) -> bool:
    if isinstance(v, Tensor):
        return dtypes.is_floating(v.dtype)
    return isinstance(v, (float, np.floating))


def _range_bound(v: Any, dtype: np.dtype) -> Tensor:
    if isinstance(v, SymDim):
        t = call("Reshape", shape_tensor([v]), _i64([]))
    elif isinstance(v, Tensor):
        if v.size != 1:
            raise ValueError(f"arange: bounds must be scalars, got a tensor of shape {v.shape}")
        t = call("Reshape", v, _i64([])) if v.ndim else v
    else:
        return constant(np.asarray(v, dtype=dtype))
    return cast(t, dtype)


def range_(start: Any, stop: Any = None, step: Any = 1, dtype: Any = None) -> Tensor:
    """``np.arange`` as a recorded ``Range`` (``kiln.arange`` calls it when a bound is a tensor
    or a symbolic size). NumPy's dtype rule: int64 for integer bounds, float64 if one is a float.

    Example:
        >>> import kiln
        >>> range_(kiln.tensor(4)).tolist()
        [0, 1, 2, 3]
    """
    if stop is None:
        start, stop = 0, start
    bounds = (start, stop, step)
    if dtype is None:
        want = dtypes.float64 if any(_is_float_bound(v) for v in bounds) else _INT64
    else:
        want = dtypes.as_dtype(dtype)
    compute = want
    if want not in _RANGE_DTYPES:  # Range supports fewer dtypes: compute wide, then Cast
        compute = dtypes.float64 if dtypes.is_floating(want) else _INT64
    if not isinstance(step, Tensor) and step == 0:
        raise ZeroDivisionError("arange: step must not be zero")
    start_t, stop_t, step_t = (_range_bound(v, compute) for v in bounds)
    return cast(call("Range", start_t, stop_t, step_t), want)


# -- indexing ------------------------------------------------------------------------------

_VALID = (
    "only integers, slices (`:`), ellipsis (`...`), numpy.newaxis (`None`) and integer or "
    "boolean arrays are valid indices"
)


@dataclass
class _Entry:
    """One item of an index tuple: ``kind`` is int, slice, array, mask or newaxis."""

    kind: str
    value: Any = None
    axis: int = -1  # the first axis of the (original) tensor it consumes

    @property
    def consumes(self) -> int:
        if self.kind == "mask":
            return self.value.ndim
        return 0 if self.kind == "newaxis" else 1


def _entry(item: Any) -> _Entry:
    if item is None:
        return _Entry("newaxis")
    if isinstance(item, slice):
        return _Entry("slice", item)
    if isinstance(item, (bool, np.bool_)):
        return _Entry("mask", constant(np.asarray(bool(item))))
    if isinstance(item, (int, np.integer, SymDim)):
        return _Entry("int", item if isinstance(item, SymDim) else int(item))
    if isinstance(item, Tensor):
        if item.dtype == dtypes.bool_:
            return _Entry("mask", item)
        if item.dtype.kind not in "iu":
            raise IndexError("arrays used as indices must be of integer (or boolean) type")
        return _Entry("array", item)
    if isinstance(item, (list, np.ndarray)):
        array = np.asarray(item)
        if array.dtype == np.bool_:
            return _Entry("mask", constant(array))
        if array.size == 0 and array.dtype.kind == "f":
            array = array.astype(np.int64)  # [] is an empty list of indices
        if array.dtype.kind not in "iu":
            raise IndexError("arrays used as indices must be of integer (or boolean) type")
        return _Entry("array", constant(array))
    if hasattr(item, "__index__") and not isinstance(item, (float, np.floating)):
        return _Entry("int", operator.index(item))
    raise IndexError(_VALID)


def _entries(t: Tensor, index: Any) -> list[_Entry]:
    """The index as one entry per consumed axis group, Ellipsis expanded, axes assigned."""
    items = index if isinstance(index, tuple) else (index,)
    ellipses = [i for i, item in enumerate(items) if item is Ellipsis]
    if len(ellipses) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    entries = [None if item is Ellipsis else _entry(item) for item in items]
    used = sum(e.consumes for e in entries if e is not None)
    if used > t.ndim:
        raise IndexError(
            f"too many indices for array: array is {t.ndim}-dimensional, but {used} were indexed"
        )
    fill = [_Entry("slice", slice(None)) for _ in range(t.ndim - used)]
    if ellipses:
        at = ellipses[0]
        entries = entries[:at] + fill + entries[at + 1 :]  # type: ignore[operator]
    else:
        entries = entries + fill  # type: ignore[operator]
    axis = 0
    result: list[_Entry] = []
    for e in entries:
        assert e is not None
        e.axis = axis
        axis += e.consumes
        result.append(e)
    return result


def _insert_new_axes(t: Tensor, entries: list[_Entry]) -> tuple[Tensor, list[_Entry]]:
    """``None`` and 0-d masks become size-1 axes (a full slice, or a 1-element mask)."""
    positions: list[int] = []
    out: list[_Entry] = []
    pos = 0
    for e in entries:
        if e.kind == "newaxis":
            positions.append(pos)
            out.append(_Entry("slice", slice(None), -1))
            pos += 1
        elif e.kind == "mask" and e.value.ndim == 0:
            positions.append(pos)
            out.append(_Entry("mask", reshape(e.value, (1,)), -1))
            pos += 1
        else:
            out.append(e)
            pos += e.consumes
    if positions:
        t = call("Unsqueeze", t, _i64(positions))
    return t, out


def _bound(v: Any) -> Any:
    if v is None or isinstance(v, (SymDim, Tensor)):
        return v
    return operator.index(v)


def _slice_bounds(s: slice, d: Dim) -> tuple[Any, Any, int] | None:
    """(start, end, step) for the Slice operator, or None for a full slice."""
    step = 1 if s.step is None else operator.index(s.step)
    if step == 0:
        raise ValueError("slice step cannot be zero")
    start, stop = _bound(s.start), _bound(s.stop)
    if start is None and stop is None and step == 1:
        return None
    if _static(d) and isinstance(start, (int, type(None))) and isinstance(stop, (int, type(None))):
        # Python's own normalisation; passing its result keeps NumPy's meaning exactly.
        lo, hi, st = slice(start, stop, step).indices(int(d))  # type: ignore[arg-type]
        length = len(range(lo, hi, st))
        if length == d and st == 1:
            return None
        if length == 0:
            return 0, 0, 1
        return lo, (INT64_MIN if hi < 0 else hi), st
    if start is None:
        start = 0 if step > 0 else INT64_MAX
    if stop is None:
        stop = INT64_MAX if step > 0 else INT64_MIN
    return start, stop, step


def _int_bounds(i: Any, axis: int, d: Dim) -> tuple[Any, Any]:
    if isinstance(i, SymDim) or not _static(d):
        # A symbolic index or size: NumPy's bounds check and negative wrap, decided by the
        # call being captured (shape guards), so other sizes re-capture rather than misread.
        what = f"index {i} on axis {axis} of size {d}"
        negative = decide(i, "<", 0, assume=isinstance(i, int) and i < 0, what=what)
        inside = decide(d + i, ">=", 0, assume=True, what=what) if negative else True
        inside = inside and decide(i, "<", d, assume=True, what=what)
        if not inside:
            raise IndexError(
                f"index {describe(i)} is out of bounds for axis {axis} with size {describe(d)}"
            )
        if negative:
            return d + i, (INT64_MAX if i == -1 else d + i + 1)
        return i, i + 1
    if _static(d):
        if not -d <= i < d:  # type: ignore[operator]
            raise IndexError(f"index {i} is out of bounds for axis {axis} with size {d}")
        i = i % d  # type: ignore[operator]
        return i, i + 1
    return i, (INT64_MAX if i == -1 else i + 1)


def _basic(t: Tensor, entries: list[_Entry], int_axes_are_sliced: bool) -> tuple[Tensor, list[int]]:
    """Apply the slices (and ints, when basic) of ``entries`` with one Slice; returns the
    result and the axes that ints selected (still of size 1)."""
    starts: list[Any] = []
    ends: list[Any] = []
    axes: list[int] = []
    steps: list[int] = []
    int_axes: list[int] = []
    pos = 0
    for e in entries:
        d = t.shape[pos]
        if e.kind == "slice":
            bounds = _slice_bounds(e.value, d)
            if bounds is not None:
                starts.append(bounds[0])
                ends.append(bounds[1])
                steps.append(bounds[2])
                axes.append(pos)
        elif e.kind == "int" and int_axes_are_sliced:
            lo, hi = _int_bounds(e.value, e.axis, d)
            starts.append(lo)
            ends.append(hi)
            steps.append(1)
            axes.append(pos)
            int_axes.append(pos)
        pos += e.consumes
    if axes:
        t = call("Slice", t, shape_tensor(starts), shape_tensor(ends), _i64(axes), _i64(steps))
    return t, int_axes


def _mask_rows(mask: Tensor, t: Tensor, pos: int, axis: int) -> Tensor:
    """NonZero of ``mask`` after checking it fits the axes it indexes."""
    for k, m in enumerate(mask.shape):
        d = t.shape[pos + k]
        if _static(d) and _static(m) and d != m:
            raise IndexError(
                f"boolean index did not match indexed array along axis {axis + k}; size of axis "
                f"is {d} but size of corresponding boolean axis is {m}"
            )
    return call("NonZero", mask)


def _broadcast_to_all(idx: Tensor, others: list[Tensor], shape: Shape) -> Tensor:
    if tuple(idx.shape) == tuple(shape):
        return idx
    if all(_static(d) for d in shape):
        return call("Expand", idx, _i64([int(d) for d in shape]))  # type: ignore[arg-type]
    for other in others:  # sizes known at run time only: broadcast against each operand
        if tuple(other.shape) != tuple(idx.shape):
            idx = call("Expand", idx, call("Shape", other))
    return idx


def _advanced(t: Tensor, entries: list[_Entry]) -> Tensor:
    """NumPy's integer-array and mask indexing over ``t`` whose slices are already applied."""
    # One (position, index tensor) per indexed axis; a k-d mask gives k of them.
    picks: list[tuple[int, Tensor]] = []
    only_mask: tuple[int, Tensor] | None = None
    advanced = [e for e in entries if e.kind in ("int", "array", "mask")]
    pos = 0
    for e in entries:
        if e.kind == "mask":
            rows = _mask_rows(e.value, t, pos, e.axis)
            if len(advanced) == 1 and e.value.ndim > 1:
                only_mask = (pos, rows)
            else:
                for k in range(e.value.ndim):
                    row = call("Gather", rows, constant(np.int64(k)), axis=0)
                    picks.append((pos + k, row))
        elif e.kind == "int":
            if isinstance(e.value, SymDim):
                idx = reshape(shape_tensor([e.value]), ())
            else:
                _int_bounds(e.value, e.axis, t.shape[pos])  # bounds check only
                idx = constant(np.int64(e.value))
            picks.append((pos, idx))
        elif e.kind == "array":
            idx = cast(e.value, _INT64)
            _check_bounds(idx, e.axis, t.shape[pos])
            picks.append((pos, idx))
        pos += e.consumes

    if only_mask is not None:  # t[mask] with a k-d mask: one GatherND over its nonzero rows
        p, rows = only_mask
        k = rows.shape[0]
        assert isinstance(k, int)
        return _gather_nd_block(t, list(range(p, p + k)), call("Transpose", rows), p)

    if len(picks) == 1:  # a single advanced index keeps its place: one Gather
        p, idx = picks[0]
        return call("Gather", t, idx, axis=p)

    shapes = [idx.shape for _, idx in picks]
    try:
        common = broadcast_shapes(*shapes)
    except ValueError:
        shown = " ".join(format_shape(s) for s in shapes)
        raise IndexError(
            f"shape mismatch: indexing arrays could not be broadcast together with shapes {shown}"
        ) from None
    tensors = [idx for _, idx in picks]
    stacked = [
        call("Unsqueeze", _broadcast_to_all(idx, tensors, common), _i64([-1])) for idx in tensors
    ]
    indices = call("Concat", *stacked, axis=-1)
    positions = [p for p, _ in picks]
    consecutive = positions == list(range(positions[0], positions[0] + len(positions)))
    return _gather_nd_block(t, positions, indices, positions[0] if consecutive else 0)


def _gather_nd_block(t: Tensor, positions: list[int], indices: Tensor, place: int) -> Tensor:
    """GatherND over the axes ``positions`` of ``t``; the index dims land at ``place``."""
    rest = [i for i in range(t.ndim) if i not in positions]
    perm = positions + rest
    data = t if perm == list(range(t.ndim)) else call("Transpose", t, perm=perm)
    out = call("GatherND", data, indices)
    if place == 0:
        return out
    nb = indices.ndim - 1  # the broadcast index dims come first in ``out``
    order = list(range(nb, nb + place)) + list(range(nb)) + list(range(nb + place, out.ndim))
    return call("Transpose", out, perm=order)


def _basic_fast(x: Tensor, index: Any) -> Tensor | None:
    """``x[index]`` for the common basic index of an unrolled loop (an int, a slice of int or
    None bounds, or a tuple of those, in range, on a tensor of static shape): the very nodes
    and constants the general path below records (one ``Slice``, then a ``Squeeze`` of the
    int axes), without building its entries. Only the indexed axes need static sizes. None
    for any other index (the general path handles it, and raises NumPy's errors)."""
    items = index if type(index) is tuple else (index,)
    shape = x.shape
    if len(items) > len(shape):
        return None
    starts: list[int] = []
    ends: list[int] = []
    axes: list[int] = []
    steps: list[int] = []
    int_axes: list[int] = []
    for axis, item in enumerate(items):
        d = shape[axis]
        if type(d) is not int:
            return None
        kind = type(item)
        if kind is int:
            if not -d <= item < d:
                return None
            i = item % d
            starts.append(i)
            ends.append(i + 1)
            steps.append(1)
            axes.append(axis)
            int_axes.append(axis)
        elif kind is slice:
            for bound in (item.start, item.stop, item.step):
                if bound is not None and type(bound) is not int:
                    return None
            bounds = _slice_bounds(item, d)
            if bounds is not None:
                starts.append(bounds[0])
                ends.append(bounds[1])
                steps.append(bounds[2])
                axes.append(axis)
        else:
            return None
    if axes:
        x = call(
            "Slice",
            x,
            int_vector(tuple(starts)),
            int_vector(tuple(ends)),
            int_vector(tuple(axes)),
            int_vector(tuple(steps)),
        )
    if int_axes:
        return call("Squeeze", x, int_vector(tuple(int_axes)))
    return x if axes else new_view(x)  # (x[:] is a new view of x, as NumPy's)


def getitem(t: Any, index: Any) -> Tensor:
    """``t[index]`` with NumPy's semantics: ints, slices, ``None``, ``...``, integer arrays
    (broadcast together; separated ones move to the front) and boolean masks.

    Example:
        >>> import kiln
        >>> x = kiln.tensor([[1, 2, 3], [4, 5, 6]])
        >>> x[1:, None, ::-1].tolist()
        [[[6, 5, 4]]]
        >>> x[..., [0, 2]].tolist()
        [[1, 3], [4, 6]]
        >>> x[np.array([[False, True, True], [True, False, False]])].tolist()
        [2, 3, 4]
    """
    x = original = as_tensor(t)
    fast = _basic_fast(x, index)
    if fast is not None:
        note = getattr(current_handler(), "note_basic_view", None)
        if note is not None:  # (a recording: `x[i] += v` writes this view back into x[i])
            note(x, index, fast)
        return fast
    entries = _entries(x, index)
    x, entries = _insert_new_axes(x, entries)
    is_basic = all(e.kind in ("slice", "int") for e in entries)
    x, int_axes = _basic(x, entries, int_axes_are_sliced=is_basic)
    if is_basic:
        if int_axes:
            return call("Squeeze", x, _i64(int_axes))
        return new_view(x) if x is original else x  # (x[...] is a new view, as NumPy's)
    return _advanced(x, entries)


def index_update(t: Any, index: Any, value: Any) -> Tensor:
    """A new tensor equal to NumPy's ``c = t.copy(); c[index] = value`` (value broadcast to
    the indexed shape and cast to ``t``'s dtype; with repeated indices the last one wins).

    Example:
        >>> import kiln
        >>> index_update(kiln.tensor([1, 2, 3, 4]), slice(1, 3), 0).tolist()
        [1, 0, 0, 4]
    """
    x = as_tensor(t)
    # Which flat positions ``index`` selects, in the indexed shape: index an iota.
    count = call("Size", x)
    iota = call("Range", constant(np.int64(0)), count, constant(np.int64(1)))
    positions = getitem(call("Reshape", iota, call("Shape", x), allowzero=1), index)
    return index_update_at(x, positions, value)


def index_update_at(x: Tensor, positions: Tensor, value: Any, reduction: str = "none") -> Tensor:
    """A new tensor equal to ``x`` with the flat positions ``positions`` (an int64 tensor of
    the written shape) set to ``value``, broadcast to that shape and cast to ``x``'s dtype as
    NumPy's assignment does; with repeated positions the last one wins. ``reduction``
    (``ScatterND``'s ``"add"``, ``"mul"``, ``"max"``, ``"min"``) combines each value with the
    contents instead, repeated positions accumulating in order (``ufunc.at``).

    Example:
        >>> import kiln
        >>> x = kiln.tensor([[1, 2], [3, 4]])
        >>> index_update_at(x, kiln.tensor([3, 0]), 9).tolist()
        [[9, 2], [3, 9]]
    """
    flat = call("Reshape", x, _i64([-1]))
    updated = index_update_rows(flat, positions, value, reduction)
    return call("Reshape", updated, call("Shape", x), allowzero=1)


def index_update_rows(
    x: Tensor, rows: Tensor, value: Any, reduction: str = "none", depth: int = 1
) -> Tensor:
    """A new tensor equal to ``x`` with the rows ``rows`` (an int64 tensor of indices into
    axis 0; negative ones count from the end) set to ``value``, broadcast to ``rows.shape +
    x.shape[1:]`` and cast to ``x``'s dtype: NumPy's ``x[rows] = value``, the last write
    winning, or ``ufunc.at`` with a ``reduction``. One ``ScatterND`` whose index rows address
    axis 0, so each writes a whole row of ``x``. With ``depth`` k > 1, ``rows`` holds one
    index per leading axis on its last axis of k (``x[i, j] = value`` for arrays ``i, j``).

    Example:
        >>> import kiln
        >>> x = kiln.tensor([[1, 2], [3, 4], [5, 6]])
        >>> index_update_rows(x, kiln.tensor([-1, 0]), [7, 8]).tolist()
        [[7, 8], [3, 4], [7, 8]]
    """
    v = constant(value, x.dtype) if is_scalar(value) else cast(as_tensor(value), x.dtype)
    lead = tuple(rows.shape) if depth == 1 else tuple(rows.shape[:-1])
    target = (*lead, *x.shape[depth:])
    extra = v.ndim - len(target)
    if extra > 0:  # NumPy drops leading size-1 axes of the value
        if not all(_static(d) and d == 1 for d in v.shape[:extra]):
            raise ValueError(
                f"could not broadcast input array from shape {format_shape(v.shape)} into "
                f"shape {format_shape(target)}"
            )
        v = call("Squeeze", v, _i64(list(range(extra))))
    for have, want in zip(reversed(v.shape), reversed(target)):
        if _static(have) and _static(want) and have not in (1, want):
            raise ValueError(
                f"could not broadcast input array from shape {format_shape(v.shape)} into "
                f"shape {format_shape(target)}"
            )
    if tuple(v.shape) != target:
        shape = call("Shape", rows) if depth == 1 else call("Shape", rows, end=-1)
        if x.ndim > depth:
            shape = call("Concat", shape, call("Shape", x, start=depth), axis=0)
        v = call("Expand", v, shape)
    where = call("Unsqueeze", rows, _i64([-1])) if depth == 1 else rows
    attrs = {} if reduction == "none" else {"reduction": reduction}
    return call("ScatterND", x, where, v, **attrs)
