"""Computing results ahead of time: the one constant folder, and the sizes it works up to.

Several layers compute an operator on inputs they already know instead of leaving it to run
time: the optimizer's ``fold_constants`` pass, algebraic simplification combining two constants,
ONNX import completing the types of small shape computations, and a type carrying the contents
of a small tensor. They all fold with :func:`fold` (a pure operator's kernel on known arrays,
results read-only) or read known contents with :func:`known_array`, and each names the limit of
:class:`FoldingLimits` it folds up to, and why.

Example:
    >>> import numpy as np
    >>> from kiln.ops.registry import get_op
    >>> (total,) = fold(get_op("Add"), [np.array(2), np.array(3)], {}, limit=1)
    >>> int(total), total.flags.writeable
    (5, False)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..symbolic import Dim, prod
from .dispatch import run_kernel
from .registry import PURE, OpDef, TensorType

__all__ = ["FoldingLimits", "FOLDING_LIMITS", "fold", "fits", "known_array", "type_of_array"]


@dataclass(frozen=True)
class FoldingLimits:
    """How many elements a result computed ahead of time may hold, per kind of folding.

    Attributes:
        optimizer: A node over constants folds (``fold_constants``; two constants combine in
            ``simplify_algebra``) when its results hold at most this many elements in all:
            bigger ones stay computed at run time, so a saved graph stays small.
            :class:`kiln.optim.DefaultsOptions` ``constant_folding_limit`` defaults to it.
        plan: An executor's plan-time folding (the NumPy plan computes nodes over known
            values once, when it is built): each output at most this many elements, so
            building a plan stays cheap and holds little memory.
        known_ints: A 0-d or 1-d integer tensor of at most this many elements carries its
            contents in its type (``TensorType.value``): shapes, axes and indices are this
            small, and types stay cheap to build and compare. Operators' ``infer`` rules and
            ONNX import's value inference keep contents up to it.
        known_floats: A 1-d float tensor of at most this many elements carries its contents
            too (``Resize`` reads its scales from them).
    """

    optimizer: int = 1 << 16
    plan: int = 4096
    known_ints: int = 64
    known_floats: int = 8


FOLDING_LIMITS = FoldingLimits()


def fits(shapes: Iterable[Sequence[Dim]], limit: int) -> bool:
    """True when tensors of ``shapes`` hold at most ``limit`` elements in all (a symbolic
    size never fits: the result must be known to become a constant of its type).

    Example:
        >>> fits([(2, 3), (4,)], 10), fits([(2, 3), (5,)], 10)
        (True, False)
    """
    total = 0
    for shape in shapes:
        size = prod(shape)
        if not isinstance(size, int):
            return False
        total += size
    return total <= limit


def fold(
    opdef: OpDef,
    arrays: Sequence[np.ndarray | None],
    attrs: Mapping[str, Any],
    *,
    limit: int | None,
    shapes: Sequence[Sequence[Dim]] | None = None,
) -> tuple[np.ndarray, ...] | None:
    """The results of ``opdef`` on known inputs, computed now, read-only.

    Args:
        opdef: The operator; only a pure one folds (its results depend on its inputs alone).
        arrays: Its inputs (None for an omitted optional input).
        attrs: Its bound attributes.
        limit: The most elements the results may hold in all (see :class:`FoldingLimits`);
            None for no limit (the caller measures each result itself).
        shapes: The outputs' shapes when they are known before computing (a node's recorded
            outputs, possibly fewer than the kernel returns), and then exactly that many
            results come back. Without them the operator's ``infer`` gives them. Either way a
            result too big for ``limit`` is never computed: sizes are checked first, so
            folding a 100-byte model's ``Range(0, 4e8)`` allocates nothing.

    Returns:
        The results, or None when ``opdef`` is not pure or they would exceed ``limit`` (or
        their size is not known before computing). A kernel's (or ``infer``'s) error
        propagates: whether a failed fold is fatal is the caller's choice.
    """
    if PURE not in opdef.traits:
        return None
    if limit is not None:
        sizes = shapes if shapes is not None else _inferred_shapes(opdef, arrays, attrs)
        if not fits(sizes, limit):
            return None
    results = run_kernel(opdef, arrays, attrs)
    if shapes is not None:
        results = results[: len(shapes)]
    for r in results:
        r.flags.writeable = False
    return results


def _inferred_shapes(
    opdef: OpDef, arrays: Sequence[np.ndarray | None], attrs: Mapping[str, Any]
) -> list[Sequence[Dim]]:
    """The output shapes ``opdef.infer`` gives for known ``arrays`` (typed with their
    contents where a type carries them), before anything is computed."""
    types = [None if a is None else type_of_array(a) for a in arrays]
    return [t.shape for t in opdef.infer(types, attrs)]


def type_of_array(data: np.ndarray) -> TensorType:
    """The :class:`TensorType` of a known array: its dtype and shape, and its contents where a
    type carries them (the ``known_ints`` / ``known_floats`` limits).

    Example:
        >>> type_of_array(np.array([2, 3])).value
        (2, 3)
    """
    value: tuple[Any, ...] | None = None
    if data.ndim <= 1 and data.dtype.kind in "iu" and data.size <= FOLDING_LIMITS.known_ints:
        value = tuple(int(v) for v in data.reshape(-1))
    elif data.ndim == 1 and data.dtype.kind == "f" and data.size <= FOLDING_LIMITS.known_floats:
        value = tuple(float(v) for v in data)
    return TensorType(data.dtype, tuple(data.shape), value)


def known_array(ttype: TensorType, *, integral: bool = False) -> np.ndarray | None:
    """The contents ``ttype`` knows statically (``TensorType.value``) as an array of its dtype
    and shape; None when they are unknown or hold a symbolic size.

    Args:
        ttype: The type.
        integral: Only integer contents count (shape arithmetic); float contents give None.

    Example:
        >>> known_array(TensorType(np.dtype("int64"), (2,), (3, 4))).tolist()
        [3, 4]
    """
    value = ttype.value
    if value is None or not all(isinstance(d, int) for d in ttype.shape):
        return None
    kinds = int if integral else (int, float)
    if not all(isinstance(v, kinds) for v in value):
        return None  # a symbolic size: only the operators' own rules compute with those
    data = np.asarray(value).astype(ttype.dtype).reshape(ttype.shape)  # type: ignore[arg-type]
    data.flags.writeable = False
    return data
