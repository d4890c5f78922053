"""Shape and layout operators: Reshape, Transpose, Slice, Gather, Concat, Pad, Resize, ...

Each operator is one record with ONNX (opset 21+) semantics. Their ``infer`` rules work on
symbolic shapes and do *value propagation*: a small integer tensor's known contents
(``TensorType.value``, ints or :class:`~kiln.symbolic.SymDim`) flow through ``Shape``, ``Gather``,
``Slice``, ``Concat``, ``Unsqueeze``, ... so that an operator reading a shape-like input
(``Reshape``'s ``shape``, ``Slice``'s ``starts``) still knows the output shape inside a trace::

    Shape(x: (B, 3, 4))            value (B, 3, 4)
    Slice(that, [0], [1])          value (B,)
    Concat(that, [-1])             value (B, -1)
    Reshape(x, that)               shape (B, 12)

A shape-like input whose value is computed at run time (a graph input, a data-dependent value)
decides the sizes only when the graph runs: they become fresh symbolic sizes (as ``NonZero``'s
count), with the rank known where ONNX fixes it (Reshape: the length of ``shape``; Expand: the
larger of the two ranks; Unsqueeze/Squeeze: the rank plus/minus the number of axes). Only an
input whose *length* is unknown, so that the rank would be, is an error naming the input and
saying to pass its value (``constant_inputs=``). The kernels check such values as ``infer``
checks constants (an axis out of range, split sizes that do not add up).

Slice follows Python's slicing rules for its clamping (as the ONNX reference implementation
does); they agree with the ONNX text everywhere except a negative-step start before the first
element, which selects nothing (Python) rather than the first element.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from .. import dtypes
from ..errors import OpArgumentError, OpTypeError
from ..symbolic import Dim, SymDim, dim_max, dim_min, floordiv, format_shape, fresh_symbol, prod
from . import batching
from .folding import FOLDING_LIMITS
from .registry import (
    DATA_DEPENDENT_SHAPE,
    LAYOUT,
    NEW_ARRAY,
    PURE,
    SHAPE,
    SHAPE_ONLY,
    VIEW,
    Attr,
    EngineLimit,
    Input,
    KernelCall,
    OpDef,
    Sample,
    TensorType,
    Typed,
    any_limit,
    register,
)
from .rules import (
    ALL,
    FLOATS,
    NUMERIC,
    broadcast,
    normalize_axes,
    normalize_axis,
    require,
    require_dtype,
    require_rank,
    require_same_dtype,
)
from .sampling import sample_array

__all__ = ["INT64_MAX", "INT64_MIN", "gather_nd_at", "index_columns"]

INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)
# A bound at least this large (in magnitude) means "to the end" whatever the axis size.
_SENTINEL = 2**62
# Only small 0-d/1-d integer tensors carry their contents (as kiln.tensor does).
_VALUE_LIMIT = FOLDING_LIMITS.known_ints
_INDEX = frozenset({dtypes.int32, dtypes.int64})
_I64 = frozenset({dtypes.int64})
_LAYOUT = frozenset({LAYOUT, PURE})
_VIEW = _LAYOUT | {VIEW}  # NumPy returns a view: a write through the result reaches the input
_SHAPE = frozenset({SHAPE, PURE})

# Sample dtypes: a float, an int and bool, as every layout op moves any dtype.
_DTS = (dtypes.float32, dtypes.int64, dtypes.bool_)


# -- engine facts (OpDef.fast_kernel, OpDef.engine_limits) ---------------------------------


def _static_reshape_fast(
    inputs: Sequence[Typed | None], outputs: Sequence[Typed], attrs: Mapping[str, Any]
) -> KernelCall | None:
    """Reshape, Flatten, Squeeze, Unsqueeze to a static output shape: ``x.reshape(shape)``
    with the shape bound once (a view, as the kernels return)."""
    shape = outputs[0].shape
    if not all(isinstance(d, int) for d in shape):
        return None
    return KernelCall("{0}.reshape({b0})", (tuple(shape),), returns_view=True)


def known_box(data: Typed | None, params: Sequence[Typed | None]) -> tuple[slice, ...] | None:
    """The index tuple of a Slice whose starts, ends, axes and steps are known at plan time
    (small constants carry their values in their types), or None."""
    if data is None:
        return None
    values = []
    for p in params:
        if p is None:
            values.append(None)
            continue
        known = getattr(getattr(p, "type", p), "value", None)
        if known is None or not all(isinstance(v, (int, np.integer)) for v in known):
            return None  # computed at run time, or a symbolic size
        values.append([int(v) for v in known])
    starts, ends = values[0], values[1]
    axes = values[2] if len(values) > 2 and values[2] is not None else list(range(len(starts)))
    steps = values[3] if len(values) > 3 and values[3] is not None else [1] * len(starts)
    ndim = len(data.shape)
    index = [slice(None)] * ndim
    for a, st, en, sp in zip(axes, starts, ends, steps):
        index[a % ndim] = slice(st, en, sp)
    return tuple(index)


def _slice_fast(
    inputs: Sequence[Typed | None], outputs: Sequence[Typed], attrs: Mapping[str, Any]
) -> KernelCall | None:
    """``x[box]`` with the box known at plan time: NumPy's basic slicing (a view)."""
    box = known_box(inputs[0], inputs[1:])
    if box is None:
        return None
    return KernelCall("{0}[{b0}]", (box,), returns_view=True)


def _transpose_fast(
    inputs: Sequence[Typed | None], outputs: Sequence[Typed], attrs: Mapping[str, Any]
) -> KernelCall | None:
    """``x.transpose(perm)`` with the permutation resolved once (a view)."""
    x = inputs[0]
    assert x is not None  # Transpose's one input is required
    perm = attrs["perm"]
    perm = tuple(reversed(range(len(x.shape)))) if perm is None else tuple(perm)
    return KernelCall("{0}.transpose({b0})", (perm,), returns_view=True)


def _bool_with_reduction(
    inputs: Sequence[Typed | None], outputs: Sequence[Typed], attrs: Mapping[str, Any]
) -> bool:
    data = inputs[0]
    return data is not None and data.dtype == np.bool_ and attrs["reduction"] != "none"


def _float_max_min(
    inputs: Sequence[Typed | None], outputs: Sequence[Typed], attrs: Mapping[str, Any]
) -> bool:
    data = inputs[0]
    return (
        data is not None and data.dtype.kind not in "biu" and attrs["reduction"] in ("max", "min")
    )


def _no_reduction(
    inputs: Sequence[Typed | None], outputs: Sequence[Typed], attrs: Mapping[str, Any]
) -> bool:
    """A scatter that only stores values is data movement (bit-exact in any engine)."""
    return attrs["reduction"] == "none"


# Where onnxruntime 1.x departs from the ONNX semantics (found by tests/exec/test_engines.py
# against the reference executor). A max/min reduction drops a NaN already in the data
# (1.32: max(NaN, 1) gives 1; NumPy's maximum.at keeps the NaN).
_ORT_REDUCTION = {
    "onnxruntime": any_limit(
        EngineLimit("on bool with a reduction", _bool_with_reduction),
        EngineLimit("on floats with a max or min reduction (drops NaN)", _float_max_min),
    )
}


# -- helpers for infer ---------------------------------------------------------------------


def _known(op: str, arg: str, t: TensorType, why: str = "the output shape") -> tuple[Dim, ...]:
    """The known contents of shape-like input ``arg``, or an error saying it must be constant."""
    if t.value is None:
        raise OpArgumentError(
            f"{op}: input {arg!r} ({t}) must be a constant (its value must be known to "
            f"compute {why}), but it is computed at run time"
        )
    return t.value


def _ints(op: str, arg: str, values: Sequence[Dim]) -> tuple[int, ...]:
    """``values`` as Python ints, or an error when one is symbolic."""
    if not all(isinstance(v, int) for v in values):
        raise OpArgumentError(
            f"{op}: input {arg!r} must hold static integers, got {tuple(str(v) for v in values)}"
        )
    return tuple(int(v) for v in values)


def _vector(op: str, arg: str, t: TensorType, allowed: frozenset = _I64) -> None:
    """Raise unless ``t`` is a 1-D integer tensor of static length."""
    require_dtype(op, arg, t, allowed)
    require_rank(op, arg, t, (1,))
    if not isinstance(t.shape[0], int):
        raise OpArgumentError(
            f"{op}: input {arg!r} ({t}) must have a length known when the graph is built: "
            "its number of entries decides the rank of the output, and kiln knows every rank "
            "before a graph runs. Pass its value when loading (kiln.io.load(model, "
            "constant_inputs={name: value})) or compute it with a static length"
        )


def _checked_axes(op: str, axes: np.ndarray, ndim: int, arg: str = "axes") -> list[int]:
    """A kernel's ``axes`` input as non-negative axes, checked as its ``infer`` checks a
    constant one (in range, none repeated): the values may be known only when the graph runs.
    """
    out = [int(a) for a in np.asarray(axes).reshape(-1)]
    for a in out:
        if not -ndim <= a < ndim:
            raise OpArgumentError(
                f"{op}: input {arg!r} holds axis {a}, out of range for rank {ndim} (expected "
                f"{-ndim}..{ndim - 1})"
            )
    out = [a % ndim for a in out]
    if len(set(out)) != len(out):
        raise OpArgumentError(f"{op}: input {arg!r} repeats an axis: {out}")
    return out


def _runtime_sizes(hint: str, rank: int) -> tuple[Dim, ...]:
    """``rank`` fresh symbolic sizes, for an output whose sizes a shape-like input computed at
    run time decides (Reshape's ``shape``, Tile's ``repeats``, ...): the rank is known when
    the graph is built, the sizes when it runs (as NonZero's count)."""
    return tuple(fresh_symbol(hint) for _ in range(rank))


def _scalar_input(op: str, arg: str, t: TensorType) -> None:
    if t.ndim != 0 and not (t.ndim == 1 and t.shape[0] == 1):
        raise OpArgumentError(f"{op}: input {arg!r} must be a scalar, got shape {t}")


def _typed(dtype: np.dtype, shape: Sequence[Dim], value: Sequence[Dim] | None = None) -> TensorType:
    """A TensorType, keeping ``value`` only where a small integer tensor may carry it."""
    shape = tuple(shape)
    keep = (
        value is not None
        and dtypes.is_integer(dtype)
        and len(shape) <= 1
        and all(isinstance(d, int) for d in shape)
        and prod(shape) == len(value)
        and len(value) <= _VALUE_LIMIT
    )
    return TensorType(dtype, shape, tuple(value) if keep and value is not None else None)


def _same_dim(op: str, what: str, a: Dim, b: Dim) -> Dim:
    """Two sizes that must be equal: the static one where one is static."""
    if isinstance(a, int) and isinstance(b, int):
        if a != b:
            raise OpArgumentError(f"{op}: {what}: sizes {a} and {b} must be equal")
        return a
    return a if isinstance(a, int) else b


def _is_to_end(bound: Dim, step: int) -> bool:
    return isinstance(bound, int) and (bound >= _SENTINEL if step > 0 else bound <= -_SENTINEL)


def _slice_dim(d: Dim, start: Dim, end: Dim, step: int) -> tuple[Dim, Dim]:
    """(first index, length) of ``range(d)[start:end:step]``, symbolic sizes allowed.

    A symbolic ``start``/``end`` is taken as non-negative (it is a size).
    """
    if isinstance(d, int) and isinstance(start, int) and isinstance(end, int):
        r = range(d)[slice(start, end, step)]
        return (r.start if len(r) else 0), len(r)
    if step > 0:
        s = _clamp_forward(start, d, start_bound=True)
        e = _clamp_forward(end, d, start_bound=False)
        if s == 0:  # e >= 0 already
            return 0, floordiv(e + step - 1, step)
        return s, dim_max(floordiv(e - s + step - 1, step), 0)
    s = _clamp_backward(start, d, start_bound=True)
    e = _clamp_backward(end, d, start_bound=False)
    if s == d - 1 and e == -1:
        return s, floordiv(d - step - 1, -step)
    return s, dim_max(floordiv(s - e - step - 1, -step), 0)


def _clamp_forward(b: Dim, d: Dim, start_bound: bool) -> Dim:
    if isinstance(b, SymDim):
        return dim_min(b, d)
    if b >= _SENTINEL:
        return d
    if b <= -_SENTINEL:
        return 0
    if b >= 0:
        return b if b == 0 else dim_min(b, d)
    return dim_max(d + b, 0)


def _clamp_backward(b: Dim, d: Dim, start_bound: bool) -> Dim:
    if isinstance(b, SymDim):
        return dim_min(b, d - 1)
    if b >= _SENTINEL:
        return d - 1
    if b <= -_SENTINEL:
        return -1
    if b >= 0:
        return dim_min(b, d - 1)
    if b == -1:
        return d - 1  # d - 1 >= -1 for every size d
    return dim_max(d + b, -1)


def _axes_input(op: str, arg: str, t: TensorType, ndim: int) -> tuple[int, ...]:
    _vector(op, arg, t, _INDEX)
    return normalize_axes(op, _ints(op, arg, _known(op, arg, t)), ndim, arg)


# -- Reshape -------------------------------------------------------------------------------


def _reshape_target(
    op: str, in_shape: Sequence[Dim], spec: Sequence[Dim], allowzero: int
) -> tuple[Dim, ...]:
    out: list[Dim | None] = []
    infer_at: int | None = None
    for i, s in enumerate(spec):
        if isinstance(s, int) and s == -1:
            if infer_at is not None:
                raise OpArgumentError(
                    f"{op}: shape {tuple(str(v) for v in spec)} has -1 more than once; at most "
                    "one size can be inferred"
                )
            infer_at = i
            out.append(None)
        elif isinstance(s, int) and s == 0 and not allowzero:
            if i >= len(in_shape):
                raise OpArgumentError(
                    f"{op}: shape entry {i} is 0 (copy the input size) but the input "
                    f"{format_shape(in_shape)} has only {len(in_shape)} axes"
                )
            out.append(in_shape[i])
        elif isinstance(s, int) and s < -1:
            raise OpArgumentError(f"{op}: shape entry {i} is {s}; sizes must be >= -1")
        else:
            out.append(s)
    total = prod(in_shape)
    if infer_at is not None:
        if allowzero and any(isinstance(s, int) and s == 0 for s in out):
            raise OpArgumentError(
                f"{op}: with allowzero=1 the shape cannot contain both 0 and -1, got {tuple(spec)}"
            )
        known = prod(d for d in out if d is not None)
        if isinstance(known, int) and known == 0:
            raise OpArgumentError(
                f"{op}: cannot infer the -1 in shape {tuple(str(v) for v in spec)} because the "
                "other sizes multiply to 0"
            )
        if isinstance(known, int) and isinstance(total, int) and total % known:
            raise OpArgumentError(
                f"{op}: cannot reshape {format_shape(in_shape)} ({total} elements) into "
                f"{tuple(str(v) for v in spec)}: {total} is not a multiple of {known}"
            )
        out[infer_at] = floordiv(total, known)
    result = tuple(d for d in out if d is not None)  # the -1 is filled in by now
    count = prod(result)
    if isinstance(count, int) and isinstance(total, int) and count != total:
        raise OpArgumentError(
            f"{op}: cannot reshape {format_shape(in_shape)} ({total} elements) into "
            f"{format_shape(result)} ({count} elements)"
        )
    return result


