"""Batching rules: an operator applied to a whole batch of its inputs at once.

What ``jax.vmap`` calls a batching rule. The loop vectorizer
(:mod:`kiln.optim.vectorize_loops`) finds the unrolled iterations of a Python loop, identical
subgraphs that differ only in constants, and rebuilds them once over a batch: each node of the
body becomes one node whose batched inputs carry an extra leading axis, one entry per
iteration. An operator's rule (``OpDef.batch``) says how:
``rule.fn(builder, op, inputs, batched, attrs)`` adds to ``builder`` the nodes computing the
operator over a batch, where input ``i`` has the leading batch axis when ``batched[i]`` and is
shared by every iteration otherwise, and returns the outputs, each with the batch axis
leading; or returns None where the rule does not cover the node (the vectorizer then leaves
that loop as it is). Constant inputs carry their contents in their type (``TensorType.value``)
when small, which is how a rule reads axes, shapes and the per-iteration slice starts.

A rule computes, for each iteration, exactly what the operator computes alone, in the same
order of operations (elementwise arithmetic, data movement, reductions along the same axes, a
matrix product per iteration as a batch axis of one ``MatMul``, so NumPy makes the same BLAS
call per iteration as the loop did); a rule whose batched form may round differently says
``reassociates=True``, and is used only where ``DefaultsOptions.allow_reassociation``
allows. ``tests/ops/test_batching.py`` checks every
rule of the registry against the operator run once per iteration.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..dtypes import is_complex, is_floating
from .registry import ELEMENTWISE, BatchFn, NodeBuilder, OpDef

__all__ = [
    "BatchRule",
    "batching_rule",
    "elementwise",
    "elementwise_into_first",
    "elementwise_first_only",
    "axes_input",
    "axis_attr",
    "reshape",
    "transpose",
    "slice_",
    "gather",
    "concat",
    "matmul",
]


@dataclass(frozen=True)
class BatchRule:
    """How an operator runs over a batch (see the module docstring).

    Attributes:
        fn: ``fn(builder, op, inputs, batched, attrs) -> outputs | None``.
        reassociates: The batched form may round differently from the operator run once per
            iteration (only used where ``DefaultsOptions.allow_reassociation`` allows).
    """

    fn: BatchFn
    reassociates: bool = False


def _rank(v: Any, batched: bool) -> int:
    """The rank one iteration's input has."""
    return len(v.shape) - (1 if batched else 0)


def _ints(v: Any) -> tuple[int, ...] | None:
    """The contents of a small constant integer input, when known and all plain ints."""
    value = v.type.value if v is not None else None
    if value is None or not all(isinstance(d, (int, np.integer)) for d in value):
        return None
    return tuple(int(d) for d in value)


def _const(builder: NodeBuilder, values: Sequence[int], hint: str = "axes") -> Any:
    return builder.add_constant(np.asarray(values, np.int64), hint=hint)


def _batch_size(inputs: Sequence[Any], batched: Sequence[bool]) -> Any:
    return next(v.shape[0] for v, b in zip(inputs, batched) if b and v is not None)


def _broadcast_batch(builder: NodeBuilder, v: Any, rank: int) -> Any:
    """Batched ``v`` (one iteration's rank ``len(v.shape) - 1``) with size-1 axes after the
    batch axis, so it broadcasts against shared operands of one iteration's rank ``rank``."""
    missing = rank - (len(v.shape) - 1)
    if missing <= 0:
        return v
    return builder.add("Unsqueeze", [v, _const(builder, range(1, 1 + missing))])[0]


def elementwise_fn(
    builder: NodeBuilder,
    op: str,
    inputs: Sequence[Any],
    batched: Sequence[bool],
    attrs: Mapping[str, Any],
) -> Sequence[Any] | None:
    """Any elementwise operator (NumPy broadcasting): batched operands get size-1 axes after
    the batch axis up to the iteration's result rank; shared ones broadcast as they are."""
    rank = max((_rank(v, b) for v, b in zip(inputs, batched) if v is not None), default=0)
    args = [
        _broadcast_batch(builder, v, rank) if b and v is not None else v
        for v, b in zip(inputs, batched)
    ]
    return builder.add(op, args, attrs)


elementwise = BatchRule(elementwise_fn)


def _into_first_fn(
    builder: NodeBuilder,
    op: str,
    inputs: Sequence[Any],
    batched: Sequence[bool],
    attrs: Mapping[str, Any],
) -> Sequence[Any] | None:
    return elementwise_fn(builder, op, inputs, batched, attrs) if batched[0] else None


