"""Operators for functionalized writes (:mod:`kiln.capture.views`).

``SliceUpdate`` is ``t[slices] = updates`` as a pure operator: a copy of ``data`` whose strided
box (``Slice``'s ``starts``/``ends``/``axes``/``steps``) holds ``updates``. It is kiln's own
(ONNX has no slice assignment): its kernel is NumPy's slice assignment, which a plan may run in
the data's own buffer when nothing else reads it, and its ``expand`` hook writes it as ONNX's
``ScatterND`` over the box's flat positions for export.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .. import dtypes
from ..errors import OpArgumentError
from .registry import PURE, Input, KernelCall, NodeBuilder, OpDef, Sample, TensorType, register
from .rules import require, require_same_dtype
from .sampling import sample_array
from .shape import _slice_infer, _slice_kernel, known_box, static_box

__all__ = ["slice_update_into", "assign_box"]

_I64 = np.dtype(np.int64)


def _infer(types: Sequence[TensorType | None], attrs: Mapping[str, Any]) -> list[TensorType]:
    data = require("SliceUpdate", "data", types[0])
    updates = require("SliceUpdate", "updates", types[1])
    require_same_dtype("SliceUpdate", (data, updates), ("data", "updates"))
    box_shape: tuple[Any, ...] | None = (
        static_box(types[0].shape, types[2:]) if len(types) > 3 else None
    )
    if box_shape is None:
        (box,) = _slice_infer([types[0], *types[2:]], {})
        box_shape = box.shape
    if len(box_shape) != len(updates.shape) or any(
        isinstance(b, int) and isinstance(u, int) and b != u
        for b, u in zip(box_shape, updates.shape)
    ):
        raise OpArgumentError(
            f"SliceUpdate: 'updates' has shape {updates.shape}; the slice of 'data' has "
            f"shape {box_shape}"
        )
    return [TensorType(data.dtype, data.shape)]


def slice_update_into(
    data: np.ndarray,
    updates: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    axes: np.ndarray | None = None,
    steps: np.ndarray | None = None,
) -> np.ndarray:
    """``data[box] = updates`` in ``data``'s own buffer (a copy first when it is read-only);
    returns ``data``. A plan calls it when nothing else reads ``data``."""
    if not data.flags.writeable:
        data = data.copy()
    _slice_kernel(data, starts, ends, axes, steps)[...] = updates  # a view of the box
    return data


def assign_box(data: np.ndarray, updates: np.ndarray, box: tuple[slice, ...]) -> np.ndarray:
    """``data[box] = updates`` in ``data``'s own buffer (a copy first when it is read-only);
    returns the written array."""
    if not data.flags.writeable:
        data = data.copy()
    data[box] = updates
    return data


def _kernel(
    data: np.ndarray,
    updates: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    axes: np.ndarray | None = None,
    steps: np.ndarray | None = None,
) -> np.ndarray:
    return slice_update_into(data.copy(), updates, starts, ends, axes, steps)


def _copy_and_assign(data: np.ndarray, updates: np.ndarray, box: tuple[slice, ...]) -> np.ndarray:
    return assign_box(data.copy(), updates, box)


def _fast(
    inputs: Sequence[Any], outputs: Sequence[Any], attrs: Mapping[str, Any]
) -> KernelCall | None:
    """A box known at plan time: a copy and NumPy's slice assignment, the box bound once."""
    box = known_box(inputs[0], inputs[2:])
    if box is None:
        return None
    return KernelCall("{b0}({0}, {1}, {b1})", (_copy_and_assign, box))


def _reference(
    data: np.ndarray,
    updates: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    axes: np.ndarray | None = None,
    steps: np.ndarray | None = None,
) -> np.ndarray:
    # Independent of the kernel: scatter through the box's flat positions.
    positions = _slice_kernel(np.arange(data.size).reshape(data.shape), starts, ends, axes, steps)
    out = np.array(data, copy=True).reshape(-1)
    out[positions.reshape(-1)] = np.asarray(updates).reshape(-1)
    return out.reshape(data.shape)


def _expand(
    builder: NodeBuilder, inputs: Sequence[Any], attrs: Mapping[str, Any], outputs: Sequence[Any]
) -> None:
    """ONNX's form: ScatterND of ``updates`` into the flattened data at the box's positions."""
    data, updates, *box = inputs

    def const(value: Any) -> Any:
        (v,) = builder.add("Constant", [], {"value": np.asarray(value, _I64)})
        return v

    (shape,) = builder.add("Shape", [data])
    (size,) = builder.add("Size", [data])
    (iota,) = builder.add("Range", [const(0), size, const(1)])
    (grid,) = builder.add("Reshape", [iota, shape], {"allowzero": 1})
    (positions,) = builder.add("Slice", [grid, *box])
    (where,) = builder.add("Unsqueeze", [positions, const([-1])])
    (flat,) = builder.add("Reshape", [data, const([-1])])
    (written,) = builder.add("ScatterND", [flat, where, updates])
    builder.add("Reshape", [written, shape], {"allowzero": 1}, outputs=[outputs[0]])


def _samples() -> list[Sample]:
    out = []
    for dt in (dtypes.float32, dtypes.int64, dtypes.bool_):
        x = sample_array((4, 5), dt)
        box = (np.array([1, 0], _I64), np.array([3, 5], _I64), np.array([0, 1], _I64))
        steps = np.array([1, 2], _I64)
        out.append(
            Sample((x, sample_array((2, 3), dt), *box, steps), {}, _reference, name=f"{dt.name}")
        )
        ends = np.array([-1], _I64)
        rev = (np.array([-1], _I64), np.array([-100], _I64), np.array([1], _I64), ends)
        out.append(
            Sample((x, sample_array((4, 5), dt), *rev), {}, _reference, name=f"rev-{dt.name}")
        )
    empty = (np.array([2], _I64), np.array([2], _I64))
    x = sample_array((3,), dtypes.float64)
    out.append(Sample((x, np.zeros(0), *empty), {}, _reference, name="empty"))
    return out


register(
    OpDef(
        name="SliceUpdate",
        bit_exact=True,
        doc="A copy of 'data' whose strided box (Slice's starts, ends, axes, steps) holds "
        "'updates' (of the box's shape): NumPy's data[box] = updates, as a value.",
        inputs=(
            Input("data"),
            Input("updates"),
            Input("starts", values_only=True),
            Input("ends", values_only=True),
            Input("axes", values_only=True, optional=True),
            Input("steps", values_only=True, optional=True),
        ),
        outputs=("output",),
        infer=_infer,
        kernel=_kernel,
        traits=frozenset({PURE}),
        samples=_samples,
        domain="kiln",
        expand=_expand,
        fast_kernel=_fast,
    )
)