def _reshape_infer(
    types: Sequence[TensorType | None], attrs: Mapping[str, Any]
) -> list[TensorType]:
    data = require("Reshape", "data", types[0])
    shape = require("Reshape", "shape", types[1])
    _vector("Reshape", "shape", shape)
    if shape.value is None and shape.shape and isinstance(shape.shape[0], int):
        # A target shape computed at run time: its rank is known, its sizes when it runs.
        rank = shape.shape[0]
        if rank == 1:
            return [_typed(data.dtype, (prod(data.shape),), data.value)]
        return [TensorType(data.dtype, tuple(fresh_symbol("reshape") for _ in range(rank)))]
    spec = _known("Reshape", "shape", shape)
    out = _reshape_target("Reshape", data.shape, spec, attrs["allowzero"])
    return [_typed(data.dtype, out, data.value)]


def _reshape_kernel(data: np.ndarray, shape: np.ndarray, *, allowzero: int) -> np.ndarray:
    target = [int(s) for s in shape]
    if not allowzero:
        target = [data.shape[i] if s == 0 else s for i, s in enumerate(target)]
    return data.reshape(target)


def _reshape_may_raise(
    inputs: Sequence[Typed | None], outputs: Sequence[Typed], attrs: Mapping[str, Any]
) -> bool:
    """OpDef.raises_on_values: a reshape of a size only known at run time raises where NumPy
    does when its target is computed then, or holds -1 (an empty array makes -1 ambiguous:
    ``cannot reshape array of size 0 into shape (0,newaxis)``); a static one never does."""
    data, shape = inputs[0], inputs[1] if len(inputs) > 1 else None
    if data is None or all(isinstance(d, int) for d in data.shape):
        return False
    target = getattr(getattr(shape, "type", shape), "value", None)
    if target is None:
        return True
    return any(isinstance(t, (int, np.integer)) and t == -1 for t in target)


def _reshape_samples() -> list[Sample]:
    ref = _reshape_reference
    out = []
    for dt in _DTS:
        x = sample_array((2, 3, 4), dt)
        for spec in ([4, 6], [-1], [2, -1, 2], [0, 0, -1], [24, 1], [-1, 0]):
            out.append(Sample((x, np.array(spec, np.int64)), {}, ref, name=f"{dt.name}{spec}"))
    empty = sample_array((0, 3), dtypes.float32)
    out.append(Sample((empty, np.array([3, 0], np.int64)), {"allowzero": 1}, ref, name="allowzero"))
    out.append(Sample((empty, np.array([-1, 0], np.int64)), {}, ref, name="size0-infer"))
    scalar = sample_array((1,), dtypes.int32)
    out.append(Sample((scalar, np.array([], np.int64)), {}, ref, name="to-0d"))
    return out


def _reshape_reference(data: np.ndarray, shape: np.ndarray, *, allowzero: int) -> np.ndarray:
    # Fill a fresh array of the target shape in row-major order from the flat data.
    dims = list(int(s) for s in shape)
    for i, s in enumerate(dims):
        if s == 0 and not allowzero:
            dims[i] = data.shape[i]
    if -1 in dims:
        known = math.prod(d for d in dims if d != -1)
        dims[dims.index(-1)] = data.size // known
    flat = [data[idx] for idx in np.ndindex(*data.shape)]
    out = np.empty(dims, dtype=data.dtype)
    for k, idx in enumerate(np.ndindex(*dims)):
        out[idx] = flat[k]
    return out


register(
    OpDef(
        name="Reshape",
        doc="The data in a new shape; one size may be -1 (inferred), 0 copies the input size "
        "unless allowzero=1.",
        inputs=(Input("data"), Input("shape", values_only=True)),
        outputs=("reshaped",),
        attrs={"allowzero": Attr("int", 0)},
        infer=_reshape_infer,
        kernel=_reshape_kernel,
        traits=_VIEW,
        batch=batching.reshape,
        samples=_reshape_samples,
        fast_kernel=_static_reshape_fast,
        raises_on_values=_reshape_may_raise,
    )
)


# -- Transpose -----------------------------------------------------------------------------


def _perm(op: str, perm: Sequence[int] | None, ndim: int) -> tuple[int, ...]:
    if perm is None:
        return tuple(reversed(range(ndim)))
    if sorted(perm) != list(range(ndim)):
        raise OpArgumentError(
            f"{op}: perm={tuple(perm)} is not a permutation of the {ndim} axes "
            f"(expected each of 0..{ndim - 1} exactly once)"
        )
    return tuple(perm)


def _transpose_infer(
    types: Sequence[TensorType | None], attrs: Mapping[str, Any]
) -> list[TensorType]:
    data = require("Transpose", "data", types[0])
    perm = _perm("Transpose", attrs["perm"], data.ndim)
    return [_typed(data.dtype, [data.shape[p] for p in perm], data.value)]


def _transpose_kernel(data: np.ndarray, *, perm: Sequence[int] | None) -> np.ndarray:
    return np.transpose(data, None if perm is None else tuple(perm))


def _transpose_reference(data: np.ndarray, *, perm: Sequence[int] | None) -> np.ndarray:
    p = tuple(reversed(range(data.ndim))) if perm is None else tuple(perm)
    out = np.empty([data.shape[i] for i in p], dtype=data.dtype)
    for idx in np.ndindex(*data.shape):
        out[tuple(idx[i] for i in p)] = data[idx]
    return out


def _transpose_samples() -> list[Sample]:
    out = []
    for dt in _DTS:
        x = sample_array((2, 3, 4), dt)
        for perm in (None, (0, 2, 1), (2, 0, 1), (0, 1, 2)):
            attrs = {} if perm is None else {"perm": perm}
            out.append(Sample((x,), attrs, _transpose_reference, name=f"{dt.name}{perm}"))
    out.append(Sample((sample_array((0, 3), dtypes.int32),), {}, _transpose_reference, name="0"))
    out.append(Sample((sample_array((), dtypes.float64),), {}, _transpose_reference, name="0d"))
    return out


register(
    OpDef(
        name="Transpose",
        doc="The axes permuted by perm (reversed by default).",
        inputs=(Input("data"),),
        outputs=("transposed",),
        attrs={"perm": Attr("ints", None)},
        infer=_transpose_infer,
        kernel=_transpose_kernel,
        traits=_VIEW,
        batch=batching.transpose,
        samples=_transpose_samples,
        fast_kernel=_transpose_fast,
    )
)


# -- Flatten -------------------------------------------------------------------------------


def _flatten_axis(ndim: int, axis: int) -> int:
    if not -ndim <= axis <= ndim:
        raise OpArgumentError(
            f"Flatten: axis={axis} is out of range for rank {ndim} (expected {-ndim}..{ndim})"
        )
    return axis + ndim if axis < 0 else axis


def _flatten_infer(
    types: Sequence[TensorType | None], attrs: Mapping[str, Any]
) -> list[TensorType]:
    x = require("Flatten", "input", types[0])
    a = _flatten_axis(x.ndim, attrs["axis"])
    return [TensorType(x.dtype, (prod(x.shape[:a]), prod(x.shape[a:])))]


def _flatten_kernel(x: np.ndarray, *, axis: int) -> np.ndarray:
    a = _flatten_axis(x.ndim, axis)
    return x.reshape(math.prod(x.shape[:a]), math.prod(x.shape[a:]))


def _flatten_samples() -> list[Sample]:
    def ref(x: np.ndarray, *, axis: int) -> np.ndarray:
        a = axis + x.ndim if axis < 0 else axis
        rows = math.prod(x.shape[:a])
        cols = math.prod(x.shape[a:])
        flat = [x[i] for i in np.ndindex(*x.shape)]
        return np.array(flat, dtype=x.dtype).reshape(rows, cols)

    out = []
    for dt in _DTS:
        x = sample_array((2, 3, 4), dt)
        for axis in (0, 1, 3, -1):
            out.append(Sample((x,), {"axis": axis}, ref, name=f"{dt.name}axis{axis}"))
    out.append(Sample((sample_array((2, 0, 3), dtypes.float32),), {"axis": 2}, ref, name="0"))
    return out


register(
    OpDef(
        name="Flatten",
        doc="A 2-D view: axes before ``axis`` become the rows, the rest the columns.",
        inputs=(Input("input"),),
        outputs=("output",),
        attrs={"axis": Attr("int", 1)},
        infer=_flatten_infer,
        kernel=_flatten_kernel,
        traits=_LAYOUT,
        samples=_flatten_samples,
        fast_kernel=_static_reshape_fast,
    )
)


# -- Squeeze / Unsqueeze -------------------------------------------------------------------


def _squeeze_axes(data: TensorType, axes_t: TensorType | None) -> tuple[int, ...]:
    if axes_t is None:
        if not all(isinstance(d, int) for d in data.shape):
            raise OpArgumentError(
                f"Squeeze: without 'axes' the axes to remove depend on which sizes are 1, which "
                f"is unknown for the symbolic shape {format_shape(data.shape)}; pass 'axes'"
            )
        return tuple(i for i, d in enumerate(data.shape) if d == 1)
    axes = _axes_input("Squeeze", "axes", axes_t, data.ndim)
    for a in axes:
        d = data.shape[a]
        if isinstance(d, int) and d != 1:
            raise OpArgumentError(
                f"Squeeze: axis {a} of {format_shape(data.shape)} has size {d}; only size-1 "
                "axes can be squeezed"
            )
    return axes


def _squeeze_infer(
    types: Sequence[TensorType | None], attrs: Mapping[str, Any]
) -> list[TensorType]:
    data = require("Squeeze", "data", types[0])
    axes_t = types[1] if len(types) > 1 else None
    if axes_t is not None and axes_t.value is None:
        # Axes computed at run time: each removes one axis (NumPy refuses a repeated or a
        # non-1 axis when it runs), so the rank is known; which sizes remain is not.
        _vector("Squeeze", "axes", axes_t, _INDEX)
        count = axes_t.shape[0]
        if count > data.ndim:
            raise OpArgumentError(
                f"Squeeze: input 'axes' has {count} entries, more than the {data.ndim} axes "
                f"of the input {format_shape(data.shape)}"
            )
        return [TensorType(data.dtype, _runtime_sizes("squeeze", data.ndim - count))]
    axes = _squeeze_axes(data, axes_t)
    shape = [d for i, d in enumerate(data.shape) if i not in axes]
    return [_typed(data.dtype, shape, data.value)]


def _squeeze_kernel(data: np.ndarray, axes: np.ndarray | None = None) -> np.ndarray:
    if axes is None:
        return np.squeeze(data)
    return np.squeeze(data, axis=tuple(int(a) for a in axes))


def _unsqueeze_infer(
    types: Sequence[TensorType | None], attrs: Mapping[str, Any]
) -> list[TensorType]:
    data = require("Unsqueeze", "data", types[0])
    axes_t = require("Unsqueeze", "axes", types[1])
    _vector("Unsqueeze", "axes", axes_t, _INDEX)
    out_rank = data.ndim + axes_t.shape[0]
    if axes_t.value is None:  # axes computed at run time: the rank is known, the order not
        if all(isinstance(d, int) and d == 1 for d in data.shape):
            return [_typed(data.dtype, (1,) * out_rank, data.value)]  # every size is 1
        return [TensorType(data.dtype, _runtime_sizes("unsqueeze", out_rank))]
    axes = _axes_input("Unsqueeze", "axes", axes_t, out_rank)
    rest = iter(data.shape)
    shape = [1 if i in axes else next(rest) for i in range(out_rank)]
    return [_typed(data.dtype, shape, data.value)]


def _unsqueeze_kernel(data: np.ndarray, axes: np.ndarray) -> np.ndarray:
    return np.expand_dims(data, tuple(int(a) for a in axes))


def _squeeze_reference(data: np.ndarray, axes: np.ndarray | None = None) -> np.ndarray:
    if axes is None:
        keep = [d for d in data.shape if d != 1]
    else:
        gone = {int(a) % data.ndim for a in axes}
        keep = [d for i, d in enumerate(data.shape) if i not in gone]
    return np.array(list(data.flat), dtype=data.dtype).reshape(keep)


def _unsqueeze_reference(data: np.ndarray, axes: np.ndarray) -> np.ndarray:
    rank = data.ndim + len(axes)
    new = {int(a) % rank for a in axes}
    rest = iter(data.shape)
    shape = [1 if i in new else next(rest) for i in range(rank)]
    return np.array(list(data.flat), dtype=data.dtype).reshape(shape)


def _squeeze_samples() -> list[Sample]:
    out = []
    for dt in _DTS:
        x = sample_array((1, 3, 1, 2), dt)
        out.append(Sample((x, None), {}, _squeeze_reference, name=f"{dt.name}all"))
        for axes in ([0], [-2], [0, 2]):
            a = np.array(axes, np.int64)
            out.append(Sample((x, a), {}, _squeeze_reference, name=f"{dt.name}{axes}"))
    x0 = sample_array((0, 1), dtypes.int32)
    out.append(Sample((x0, np.array([1], np.int64)), {}, _squeeze_reference, name="0"))
    return out


def _unsqueeze_samples() -> list[Sample]:
    out = []
    for dt in _DTS:
        x = sample_array((3, 2), dt)
        for axes in ([0], [-1], [0, 3], [1, -1]):
            a = np.array(axes, np.int64)
            out.append(Sample((x, a), {}, _unsqueeze_reference, name=f"{dt.name}{axes}"))
    x0 = sample_array((), dtypes.float64)
    out.append(Sample((x0, np.array([0], np.int64)), {}, _unsqueeze_reference, name="0d"))
    x1 = sample_array((0,), dtypes.int32)
    out.append(Sample((x1, np.array([1], np.int64)), {}, _unsqueeze_reference, name="0"))
    return out


register(
    OpDef(
        name="Squeeze",
        doc="The size-1 axes listed in ``axes`` removed (every size-1 axis when omitted).",
        inputs=(Input("data"), Input("axes", values_only=True, optional=True)),
        outputs=("squeezed",),
        infer=_squeeze_infer,
        kernel=_squeeze_kernel,
        traits=_VIEW,
        batch=batching.axes_input(),
        samples=_squeeze_samples,
        fast_kernel=_static_reshape_fast,
    )
)

register(
    OpDef(
        name="Unsqueeze",
        doc="Size-1 axes inserted at ``axes`` (positions in the output).",
        inputs=(Input("data"), Input("axes", values_only=True)),
        outputs=("expanded",),
        infer=_unsqueeze_infer,
        kernel=_unsqueeze_kernel,
        traits=_VIEW,
        batch=batching.axes_input(output_rank=True),
        samples=_unsqueeze_samples,
        fast_kernel=_static_reshape_fast,
    )
)


# -- Expand / Tile -------------------------------------------------------------------------


def _expand_infer(types: Sequence[TensorType | None], attrs: Mapping[str, Any]) -> list[TensorType]:
    x = require("Expand", "input", types[0])
    shape_t = require("Expand", "shape", types[1])
    _vector("Expand", "shape", shape_t)
    if shape_t.value is None:  # a target computed at run time: the rank is known
        rank = max(x.ndim, shape_t.shape[0])
        dims = (None,) * (rank - x.ndim) + tuple(x.shape)
        # A static input size other than 1 is the output size (the target's is 1 or the same,
        # or the run raises); the others are known when the graph runs.
        out = [d if isinstance(d, int) and d != 1 else fresh_symbol("expand") for d in dims]
        return [TensorType(x.dtype, tuple(out))]
    target = _known("Expand", "shape", shape_t)
    out = broadcast("Expand", x.shape, target)
    value = None
    if x.value is not None and len(out) <= 1:
        count = out[0] if out else 1
        # The contents are built only when they fit a type (never a huge tuple first).
        if isinstance(count, int) and count <= _VALUE_LIMIT:
            value = x.value * count if len(x.value) == 1 else x.value
    return [_typed(x.dtype, out, value)]