def _first_only_fn(
    builder: NodeBuilder,
    op: str,
    inputs: Sequence[Any],
    batched: Sequence[bool],
    attrs: Mapping[str, Any],
) -> Sequence[Any] | None:
    return builder.add(op, inputs, attrs) if _only_first_batched(batched) else None


# Elementwise operators whose other inputs broadcast into the first only (PRelu's slope): the
# first must be batched.
elementwise_into_first = BatchRule(_into_first_fn)
# Elementwise operators whose other inputs must stay scalars (Clip's bounds): only the first
# may be batched.
elementwise_first_only = BatchRule(_first_only_fn)


def batching_rule(opdef: OpDef) -> BatchRule | None:
    """The operator's batching rule: its own, else the elementwise one for an elementwise
    operator, else None (the vectorizer then leaves loops using it as they are)."""
    if opdef.batch is not None:
        return opdef.batch  # type: ignore[no-any-return]
    if opdef.has(ELEMENTWISE):
        return elementwise
    return None


def _more_batch_axes_fn(
    builder: NodeBuilder,
    op: str,
    inputs: Sequence[Any],
    batched: Sequence[bool],
    attrs: Mapping[str, Any],
) -> Sequence[Any] | None:
    if not _only_first_batched(batched):
        return None
    return builder.add(op, list(inputs), {**attrs, "batch_axes": attrs["batch_axes"] + 1})


# ``kiln.Contiguous``: one more leading axis indexes the batch elements it lays out.
more_batch_axes = BatchRule(_more_batch_axes_fn)


# Reductions whose floating-point result depends on the order NumPy adds or multiplies in,
# which follows the array's memory layout.
_ORDERED_REDUCTIONS = frozenset(
    {
        *("ReduceSum", "ReduceMean", "ReduceProd", "ReduceSumSquare", "ReduceL1"),
        *("ReduceL2", "ReduceLogSum", "ReduceLogSumExp"),
    }
)


def _only_first_batched(batched: Sequence[bool]) -> bool:
    return bool(batched[0]) and not any(batched[1:])


def _axes_input_fn(output_rank: bool) -> BatchFn:
    def fn(
        builder: NodeBuilder,
        op: str,
        inputs: Sequence[Any],
        batched: Sequence[bool],
        attrs: Mapping[str, Any],
    ) -> Sequence[Any] | None:
        if not _only_first_batched(batched):
            return None
        data, axes = inputs[0], inputs[1] if len(inputs) > 1 else None
        rank = _rank(data, True)
        if axes is None:
            if op == "Squeeze":  # every size-1 axis: name them, or the batch axis could go
                if any(not isinstance(d, int) for d in data.shape[1:]):
                    return None
                given: tuple[int, ...] = tuple(i for i, d in enumerate(data.shape[1:]) if d == 1)
            elif attrs.get("noop_with_empty_axes"):
                return builder.add(op, inputs, attrs)  # no reduction (the operator's own)
            elif op == "ReduceL2":  # np.linalg.norm(x): a dot product, not a reduction over
                return None  # axes (kiln.ops.reduce.l2_whole), which rounds otherwise
            else:  # a reduction over every axis
                given = tuple(range(rank))
        else:
            known = _ints(axes)
            if known is None:
                return None
            given = known
            if not given and attrs.get("noop_with_empty_axes"):
                return builder.add(op, inputs, attrs)  # no reduction (the operator's own)
            if not given and op != "Squeeze" and op != "Unsqueeze":
                given = tuple(range(rank))
        within = rank + len(given) if output_rank else rank
        if any(not -within <= a < within for a in given):
            return None  # the operator's own error, raised by the unbatched node
        shifted = [a % within + 1 if within else 1 for a in given]
        if op in _ORDERED_REDUCTIONS and (is_floating(data.dtype) or is_complex(data.dtype)):
            # NumPy adds a contiguous array's elements pairwise in memory order but a strided
            # one's across rows; each iteration reduced a fresh contiguous array, laid out as
            # its inputs were: so is each batch element (fuzz 38:3804, 40:3985)
            (data,) = builder.add("kiln.Contiguous", [data], {"batch_axes": 1})
        return builder.add(op, [data, _const(builder, shifted), *inputs[2:]], attrs)

    return fn


def axes_input(*, output_rank: bool = False) -> BatchRule:
    """Operators with an ``axes`` input (second) over their first input (``Squeeze``, the
    reductions; ``Unsqueeze`` with ``output_rank=True``, whose axes index its result): the
    axes move one up, past the batch axis."""
    return BatchRule(_axes_input_fn(output_rank))


