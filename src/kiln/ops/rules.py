"""Building blocks for operators' ``infer`` rules: axes, broadcasting, dtype checks.

Every error raised here names the operator and the argument, and says what was expected and what
was found.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from .. import dtypes
from ..errors import AxisError, OpArgumentError, OpTypeError
from ..symbolic import Dim, Shape, broadcast_dim, format_shape
from .registry import TensorType

__all__ = [
    "normalize_axis",
    "normalize_axes",
    "broadcast",
    "require",
    "require_dtype",
    "require_same_dtype",
    "require_rank",
    "FLOATS",
    "NUMERIC",
    "INTEGERS",
    "SIGNED",
    "ALL",
    "BOOL",
]

FLOATS = frozenset(dtypes.FLOAT_DTYPES)
INTEGERS = frozenset(dtypes.INT_DTYPES)
SIGNED = frozenset(dtypes.SIGNED_DTYPES + dtypes.FLOAT_DTYPES)
NUMERIC = frozenset(dtypes.NUMERIC_DTYPES)
ALL = frozenset(dtypes.ALL_DTYPES)
BOOL = frozenset({dtypes.bool_})


def require(op: str, arg: str, t: TensorType | None) -> TensorType:
    """``t``, or an error saying that input ``arg`` of ``op`` is missing."""
    if t is None:
        raise OpArgumentError(f"{op}: input {arg!r} is required")
    return t


def normalize_axis(
    op: str,
    axis: int,
    ndim: int,
    arg: str = "axis",
    *,
    scalar: bool = True,
    numpy_wording: bool = False,
) -> int:
    """``axis`` in ``[0, ndim)``, accepting negative axes NumPy-style: the one axis check of
    kiln's operators, its NumPy-style functions and ``kiln.nn``.

    Args:
        op: The operator or function the error names ("" for none).
        axis: The axis given.
        ndim: The rank of the tensor it indexes.
        arg: The argument the error names.
        scalar: Let a 0-d tensor take axis 0 (as the whole tensor), as kiln's operators
            always have; NumPy-style callers pass False (in NumPy a 0-d array has no axis).
        numpy_wording: Word the error as NumPy does ("axis 3 is out of bounds for an array
            of dimension 2"), for the functions that mirror NumPy's.

    Raises:
        AxisError: ``axis`` is outside ``[-ndim, ndim)``; it is an ``OpArgumentError`` and
            NumPy's ``AxisError`` (a ``ValueError`` and an ``IndexError``) alike.

    Example:
        >>> normalize_axis("Softmax", -1, 3), normalize_axis("Softmax", 0, 0)
        (2, 0)
    """
    if -ndim <= axis < ndim or (scalar and ndim == 0 and axis == 0):
        return axis % ndim if ndim else 0
    if numpy_wording:
        where = f"{op}: " if op else ""
        raise AxisError(f"{where}axis {axis} is out of bounds for an array of dimension {ndim}")
    raise AxisError(
        f"{op}: {arg}={axis} is out of range for a tensor of rank {ndim} "
        f"(expected {-ndim} <= {arg} < {ndim})"
    )


def normalize_axes(
    op: str, axes: Iterable[int], ndim: int, arg: str = "axes", *, scalar: bool = True
) -> tuple[int, ...]:
    """Each axis normalised (:func:`normalize_axis`); duplicates rejected."""
    result = tuple(normalize_axis(op, a, ndim, arg, scalar=scalar) for a in axes)
    if len(set(result)) != len(result):
        raise OpArgumentError(f"{op}: {arg}={tuple(axes)} repeats an axis")
    return result


def broadcast(op: str, *shapes: Shape) -> Shape:
    """The NumPy broadcast of ``shapes``, or an error naming ``op`` and the shapes."""
    ndim = max((len(s) for s in shapes), default=0)
    result: list[Dim] = [1] * ndim
    for shape in shapes:
        offset = ndim - len(shape)
        for i, d in enumerate(shape):
            try:
                result[offset + i] = broadcast_dim(result[offset + i], d)
            except ValueError:
                shown = " and ".join(format_shape(s) for s in shapes)
                raise OpArgumentError(
                    f"{op}: shapes {shown} do not broadcast (axis {offset + i - ndim}: "
                    f"{result[offset + i]} vs {d})"
                ) from None
    return tuple(result)


def require_dtype(op: str, arg: str, t: TensorType, allowed: Iterable[np.dtype]) -> None:
    """Raise unless ``t.dtype`` is one of ``allowed``."""
    allowed = frozenset(allowed)
    if t.dtype not in allowed:
        names = ", ".join(sorted(d.name for d in allowed))
        raise OpTypeError(f"{op}: input {arg!r} has dtype {t.dtype}; expected one of {names}")


def require_same_dtype(op: str, types: Sequence[TensorType | None], names: Sequence[str]) -> None:
    """Raise unless every given input has the same dtype (ONNX's type constraint ``T``)."""
    present = [(n, t) for n, t in zip(names, types) if t is not None]
    if not present:
        return
    first_name, first = present[0]
    for name, t in present[1:]:
        if t.dtype != first.dtype:
            raise OpTypeError(
                f"{op}: inputs {first_name!r} ({first.dtype}) and {name!r} ({t.dtype}) must "
                "have the same dtype; cast one of them first"
            )


def require_rank(op: str, arg: str, t: TensorType, ranks: Iterable[int]) -> None:
    """Raise unless ``t`` has one of ``ranks``."""
    ranks = tuple(ranks)
    if t.ndim not in ranks:
        expected = " or ".join(str(r) for r in ranks)
        raise OpArgumentError(
            f"{op}: input {arg!r} must have rank {expected}, got rank {t.ndim} "
            f"(shape {format_shape(t.shape)})"
        )