def _expand_kernel(x: np.ndarray, shape: np.ndarray) -> np.ndarray:
    target = np.broadcast_shapes(x.shape, tuple(int(s) for s in shape))
    return np.broadcast_to(x, target)


def _expand_reference(x: np.ndarray, shape: np.ndarray) -> np.ndarray:
    dims = [int(s) for s in shape]
    rank = max(len(dims), x.ndim)
    a = [1] * (rank - x.ndim) + list(x.shape)
    b = [1] * (rank - len(dims)) + dims
    out_shape = [max(p, q) if min(p, q) != 0 else 0 for p, q in zip(a, b)]
    src = x.reshape(a)
    out = np.empty(out_shape, dtype=x.dtype)
    for idx in np.ndindex(*out_shape):
        out[idx] = src[tuple(0 if a[i] == 1 else idx[i] for i in range(rank))]
    return out


def _expand_samples() -> list[Sample]:
    out = []
    for dt in _DTS:
        for shape, target in (((3, 1), [2, 3, 4]), ((3, 1), [1, 1]), ((), [2, 2]), ((4,), [3, 1])):
            x = sample_array(shape, dt)
            t = np.array(target, np.int64)
            out.append(Sample((x, t), {}, _expand_reference, name=f"{dt.name}{shape}->{target}"))
    x0 = sample_array((1, 3), dtypes.float32)
    out.append(Sample((x0, np.array([0, 1], np.int64)), {}, _expand_reference, name="0"))
    return out


register(
    OpDef(
        name="Expand",
        doc="The input broadcast with ``shape`` (bidirectionally, as NumPy broadcasts two shapes).",
        inputs=(Input("input"), Input("shape", values_only=True)),
        outputs=("output",),
        infer=_expand_infer,
        kernel=_expand_kernel,
        traits=_VIEW,
        samples=_expand_samples,
    )
)


def _tile_infer(types: Sequence[TensorType | None], attrs: Mapping[str, Any]) -> list[TensorType]:
    x = require("Tile", "input", types[0])
    reps_t = require("Tile", "repeats", types[1])
    _vector("Tile", "repeats", reps_t)
    reps = _known_or_unknown("Tile", "repeats", reps_t)
    if len(reps) != x.ndim:
        raise OpArgumentError(
            f"Tile: 'repeats' has {len(reps)} entries; expected one per axis of the input "
            f"{format_shape(x.shape)} ({x.ndim})"
        )
    for r in reps:
        if isinstance(r, int) and r < 0:
            raise OpArgumentError(f"Tile: repeats must be >= 0, got {tuple(reps)}")
    # repeats computed at run time (None): those sizes are known when the graph runs
    shape = [fresh_symbol("tile") if r is None else d * r for d, r in zip(x.shape, reps)]
    value = None
    if x.value is not None and x.ndim == 1 and isinstance(reps[0], int):
        if len(x.value) * reps[0] <= _VALUE_LIMIT:  # never a huge tuple first
            value = x.value * reps[0]
    return [_typed(x.dtype, shape, value)]


def _tile_kernel(x: np.ndarray, repeats: np.ndarray) -> np.ndarray:
    return np.tile(x, tuple(int(r) for r in repeats)) if x.ndim else x.copy()


def _tile_reference(x: np.ndarray, repeats: np.ndarray) -> np.ndarray:
    reps = [int(r) for r in repeats]
    out_shape = [d * r for d, r in zip(x.shape, reps)]
    out = np.empty(out_shape, dtype=x.dtype)
    for idx in np.ndindex(*out_shape):
        out[idx] = x[tuple(i % d for i, d in zip(idx, x.shape))]
    return out


def _tile_samples() -> list[Sample]:
    out = []
    for dt in _DTS:
        x = sample_array((2, 3), dt)
        for reps in ([1, 1], [2, 3], [1, 0], [3, 1]):
            r = np.array(reps, np.int64)
            out.append(Sample((x, r), {}, _tile_reference, name=f"{dt.name}{reps}"))
    out.append(Sample((sample_array((0,), dtypes.int32), np.array([4])), {}, _tile_reference))
    return out


register(
    OpDef(
        name="Tile",
        doc="The input repeated ``repeats[i]`` times along each axis i.",
        inputs=(Input("input"), Input("repeats", values_only=True)),
        outputs=("output",),
        infer=_tile_infer,
        kernel=_tile_kernel,
        traits=_LAYOUT,
        samples=_tile_samples,
    )
)


# -- Concat / Split ------------------------------------------------------------------------


def _concat_infer(types: Sequence[TensorType | None], attrs: Mapping[str, Any]) -> list[TensorType]:
    if not types:
        raise OpArgumentError("Concat: needs at least one input")
    present = [require("Concat", f"inputs[{i}]", t) for i, t in enumerate(types)]
    names = [f"inputs[{i}]" for i in range(len(present))]
    require_same_dtype("Concat", present, names)
    first = present[0]
    if first.ndim == 0:
        raise OpArgumentError("Concat: inputs must have rank >= 1, got a 0-d input")
    axis = normalize_axis("Concat", attrs["axis"], first.ndim)
    shape = list(first.shape)
    total: Dim = 0
    for name, t in zip(names, present):
        if t.ndim != first.ndim:
            raise OpArgumentError(
                f"Concat: {name} has rank {t.ndim} ({t}); every input must have rank "
                f"{first.ndim} like inputs[0] ({first})"
            )
        for i, d in enumerate(t.shape):
            if i != axis:
                shape[i] = _same_dim("Concat", f"{name} axis {i}", shape[i], d)
        total = total + t.shape[axis]
    shape[axis] = total
    value = None
    if first.ndim == 1 and all(t.value is not None for t in present):
        value = tuple(v for t in present for v in (t.value or ()))
    return [_typed(first.dtype, shape, value)]


def _concat_may_raise(
    inputs: Sequence[TensorType | None], outputs: Sequence[TensorType], attrs: Mapping[str, Any]
) -> bool:
    """OpDef.raises_on_values: a concatenation whose inputs' sizes off the axis are not known
    to agree (a symbolic size against another size) raises NumPy's error when they differ, so
    it must run even when unused (fuzz 59:3465: a dead ``np.stack`` of a row mean over ``s1``
    rows and an array of ``s0`` elements)."""
    present = [t for t in inputs if t is not None]
    if len(present) < 2 or not present[0].shape:
        return False
    first = present[0].shape
    axis = attrs["axis"] % len(first)
    for t in present[1:]:
        for i, (a, b) in enumerate(zip(first, t.shape)):
            if i != axis and a != b:
                return True
    return False


def _concat_kernel(*inputs: np.ndarray, axis: int) -> np.ndarray:
    return np.concatenate(inputs, axis=axis)


def _concat_reference(*inputs: np.ndarray, axis: int) -> np.ndarray:
    a = axis % inputs[0].ndim
    shape = list(inputs[0].shape)
    shape[a] = sum(x.shape[a] for x in inputs)
    out = np.empty(shape, dtype=inputs[0].dtype)
    offset = 0
    for x in inputs:
        for idx in np.ndindex(*x.shape):
            target = list(idx)
            target[a] += offset
            out[tuple(target)] = x[idx]
        offset += x.shape[a]
    return out


def _concat_samples() -> list[Sample]:
    out = []
    for dt in _DTS:
        a, b = sample_array((2, 3), dt), sample_array((2, 1), dt)
        c = sample_array((2, 0), dt)
        out.append(Sample((a, b, c), {"axis": 1}, _concat_reference, name=f"{dt.name}axis1"))
        out.append(Sample((a, a), {"axis": -2}, _concat_reference, name=f"{dt.name}axis-2"))
        out.append(Sample((a,), {"axis": 0}, _concat_reference, name=f"{dt.name}single"))
    v = sample_array((3,), dtypes.int64)
    out.append(Sample((v, v[:0], v), {"axis": 0}, _concat_reference, name="1d"))
    return out


register(
    OpDef(
        name="Concat",
        doc="The inputs joined along ``axis``; other sizes must agree.",
        inputs=(Input("inputs", variadic=True),),
        outputs=("concat_result",),
        attrs={"axis": Attr("int")},
        infer=_concat_infer,
        kernel=_concat_kernel,
        raises_on_values=_concat_may_raise,
        traits=_LAYOUT | {NEW_ARRAY},
        batch=batching.concat,
        samples=_concat_samples,
    )
)