def axis_attr(name: str = "axis", *, output_rank: bool = False) -> BatchRule:
    """Operators over their first input with an ``axis`` attribute (``Softmax``, ``ArgMax``,
    ``Flatten``...): the axis moves one up, past the batch axis."""

    def fn(
        builder: NodeBuilder,
        op: str,
        inputs: Sequence[Any],
        batched: Sequence[bool],
        attrs: Mapping[str, Any],
    ) -> Sequence[Any] | None:
        if not _only_first_batched(batched):
            return None
        rank = _rank(inputs[0], True) + (1 if output_rank else 0)
        axis = attrs[name]
        if not -max(rank, 1) <= axis < max(rank, 1):
            return None
        return builder.add(op, inputs, {**attrs, name: (axis % rank if rank else 0) + 1})

    return BatchRule(fn)


def _reshape_fn(
    builder: NodeBuilder,
    op: str,
    inputs: Sequence[Any],
    batched: Sequence[bool],
    attrs: Mapping[str, Any],
) -> Sequence[Any] | None:
    target = _ints(inputs[1])
    size = inputs[0].shape[0]
    if not _only_first_batched(batched) or target is None or not isinstance(size, int):
        return None
    if attrs.get("allowzero") and 0 in target:
        return None
    return builder.add(op, [inputs[0], _const(builder, (size, *target), "shape")], attrs)


reshape = BatchRule(_reshape_fn)


def _transpose_fn(
    builder: NodeBuilder,
    op: str,
    inputs: Sequence[Any],
    batched: Sequence[bool],
    attrs: Mapping[str, Any],
) -> Sequence[Any] | None:
    rank = _rank(inputs[0], True)
    perm = attrs.get("perm") or tuple(range(rank - 1, -1, -1))
    return builder.add(op, inputs, {**attrs, "perm": (0, *(p + 1 for p in perm))})


transpose = BatchRule(_transpose_fn)


def _slice_fn(
    builder: NodeBuilder,
    op: str,
    inputs: Sequence[Any],
    batched: Sequence[bool],
    attrs: Mapping[str, Any],
) -> Sequence[Any] | None:
    data, starts, ends = inputs[0], inputs[1], inputs[2]
    axes = inputs[3] if len(inputs) > 3 else None
    steps = inputs[4] if len(inputs) > 4 else None
    if batched[0]:  # the data varies, the bounds are shared: slice one axis further in
        if any(batched[1:]):
            return None
        rank = _rank(data, True)
        count = starts.shape[0] if starts.shape else None
        given = (
            _ints(axes)
            if axes is not None
            else (tuple(range(count)) if isinstance(count, int) else None)
        )
        if given is None or any(not -rank <= a < rank for a in given):
            return None
        shifted = _const(builder, [a % rank + 1 for a in given])
        return builder.add(op, [data, starts, ends, shifted, steps], attrs)
    # The data is shared and the bounds vary: the loop index is in them (x[i], x[:, j]).
    # Every iteration takes as many elements along each axis: gather them all at once.
    if any(batched[3:]):
        return None  # varying axes or steps: rare, left alone
    size = _batch_size(inputs, batched)
    bounds = [
        _rows(builder, v) if b else (None if (one := _ints(v)) is None else [one] * size)
        for v, b in zip((starts, ends), batched[1:3])
    ]
    if bounds[0] is None or bounds[1] is None:
        return None
    return _gather_slices(builder, data, bounds[0], bounds[1], axes, steps)


