"""Pattern pieces the normalization fusions share (``fuse_layer_norm``, ``fuse_rms_norm``).

Not a pass: passes never import each other, so what two of them match alike lives here, next to
the generic pieces of :mod:`kiln.optim.pattern`.
"""

from __future__ import annotations

import numpy as np

from .. import dtypes
from ..dtypes import onnx_dtype_code
from ..ir.graph import Value
from .pattern import Match, Pattern, const, either, op
from .transform import DefaultsOptions

__all__ = [
    "square",
    "rsqrt_of",
    "normalize",
    "normalized_axis",
    "rounds_as_written",
    "stash_type",
]


def square(p: Pattern, q: Pattern) -> Pattern:
    """``p ** 2`` or ``p * q`` (``q`` a second copy of ``p``'s pattern).

    Example:
        >>> from kiln.optim.pattern import var
        >>> len(square(var("x"), var("x")).alternatives)
        2
    """
    return either(op("Pow", p, const(2)), op("Mul", p, q))


def rsqrt_of(p: Pattern, eps: str = "eps") -> tuple[Pattern, Pattern]:
    """``sqrt(p + eps)`` (or ``** 0.5``) and the pattern of its use as a divisor."""
    shifted = op("Add", p, const(name=eps))
    return either(op("Sqrt", shifted), op("Pow", shifted, const(0.5))), shifted


def normalize(numerator: Pattern, denominator: Pattern) -> Pattern:
    """``numerator / denominator`` written as a division (its node named ``divide``) or a
    product with the reciprocal."""
    return either(
        op("Div", numerator, denominator, name="divide"),
        op("Mul", numerator, op("Div", const(1), denominator)),
        op("Mul", numerator, op("Reciprocal", denominator)),
    )


def normalized_axis(m: Match, reductions: list[str], x: Value) -> int | None:
    """The first axis ``a`` when every reduction named in ``reductions`` reduces exactly the
    trailing axes ``[a, rank)`` of ``x`` with keepdims; None otherwise."""
    rank = len(x.shape)
    found: set[tuple[int, ...]] = set()
    for name in reductions:
        if name not in m.nodes:
            continue
        if len(m.node(name).inputs[0].shape) != rank or not m.attrs(name)["keepdims"]:  # type: ignore[union-attr]
            return None
        axes = m.axes(name)
        if axes is None:
            return None
        found.add(axes)
    if len(found) != 1:
        return None
    axes = found.pop()
    if not axes or axes != tuple(range(axes[0], rank)):
        return None
    return axes[0]


def rounds_as_written(m: Match, x: Value, options: DefaultsOptions) -> bool:
    """Whether the fused kernel (statistics in ``x``'s float32 or float64, then ``x`` times
    ``1 / sqrt(...)``) rounds as the matched operations do: only for a product with the
    reciprocal of a float32 or float64 ``x``. A division (``(x - mu) / sqrt(var + eps)``) or
    half precision (computed in float32 by the kernel) round otherwise, so they fuse only
    where ``options`` allow reassociation."""
    if options.allow_reassociation:
        return True
    return "divide" not in m.nodes and x.dtype in (dtypes.float32, dtypes.float64)


def stash_type(dtype: np.dtype) -> int:
    """The statistics' dtype code: the input's own for float64 (so nothing is lost), float32
    otherwise (ONNX's default; half precision then computes more exactly).

    Example:
        >>> stash_type(np.dtype("float64")), stash_type(np.dtype("float16"))
        (11, 1)
    """
    return onnx_dtype_code(dtype) if dtype == dtypes.float64 else 1