def _split_sizes(
    d: Dim, split: TensorType | None, num_outputs: int | None, where: str = "Split"
) -> list[Dim]:
    if split is not None:
        if num_outputs is not None:
            raise OpArgumentError("Split: give either the 'split' input or num_outputs, not both")
        _vector("Split", "split", split)
        if split.value is None:  # sizes computed at run time: as many pieces, sizes then
            count = split.shape[0]
            return [d] if count == 1 else list(_runtime_sizes("split", count))
        sizes = list(_known("Split", "split", split, "the output shapes"))
        for s in sizes:
            if isinstance(s, int) and s < 0:
                raise OpArgumentError(f"Split: split sizes must be >= 0, got {tuple(sizes)}")
        total = sum(sizes, start=0)
        if isinstance(total, int) and isinstance(d, int) and total != d:
            raise OpArgumentError(
                f"Split: split sizes {tuple(sizes)} add up to {total}, but the axis has size {d}"
            )
        return sizes
    if num_outputs is None:
        raise OpArgumentError("Split: needs the 'split' input or the num_outputs attribute")
    n = num_outputs
    if n < 1:
        raise OpArgumentError(f"Split: num_outputs must be >= 1, got {n}")
    if isinstance(d, int) and d % n == 0:
        return [d // n] * n
    chunk = floordiv(d + n - 1, n)
    last = d - chunk * (n - 1)
    if isinstance(last, int) and last < 0:
        raise OpArgumentError(
            f"Split: an axis of size {d} cannot be split into {n} chunks of size {chunk} "
            "with a smaller last one"
        )
    return [chunk] * (n - 1) + [last]


def _split_infer(types: Sequence[TensorType | None], attrs: Mapping[str, Any]) -> list[TensorType]:
    x = require("Split", "input", types[0])
    if x.ndim == 0:
        raise OpArgumentError("Split: the input must have rank >= 1, got a 0-d input")
    axis = normalize_axis("Split", attrs["axis"], x.ndim)
    split = types[1] if len(types) > 1 else None
    sizes = _split_sizes(x.shape[axis], split, attrs["num_outputs"])
    out = []
    offset = 0
    for s in sizes:
        shape = list(x.shape)
        shape[axis] = s
        value = None
        if x.value is not None and isinstance(s, int):
            value = x.value[offset : offset + s]
            offset += s
        out.append(_typed(x.dtype, shape, value))
    return out


def _split_kernel(
    x: np.ndarray, split: np.ndarray | None = None, *, axis: int, num_outputs: int | None
) -> tuple[np.ndarray, ...]:
    d = x.shape[axis]
    if split is None:
        sizes = [int(s) for s in _split_sizes(d, None, num_outputs)]
    else:
        sizes = [int(s) for s in split]
        if sum(sizes) != d or min(sizes, default=0) < 0:  # values known only now
            raise OpArgumentError(
                f"Split: split sizes {tuple(sizes)} must be >= 0 and add up to {d}, the size "
                f"of axis {axis} of the input {format_shape(x.shape)}"
            )
    bounds = np.cumsum([0] + sizes)
    index = [slice(None)] * x.ndim
    parts = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        index[axis % x.ndim] = slice(int(lo), int(hi))
        parts.append(x[tuple(index)])
    return tuple(parts)


def _split_reference(
    x: np.ndarray, split: np.ndarray | None = None, *, axis: int, num_outputs: int | None
) -> tuple[np.ndarray, ...]:
    a = axis % x.ndim
    d = x.shape[a]
    if split is not None:
        sizes = [int(s) for s in split]
    else:
        chunk = -(-d // num_outputs)  # ceil
        sizes = [chunk] * (num_outputs - 1) + [d - chunk * (num_outputs - 1)]
    parts = []
    start = 0
    for s in sizes:
        parts.append(np.take(x, list(range(start, start + s)), axis=a).astype(x.dtype))
        start += s
    return tuple(parts)


def _split_samples() -> list[Sample]:
    out = []
    for dt in _DTS:
        x = sample_array((6, 4), dt)
        out.append(Sample((x, None), {"num_outputs": 3}, _split_reference, name=f"{dt.name}n3"))
        out.append(Sample((x, None), {"num_outputs": 4}, _split_reference, name=f"{dt.name}n4"))
        s = np.array([1, 0, 3], np.int64)
        out.append(Sample((x, s), {"axis": -1}, _split_reference, name=f"{dt.name}sizes"))
    out.append(
        Sample((sample_array((0, 2), dtypes.int32), None), {"num_outputs": 2}, _split_reference)
    )
    return out


register(
    OpDef(
        name="Split",
        doc="The input cut along ``axis`` into pieces of the sizes in ``split``, or into "
        "num_outputs equal pieces (the last one smaller when the size does not divide).",
        inputs=(Input("input"), Input("split", values_only=True, optional=True)),
        outputs=("outputs",),
        attrs={"axis": Attr("int", 0), "num_outputs": Attr("int", None)},
        infer=_split_infer,
        kernel=_split_kernel,
        traits=_LAYOUT,
        samples=_split_samples,
        variadic_outputs=True,
    )
)


# -- Slice ---------------------------------------------------------------------------------


def _slice_params(
    op: str, data: TensorType, types: Sequence[TensorType | None]
) -> list[tuple[int | None, Dim | None, Dim | None, int | None]]:
    """(axis, start, end, step) per sliced axis, from the known input values; None for an
    entry computed at run time."""
    starts_t = require(op, "starts", types[1])
    ends_t = require(op, "ends", types[2])
    axes_t = types[3] if len(types) > 3 else None
    steps_t = types[4] if len(types) > 4 else None
    for arg, t in (("starts", starts_t), ("ends", ends_t), ("axes", axes_t), ("steps", steps_t)):
        if t is not None:
            _vector(op, arg, t, _INDEX)
    starts = _known_or_unknown(op, "starts", starts_t)
    ends = _known_or_unknown(op, "ends", ends_t)
    if len(starts) != len(ends):
        raise OpArgumentError(
            f"{op}: 'starts' has {len(starts)} entries but 'ends' has {len(ends)}"
        )
    if axes_t is None:
        if len(starts) > data.ndim:
            raise OpArgumentError(
                f"{op}: {len(starts)} starts for a tensor of rank {data.ndim}; pass 'axes'"
            )
        axes: tuple[int | None, ...] = tuple(range(len(starts)))
    elif axes_t.value is None:  # computed at run time: which axes are sliced is unknown
        axes = _known_or_unknown(op, "axes", axes_t)  # type: ignore[assignment]
        if len(axes) > data.ndim:
            raise OpArgumentError(
                f"{op}: 'axes' has {len(axes)} entries for a tensor of rank {data.ndim}"
            )
    else:
        axes = normalize_axes(op, _ints(op, "axes", _known(op, "axes", axes_t)), data.ndim)
    steps: tuple[int | None, ...] = (1,) * len(starts)
    if steps_t is not None and steps_t.value is None:  # computed at run time
        steps = _known_or_unknown(op, "steps", steps_t)  # type: ignore[assignment]
    elif steps_t is not None:
        steps = _ints(op, "steps", _known(op, "steps", steps_t))
    for arg, t in (("axes", axes), ("steps", steps)):
        if len(t) != len(starts):
            raise OpArgumentError(
                f"{op}: {arg!r} has {len(t)} entries; expected {len(starts)} like 'starts'"
            )
    if 0 in steps:
        raise OpArgumentError(f"{op}: steps must not be 0, got {steps}")
    return list(zip(axes, starts, ends, steps))


def _known_or_unknown(op: str, arg: str, t: TensorType) -> tuple[Dim | None, ...]:
    """The known contents of a 1-D ``arg``, or one None per entry when it is computed at run
    time (its length must be static)."""
    if t.value is not None:
        return t.value
    n = t.shape[0] if t.shape else None
    if not isinstance(n, int):
        return _known(op, arg, t)  # raises: not even the number of entries is known
    return (None,) * n


def static_box(
    shape: Sequence[Dim], bounds_types: Sequence[TensorType | None]
) -> tuple[Dim, ...] | None:
    """The shape of the box ``starts, ends[, axes[, steps]]`` (``bounds_types``, each known)
    of a data of ``shape``, static along the sliced axes, when the box is valid (int32/int64
    vectors of one length, axes in range and distinct, no zero step): what ``Slice``'s
    ``infer`` gives, without its general checks (a tracer infers each new box of an unrolled
    loop: ``x[i]``, ``D[i, j] = v``). ``None`` for anything else: the general path then
    answers, or raises its error."""
    bounds: list[tuple[Any, ...] | None] = []
    for t in bounds_types:
        if t is None:
            bounds.append(None)
            continue
        if t.value is None or t.dtype not in _INDEX or len(t.shape) != 1:
            return None
        bounds.append(t.value)
    if len(bounds) < 2:
        return None
    starts, ends = bounds[0], bounds[1]
    if starts is None or ends is None or len(ends) != len(starts):
        return None
    ndim = len(shape)
    axes = bounds[2] if len(bounds) > 2 else None
    steps = bounds[3] if len(bounds) > 3 else None
    if (axes is not None and len(axes) != len(starts)) or len(starts) > ndim:
        return None
    if steps is not None and len(steps) != len(starts):
        return None
    out = list(shape)
    seen: set[int] = set()
    for k, (start, end) in enumerate(zip(starts, ends)):
        axis = k if axes is None else axes[k]
        step = 1 if steps is None else steps[k]
        if type(axis) is not int or type(start) is not int or type(end) is not int:
            return None
        if type(step) is not int or step == 0 or not -ndim <= axis < ndim:
            return None
        axis %= ndim
        size = shape[axis]
        if axis in seen or type(size) is not int:
            return None
        seen.add(axis)
        out[axis] = len(range(size)[start:end:step])
    return tuple(out)


def _slice_infer(types: Sequence[TensorType | None], attrs: Mapping[str, Any]) -> list[TensorType]:
    data = require("Slice", "data", types[0])
    if data.value is None:  # an unrolled loop's x[i]: every bound known (see static_box)
        box = static_box(data.shape, types[1:])
        if box is not None:
            return [TensorType(data.dtype, box)]
    return _slice_infer_general(types)


def _slice_infer_general(types: Sequence[TensorType | None]) -> list[TensorType]:
    """``Slice``'s ``infer`` for any bounds (computed at run time, or carried contents)."""
    data = require("Slice", "data", types[0])
    shape = list(data.shape)
    value: tuple[Dim, ...] | None = data.value
    params = _slice_params("Slice", data, types)
    if any(axis is None for axis, _, _, _ in params):
        # Axes computed at run time: any axis may be sliced, so every size is known then.
        return [TensorType(data.dtype, _runtime_sizes("slice", data.ndim))]
    for axis, start, end, step in params:
        assert axis is not None
        if start is None or end is None or step is None:  # computed at run time (from data)
            shape[axis] = fresh_symbol("slice")  # known when the graph runs
            value = None
            continue
        first, length = _slice_dim(data.shape[axis], start, end, step)
        shape[axis] = length
        if value is not None and isinstance(start, int) and isinstance(end, int):
            value = value[slice(start, end, step)]
        else:
            value = None
    return [_typed(data.dtype, shape, value)]


def _slice_kernel(
    data: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    axes: np.ndarray | None = None,
    steps: np.ndarray | None = None,
) -> np.ndarray:
    index = [slice(None)] * data.ndim
    axes_ = range(len(starts)) if axes is None else _checked_axes("Slice", axes, data.ndim)
    steps_ = [1] * len(starts) if steps is None else [int(s) for s in steps]
    if 0 in steps_:
        raise OpArgumentError(f"Slice: steps must not be 0, got {tuple(steps_)}")
    for a, s, e, st in zip(axes_, starts, ends, steps_):
        index[a] = slice(int(s), int(e), st)
    return data[tuple(index)]


def _slice_reference(
    data: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    axes: np.ndarray | None = None,
    steps: np.ndarray | None = None,
) -> np.ndarray:
    # Per axis, the list of selected positions by explicit clamping, then a loop gather.
    picks = [list(range(d)) for d in data.shape]
    axes_ = range(len(starts)) if axes is None else [int(a) % data.ndim for a in axes]
    steps_ = [1] * len(starts) if steps is None else [int(s) for s in steps]
    for a, s, e, st in zip(axes_, starts, ends, steps_):
        d = data.shape[a]
        s, e = int(s), int(e)
        s = s + d if s < 0 else s
        e = e + d if e < 0 else e
        if st > 0:
            s, e = min(max(s, 0), d), min(max(e, 0), d)
        else:
            s, e = min(max(s, -1), d - 1), min(max(e, -1), d - 1)
        chosen = []
        i = s
        while (st > 0 and i < e) or (st < 0 and i > e):
            chosen.append(i)
            i += st
        picks[a] = chosen
    out = np.empty([len(p) for p in picks], dtype=data.dtype)
    for idx in np.ndindex(*out.shape):
        out[idx] = data[tuple(p[i] for p, i in zip(picks, idx))]
    return out


def _slice_samples() -> list[Sample]:
    i64 = lambda v: np.array(v, np.int64)  # noqa: E731
    cases = [
        ([1, 0], [3, 4], None, None),
        ([0], [-1], [1], None),
        ([-1], [INT64_MIN], [0], [-1]),
        ([INT64_MAX], [INT64_MIN], [-1], [-2]),
        ([0, 1], [INT64_MAX, 1000], [-2, -1], [2, 1]),
        ([5], [-10], [1], [-1]),
        ([2], [1], [0], [1]),
        ([-100], [100], [0], [3]),
    ]
    out = []
    for dt in _DTS:
        x = sample_array((3, 5), dt)
        for starts, ends, axes, steps in cases:
            inputs = (
                x,
                i64(starts),
                i64(ends),
                None if axes is None else i64(axes),
                None if steps is None else i64(steps),
            )
            out.append(Sample(inputs, {}, _slice_reference, name=f"{dt.name}{starts}{ends}"))
    x0 = sample_array((0, 2), dtypes.int32)
    out.append(Sample((x0, i64([0]), i64([INT64_MIN]), i64([0]), i64([-1])), {}, _slice_reference))
    x32 = sample_array((4,), dtypes.float64)
    idx32 = np.array([1], np.int32)
    out.append(Sample((x32, idx32, np.array([3], np.int32)), {}, _slice_reference, name="int32"))
    return out


register(
    OpDef(
        name="Slice",
        doc="A strided sub-tensor: ``data[starts[i]:ends[i]:steps[i]]`` along ``axes[i]``, "
        "with negative bounds counted from the end and out-of-range bounds clamped.",
        inputs=(
            Input("data"),
            Input("starts", values_only=True),
            Input("ends", values_only=True),
            Input("axes", values_only=True, optional=True),
            Input("steps", values_only=True, optional=True),
        ),
        outputs=("output",),
        infer=_slice_infer,
        kernel=_slice_kernel,
        traits=_VIEW,
        batch=batching.slice_,
        fast_kernel=_slice_fast,
        samples=_slice_samples,
    )
)


# -- Gather family -------------------------------------------------------------------------


def _gather_infer(types: Sequence[TensorType | None], attrs: Mapping[str, Any]) -> list[TensorType]:
    data = require("Gather", "data", types[0])
    idx = require("Gather", "indices", types[1])
    require_dtype("Gather", "indices", idx, _INDEX)
    if data.ndim == 0:
        raise OpArgumentError("Gather: 'data' must have rank >= 1, got a 0-d tensor")
    axis = normalize_axis("Gather", attrs["axis"], data.ndim)
    shape = data.shape[:axis] + idx.shape + data.shape[axis + 1 :]
    d = data.shape[axis]
    value = None
    if idx.value is not None and isinstance(d, int):
        positions = _ints("Gather", "indices", idx.value)
        bad = [i for i in positions if not -d <= i < d]
        if bad:
            raise OpArgumentError(
                f"Gather: index {bad[0]} is out of bounds for axis {axis} with size {d}"
            )
        if data.value is not None and data.ndim == 1:
            value = tuple(data.value[i] for i in positions)
    return [_typed(data.dtype, shape, value)]


def _index_may_be_out_of_range(
    inputs: Sequence[Any], outputs: Sequence[Any], attrs: Mapping[str, Any]
) -> bool:
    """An ``OpDef.raises_on_values`` rule of Gather: unless its indices are known and the
    gathered axis has a static size (then ``infer`` checked them), an index may be out of
    range at run time, and NumPy raises IndexError."""
    data, idx = inputs[0], inputs[1]
    typed = idx if isinstance(idx, TensorType) else getattr(idx, "type", None)
    known = getattr(typed, "value", None)
    if known is None or data is None or not data.shape:
        return True
    return not isinstance(data.shape[normalize_axis("Gather", attrs["axis"], len(data.shape))], int)


def _gather_kernel(data: np.ndarray, indices: np.ndarray, *, axis: int) -> np.ndarray:
    return np.take(data, indices, axis=axis)


def _gather_reference(data: np.ndarray, indices: np.ndarray, *, axis: int) -> np.ndarray:
    a = axis % data.ndim
    shape = data.shape[:a] + indices.shape + data.shape[a + 1 :]
    out = np.empty(shape, dtype=data.dtype)
    for idx in np.ndindex(*shape):
        pos = int(indices[idx[a : a + indices.ndim]])
        pos = pos + data.shape[a] if pos < 0 else pos
        out[idx] = data[idx[:a] + (pos,) + idx[a + indices.ndim :]]
    return out


def _gather_samples() -> list[Sample]:
    out = []
    for dt in _DTS:
        x = sample_array((4, 3), dt)
        for axis, ind in ((0, [[0, -1], [2, 1]]), (-1, [2, 0, 0]), (1, 1), (0, [])):
            i = np.array(ind, np.int64).reshape(np.shape(ind))
            out.append(Sample((x, i), {"axis": axis}, _gather_reference, name=f"{dt.name}{ind}"))
    i32 = np.array([1, -4], np.int32)
    out.append(Sample((sample_array((4,), dtypes.int8), i32), {}, _gather_reference, name="int32"))
    return out


register(
    OpDef(
        name="Gather",
        doc="Slices of ``data`` along ``axis`` picked by ``indices`` (negative from the end): "
        "output shape data.shape[:axis] + indices.shape + data.shape[axis+1:].",
        inputs=(Input("data"), Input("indices")),
        outputs=("output",),
        attrs={"axis": Attr("int", 0)},
        infer=_gather_infer,
        kernel=_gather_kernel,
        traits=_LAYOUT | {NEW_ARRAY},
        batch=batching.gather,
        samples=_gather_samples,
        raises_on_values=_index_may_be_out_of_range,
    )
)


def _elements_check(op: str, data: TensorType, idx: TensorType, axis: int) -> None:
    if idx.ndim != data.ndim:
        raise OpArgumentError(
            f"{op}: 'indices' ({idx}) must have the rank of 'data' ({data}), {data.ndim}"
        )
    for i, (d, n) in enumerate(zip(data.shape, idx.shape)):
        if i != axis and isinstance(d, int) and isinstance(n, int) and n > d:
            raise OpArgumentError(
                f"{op}: 'indices' axis {i} has size {n}, larger than 'data' ({d})"
            )


def _gather_elements_infer(
    types: Sequence[TensorType | None], attrs: Mapping[str, Any]
) -> list[TensorType]:
    data = require("GatherElements", "data", types[0])
    idx = require("GatherElements", "indices", types[1])
    require_dtype("GatherElements", "indices", idx, _INDEX)
    axis = normalize_axis("GatherElements", attrs["axis"], data.ndim)
    _elements_check("GatherElements", data, idx, axis)
    return [TensorType(data.dtype, idx.shape)]


def _gather_elements_kernel(data: np.ndarray, indices: np.ndarray, *, axis: int) -> np.ndarray:
    a = axis % data.ndim
    # Indices may be smaller than data on the other axes: take the leading block.
    block = tuple(slice(None) if i == a else slice(0, n) for i, n in enumerate(indices.shape))
    return np.take_along_axis(data[block], indices.astype(np.int64), axis=a)


def _gather_elements_reference(data: np.ndarray, indices: np.ndarray, *, axis: int) -> np.ndarray:
    a = axis % data.ndim
    out = np.empty(indices.shape, dtype=data.dtype)
    for idx in np.ndindex(*indices.shape):
        pos = int(indices[idx])
        pos = pos + data.shape[a] if pos < 0 else pos
        out[idx] = data[idx[:a] + (pos,) + idx[a + 1 :]]
    return out


def _gather_elements_samples() -> list[Sample]:
    out = []
    for dt in _DTS:
        x = sample_array((3, 4), dt)
        i0 = np.array([[0, 2, -1, 1], [2, 2, 0, 0]], np.int64)
        out.append(Sample((x, i0), {"axis": 0}, _gather_elements_reference, name=f"{dt.name}0"))
        i1 = np.array([[3], [0], [-2]], np.int32)
        out.append(Sample((x, i1), {"axis": -1}, _gather_elements_reference, name=f"{dt.name}1"))
    e = np.zeros((0, 4), np.int64)
    out.append(Sample((sample_array((3, 4), dtypes.float64), e), {}, _gather_elements_reference))
    return out


register(
    OpDef(
        name="GatherElements",
        doc="out[i][j] = data[indices[i][j]][j] (for axis 0; likewise for any axis).",
        inputs=(Input("data"), Input("indices")),
        outputs=("output",),
        attrs={"axis": Attr("int", 0)},
        infer=_gather_elements_infer,
        kernel=_gather_elements_kernel,
        traits=_LAYOUT | {NEW_ARRAY},
        samples=_gather_elements_samples,
        raises_on_values=True,  # an index out of range raises IndexError
    )
)


def _gather_nd_infer(
    types: Sequence[TensorType | None], attrs: Mapping[str, Any]
) -> list[TensorType]:
    op = "GatherND"
    data = require(op, "data", types[0])
    idx = require(op, "indices", types[1])
    require_dtype(op, "indices", idx, _I64)
    b = attrs["batch_dims"]
    if idx.ndim < 1 or not isinstance(idx.shape[-1], int):
        raise OpArgumentError(f"{op}: 'indices' needs rank >= 1 and a static last axis, got {idx}")
    q = idx.shape[-1]
    if not 0 <= b < min(data.ndim, idx.ndim) or not 1 <= q <= data.ndim - b:
        raise OpArgumentError(
            f"{op}: batch_dims={b} with indices {idx} does not fit data {data} (need "
            f"batch_dims < rank of both and 1 <= indices.shape[-1] <= {data.ndim - b})"
        )
    for i in range(b):
        _same_dim(op, f"batch axis {i}", data.shape[i], idx.shape[i])
    return [TensorType(data.dtype, idx.shape[:-1] + data.shape[b + q :])]


def index_columns(indices: np.ndarray | tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
    """The index arrays a GatherND/ScatterND's ``indices`` (..., q) address ``data`` with, one
    per leading axis (views of its columns), for NumPy's indexing; a tuple of them is taken as
    it is (a plan passes the parts of a ``Concat`` of index columns without joining them)."""
    if type(indices) is tuple:
        return indices
    return tuple([indices[..., k] for k in range(indices.shape[-1])])  # (np.moveaxis: slow)


def gather_nd_at(data: np.ndarray, indices: np.ndarray | tuple[np.ndarray, ...]) -> np.ndarray:
    """GatherND with ``batch_dims=0`` and at least one index column: NumPy's fancy indexing
    ``data[i0, i1, ...]`` (one copy; IndexError out of range, as the kernel)."""
    return data[index_columns(indices)]


def _gather_nd_fast(
    inputs: Sequence[Typed | None], outputs: Sequence[Typed], attrs: Mapping[str, Any]
) -> KernelCall | None:
    """``data[i0, i1, ...]`` for ``batch_dims=0`` (the kernel's general batched path stacks a
    copy per batch)."""
    indices = inputs[1]
    if attrs["batch_dims"] or indices is None or not indices.shape:
        return None
    if not isinstance(indices.shape[-1], int) or indices.shape[-1] < 1:
        return None
    return KernelCall("{b0}({0}, {1})", (gather_nd_at,))


def _gather_nd_kernel(data: np.ndarray, indices: np.ndarray, *, batch_dims: int) -> np.ndarray:
    b = batch_dims
    batch = data.shape[:b]
    n = math.prod(batch)
    flat_data = data.reshape((n,) + data.shape[b:])
    flat_idx = indices.reshape((n,) + indices.shape[b:])
    parts = [d[tuple(np.moveaxis(i, -1, 0))] for d, i in zip(flat_data, flat_idx)]
    q = indices.shape[-1]
    tail = indices.shape[b:-1] + data.shape[b + q :]
    stacked = np.stack(parts) if parts else np.empty((0,) + tail, data.dtype)
    return stacked.reshape(indices.shape[:-1] + data.shape[b + q :])


def _gather_nd_reference(data: np.ndarray, indices: np.ndarray, *, batch_dims: int) -> np.ndarray:
    b = batch_dims
    q = indices.shape[-1]
    shape = indices.shape[:-1] + data.shape[b + q :]
    out = np.empty(shape, dtype=data.dtype)
    lead = indices.ndim - 1
    for idx in np.ndindex(*shape):
        ind = [int(v) for v in indices[idx[:lead]]]
        ind = [v + data.shape[b + k] if v < 0 else v for k, v in enumerate(ind)]
        out[idx] = data[idx[:b] + tuple(ind) + idx[lead:]]
    return out


def _gather_nd_samples() -> list[Sample]:
    out = []
    for dt in _DTS:
        x = sample_array((2, 3, 4), dt)
        i1 = np.array([[0, 1], [1, -1], [0, 0]], np.int64)
        out.append(Sample((x, i1), {}, _gather_nd_reference, name=f"{dt.name}q2"))
        i2 = np.array([[[1]], [[0]]], np.int64)
        out.append(Sample((x, i2), {"batch_dims": 1}, _gather_nd_reference, name=f"{dt.name}b1"))
        i3 = np.array([[1, 2, 3], [0, 0, -1]], np.int64)
        out.append(Sample((x, i3), {}, _gather_nd_reference, name=f"{dt.name}full"))
    e = np.zeros((0, 1), np.int64)
    out.append(Sample((sample_array((2, 3), dtypes.float32), e), {}, _gather_nd_reference))
    return out


register(
    OpDef(
        name="GatherND",
        doc="Slices of ``data`` addressed by the last axis of ``indices`` (after batch_dims "
        "shared leading axes).",
        inputs=(Input("data"), Input("indices")),
        outputs=("output",),
        attrs={"batch_dims": Attr("int", 0)},
        infer=_gather_nd_infer,
        kernel=_gather_nd_kernel,
        fast_kernel=_gather_nd_fast,
        traits=_LAYOUT,
        samples=_gather_nd_samples,
        raises_on_values=True,  # an index out of range raises IndexError
    )
)


# -- Scatter family ------------------------------------------------------------------------

_REDUCTIONS: dict[str, Callable[[Any, Any], Any] | None] = {
    "none": None,
    "add": np.add,
    "mul": np.multiply,
    "max": np.maximum,
    "min": np.minimum,
}


def _reduction(op: str, name: str) -> Callable[[Any, Any], Any] | None:
    if name not in _REDUCTIONS:
        raise OpArgumentError(
            f"{op}: reduction={name!r} is not one of {', '.join(map(repr, _REDUCTIONS))}"
        )
    return _REDUCTIONS[name]


def _scatter_nd_infer(
    types: Sequence[TensorType | None], attrs: Mapping[str, Any]
) -> list[TensorType]:
    op = "ScatterND"
    data = require(op, "data", types[0])
    idx = require(op, "indices", types[1])
    upd = require(op, "updates", types[2])
    require_dtype(op, "indices", idx, _I64)
    require_same_dtype(op, (data, upd), ("data", "updates"))
    _reduction(op, attrs["reduction"])
    if idx.ndim < 1 or not isinstance(idx.shape[-1], int) or idx.shape[-1] > data.ndim:
        raise OpArgumentError(
            f"{op}: 'indices' ({idx}) needs rank >= 1 and a static last axis <= {data.ndim}"
        )
    want = idx.shape[:-1] + data.shape[idx.shape[-1] :]
    if len(want) != upd.ndim:
        raise OpArgumentError(
            f"{op}: 'updates' has shape {format_shape(upd.shape)}; expected "
            f"{format_shape(want)} (indices.shape[:-1] + data.shape[indices.shape[-1]:])"
        )
    for i, (w, u) in enumerate(zip(want, upd.shape)):
        _same_dim(op, f"'updates' axis {i}", w, u)
    return [TensorType(data.dtype, data.shape)]


def scatter_nd_into(
    data: np.ndarray, indices: np.ndarray, updates: np.ndarray, reduction: str
) -> np.ndarray:
    """ScatterND in ``data``'s own buffer (a copy first when it is read-only); returns it. The
    kernel calls it on a copy; a plan calls it directly when nothing else reads ``data``."""
    if not data.flags.writeable:
        data = data.copy()
    where = index_columns(indices)
    fn = _REDUCTIONS[reduction]
    if fn is None:
        data[where] = updates
    else:
        fn.at(data, where, updates)  # type: ignore[attr-defined]  # ufunc.at: repeats accumulate
    return data


def _scatter_nd_kernel(
    data: np.ndarray, indices: np.ndarray, updates: np.ndarray, *, reduction: str
) -> np.ndarray:
    return scatter_nd_into(data.copy(), indices, updates, reduction)


def scatter_nd_copy(data: np.ndarray, indices: np.ndarray, updates: np.ndarray) -> np.ndarray:
    """ScatterND without a reduction into a copy of ``data``: ``out = data.copy();
    out[i0, i1, ...] = updates`` (NumPy's assignment: the last of repeated indices wins)."""
    out = data.copy()
    out[index_columns(indices)] = updates
    return out


def _scatter_nd_fast(
    inputs: Sequence[Typed | None], outputs: Sequence[Typed], attrs: Mapping[str, Any]
) -> KernelCall | None:
    """The plain assignment (``reduction="none"``), without the kernel's attribute handling."""
    if attrs["reduction"] != "none":
        return None
    return KernelCall("{b0}({0}, {1}, {2})", (scatter_nd_copy,))


def _scatter_nd_reference(
    data: np.ndarray, indices: np.ndarray, updates: np.ndarray, *, reduction: str
) -> np.ndarray:
    out = np.array(data, copy=True)
    lead = indices.shape[:-1]
    for idx in np.ndindex(*lead):
        ind = tuple(int(v) for v in indices[idx])
        ind = tuple(v + data.shape[k] if v < 0 else v for k, v in enumerate(ind))
        block = updates[idx]
        for sub in np.ndindex(*np.shape(block)):
            target = ind + sub
            new = block[sub]
            old = out[target]
            if reduction == "none":
                out[target] = new
            elif reduction == "add":
                out[target] = old + new if out.dtype != np.bool_ else (old or new)
            elif reduction == "mul":
                out[target] = old * new if out.dtype != np.bool_ else (old and new)
            elif reduction == "max":
                out[target] = max(old, new)
            else:
                out[target] = min(old, new)
    return out


def _scatter_nd_samples() -> list[Sample]:
    out = []
    for dt in (dtypes.float32, dtypes.int32, dtypes.bool_):
        x = sample_array((4, 3), dt)
        rows = np.array([[0], [-1]], np.int64)
        u = sample_array((2, 3), dt, 0, 4)
        for red in ("none", "add", "mul", "max", "min"):
            out.append(
                Sample((x, rows, u), {"reduction": red}, _scatter_nd_reference, name=dt.name + red)
            )
        cells = np.array([[1, 2], [3, 0], [1, 2]], np.int64)
        uc = sample_array((3,), dt, 0, 4)
        out.append(
            Sample((x, cells, uc), {"reduction": "add"}, _scatter_nd_reference, name=dt.name + "c")
        )
    x = sample_array((2, 2), dtypes.float64)
    e = np.zeros((0, 2), np.int64)
    out.append(Sample((x, e, np.zeros((0,), np.float64)), {}, _scatter_nd_reference, name="0"))
    return out


def _rows_may_repeat(
    inputs: Sequence[Typed | None], outputs: Sequence[Typed], attrs: Mapping[str, Any]
) -> bool:
    """More than one index row (or an unknown number): two rows may address one cell."""
    idx = inputs[1]
    rows = prod(idx.shape[:-1]) if idx is not None else 0
    return not (isinstance(rows, int) and rows <= 1)


# onnxruntime writes ScatterND's index rows in parallel, so rows repeating a cell race (ONNX
# leaves repeats undefined): measured on 1.32 with 2 threads, 2**20 rows onto 16 cells gave
# another answer than NumPy's last write (reduction "none", 6 runs of 20) or lost updates
# ("add", 4 of 20). Types cannot show indices unique, so every multi-row node stays off it.
_ORT_SCATTER_ND = {
    "onnxruntime": any_limit(
        *_ORT_REDUCTION["onnxruntime"].parts,
        EngineLimit("with more than one index row (repeated rows race)", _rows_may_repeat),
    )
}


register(
    OpDef(
        name="ScatterND",
        bit_exact=_no_reduction,
        doc="A copy of ``data`` with the slices addressed by ``indices`` replaced by (or "
        "combined by ``reduction`` with) ``updates``.",
        inputs=(Input("data"), Input("indices"), Input("updates")),
        outputs=("output",),
        attrs={"reduction": Attr("str", "none")},
        infer=_scatter_nd_infer,
        kernel=_scatter_nd_kernel,
        fast_kernel=_scatter_nd_fast,
        traits=frozenset({PURE, NEW_ARRAY}),
        samples=_scatter_nd_samples,
        raises_on_values=True,  # an index out of range raises IndexError
        engine_limits=_ORT_SCATTER_ND,
    )
)


def _scatter_elements_infer(
    types: Sequence[TensorType | None], attrs: Mapping[str, Any]
) -> list[TensorType]:
    op = "ScatterElements"
    data = require(op, "data", types[0])
    idx = require(op, "indices", types[1])
    upd = require(op, "updates", types[2])
    require_dtype(op, "indices", idx, _INDEX)
    require_same_dtype(op, (data, upd), ("data", "updates"))
    _reduction(op, attrs["reduction"])
    axis = normalize_axis(op, attrs["axis"], data.ndim)
    _elements_check(op, data, idx, axis)
    if upd.ndim != idx.ndim:
        raise OpArgumentError(f"{op}: 'updates' ({upd}) must have the shape of 'indices' ({idx})")
    for i, (a, b) in enumerate(zip(idx.shape, upd.shape)):
        _same_dim(op, f"'updates' axis {i}", a, b)
    return [TensorType(data.dtype, data.shape)]


def _scatter_elements_kernel(
    data: np.ndarray, indices: np.ndarray, updates: np.ndarray, *, axis: int, reduction: str
) -> np.ndarray:
    a = axis % data.ndim
    out = data.copy()
    grid = list(np.indices(indices.shape, sparse=True))
    grid[a] = indices
    where = tuple(grid)
    fn = _REDUCTIONS[reduction]
    if fn is None:
        out[where] = updates
    else:
        fn.at(out, where, updates)  # type: ignore[attr-defined]
    return out


def _scatter_elements_reference(
    data: np.ndarray, indices: np.ndarray, updates: np.ndarray, *, axis: int, reduction: str
) -> np.ndarray:
    a = axis % data.ndim
    out = np.array(data, copy=True)
    for idx in np.ndindex(*indices.shape):
        pos = int(indices[idx])
        pos = pos + data.shape[a] if pos < 0 else pos
        target = idx[:a] + (pos,) + idx[a + 1 :]
        old, new = out[target], updates[idx]
        if reduction == "none":
            out[target] = new
        elif reduction == "add":
            out[target] = old + new if out.dtype != np.bool_ else (old or new)
        elif reduction == "mul":
            out[target] = old * new if out.dtype != np.bool_ else (old and new)
        elif reduction == "max":
            out[target] = max(old, new)
        else:
            out[target] = min(old, new)
    return out


def _scatter_elements_samples() -> list[Sample]:
    out = []
    for dt in (dtypes.float32, dtypes.int64, dtypes.bool_):
        x = sample_array((3, 4), dt)
        i = np.array([[0, 2, -1, 1], [2, 2, 0, 0]], np.int64)
        u = sample_array((2, 4), dt, 0, 4)
        for red in ("none", "add", "mul", "max", "min"):
            attrs = {"axis": 0, "reduction": red}
            out.append(Sample((x, i, u), attrs, _scatter_elements_reference, name=dt.name + red))
        i1 = np.array([[3], [0], [-2]], np.int32)
        u1 = sample_array((3, 1), dt, 0, 4)
        attrs = {"axis": -1}
        out.append(Sample((x, i1, u1), attrs, _scatter_elements_reference, name=dt.name + "-1"))
    return out


register(
    OpDef(
        name="ScatterElements",
        bit_exact=_no_reduction,
        doc="A copy of ``data`` with out[indices[i][j]][j] = updates[i][j] (axis 0; likewise "
        "for any axis), or combined by ``reduction``.",
        inputs=(Input("data"), Input("indices"), Input("updates")),
        outputs=("output",),
        attrs={"axis": Attr("int", 0), "reduction": Attr("str", "none")},
        infer=_scatter_elements_infer,
        kernel=_scatter_elements_kernel,
        traits=frozenset({PURE, NEW_ARRAY}),
        samples=_scatter_elements_samples,
        raises_on_values=True,  # an index out of range raises IndexError
        engine_limits=_ORT_REDUCTION,
    )
)


# -- Pad -----------------------------------------------------------------------------------

_PAD_MODES = ("constant", "reflect", "edge", "wrap")


def _pad_plan(
    op: str, data: TensorType, pads: Sequence[Dim], axes: Sequence[int] | None
) -> list[tuple[int, Dim, Dim]]:
    axes_ = tuple(range(data.ndim)) if axes is None else tuple(axes)
    if len(pads) != 2 * len(axes_):
        raise OpArgumentError(
            f"{op}: 'pads' has {len(pads)} entries; expected 2 * {len(axes_)} (all befores, "
            "then all afters)"
        )
    k = len(axes_)
    return [(a, pads[i], pads[k + i]) for i, a in enumerate(axes_)]


def _pad_infer(types: Sequence[TensorType | None], attrs: Mapping[str, Any]) -> list[TensorType]:
    op = "Pad"
    data = require(op, "data", types[0])
    pads_t = require(op, "pads", types[1])
    _vector(op, "pads", pads_t)
    value_t = types[2] if len(types) > 2 else None
    axes_t = types[3] if len(types) > 3 else None
    mode = attrs["mode"]
    if mode not in _PAD_MODES:
        raise OpArgumentError(f"{op}: mode={mode!r} is not one of {_PAD_MODES}")
    if value_t is not None:
        require_same_dtype(op, (data, value_t), ("data", "constant_value"))
        _scalar_input(op, "constant_value", value_t)
    if axes_t is not None and axes_t.value is None:
        # Axes computed at run time: any axis may be padded, so every size is known then.
        _vector(op, "axes", axes_t, _INDEX)
        if pads_t.shape[0] != 2 * axes_t.shape[0]:
            raise OpArgumentError(
                f"{op}: 'pads' has {pads_t.shape[0]} entries; expected 2 * {axes_t.shape[0]} "
                "(all befores, then all afters, one pair per entry of 'axes')"
            )
        return [TensorType(data.dtype, _runtime_sizes("pad", data.ndim))]
    axes = None if axes_t is None else _axes_input(op, "axes", axes_t, data.ndim)
    shape = list(data.shape)
    pads = _known_or_unknown(op, "pads", pads_t)
    for a, before, after in _pad_plan(op, data, pads, axes):
        if before is None or after is None:  # pads computed at run time
            shape[a] = fresh_symbol("pad")
            continue
        d = data.shape[a]
        size = d + before + after
        if isinstance(size, int) and size < 0:
            raise OpArgumentError(
                f"{op}: pads ({before}, {after}) on axis {a} of size {d} leave a negative size"
            )
        if mode != "constant" and isinstance(d, int) and d == 0 and (before != 0 or after != 0):
            raise OpArgumentError(f"{op}: mode {mode!r} cannot pad the empty axis {a}")
        shape[a] = size
    return [TensorType(data.dtype, tuple(shape))]


def _pad_kernel(
    data: np.ndarray,
    pads: np.ndarray,
    constant_value: np.ndarray | None = None,
    axes: np.ndarray | None = None,
    *,
    mode: str,
) -> np.ndarray:
    axes_ = range(data.ndim) if axes is None else _checked_axes("Pad", axes, data.ndim)
    k = len(pads) // 2
    widths = [[0, 0] for _ in range(data.ndim)]
    crop = [slice(None)] * data.ndim
    for i, a in enumerate(axes_):
        before, after = int(pads[i]), int(pads[k + i])
        if data.shape[a] + before + after < 0:  # pads known only now (see _pad_infer)
            raise OpArgumentError(
                f"Pad: pads ({before}, {after}) on axis {a} of size {data.shape[a]} leave a "
                "negative size"
            )
        # Negative pads crop first; the rest pads.
        crop[a] = slice(max(-before, 0), data.shape[a] - max(-after, 0))
        widths[a] = [max(before, 0), max(after, 0)]
    cropped = data[tuple(crop)]
    if mode == "constant":
        fill = 0 if constant_value is None else constant_value.reshape(())[()]
        return np.pad(cropped, widths, mode="constant", constant_values=fill)
    return np.pad(cropped, widths, mode=mode)


def _pad_reference(
    data: np.ndarray,
    pads: np.ndarray,
    constant_value: np.ndarray | None = None,
    axes: np.ndarray | None = None,
    *,
    mode: str,
) -> np.ndarray:
    axes_ = list(range(data.ndim)) if axes is None else [int(a) % data.ndim for a in axes]
    k = len(pads) // 2
    before = [0] * data.ndim
    after = [0] * data.ndim
    for i, a in enumerate(axes_):
        before[a], after[a] = int(pads[i]), int(pads[k + i])
    shape = [d + b + e for d, b, e in zip(data.shape, before, after)]
    fill = data.dtype.type(0) if constant_value is None else constant_value.reshape(())[()]
    out = np.empty(shape, dtype=data.dtype)
    for idx in np.ndindex(*shape):
        src = []
        outside = False
        for j, d in zip(idx, data.shape):
            i = j - before[len(src)]
            if 0 <= i < d:
                src.append(i)
            elif mode == "constant":
                outside = True
                src.append(0)
            elif mode == "edge":
                src.append(min(max(i, 0), d - 1))
            elif mode == "wrap":
                src.append(i % d)
            else:  # reflect about the edge elements, bouncing back and forth
                period = 2 * (d - 1)
                m = i % period if period else 0
                src.append(m if m < d else period - m)
        out[idx] = fill if outside else data[tuple(src)]
    return out


def _pad_samples() -> list[Sample]:
    i64 = lambda v: np.array(v, np.int64)  # noqa: E731
    out = []
    for dt in _DTS:
        x = sample_array((3, 4), dt)
        c = np.array(True if dt == dtypes.bool_ else 7, dtype=dt)
        out.append(Sample((x, i64([1, 0, 2, 3])), {}, _pad_reference, name=f"{dt.name}const"))
        out.append(Sample((x, i64([0, 2, 1, 0]), c), {}, _pad_reference, name=f"{dt.name}value"))
        out.append(Sample((x, i64([1, -1]), c, i64([-1])), {}, _pad_reference, name=f"{dt.name}ax"))
        for mode in ("reflect", "edge", "wrap"):
            pads = i64([2, 1, 1, 3])
            out.append(Sample((x, pads), {"mode": mode}, _pad_reference, name=f"{dt.name}{mode}"))
    x0 = sample_array((0, 2), dtypes.float32)
    out.append(Sample((x0, i64([1, 1, 0, 0])), {}, _pad_reference, name="0"))
    return out


register(
    OpDef(
        name="Pad",
        doc="The data padded by ``pads`` (all befores, then all afters, per axis in ``axes``) "
        "with ``constant_value``, a reflection, the edge values, or wrapping around.",
        inputs=(
            Input("data"),
            Input("pads", values_only=True),
            Input("constant_value", optional=True),
            Input("axes", values_only=True, optional=True),
        ),
        outputs=("output",),
        attrs={"mode": Attr("str", "constant")},
        infer=_pad_infer,
        kernel=_pad_kernel,
        traits=_LAYOUT,
        samples=_pad_samples,
    )
)


# -- Shape, Size, ConstantOfShape, Range, Constant -----------------------------------------


def _shape_bounds(ndim: int, start: int, end: int | None) -> tuple[int, int]:
    def clamp(v: int) -> int:
        v = v + ndim if v < 0 else v
        return min(max(v, 0), ndim)

    return clamp(start), clamp(ndim if end is None else end)


def _shape_infer(types: Sequence[TensorType | None], attrs: Mapping[str, Any]) -> list[TensorType]:
    data = require("Shape", "data", types[0])
    lo, hi = _shape_bounds(data.ndim, attrs["start"], attrs["end"])
    dims = data.shape[lo:hi]
    return [_typed(dtypes.int64, (len(dims),), dims)]


def _shape_kernel(data: np.ndarray, *, start: int, end: int | None) -> np.ndarray:
    lo, hi = _shape_bounds(data.ndim, start, end)
    return np.array(data.shape[lo:hi], dtype=np.int64).reshape(-1)


def _shape_fast(
    inputs: Sequence[Typed | None], outputs: Sequence[Typed], attrs: Mapping[str, Any]
) -> KernelCall | None:
    """``np.array(x.shape[lo:hi], int64)`` with the bounds worked out once (the rank is
    static)."""
    data = inputs[0]
    if data is None:
        return None
    lo, hi = _shape_bounds(len(data.shape), attrs["start"], attrs["end"])
    template = "{b0}({0}.shape[" + f"{lo}:{hi}" + "], {b1})"
    return KernelCall(template, (np.array, np.dtype(np.int64)))


def _shape_samples() -> list[Sample]:
    def ref(data: np.ndarray, *, start: int, end: int | None) -> np.ndarray:
        dims = list(data.shape)
        n = len(dims)
        s = start + n if start < 0 else start
        e = n if end is None else (end + n if end < 0 else end)
        s, e = min(max(s, 0), n), min(max(e, 0), n)
        return np.array([dims[i] for i in range(s, e)], dtype=np.int64)

    out = []
    for dt in _DTS:
        x = sample_array((2, 0, 4), dt)
        for start, end in ((0, None), (1, None), (-1, None), (0, -1), (2, 1), (-10, 10)):
            attrs = {"start": start} if end is None else {"start": start, "end": end}
            out.append(Sample((x,), attrs, ref, name=f"{dt.name}[{start}:{end}]"))
    out.append(Sample((sample_array((), dtypes.float32),), {}, ref, name="0d"))
    return out


register(
    OpDef(
        name="Shape",
        doc="The input's shape as a 1-D int64 tensor (axes start..end).",
        inputs=(Input("data"),),
        outputs=("shape",),
        attrs={"start": Attr("int", 0), "end": Attr("int", None)},
        infer=_shape_infer,
        kernel=_shape_kernel,
        fast_kernel=_shape_fast,
        traits=_SHAPE | {SHAPE_ONLY},
        samples=_shape_samples,
    )
)


def _size_infer(types: Sequence[TensorType | None], attrs: Mapping[str, Any]) -> list[TensorType]:
    data = require("Size", "data", types[0])
    return [TensorType(dtypes.int64, (), (prod(data.shape),))]


def _size_samples() -> list[Sample]:
    def ref(data: np.ndarray) -> np.ndarray:
        n = 1
        for d in data.shape:
            n *= d
        return np.array(n, dtype=np.int64)

    shapes = ((2, 3), (), (0, 4), (1,))
    return [
        Sample((sample_array(s, dt),), {}, ref, name=f"{dt.name}{s}") for dt in _DTS for s in shapes
    ]


register(
    OpDef(
        name="Size",
        doc="The number of elements of the input, as an int64 scalar.",
        inputs=(Input("data"),),
        outputs=("size",),
        infer=_size_infer,
        kernel=lambda data: np.array(data.size, dtype=np.int64),
        traits=_SHAPE | {SHAPE_ONLY},
        samples=_size_samples,
    )
)


def _fill_value(op: str, value: Any) -> np.ndarray:
    if value is None:
        return np.zeros((1,), np.float32)
    array = np.asarray(value)
    if array.size != 1:
        raise OpArgumentError(f"{op}: attribute 'value' must hold one element, got {array.shape}")
    if array.dtype not in dtypes.ALL_DTYPES:
        raise OpTypeError(f"{op}: attribute 'value' has unsupported dtype {array.dtype}")
    return array.reshape(1)


def _constant_of_shape_infer(
    types: Sequence[TensorType | None], attrs: Mapping[str, Any]
) -> list[TensorType]:
    op = "ConstantOfShape"
    shape_t = require(op, "input", types[0])
    _vector(op, "input", shape_t)
    if shape_t.value is None:  # a shape computed at run time: its rank is its length
        fill = _fill_value(op, attrs["value"])
        return [TensorType(fill.dtype, _runtime_sizes("constant_of_shape", shape_t.shape[0]))]
    dims = _known(op, "input", shape_t)
    for d in dims:
        if isinstance(d, int) and d < 0:
            raise OpArgumentError(f"{op}: sizes must be >= 0, got {tuple(dims)}")
    fill = _fill_value(op, attrs["value"])
    value = None
    if len(dims) <= 1 and all(isinstance(d, int) for d in dims) and dtypes.is_integer(fill.dtype):
        count = int(prod(dims))
        if count <= _VALUE_LIMIT:
            value = (int(fill[0]),) * count
    return [_typed(fill.dtype, dims, value)]


def _constant_of_shape_kernel(shape: np.ndarray, *, value: Any) -> np.ndarray:
    fill = _fill_value("ConstantOfShape", value)
    return np.full(tuple(int(d) for d in shape), fill[0], dtype=fill.dtype)


def _constant_of_shape_fast(
    inputs: Sequence[Typed | None], outputs: Sequence[Typed], attrs: Mapping[str, Any]
) -> KernelCall | None:
    """A static shape: ``np.zeros(shape, dtype)`` for a zero fill (pages the allocator hands
    out zeroed, touched first by whoever writes them, as ``np.empty`` + a write in NumPy
    code), else ``np.full``, with the shape and fill bound once."""
    shape = outputs[0].shape
    if not all(isinstance(d, int) for d in shape):
        return None
    fill = _fill_value("ConstantOfShape", attrs["value"])
    zero = fill[0] == 0 and not (fill.dtype.kind == "f" and np.signbit(fill[0]))
    if zero:
        return KernelCall("{b0}({b1}, {b2})", (np.zeros, tuple(shape), fill.dtype))
    return KernelCall("{b0}({b1}, {b2}, {b3})", (np.full, tuple(shape), fill[0], fill.dtype))


def _constant_of_shape_samples() -> list[Sample]:
    def ref(shape: np.ndarray, *, value: Any) -> np.ndarray:
        fill = np.zeros(1, np.float32) if value is None else np.asarray(value).reshape(1)
        out = np.empty(tuple(int(d) for d in shape), dtype=fill.dtype)
        for idx in np.ndindex(*out.shape):
            out[idx] = fill[0]
        return out

    out = []
    for dims in ([2, 3], [], [0, 4], [1]):
        s = np.array(dims, np.int64)
        out.append(Sample((s,), {}, ref, name=f"default{dims}"))
        for v in (np.array([7], np.int32), np.array([True]), np.array([2.5], np.float64)):
            out.append(Sample((s,), {"value": v}, ref, name=f"{v.dtype.name}{dims}"))
    return out


register(
    OpDef(
        name="ConstantOfShape",
        bit_exact=True,
        doc="A tensor of the shape given by the input, filled with the one-element ``value`` "
        "(float32 0 by default).",
        inputs=(Input("input"),),
        outputs=("output",),
        attrs={"value": Attr("tensor", None)},
        infer=_constant_of_shape_infer,
        kernel=_constant_of_shape_kernel,
        traits=_SHAPE,
        fast_kernel=_constant_of_shape_fast,
        samples=_constant_of_shape_samples,
    )
)

_RANGE_DTYPES = frozenset(
    {
        dtypes.float16,
        dtypes.bfloat16,
        dtypes.float32,
        dtypes.float64,
        dtypes.int16,
        dtypes.int32,
        dtypes.int64,
    }
)
_HALF_DTYPES = (dtypes.float16, dtypes.bfloat16)


def _range_infer(types: Sequence[TensorType | None], attrs: Mapping[str, Any]) -> list[TensorType]:
    op = "Range"
    names = ("start", "limit", "delta")
    given = [require(op, n, t) for n, t in zip(names, types)]
    for n, t in zip(names, given):
        require_dtype(op, n, t, _RANGE_DTYPES)
        if t.ndim != 0:
            raise OpArgumentError(f"{op}: input {n!r} must be a scalar (0-d), got {t}")
    require_same_dtype(op, given, names)
    dtype = given[0].dtype
    values = [t.value[0] if t.value is not None else None for t in given]
    start, limit, delta = values
    if isinstance(delta, int) and delta == 0:
        raise OpArgumentError(f"{op}: 'delta' must not be 0")
    if not dtypes.is_integer(dtype) or start is None or limit is None or delta is None:
        return [TensorType(dtype, (fresh_symbol("range"),))]
    if not isinstance(delta, int):
        raise OpArgumentError(f"{op}: 'delta' must be a static integer, got {delta}")
    if isinstance(start, int) and isinstance(limit, int):
        # The length is arithmetic (a lazy range); the contents are built only when a type
        # may carry them, so Range(0, 4e8) costs nothing to type.
        r = range(start, limit, delta)
        return [_typed(dtype, (len(r),), tuple(r) if len(r) <= _VALUE_LIMIT else None)]
    if delta > 0:
        n = floordiv(limit - start + delta - 1, delta)
    else:
        n = floordiv(start - limit - delta - 1, -delta)
    if not (isinstance(start, int) and start == 0 and delta > 0):
        n = dim_max(n, 0)  # limit >= 0 for 0..limit; other spans may be empty
    return [TensorType(dtype, (n,))]


def _range_kernel(
    start: np.ndarray, limit: np.ndarray, delta: np.ndarray, *, stash_type: int = 1
) -> np.ndarray:
    dtype = start.dtype
    if dtype in _HALF_DTYPES and stash_type == 1:  # Range-27: half precision steps in float32
        start, limit, delta = (a.astype(np.float32) for a in (start, limit, delta))
    s, lim, d = start[()], limit[()], delta[()]
    n = max(math.ceil((float(lim) - float(s)) / float(d)), 0)
    return (s + np.arange(n, dtype=start.dtype) * d).astype(dtype)


def _range_samples() -> list[Sample]:
    def ref(start: np.ndarray, limit: np.ndarray, delta: np.ndarray, **_: Any) -> np.ndarray:
        values = []
        s, lim, d = (
            float(a) if a.dtype.kind == "f" or a.dtype in _HALF_DTYPES else int(a)
            for a in (start, limit, delta)
        )
        v = s
        i = 0
        while (d > 0 and v < lim) or (d < 0 and v > lim):
            values.append(v)
            i += 1
            v = s + i * d
        return np.array(values, dtype=np.float64 if isinstance(s, float) else np.int64).astype(
            start.dtype
        )

    out = []
    for dt, (s, lim, d) in (
        (dtypes.int64, (0, 5, 1)),
        (dtypes.int32, (10, 1, -3)),
        (dtypes.int16, (3, 3, 1)),
        (dtypes.int64, (5, 0, 1)),
        (dtypes.float32, (0.5, 2.0, 0.25)),
        (dtypes.float64, (1.0, -1.0, -0.5)),
        (dtypes.int32, (-3, 4, 2)),
        (dtypes.float32, (0.0, 1.0, 0.3)),
        (dtypes.float16, (1.0, 4.0, 0.5)),  # Range-27: half precision
        (dtypes.bfloat16, (8.0, 2.0, -1.5)),
    ):
        args = tuple(np.array(v, dtype=dt) for v in (s, lim, d))
        out.append(Sample(args, {}, ref, name=f"{dt.name}({s},{lim},{d})"))
    return out


register(
    OpDef(
        name="Range",
        doc="start, start + delta, ... up to (excluding) limit.",
        inputs=(Input("start"), Input("limit"), Input("delta")),
        outputs=("output",),
        attrs={
            "stash_type": Attr(
                "int", 1, "1: float16/bfloat16 ranges are computed in float32 (Range-27)"
            )
        },
        infer=_range_infer,
        kernel=_range_kernel,
        traits=_SHAPE | {DATA_DEPENDENT_SHAPE},  # the length depends on the bounds' values
        samples=_range_samples,
    )
)

_CONSTANT_ATTRS = ("value", "value_int", "value_ints", "value_float", "value_floats")


def _constant_array(attrs: Mapping[str, Any]) -> np.ndarray:
    given = [name for name in _CONSTANT_ATTRS if attrs.get(name) is not None]
    if len(given) != 1:
        raise OpArgumentError(
            f"Constant: exactly one of {', '.join(_CONSTANT_ATTRS)} must be given, got "
            f"{given or 'none'}"
        )
    name = given[0]
    v = attrs[name]
    if name == "value":
        array = np.asarray(v)
        if array.dtype not in dtypes.ALL_DTYPES:
            raise OpTypeError(f"Constant: attribute 'value' has unsupported dtype {array.dtype}")
        return array
    if name in ("value_int", "value_ints"):
        return np.asarray(v, dtype=np.int64)
    return np.asarray(v, dtype=np.float32)


def _constant_infer(
    types: Sequence[TensorType | None], attrs: Mapping[str, Any]
) -> list[TensorType]:
    array = _constant_array(attrs)
    value = None
    if array.dtype.kind in "iu" and array.ndim <= 1 and array.size <= _VALUE_LIMIT:
        value = tuple(int(v) for v in array.reshape(-1))
    return [_typed(array.dtype, array.shape, value)]


def _constant_kernel(**attrs: Any) -> np.ndarray:
    return _constant_array(attrs)


def _constant_samples() -> list[Sample]:
    def ref(**attrs: Any) -> np.ndarray:
        for name in _CONSTANT_ATTRS:
            v = attrs.get(name)
            if v is not None:
                if name == "value":
                    return np.array(v)
                return np.array(v, dtype=np.int64 if "int" in name else np.float32)
        raise AssertionError

    return [
        Sample((), {"value": sample_array((2, 3), dtypes.float16)}, ref, name="tensor"),
        Sample((), {"value": np.array([True, False])}, ref, name="bool"),
        Sample((), {"value": np.array(3, np.int32)}, ref, name="0d"),
        Sample((), {"value_int": 4}, ref, name="int"),
        Sample((), {"value_ints": (1, 2, 3)}, ref, name="ints"),
        Sample((), {"value_float": 0.5}, ref, name="float"),
        Sample((), {"value_floats": (0.5, -1.0)}, ref, name="floats"),
    ]


register(
    OpDef(
        name="Constant",
        bit_exact=True,
        doc="A constant tensor given by exactly one of its attributes.",
        inputs=(),
        outputs=("output",),
        attrs={
            "value": Attr("tensor", None),
            "value_int": Attr("int", None),
            "value_ints": Attr("ints", None),
            "value_float": Attr("float", None),
            "value_floats": Attr("floats", None),
        },
        infer=_constant_infer,
        kernel=_constant_kernel,
        traits=frozenset({PURE}),
        samples=_constant_samples,
    )
)


# -- Trilu, NonZero ------------------------------------------------------------------------


def _trilu_infer(types: Sequence[TensorType | None], attrs: Mapping[str, Any]) -> list[TensorType]:
    x = require("Trilu", "input", types[0])
    if x.ndim < 2:
        raise OpArgumentError(f"Trilu: 'input' must have rank >= 2, got {x}")
    k = types[1] if len(types) > 1 else None
    if k is not None:
        require_dtype("Trilu", "k", k, _I64)
        _scalar_input("Trilu", "k", k)
    return [TensorType(x.dtype, x.shape)]


def _trilu_kernel(x: np.ndarray, k: np.ndarray | None = None, *, upper: int) -> np.ndarray:
    kk = 0 if k is None else int(k.reshape(()))
    return np.triu(x, kk) if upper else np.tril(x, kk)


def _trilu_reference(x: np.ndarray, k: np.ndarray | None = None, *, upper: int) -> np.ndarray:
    kk = 0 if k is None else int(k.reshape(()))
    out = np.array(x, copy=True)
    for idx in np.ndindex(*x.shape):
        i, j = idx[-2], idx[-1]
        keep = j - i >= kk if upper else j - i <= kk
        if not keep:
            out[idx] = x.dtype.type(0)
    return out


def _trilu_samples() -> list[Sample]:
    out = []
    for dt in _DTS:
        x = sample_array((2, 3, 4), dt)
        for upper in (0, 1):
            for k in (None, 1, -1, 5):
                kk = None if k is None else np.array(k, np.int64)
                attrs = {"upper": upper}
                out.append(Sample((x, kk), attrs, _trilu_reference, name=f"{dt.name}u{upper}k{k}"))
    out.append(Sample((sample_array((0, 3), dtypes.float32), None), {}, _trilu_reference))
    return out


register(
    OpDef(
        name="Trilu",
        bit_exact=True,
        doc="The upper (upper=1) or lower triangle of the last two axes, from diagonal k; the "
        "rest set to zero.",
        inputs=(Input("input"), Input("k", values_only=True, optional=True)),
        outputs=("output",),
        attrs={"upper": Attr("int", 1)},
        infer=_trilu_infer,
        kernel=_trilu_kernel,
        traits=frozenset({PURE}),
        samples=_trilu_samples,
    )
)


def _nonzero_infer(
    types: Sequence[TensorType | None], attrs: Mapping[str, Any]
) -> list[TensorType]:
    x = require("NonZero", "X", types[0])
    require_dtype("NonZero", "X", x, ALL)
    return [TensorType(dtypes.int64, (x.ndim, fresh_symbol("nonzero")))]


def _nonzero_kernel(x: np.ndarray) -> np.ndarray:
    if x.ndim == 0:
        count = int(bool(x))
        return np.zeros((0, count), dtype=np.int64)
    return np.array(np.nonzero(x), dtype=np.int64).reshape(x.ndim, -1)


def _nonzero_reference(x: np.ndarray) -> np.ndarray:
    hits = [idx for idx in np.ndindex(*x.shape) if x[idx]]
    out = np.zeros((x.ndim, len(hits)), dtype=np.int64)
    for j, idx in enumerate(hits):
        for i, v in enumerate(idx):
            out[i, j] = v
    return out


def _nonzero_samples() -> list[Sample]:
    out = []
    for dt in (dtypes.float32, dtypes.int32, dtypes.bool_):
        for shape in ((3, 4), (5,), (0, 2), (1, 1, 3)):
            x = sample_array(shape, dt, -1, 2)
            out.append(Sample((x,), {}, _nonzero_reference, name=f"{dt.name}{shape}"))
    out.append(Sample((np.array(2.0),), {}, _nonzero_reference, name="0d"))
    return out


register(
    OpDef(
        name="NonZero",
        doc="The indices of the non-zero elements, one row per axis: int64 (rank, N), N "
        "depending on the data.",
        inputs=(Input("X"),),
        outputs=("Y",),
        infer=_nonzero_infer,
        kernel=_nonzero_kernel,
        traits=frozenset({PURE, DATA_DEPENDENT_SHAPE}),
        samples=_nonzero_samples,
    )
)


# -- Resize --------------------------------------------------------------------------------

_COORD_MODES = (
    "half_pixel",
    "half_pixel_symmetric",
    "pytorch_half_pixel",
    "align_corners",
    "asymmetric",
)
_NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
_ASPECT_POLICIES = ("stretch", "not_larger", "not_smaller")


def _resize_check_attrs(attrs: Mapping[str, Any]) -> None:
    op = "Resize"
    if attrs["mode"] not in ("nearest", "linear", "cubic"):
        raise OpArgumentError(
            f"{op}: mode={attrs['mode']!r} is not one of 'nearest', 'linear', 'cubic'"
        )
    if attrs["coordinate_transformation_mode"] not in (*_COORD_MODES, "tf_crop_and_resize"):
        raise OpArgumentError(
            f"{op}: coordinate_transformation_mode={attrs['coordinate_transformation_mode']!r} "
            f"is not one of {_COORD_MODES}"
        )
    if attrs["nearest_mode"] not in _NEAREST_MODES:
        raise OpArgumentError(
            f"{op}: nearest_mode={attrs['nearest_mode']!r} is not one of {_NEAREST_MODES}"
        )
    if attrs["keep_aspect_ratio_policy"] not in _ASPECT_POLICIES:
        raise OpArgumentError(
            f"{op}: keep_aspect_ratio_policy={attrs['keep_aspect_ratio_policy']!r} is not one "
            f"of {_ASPECT_POLICIES}"
        )


def _keep_aspect(
    shape: Sequence[Dim], axes: Sequence[int], sizes: Sequence[Dim], policy: str
) -> tuple[list[Dim], float] | None:
    """Output sizes and the one shared scale under keep_aspect_ratio_policy (None: stretch, or
    sizes that are not all static)."""
    if policy == "stretch":
        return None
    dims = [shape[a] for a in axes]
    if not all(isinstance(d, int) for d in (*dims, *sizes)):
        raise OpArgumentError(
            f"Resize: keep_aspect_ratio_policy={policy!r} needs static input sizes and 'sizes'"
        )
    ratios = [int(n) / int(d) if d else 1.0 for n, d in zip(sizes, dims)]
    scale = min(ratios) if policy == "not_larger" else max(ratios)
    out = list(shape)
    for a in axes:
        out[a] = int(scale * int(shape[a]) + 0.5)  # rounded half up, as ONNX says
    return out, scale


def _resize_infer(types: Sequence[TensorType | None], attrs: Mapping[str, Any]) -> list[TensorType]:
    op = "Resize"
    x = require(op, "X", types[0])
    _resize_check_attrs(attrs)
    allowed = FLOATS if attrs["mode"] != "nearest" else NUMERIC
    require_dtype(op, "X", x, allowed)
    scales = types[2] if len(types) > 2 else None
    sizes = types[3] if len(types) > 3 else None
    if scales is not None and scales.shape == (0,):
        scales = None  # an empty scales tensor means "not given" (older exporters)
    if (scales is None) == (sizes is None):
        raise OpArgumentError(f"{op}: give exactly one of the inputs 'scales' and 'sizes'")
    axes = tuple(range(x.ndim))
    if attrs["axes"] is not None:
        axes = normalize_axes(op, attrs["axes"], x.ndim)
    shape = list(x.shape)
    if sizes is not None:
        _vector(op, "sizes", sizes)
        if sizes.value is None:  # computed at run time: those sizes are known then
            if sizes.shape[0] != len(axes):
                raise OpArgumentError(
                    f"{op}: 'sizes' has {sizes.shape[0]} entries; expected {len(axes)}"
                )
            for a in axes:
                shape[a] = fresh_symbol("resize")
            return [TensorType(x.dtype, tuple(shape))]
        values = _known(op, "sizes", sizes)
        if len(values) != len(axes):
            raise OpArgumentError(f"{op}: 'sizes' has {len(values)} entries; expected {len(axes)}")
        for a, v in zip(axes, values):
            if isinstance(v, int) and v < 0:
                raise OpArgumentError(f"{op}: sizes must be >= 0, got {tuple(values)}")
            shape[a] = v
        kept = _keep_aspect(x.shape, axes, values, attrs["keep_aspect_ratio_policy"])
        if kept is not None:
            shape = kept[0]
        return [TensorType(x.dtype, tuple(shape))]
    assert scales is not None
    require_dtype(op, "scales", scales, FLOATS)
    require_rank(op, "scales", scales, (1,))
    if scales.shape[0] != len(axes):
        raise OpArgumentError(f"{op}: 'scales' has {scales.shape[0]} entries; expected {len(axes)}")
    known = scales.value  # small float tensors carry their contents too
    for i, a in enumerate(axes):
        if known is not None and isinstance(shape[a], int):
            # ONNX: output size = floor(input size * scale), computed in float64 as the kernel does
            shape[a] = int(math.floor(shape[a] * float(known[i])))
        else:
            shape[a] = fresh_symbol("resize")  # known at run time only
    return [TensorType(x.dtype, tuple(shape))]


def _resize_plan(
    shape: Sequence[int],
    scales: np.ndarray | None,
    sizes: np.ndarray | None,
    axes: Sequence[int] | None,
) -> tuple[list[int], list[float]]:
    """Output sizes and the scale used for the coordinate transform, per axis."""
    axes_ = list(range(len(shape))) if axes is None else [a % len(shape) for a in axes]
    out = list(shape)
    scale = [1.0] * len(shape)
    if scales is not None and scales.size:
        for a, s in zip(axes_, scales.astype(np.float64)):
            out[a] = int(math.floor(shape[a] * float(s)))
            scale[a] = float(s)
    else:
        assert sizes is not None
        for a, n in zip(axes_, sizes):
            out[a] = int(n)
            scale[a] = int(n) / shape[a] if shape[a] else 1.0
    return out, scale


def _original_coords(x: np.ndarray, n_in: int, n_out: int, scale: float, mode: str) -> np.ndarray:
    if mode == "asymmetric":
        return x / scale
    if mode == "align_corners":
        # the output length is n_in * scale before flooring (equal to n_out for 'sizes')
        width = n_in * scale
        return x * 0.0 if n_out == 1 or width == 1 else x * (n_in - 1) / (width - 1)
    if mode == "pytorch_half_pixel":
        return (x + 0.5) / scale - 0.5 if n_out > 1 else x * 0.0
    if mode == "half_pixel_symmetric":
        adjustment = n_out / (scale * n_in)
        offset = n_in / 2 * (1 - adjustment)
        return offset + (x + 0.5) / scale - 0.5
    return (x + 0.5) / scale - 0.5  # half_pixel


def _nearest_index(c: np.ndarray, mode: str) -> np.ndarray:
    if mode == "round_prefer_floor":
        r = np.ceil(c - 0.5)
    elif mode == "round_prefer_ceil":
        r = np.floor(c + 0.5)
    elif mode == "floor":
        r = np.floor(c)
    else:
        r = np.ceil(c)
    return r.astype(np.int64)


def _resize_kernel(
    x: np.ndarray,
    roi: np.ndarray | None = None,
    scales: np.ndarray | None = None,
    sizes: np.ndarray | None = None,
    **attrs: Any,
) -> np.ndarray:
    general = (
        attrs["mode"] == "cubic"
        or attrs["antialias"]
        or attrs["coordinate_transformation_mode"] == "tf_crop_and_resize"
        or attrs["keep_aspect_ratio_policy"] != "stretch"
    )
    if general:
        return _resize_separable(x, roi, scales, sizes, **attrs)
    out_shape, scale = _resize_plan(x.shape, scales, sizes, attrs["axes"])
    linear = attrs["mode"] == "linear"
    y = x.astype(np.float64) if linear else x
    for a, (n_in, n_out) in enumerate(zip(x.shape, out_shape)):
        if n_in == n_out and scale[a] == 1.0:
            continue
        if n_out == 0 or n_in == 0:
            shape = list(y.shape)
            shape[a] = n_out
            y = np.zeros(shape, dtype=y.dtype)
            continue
        ctm = attrs["coordinate_transformation_mode"]
        c = _original_coords(np.arange(n_out, dtype=np.float64), n_in, n_out, scale[a], ctm)
        if not linear:
            idx = np.clip(_nearest_index(c, attrs["nearest_mode"]), 0, n_in - 1)
            y = np.take(y, idx, axis=a)
            continue
        c = np.clip(c, 0, n_in - 1)
        lo = np.floor(c).astype(np.int64)
        hi = np.minimum(lo + 1, n_in - 1)
        w = (c - lo).reshape([-1 if i == a else 1 for i in range(x.ndim)])
        y = np.take(y, lo, axis=a) * (1 - w) + np.take(y, hi, axis=a) * w
    return y.astype(x.dtype)


def _cubic_weight(d: np.ndarray, a: float) -> np.ndarray:
    """The cubic convolution kernel (Keys) with coefficient ``a`` at distances ``d``."""
    d = np.abs(d)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.where(d <= 1, near, np.where(d < 2, far, 0.0))


def _axis_taps(
    n_in: int, n_out: int, scale: float, roi: tuple[float, float] | None, attrs: Mapping[str, Any]
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Source indices and weights (n_out, taps) along one axis, and which outputs fall outside
    the input (tf_crop_and_resize only)."""
    ctm = attrs["coordinate_transformation_mode"]
    y = np.arange(n_out, dtype=np.float64)
    width = scale * n_in  # the output length before flooring
    outside = None
    if ctm == "tf_crop_and_resize":
        start, end = roi if roi is not None else (0.0, 1.0)
        if n_out == 1:
            c = np.full(n_out, (end - start) * (n_in - 1) / 2)
        else:
            c = y * (end - start) * (n_in - 1) / (width - 1)
        c = c + start * (n_in - 1)
        outside = (c < 0) | (c > n_in - 1)
    elif ctm == "pytorch_half_pixel" and width == 1:
        c = np.full(n_out, -0.5)
    elif ctm == "half_pixel_symmetric":
        c = n_in / 2 * (1 - n_out / width) + (y + 0.5) / scale - 0.5
    else:
        c = _original_coords(y, n_in, n_out, scale, ctm)
    mode = attrs["mode"]
    if mode == "nearest":
        idx = np.clip(_nearest_index(c, attrs["nearest_mode"]), 0, n_in - 1)
        return idx[:, None], np.ones((n_out, 1)), outside
    support = 1.0 if mode == "linear" else 2.0
    stretch = min(scale, 1.0) if attrs["antialias"] else 1.0  # antialias widens the filter
    first = math.floor(-support / stretch) + 1
    offsets = np.arange(first, 1 - first + 1)  # 2 - 2 * first taps
    base = np.floor(c)
    ratio = c - base
    exact = ratio == 0  # an exact hit takes the left neighbourhood (ratio 1), as ONNX does
    base, ratio = np.where(exact, base - 1, base), np.where(exact, 1.0, ratio)
    dist = (offsets[None, :] - ratio[:, None]) * stretch
    if mode == "linear":
        weights = np.clip(1 - np.abs(dist), 0, 1)
    else:
        weights = _cubic_weight(dist, attrs["cubic_coeff_a"])
    idx = base[:, None].astype(np.int64) + offsets[None, :]
    if attrs["exclude_outside"]:
        weights = np.where((idx < 0) | (idx >= n_in), 0.0, weights)
    if attrs["antialias"] or attrs["exclude_outside"]:
        total = weights.sum(axis=1, keepdims=True)
        weights = weights / np.where(total == 0, 1.0, total)
    return np.clip(idx, 0, n_in - 1), weights, outside


def _resize_separable(
    x: np.ndarray,
    roi: np.ndarray | None,
    scales: np.ndarray | None,
    sizes: np.ndarray | None,
    **attrs: Any,
) -> np.ndarray:
    """Resize one axis at a time with explicit taps: cubic, antialias, tf_crop_and_resize and
    keep_aspect_ratio_policy (nearest and linear without them take the plain path)."""
    rank = x.ndim
    axes = list(range(rank)) if attrs["axes"] is None else [a % rank for a in attrs["axes"]]
    out_shape, scale = _resize_plan(x.shape, scales, sizes, attrs["axes"])
    if sizes is not None and not (scales is not None and scales.size):
        kept = _keep_aspect(
            x.shape, axes, [int(n) for n in sizes], attrs["keep_aspect_ratio_policy"]
        )
        if kept is not None:
            out_shape = [int(d) for d in kept[0]]
            scale = [kept[1] if a in axes else 1.0 for a in range(rank)]
    y = x.astype(np.float64)
    tf_crop = attrs["coordinate_transformation_mode"] == "tf_crop_and_resize"
    for i, a in enumerate(axes):
        n_in, n_out = x.shape[a], out_shape[a]
        box = None
        if roi is not None and roi.size:
            r = roi.astype(np.float64).reshape(-1)
            box = (
                (float(r[i]), float(r[i + len(axes)]))
                if r.size == 2 * len(axes)
                else (
                    float(r[a]),
                    float(r[a + rank]),
                )
            )
        plain = box is None or box == (0.0, 1.0)
        if n_in == n_out and scale[a] == 1.0 and (not tf_crop or plain):
            continue
        if n_out == 0 or n_in == 0:
            shape = list(y.shape)
            shape[a] = n_out
            y = np.zeros(shape)
            continue
        idx, weights, outside = _axis_taps(n_in, n_out, scale[a], box, attrs)
        gathered = np.take(y, idx, axis=a)  # axis a becomes (n_out, taps)
        w = weights.reshape((1,) * a + weights.shape + (1,) * (rank - a - 1))
        y = (gathered * w).sum(axis=a + 1)
        if outside is not None and outside.any():
            where = outside.reshape((1,) * a + (n_out,) + (1,) * (rank - a - 1))
            y = np.where(where, attrs["extrapolation_value"], y)
    if not dtypes.is_floating(x.dtype):
        y = np.round(y)
    return y.astype(x.dtype)


def _resize_reference(
    x: np.ndarray,
    roi: np.ndarray | None = None,
    scales: np.ndarray | None = None,
    sizes: np.ndarray | None = None,
    **attrs: Any,
) -> np.ndarray:
    # Straight from the ONNX text: per output element, per axis, the original coordinate;
    # nearest picks one input element, linear weighs the 2**rank surrounding ones.
    rank = x.ndim
    axes = list(range(rank)) if attrs["axes"] is None else [a % rank for a in attrs["axes"]]
    out_shape = list(x.shape)
    scale = [1.0] * rank
    for i, a in enumerate(axes):
        if sizes is not None:
            out_shape[a] = int(sizes[i])
            scale[a] = out_shape[a] / x.shape[a]
        else:
            scale[a] = float(scales[i])  # type: ignore[index]
            out_shape[a] = int(x.shape[a] * scale[a] // 1)
    ctm = attrs["coordinate_transformation_mode"]

    def coord(j: int, a: int) -> float:
        n_in, n_out, s = x.shape[a], out_shape[a], scale[a]
        if ctm == "asymmetric":
            return j / s
        if ctm == "align_corners":
            return 0.0 if n_out == 1 else j * (n_in - 1) / (n_out - 1)
        if ctm == "pytorch_half_pixel":
            return (j + 0.5) / s - 0.5 if n_out > 1 else 0.0
        if ctm == "half_pixel_symmetric":
            adj = n_out / (s * n_in)
            return n_in / 2 * (1 - adj) + (j + 0.5) / s - 0.5
        return (j + 0.5) / s - 0.5

    def nearest(c: float, n: int) -> int:
        f = math.floor(c)
        frac = c - f
        mode = attrs["nearest_mode"]
        if mode == "floor":
            r = f
        elif mode == "ceil":
            r = math.ceil(c)
        elif mode == "round_prefer_floor":
            r = f if frac <= 0.5 else f + 1
        else:
            r = f if frac < 0.5 else f + 1
        return min(max(r, 0), n - 1)

    out = np.zeros(out_shape, dtype=np.float64)
    for idx in np.ndindex(*out_shape):
        coords = [
            float(j) if (x.shape[a] == out_shape[a] and scale[a] == 1.0) else coord(j, a)
            for a, j in enumerate(idx)
        ]
        if attrs["mode"] == "nearest":
            out[idx] = x[tuple(nearest(c, x.shape[a]) for a, c in enumerate(coords))]
            continue
        total = 0.0
        for corner in np.ndindex(*([2] * rank)):
            weight = 1.0
            src = []
            for a, (c, bit) in enumerate(zip(coords, corner)):
                c = min(max(c, 0.0), x.shape[a] - 1.0)
                base = math.floor(c)
                frac = c - base
                src.append(min(base + bit, x.shape[a] - 1))
                weight *= frac if bit else 1.0 - frac
            total += weight * float(x[tuple(src)])
        out[idx] = total
    return out.astype(x.dtype)


def _resize_samples() -> list[Sample]:
    out = []
    f32 = lambda v: np.array(v, np.float32)  # noqa: E731
    x = sample_array((1, 2, 3, 4), dtypes.float32)
    for ctm in _COORD_MODES:
        for mode in ("nearest", "linear"):
            attrs = {"mode": mode, "coordinate_transformation_mode": ctm}
            s = f32([1, 1, 2, 1.5])
            out.append(Sample((x, None, s), attrs, _resize_reference, name=f"{mode}-{ctm}-up"))
            sz = np.array([1, 2, 2, 3], np.int64)
            out.append(Sample((x, None, None, sz), attrs, _resize_reference, name=f"{mode}-{ctm}"))
    for nm in _NEAREST_MODES:
        attrs = {
            "mode": "nearest",
            "nearest_mode": nm,
            "coordinate_transformation_mode": "asymmetric",
        }
        s = f32([1, 1, 1.5, 0.5])
        out.append(Sample((x, None, s), attrs, _resize_reference, name=f"nearest-{nm}"))
    x64 = sample_array((3, 5), dtypes.float64)
    attrs = {"mode": "linear", "axes": (-1,)}
    out.append(
        Sample((x64, None, None, np.array([8], np.int64)), attrs, _resize_reference, name="ax")
    )
    xi = sample_array((2, 3), dtypes.int32)
    out.append(Sample((xi, None, f32([2, 2])), {}, _resize_reference, name="int-nearest"))
    return out


register(
    OpDef(
        name="Resize",
        doc="The input resampled to new sizes (from ``sizes`` or floor(size * ``scales``)) by "
        "nearest-neighbour or n-linear interpolation.",
        inputs=(
            Input("X"),
            Input("roi", optional=True),
            Input("scales", values_only=True, optional=True),
            Input("sizes", values_only=True, optional=True),
        ),
        outputs=("Y",),
        attrs={
            "antialias": Attr("int", 0),
            "axes": Attr("ints", None),
            "coordinate_transformation_mode": Attr("str", "half_pixel"),
            "cubic_coeff_a": Attr("float", -0.75),
            "exclude_outside": Attr("int", 0),
            "extrapolation_value": Attr("float", 0.0),
            "keep_aspect_ratio_policy": Attr("str", "stretch"),
            "mode": Attr("str", "nearest"),
            "nearest_mode": Attr("str", "round_prefer_floor"),
        },
        infer=_resize_infer,
        kernel=_resize_kernel,
        traits=frozenset({PURE, DATA_DEPENDENT_SHAPE}),  # sizes from float scales: at run time
        samples=_resize_samples,
    )
)