def _gather_slices(
    builder: NodeBuilder,
    data: Any,
    starts_rows: list[tuple[int, ...]],
    ends_rows: list[tuple[int, ...]],
    axes: Any,
    steps: Any,
) -> Sequence[Any] | None:
    """Shared ``data`` sliced by per-iteration bounds (one tuple per iteration): one
    ``Gather`` along the axis whose bounds vary, after a shared slice of the axes whose bounds
    do not."""
    count = len(starts_rows[0])
    rank = len(data.shape)
    axes_given = _ints(axes) if axes is not None else tuple(range(count))
    steps_given = _ints(steps) if steps is not None else (1,) * count
    if axes_given is None or steps_given is None or len(axes_given) != count:
        return None
    if any(not -rank <= a < rank for a in axes_given) or 0 in steps_given:
        return None
    n = len(starts_rows)
    indices: list[tuple[int, np.ndarray]] = []  # (axis, (n, length) positions) per varying axis
    fixed: list[tuple[int, int, int, int]] = []  # (axis, start, end, step) shared by all
    for j, axis in enumerate(axes_given):
        axis %= rank
        dim = data.shape[axis]
        if not isinstance(dim, int):
            return None
        bounds = {(starts_rows[i][j], ends_rows[i][j]) for i in range(n)}
        if len(bounds) == 1:
            start, end = next(iter(bounds))
            fixed.append((axis, start, end, steps_given[j]))
            continue
        picks = [
            np.arange(*slice(starts_rows[i][j], ends_rows[i][j], steps_given[j]).indices(dim))
            for i in range(n)
        ]
        if len({len(p) for p in picks}) != 1:
            return None  # iterations take different lengths: no one batched shape
        indices.append((axis, np.stack(picks).astype(np.int64)))
    if not indices:
        return None
    value = data
    if fixed:
        value = _slice(builder, value, fixed)
    if len(indices) > 1:
        return _gather_blocks(builder, value, indices)
    axis, positions = indices[0]
    gathered = _contiguous(builder, value, axis, positions)
    if gathered is None:
        picked = builder.add_constant(positions, hint="positions")
        (gathered,) = builder.add("Gather", [value, picked], {"axis": axis})
    # The (n, length) positions are where the axis was: move the batch axis first.
    if axis == 0:
        return (gathered,)
    perm = (axis, *range(axis), *range(axis + 1, rank + 1))
    return builder.add("Transpose", [gathered], {"perm": perm})


def _gather_blocks(
    builder: NodeBuilder, data: Any, indices: list[tuple[int, np.ndarray]]
) -> Sequence[Any] | None:
    """Shared ``data`` read at a block per iteration whose bounds vary along several axes
    (``grid[i:i + 3, j:j + 3]``): the varying axes are moved first and merged into one, each
    iteration's block becomes flat positions into it, one ``Gather`` reads them all, and the
    axes go back in order, the batch first."""
    shape = data.shape
    if not all(isinstance(d, int) for d in shape):
        return None
    axes = sorted(a for a, _ in indices)
    positions = dict(indices)
    others = [a for a in range(len(shape)) if a not in positions]
    n = next(iter(positions.values())).shape[0]
    flat = np.zeros((n,) + (1,) * len(axes), np.int64)  # becomes (n, length per axis...)
    stride = 1
    for k in reversed(range(len(axes))):  # the position in the merged axis, row-major
        rows = positions[axes[k]]
        along = [n] + [1] * len(axes)
        along[1 + k] = rows.shape[1]
        flat = flat + rows.reshape(along) * stride
        stride *= shape[axes[k]]
    value = data
    if axes != list(range(len(axes))):
        (value,) = builder.add("Transpose", [value], {"perm": (*axes, *others)})
    target = [stride, *(shape[a] for a in others)]
    (value,) = builder.add("Reshape", [value, _const(builder, target, "shape")], {"allowzero": 1})
    picked = builder.add_constant(flat.astype(np.int64), hint="positions")
    (gathered,) = builder.add("Gather", [value, picked], {"axis": 0})
    # Now (batch, *varying axes, *other axes): put every axis back where it was.
    where = {a: 1 + i for i, a in enumerate(axes)}
    where.update({a: 1 + len(axes) + i for i, a in enumerate(others)})
    perm = (0, *(where[a] for a in range(len(shape))))
    if perm == tuple(range(len(perm))):
        return (gathered,)
    return builder.add("Transpose", [gathered], {"perm": perm})


def _contiguous(builder: NodeBuilder, data: Any, axis: int, positions: np.ndarray) -> Any:
    """``Gather(data, positions, axis)`` as a slice split in two axes (a view, not a copy)
    when the positions run evenly forward (``x[i]`` for ``i`` in order), else None."""
    flat = positions.reshape(-1)
    shape = data.shape
    if flat.size == 0:
        return None
    step = int(flat[1] - flat[0]) if flat.size > 1 else 1
    if step <= 0 or not np.array_equal(flat, flat[0] + step * np.arange(flat.size)):
        return None
    start = int(flat[0])
    if positions.shape[1:] == (1,):  # one row per iteration (x[i]): a unit axis after it
        run = _slice(builder, data, [(axis, start, start + step * flat.size, step)])
        return builder.add("Unsqueeze", [run, _const(builder, [axis + 1])])[0]
    if not all(isinstance(d, int) for d in shape):
        return None
    run = _slice(builder, data, [(axis, start, start + step * flat.size, step)])
    target = [*shape[:axis], *positions.shape, *shape[axis + 1 :]]
    return builder.add("Reshape", [run, _const(builder, target, "shape")], {"allowzero": 1})[0]


def _slice(builder: NodeBuilder, data: Any, boxes: Sequence[tuple[int, int, int, int]]) -> Any:
    """``data`` sliced by constant ``(axis, start, end, step)`` bounds."""
    columns = list(zip(*boxes))
    hints = ("axes", "starts", "ends", "steps")
    axes, starts, ends, steps = (_const(builder, c, h) for c, h in zip(columns, hints))
    return builder.add("Slice", [data, starts, ends, axes, steps])[0]


def _rows(builder: NodeBuilder, v: Any) -> list[tuple[int, ...]] | None:
    """A batched constant ``(n, count)`` integer input (one the batch stacked), as ``n``
    tuples."""
    data = builder.constant_data(v)
    if data is None or data.ndim != 2 or data.dtype.kind not in "iu":
        return None
    return [tuple(int(d) for d in row) for row in data.tolist()]


slice_ = BatchRule(_slice_fn)


def _gather_fn(
    builder: NodeBuilder,
    op: str,
    inputs: Sequence[Any],
    batched: Sequence[bool],
    attrs: Mapping[str, Any],
) -> Sequence[Any] | None:
    data, indices = inputs
    rank = _rank(data, batched[0])
    axis = attrs["axis"]
    if not -rank <= axis < rank:
        return None
    axis %= rank
    if batched[0] and not batched[1]:
        return builder.add(op, [data, indices], {**attrs, "axis": axis + 1})
    if batched[1] and not batched[0]:
        # Gather puts the batched indices' axes where ``axis`` was: move the batch axis first.
        (out,) = builder.add(op, [data, indices], {**attrs, "axis": axis})
        if axis == 0:
            return (out,)
        out_rank = rank - 1 + len(indices.shape)
        perm = (axis, *range(axis), *range(axis + 1, out_rank))
        return builder.add("Transpose", [out], {"perm": perm})
    return None


gather = BatchRule(_gather_fn)


def _concat_fn(
    builder: NodeBuilder,
    op: str,
    inputs: Sequence[Any],
    batched: Sequence[bool],
    attrs: Mapping[str, Any],
) -> Sequence[Any] | None:
    size = _batch_size(inputs, batched)
    rank = _rank(inputs[0], batched[0])
    axis = attrs["axis"]
    if not isinstance(size, int) or not -rank <= axis < rank:
        return None
    parts = []
    for v, b in zip(inputs, batched):
        if not b:  # shared by every iteration: repeat it along a new batch axis
            if any(not isinstance(d, int) for d in v.shape):
                return None
            (v,) = builder.add("Unsqueeze", [v, _const(builder, [0])])
            (v,) = builder.add("Expand", [v, _const(builder, [size, *v.shape[1:]])])
        parts.append(v)
    return builder.add(op, parts, {**attrs, "axis": axis % rank + 1})


concat = BatchRule(_concat_fn)


def _matmul_fn(
    builder: NodeBuilder,
    op: str,
    inputs: Sequence[Any],
    batched: Sequence[bool],
    attrs: Mapping[str, Any],
) -> Sequence[Any] | None:
    # The batch becomes a leading batch axis of the product, never rows of a bigger matrix:
    # NumPy then runs each iteration's product by itself (the same BLAS call as the loop ran,
    # so the same rounding). A batched vector becomes a batch of 1-row (or 1-column) matrices.
    a, b = inputs
    ra, rb = _rank(a, batched[0]), _rank(b, batched[1])
    if ra == 0 or rb == 0:
        return None
    squeeze = []
    if batched[0] and ra == 1:
        (a,) = builder.add("Unsqueeze", [a, _const(builder, [1])])  # (n, 1, k)
        ra, squeeze = 2, [-2 if rb >= 2 else -1]
    if batched[1] and rb == 1:
        (b,) = builder.add("Unsqueeze", [b, _const(builder, [2])])  # (n, k, 1)
        rb = 2
        squeeze = [-2, -1] if squeeze else [-1]
    # Each side's batch axes (beyond the matrix) must line up: the batched side has one more
    # than the shared side, so the shared side must not have more batch axes than it.
    full_a = ra + (1 if batched[0] else 0)
    full_b = rb + (1 if batched[1] else 0)
    if batched[0] and not batched[1] and rb > 2 and full_a < full_b + 1:
        return None
    if batched[1] and not batched[0] and ra > 2 and full_b < full_a + 1:
        return None
    if batched[0] and batched[1] and ra != rb:
        return None
    (out,) = builder.add(op, [a, b], attrs)
    if squeeze:
        (out,) = builder.add("Squeeze", [out, _const(builder, squeeze)])
    return (out,)


matmul = BatchRule(_matmul_fn)
