"""Neural-network operators: softmax, normalizations, convolution, pooling, dropout, attention.

Each operator is one record (see the module docstring of :mod:`kiln.ops.registry`) with ONNX
semantics. Window operators (Conv, ConvTranspose, MaxPool, AveragePool) share one geometry rule:
along a spatial axis of size ``n``, with kernel ``k``, stride ``s``, dilation ``d`` and pads
``b``/``e``, the output has ``(n + b + e - d*(k-1) - 1) // s + 1`` entries (ceil instead of floor
under ``ceil_mode``), and ``ceil(n / s)`` under ``auto_pad=SAME_*``. The rule is written with
:func:`kiln.symbolic.floordiv`, so it holds for symbolic sizes too.

Kernels compute half-precision inputs in float32 and cast the result back, as accelerators do;
the convolution kernel is an im2col over ``sliding_window_view`` followed by one matrix product
per group.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from itertools import product
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from .. import dtypes
from ..errors import OpArgumentError, OpTypeError
from ..symbolic import Dim, dim_min, floordiv, format_shape
from . import batching
from .registry import (
    Attr,
    EngineLimit,
    Input,
    KernelCall,
    NodeRule,
    OpDef,
    Sample,
    TensorType,
    Typed,
    first_input_dtype,
    float64_differs,
    float_input,
    register,
)
from .rules import (
    BOOL,
    FLOATS,
    normalize_axis,
    require,
    require_dtype,
    require_rank,
    require_same_dtype,
)
from .sampling import sample_array

__all__: list[str] = []

_F16 = dtypes.float16
_F32 = dtypes.float32
_F64 = dtypes.float64
_SAMPLE_DTYPES = (_F32, _F64, _F16)
_AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")
_SAME = ("SAME_UPPER", "SAME_LOWER")
# stash_type codes LayerNormalization/RMSNormalization accept (ONNX TensorProto numbers).
_STASH_DTYPES = {1: _F32, 10: _F16, 11: _F64, 16: dtypes.bfloat16}


def _work_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype a kernel computes in: float32 for half precision, else the dtype itself."""
    return _F32 if dtype in (_F16, dtypes.bfloat16) else dtype


def _floats(*arrays: np.ndarray) -> list[np.ndarray]:
    return [a.astype(_work_dtype(a.dtype), copy=False) for a in arrays]


def _rank_error(op: str, arg: str, t: TensorType, expected: str) -> OpArgumentError:
    return OpArgumentError(
        f"{op}: input {arg!r} must be {expected}, got rank {t.ndim} (shape {format_shape(t.shape)})"
    )


def _check_dim(op: str, arg: str, what: str, found: Dim, expected: Dim) -> None:
    """Raise when two sizes are both static and differ (symbolic sizes are checked at run time)."""
    if isinstance(found, int) and isinstance(expected, int) and found != expected:
        raise OpArgumentError(f"{op}: input {arg!r} has {what} {found}; expected {expected}")


# -- engine facts (OpDef.cost, OpDef.engine_limits) ------------------------------------------

# onnxruntime 1.x computes these in float32 even for float64 inputs (found by
# tests/exec/test_engines.py against the reference executor).
_ORT_FLOAT64 = EngineLimit("on float64 (computed in lower precision)", first_input_dtype(_F64))
# onnxruntime's max pooling skips NaN, where NumPy's maximum returns NaN (issue 10).
_ORT_DROPS_NAN = {
    "onnxruntime": EngineLimit("on floating-point input (onnxruntime skips NaN)", float_input)
}


def _window_cost(
    inputs: Sequence[Typed | None], outputs: Sequence[Typed], attrs: Mapping[str, Any]
) -> float:
    """Conv, ConvTranspose: 2 * (one output channel's filter size) per output element, a
    multiply and an add per weight (1 while the weight's shape is symbolic)."""
    w = inputs[1] if len(inputs) > 1 else None
    if w is None or not all(isinstance(d, int) for d in w.shape):
        return 1
    return 2 * math.prod(w.shape[1:])


def _attention_cost(
    inputs: Sequence[Typed | None], outputs: Sequence[Typed], attrs: Mapping[str, Any]
) -> float:
    """2 * the head size per output element: a rough count of the score and value products."""
    q = inputs[0]
    head = int(q.shape[-1]) if q is not None and q.shape else 1
    return 2 * max(head, 1)


# -- Softmax, LogSoftmax --------------------------------------------------------------------


def _softmax_infer(op: str) -> Callable[..., list[TensorType]]:
    def infer(types: Sequence[TensorType | None], attrs: Mapping[str, Any]) -> list[TensorType]:
        x = require(op, "input", types[0])
        require_dtype(op, "input", x, FLOATS)
        if x.ndim == 0:
            raise _rank_error(op, "input", x, "at least 1-D")
        normalize_axis(op, attrs["axis"], x.ndim)
        return [TensorType(x.dtype, x.shape)]

    return infer


def _softmax_steps(x: np.ndarray, axis: int, log: bool, out: np.ndarray) -> np.ndarray:
    """(Log)softmax of a float32/float64 ``x`` along ``axis``, computed in ``out`` (which may
    be ``x`` itself), one buffer as NumPy code writing its steps in place: the maximum is
    subtracted first, so exp never overflows."""
    if x.shape[axis] == 0:
        return out
    np.subtract(x, x.max(axis=axis, keepdims=True), out=out)
    if log:
        out -= np.log(np.exp(out).sum(axis=axis, keepdims=True))
    else:
        np.exp(out, out=out)
        out /= out.sum(axis=axis, keepdims=True)
    return out


def _softmax_kernel(x: np.ndarray, *, axis: int = -1) -> np.ndarray:
    (work,) = _floats(x)
    return _softmax_steps(work, axis, False, np.empty_like(work)).astype(x.dtype, copy=False)


def _log_softmax_kernel(x: np.ndarray, *, axis: int = -1) -> np.ndarray:
    (work,) = _floats(x)
    return _softmax_steps(work, axis, True, np.empty_like(work)).astype(x.dtype, copy=False)


def _softmax_into(
    x: np.ndarray, *, axis: int, log: bool, out: np.ndarray | None = None
) -> np.ndarray:
    """(Log)softmax of a float32/float64 ``x`` written into ``out`` (which may be ``x``
    itself), or into a new array."""
    return _softmax_steps(x, axis, log, np.empty_like(x) if out is None else out)


def _softmax_fast(log: bool) -> NodeRule[KernelCall | None]:
    """Where the input's dtype is the one the kernel computes in: the kernel may write into a
    buffer the plan hands it (a dead input, or the caller's array a softmax overwrites)."""

    def fast(
        inputs: Sequence[Typed | None], outputs: Sequence[Typed], attrs: Mapping[str, Any]
    ) -> KernelCall | None:
        x = inputs[0]
        if x is None or _work_dtype(x.dtype) != x.dtype:
            return None
        axis = attrs["axis"] % len(x.shape)
        return KernelCall(
            "{b0}({0}, axis={b1}, log={b2})", (_softmax_into, axis, log), takes_out=True
        )

    return fast


def _ref_softmax(x: np.ndarray, *, axis: int = -1, log: bool = False) -> np.ndarray:
    """Row by row in float64: exp(x - logsumexp(x)), logsumexp via math.fsum."""
    moved = np.moveaxis(x.astype(np.float64), axis, -1)
    out = np.empty_like(moved)
    for idx in np.ndindex(*moved.shape[:-1]):
        row = moved[idx]
        top = max(row.tolist())
        lse = top + math.log(math.fsum(math.exp(v - top) for v in row.tolist()))
        out[idx] = [(v - lse) if log else math.exp(v - lse) for v in row.tolist()]
    return np.moveaxis(out, -1, axis).astype(x.dtype)


def _softmax_samples(log: bool) -> Callable[[], list[Sample]]:
    def make() -> list[Sample]:
        def ref(x: np.ndarray, *, axis: int) -> np.ndarray:
            return _ref_softmax(x, axis=axis, log=log)

        out = []
        cases = [((3, 4), -1), ((2, 3, 4), 1), ((2, 3, 4), -3), ((1,), 0), ((1, 1, 5), -1)]
        for dt in _SAMPLE_DTYPES:
            for shape, axis in cases:
                x = sample_array(shape, dt)
                out.append(Sample((x,), {"axis": axis}, ref, name=f"{dt.name}{shape}axis{axis}"))
        big = (sample_array((2, 5), _F32) * 1000).astype(_F32)  # stability: no overflow to inf
        out.append(Sample((big,), {"axis": -1}, ref, name="large-values"))
        out.append(Sample((sample_array((0, 3), _F32),), {"axis": -1}, ref, name="empty-batch"))
        return out

    return make


_SOFTMAX_FLOAT64_ULPS = {
    "Softmax": {"jax": 5, "onnxruntime": 6},
    "LogSoftmax": {"jax": 1, "onnxruntime": 1},
}
for _name, _kernel, _log in (
    ("Softmax", _softmax_kernel, False),
    ("LogSoftmax", _log_softmax_kernel, True),
):
    register(
        OpDef(
            name=_name,
            doc=f"{'log ' if _log else ''}softmax along ``axis`` (numerically stable: the "
            "maximum is subtracted first).",
            inputs=(Input("input"),),
            outputs=("output",),
            attrs={"axis": Attr("int", -1)},
            infer=_softmax_infer(_name),
            kernel=_kernel,
            samples=_softmax_samples(_log),
            batch=batching.axis_attr(),
            cost=8,
            fast_kernel=_softmax_fast(_log),
            # float64 results measured against NumPy's (tools/engine_ulps.py; issue 10)
            engine_limits=float64_differs(**_SOFTMAX_FLOAT64_ULPS[_name]),
        )
    )


# -- Hardmax ---------------------------------------------------------------------------------


def _hardmax_kernel(x: np.ndarray, *, axis: int = -1) -> np.ndarray:
    out = np.zeros(x.shape, x.dtype)
    if x.size == 0:
        return out
    first = np.expand_dims(np.argmax(x, axis=axis), axis)  # the first maximum wins ties
    np.put_along_axis(out, first, x.dtype.type(1), axis=axis)
    return out


def _ref_hardmax(x: np.ndarray, *, axis: int = -1) -> np.ndarray:
    moved = np.moveaxis(x.astype(np.float64), axis, -1)
    out = np.zeros_like(moved)
    for idx in np.ndindex(*moved.shape[:-1]):
        row = moved[idx].tolist()
        if row:
            out[idx + (row.index(max(row)),)] = 1.0
    return np.moveaxis(out, -1, axis).astype(x.dtype)


def _hardmax_samples() -> list[Sample]:
    out = []
    ties = np.array([[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 2.0, 2.0]], _F32)
    out.append(Sample((ties,), {"axis": -1}, _ref_hardmax, name="ties"))
    cases = [((3, 4), -1), ((2, 3, 4), 1), ((2, 3, 4), -3), ((1,), 0), ((0, 3), -1)]
    cases += [((2, 1, 3), -2), ((4, 2), 0)]
    for dt in _SAMPLE_DTYPES:
        for shape, axis in cases:
            x = sample_array(shape, dt)
            out.append(Sample((x,), {"axis": axis}, _ref_hardmax, name=f"{dt.name}{shape}{axis}"))
    return out


register(
    OpDef(
        name="Hardmax",
        bit_exact=True,
        doc="1 at the first maximum along ``axis``, 0 elsewhere.",
        inputs=(Input("input"),),
        outputs=("output",),
        attrs={"axis": Attr("int", -1)},
        infer=_softmax_infer("Hardmax"),
        kernel=_hardmax_kernel,
        samples=_hardmax_samples,
    )
)


# -- LayerNormalization, RMSNormalization ---------------------------------------------------


def _stash_dtype(op: str, code: int) -> np.dtype:
    try:
        return _STASH_DTYPES[code]
    except KeyError:
        raise OpArgumentError(
            f"{op}: attribute 'stash_type' is {code}; expected a float type code "
            f"({', '.join(f'{c} ({d.name})' for c, d in _STASH_DTYPES.items())})"
        ) from None


def _broadcasts_to(shape: Sequence[Dim], target: Sequence[Dim]) -> bool:
    """True unless ``shape`` surely fails to broadcast onto ``target`` (NumPy rules, one way)."""
    if len(shape) > len(target):
        return False
    for d, t in zip(reversed(shape), reversed(target)):
        if isinstance(d, int) and isinstance(t, int) and d not in (1, t):
            return False
    return True


def _check_affine(op: str, arg: str, x: TensorType, t: TensorType | None, axis: int) -> None:
    """``t`` (Scale or B) must broadcast onto the normalized trailing axes of ``x``."""
    if t is not None and not _broadcasts_to(t.shape, x.shape[axis:]):
        raise OpArgumentError(
            f"{op}: input {arg!r} has shape {format_shape(t.shape)}; expected a shape that "
            f"broadcasts to the normalized axes {format_shape(x.shape[axis:])}"
        )


def _norm_infer(op: str, args: tuple[str, ...], stats: bool) -> Callable[..., list[TensorType]]:
    def infer(types: Sequence[TensorType | None], attrs: Mapping[str, Any]) -> list[TensorType]:
        x = require(op, "X", types[0])
        scale = require(op, args[1], types[1])
        bias = types[2] if len(types) > 2 else None
        require_dtype(op, "X", x, FLOATS)
        require_same_dtype(op, (x, scale, bias), args)
        if x.ndim == 0:
            raise _rank_error(op, "X", x, "at least 1-D")
        axis = normalize_axis(op, attrs["axis"], x.ndim)
        _check_affine(op, args[1], x, scale, axis)
        if len(args) > 2:
            _check_affine(op, args[2], x, bias, axis)
        stash = _stash_dtype(op, attrs["stash_type"])
        out = [TensorType(x.dtype, x.shape)]
        if stats:
            reduced = (*x.shape[:axis], *([1] * (x.ndim - axis)))
            out += [TensorType(stash, reduced), TensorType(stash, reduced)]
        return out

    return infer


def _layer_norm_kernel(
    x: np.ndarray,
    scale: np.ndarray,
    bias: np.ndarray | None = None,
    *,
    axis: int = -1,
    epsilon: float = 1e-5,
    stash_type: int = 1,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    stash = _work_dtype(_STASH_DTYPES[stash_type])
    axes = tuple(range(axis % x.ndim, x.ndim))
    work = x.astype(stash, copy=False)
    mean = work.mean(axis=axes, keepdims=True)
    centered = work - mean
    inv_std = 1.0 / np.sqrt((centered * centered).mean(axis=axes, keepdims=True) + epsilon)
    y = centered * inv_std * scale.astype(stash, copy=False)
    if bias is not None:
        y = y + bias.astype(stash, copy=False)
    out_stash = _STASH_DTYPES[stash_type]
    return (
        y.astype(x.dtype, copy=False),
        mean.astype(out_stash, copy=False),
        inv_std.astype(out_stash, copy=False),
    )


def _rms_norm_kernel(
    x: np.ndarray,
    scale: np.ndarray,
    *,
    axis: int = -1,
    epsilon: float = 1e-5,
    stash_type: int = 1,
) -> np.ndarray:
    stash = _work_dtype(_STASH_DTYPES[stash_type])
    axes = tuple(range(axis % x.ndim, x.ndim))
    work = x.astype(stash, copy=False)
    inv_rms = 1.0 / np.sqrt((work * work).mean(axis=axes, keepdims=True) + epsilon)
    return (work * inv_rms * scale.astype(stash, copy=False)).astype(x.dtype, copy=False)


def _ref_normalize(x: np.ndarray, axis: int, epsilon: float, rms: bool) -> tuple[Any, Any, Any]:
    """Per row in float64 with math.fsum: (normalized, mean, 1/std) over axes [axis, ndim)."""
    axis %= x.ndim
    rows = x.astype(np.float64).reshape(*x.shape[:axis], math.prod(x.shape[axis:]))
    lead = rows.shape[:-1]
    norm = np.empty_like(rows)
    means = np.empty(lead)
    invs = np.empty(lead)
    for idx in np.ndindex(*lead):
        values = rows[idx].tolist()
        mean = 0.0 if rms else math.fsum(values) / len(values)
        var = math.fsum((v - mean) ** 2 for v in values) / len(values)
        inv = 1.0 / math.sqrt(var + epsilon)
        norm[idx] = [(v - mean) * inv for v in values]
        means[idx], invs[idx] = mean, inv
    stats_shape = (*x.shape[:axis], *([1] * (x.ndim - axis)))
    return norm.reshape(x.shape), means.reshape(stats_shape), invs.reshape(stats_shape)


def _ref_layer_norm(x, scale, bias=None, *, axis, epsilon, stash_type):  # type: ignore[no-untyped-def]
    norm, mean, inv = _ref_normalize(x, axis, epsilon, rms=False)
    y = norm * scale.astype(np.float64) + (0.0 if bias is None else bias.astype(np.float64))
    stash = _STASH_DTYPES[stash_type]
    return y.astype(x.dtype), mean.astype(stash), inv.astype(stash)


def _ref_rms_norm(x, scale, *, axis, epsilon, stash_type):  # type: ignore[no-untyped-def]
    norm, _, _ = _ref_normalize(x, axis, epsilon, rms=True)
    return (norm * scale.astype(np.float64)).astype(x.dtype)


def _norm_samples(rms: bool) -> Callable[[], list[Sample]]:
    def make() -> list[Sample]:
        ref = _ref_rms_norm if rms else _ref_layer_norm
        out = []
        # (x shape, axis, scale shape, with bias)
        cases = [
            ((3, 4), -1, (4,), True),
            ((2, 3, 5), 1, (3, 5), True),
            ((2, 3, 5), -2, (5,), False),  # scale broadcasts over the normalized axes
            ((1, 1), -1, (1,), True),
            ((0, 4), -1, (4,), True),
            ((2, 6), 0, (2, 6), False),
        ]
        for dt in _SAMPLE_DTYPES:
            for shape, axis, sshape, with_bias in cases:
                x = sample_array(shape, dt)
                scale = sample_array(sshape, dt, 0.5, 2.0)
                inputs: tuple[np.ndarray, ...] = (x, scale)
                if with_bias and not rms:
                    inputs += (sample_array(sshape, dt, -1.0, 1.0),)
                attrs: dict[str, Any] = {"axis": axis, "epsilon": 1e-3}
                if dt == _F64:
                    attrs["stash_type"] = 11  # compute in float64
                out.append(Sample(inputs, attrs, ref, name=f"{dt.name}{shape}axis{axis}"))
        return out

    return make


register(
    OpDef(
        name="LayerNormalization",
        doc="(X - mean) / sqrt(var + epsilon) * Scale + B over axes [axis, rank); also returns "
        "Mean and InvStdDev (shape X.shape[:axis] + [1, ...], dtype of stash_type).",
        inputs=(Input("X"), Input("Scale"), Input("B", optional=True)),
        outputs=("Y", "Mean", "InvStdDev"),
        attrs={
            "axis": Attr("int", -1),
            "epsilon": Attr("float", 1e-5),
            "stash_type": Attr("int", 1, "dtype code the statistics are computed in"),
        },
        infer=_norm_infer("LayerNormalization", ("X", "Scale", "B"), stats=True),
        kernel=_layer_norm_kernel,
        samples=_norm_samples(rms=False),
        since_version=17,
        cost=8,
    )
)

register(
    OpDef(
        name="RMSNormalization",
        doc="X / sqrt(mean(X^2) + epsilon) * scale over axes [axis, rank).",
        inputs=(Input("X"), Input("scale")),
        outputs=("Y",),
        attrs={
            "axis": Attr("int", -1),
            "epsilon": Attr("float", 1e-5),
            "stash_type": Attr("int", 1, "dtype code the statistics are computed in"),
        },
        infer=_norm_infer("RMSNormalization", ("X", "scale"), stats=False),
        kernel=_rms_norm_kernel,
        samples=_norm_samples(rms=True),
        since_version=23,
        cost=6,
        engine_limits={"onnxruntime": _ORT_FLOAT64},
    )
)


# -- BatchNormalization, InstanceNormalization ----------------------------------------------


def _channel_params(
    op: str, x: TensorType, params: Sequence[tuple[str, TensorType | None]]
) -> None:
    for name, t in params:
        t = require(op, name, t)
        require_dtype(op, name, t, FLOATS)
        require_rank(op, name, t, (1,))
        _check_dim(op, name, "size", t.shape[0], x.shape[1])


def _batch_norm_infer(
    types: Sequence[TensorType | None], attrs: Mapping[str, Any]
) -> list[TensorType]:
    op = "BatchNormalization"
    if attrs["training_mode"]:
        raise OpArgumentError(
            f"{op}: training_mode={attrs['training_mode']} is not supported; expected "
            "training_mode=0 (kiln is an inference runtime: running statistics are inputs)"
        )
    x = require(op, "X", types[0])
    require_dtype(op, "X", x, FLOATS)
    if x.ndim < 2:
        raise _rank_error(op, "X", x, "at least 2-D (N, C, ...)")
    names = ("scale", "B", "input_mean", "input_var")
    _channel_params(op, x, list(zip(names, types[1:])))
    return [TensorType(x.dtype, x.shape)]


def _per_channel(p: np.ndarray, ndim: int, dtype: np.dtype) -> np.ndarray:
    return p.astype(dtype, copy=False).reshape(1, -1, *([1] * (ndim - 2)))


def _batch_norm_kernel(
    x: np.ndarray,
    scale: np.ndarray,
    bias: np.ndarray,
    mean: np.ndarray,
    var: np.ndarray,
    *,
    epsilon: float = 1e-5,
    momentum: float = 0.9,
    training_mode: int = 0,
) -> np.ndarray:
    work = _work_dtype(x.dtype)
    s, b, m, v = (_per_channel(p, x.ndim, work) for p in (scale, bias, mean, var))
    factor = s / np.sqrt(v + work.type(epsilon))
    y = (x.astype(work, copy=False) - m) * factor + b
    return y.astype(x.dtype, copy=False)


def _ref_batch_norm(x, scale, bias, mean, var, *, epsilon, **_):  # type: ignore[no-untyped-def]
    y = np.empty(x.shape)
    for idx in np.ndindex(*x.shape):
        c = idx[1]
        y[idx] = (float(x[idx]) - float(mean[c])) / math.sqrt(float(var[c]) + epsilon) * float(
            scale[c]
        ) + float(bias[c])
    return y.astype(x.dtype)


def _batch_norm_samples() -> list[Sample]:
    out = []
    for dt in _SAMPLE_DTYPES:
        for shape in ((2, 3, 4, 5), (1, 1), (2, 3), (1, 2, 1, 1, 3), (0, 3, 2)):
            c = shape[1]
            inputs = (
                sample_array(shape, dt),
                sample_array((c,), dt, 0.5, 2.0),
                sample_array((c,), dt, -1.0, 1.0),
                sample_array((c,), dt, -0.5, 0.5),
                sample_array((c,), dt, 0.5, 3.0),
            )
            out.append(Sample(inputs, {"epsilon": 1e-3}, _ref_batch_norm, name=f"{dt.name}{shape}"))
    return out


register(
    OpDef(
        name="BatchNormalization",
        doc="Inference-mode batch normalization: (X - input_mean) / sqrt(input_var + epsilon) "
        "* scale + B, per channel (axis 1).",
        inputs=(Input("X"), Input("scale"), Input("B"), Input("input_mean"), Input("input_var")),
        outputs=("Y",),
        attrs={
            "epsilon": Attr("float", 1e-5),
            "momentum": Attr("float", 0.9, "only used in training mode"),
            "training_mode": Attr("int", 0, "must be 0: kiln is an inference runtime"),
        },
        infer=_batch_norm_infer,
        kernel=_batch_norm_kernel,
        samples=_batch_norm_samples,
        cost=4,
        engine_limits={"onnxruntime": _ORT_FLOAT64},
    )
)


def _instance_norm_infer(
    types: Sequence[TensorType | None], attrs: Mapping[str, Any]
) -> list[TensorType]:
    op = "InstanceNormalization"
    x = require(op, "input", types[0])
    require_dtype(op, "input", x, FLOATS)
    if x.ndim < 3:
        raise _rank_error(op, "input", x, "at least 3-D (N, C, D1, ...)")
    require_same_dtype(op, types, ("input", "scale", "B"))
    _channel_params(op, x, [("scale", types[1]), ("B", types[2])])
    return [TensorType(x.dtype, x.shape)]


def _instance_norm_kernel(
    x: np.ndarray, scale: np.ndarray, bias: np.ndarray, *, epsilon: float = 1e-5
) -> np.ndarray:
    (work,) = _floats(x)
    axes = tuple(range(2, x.ndim))
    mean = work.mean(axis=axes, keepdims=True)
    centered = work - mean
    inv_std = 1.0 / np.sqrt((centered * centered).mean(axis=axes, keepdims=True) + epsilon)
    s, b = (_per_channel(p, x.ndim, work.dtype) for p in (scale, bias))
    return (centered * inv_std * s + b).astype(x.dtype, copy=False)


def _ref_instance_norm(x, scale, bias, *, epsilon):  # type: ignore[no-untyped-def]
    n, c = x.shape[:2]
    flat = x.reshape(n, c, -1)
    norm, _, _ = _ref_normalize(flat, -1, epsilon, rms=False)
    y = norm * scale.astype(np.float64)[None, :, None] + bias.astype(np.float64)[None, :, None]
    return y.reshape(x.shape).astype(x.dtype)


def _instance_norm_samples() -> list[Sample]:
    out = []
    for dt in _SAMPLE_DTYPES:
        for shape in ((2, 3, 5), (1, 2, 3, 4), (2, 1, 1, 3), (1, 2, 2, 2, 2)):
            c = shape[1]
            inputs = (
                sample_array(shape, dt),
                sample_array((c,), dt, 0.5, 2.0),
                sample_array((c,), dt, -1.0, 1.0),
            )
            out.append(
                Sample(inputs, {"epsilon": 1e-3}, _ref_instance_norm, name=f"{dt.name}{shape}")
            )
    return out


register(
    OpDef(
        name="InstanceNormalization",
        doc="Per sample and channel: (x - mean) / sqrt(var + epsilon) * scale + B over the "
        "spatial axes.",
        inputs=(Input("input"), Input("scale"), Input("B")),
        outputs=("output",),
        attrs={"epsilon": Attr("float", 1e-5)},
        infer=_instance_norm_infer,
        kernel=_instance_norm_kernel,
        samples=_instance_norm_samples,
        cost=8,
    )
)


# -- LRN ------------------------------------------------------------------------------------


def _lrn_infer(types: Sequence[TensorType | None], attrs: Mapping[str, Any]) -> list[TensorType]:
    op = "LRN"
    x = require(op, "X", types[0])
    require_dtype(op, "X", x, FLOATS)
    if x.ndim < 3:
        raise _rank_error(op, "X", x, "at least 3-D (N, C, D1, ...)")
    if attrs["size"] < 1:
        raise OpArgumentError(f"{op}: attribute 'size' is {attrs['size']}; expected >= 1")
    return [TensorType(x.dtype, x.shape)]


def _lrn_kernel(
    x: np.ndarray, *, alpha: float = 1e-4, beta: float = 0.75, bias: float = 1.0, size: int
) -> np.ndarray:
    (work,) = _floats(x)
    channels = x.shape[1]
    before, after = (size - 1) // 2, size // 2  # floor / ceil of (size - 1) / 2
    # a running sum over the channel axis: pad the squares, then difference a cumulative sum
    squares = np.square(work)
    pad = [(0, 0)] * x.ndim
    pad[1] = (before + 1, after)
    total = np.cumsum(np.pad(squares, pad), axis=1)
    hi = np.take(total, np.arange(channels) + before + after + 1, axis=1)
    lo = np.take(total, np.arange(channels), axis=1)
    square_sum = hi - lo
    return (work / (bias + (alpha / size) * square_sum) ** beta).astype(x.dtype, copy=False)


def _ref_lrn(x, *, alpha=1e-4, beta=0.75, bias=1.0, size):  # type: ignore[no-untyped-def]
    """Element by element in float64, the channel window of the ONNX definition."""
    wide = x.astype(np.float64)
    out = np.empty_like(wide)
    channels = x.shape[1]
    for idx in np.ndindex(*x.shape):
        c = idx[1]
        lo, hi = max(0, c - (size - 1) // 2), min(channels - 1, c + math.ceil((size - 1) / 2))
        total = 0.0
        for i in range(lo, hi + 1):
            total += wide[(idx[0], i, *idx[2:])] ** 2
        out[idx] = wide[idx] / (bias + alpha / size * total) ** beta
    return out.astype(x.dtype)


def _lrn_samples() -> list[Sample]:
    out = []
    # 4-D with odd sizes (what onnxruntime implements); tests/ops/test_nn.py covers even sizes
    # and other ranks
    common: list[tuple[tuple[int, ...], dict[str, Any]]] = [
        ((2, 5, 3, 3), {"size": 3}),
        ((1, 3, 2, 2), {"size": 5, "alpha": 0.1}),  # window wider than the channels
        ((0, 4, 2, 2), {"size": 3}),
        ((1, 6, 2, 3), {"size": 1, "bias": 2.0}),
        ((1, 7, 1, 2), {"size": 7, "beta": 0.5}),
        ((2, 4, 1, 1), {"size": 3, "alpha": 1.0, "beta": 1.0}),
        ((1, 2, 3, 3), {"size": 3, "bias": 0.5}),
        ((1, 8, 2, 2), {"size": 5, "alpha": 0.02, "beta": 0.25}),
    ]
    for shape, attrs in common:
        x = sample_array(shape, _F32, -3.0, 3.0)
        out.append(Sample((x,), attrs, _ref_lrn, name=f"float32{shape}{attrs}"))
    for dt in (_F64, _F16):
        for shape, attrs in common[:3]:
            x = sample_array(shape, dt, -3.0, 3.0)
            out.append(Sample((x,), attrs, _ref_lrn, name=f"{dt.name}{shape}{attrs}"))
    return out


register(
    OpDef(
        name="LRN",
        doc="Local response normalization across channels: x / (bias + alpha / size * "
        "sum of x^2 over the size neighbouring channels) ^ beta.",
        inputs=(Input("X"),),
        outputs=("Y",),
        attrs={
            "alpha": Attr("float", 1e-4),
            "beta": Attr("float", 0.75),
            "bias": Attr("float", 1.0),
            "size": Attr("int"),
        },
        infer=_lrn_infer,
        kernel=_lrn_kernel,
        samples=_lrn_samples,
    )
)


# -- window geometry shared by Conv, ConvTranspose and the pools ----------------------------


def _per_axis(op: str, name: str, value: Sequence[int], n: int, default: int) -> tuple[int, ...]:
    if not value:
        return (default,) * n
    if len(value) != n:
        raise OpArgumentError(
            f"{op}: attribute {name!r} has {len(value)} entries {tuple(value)}; expected {n} "
            "(one per spatial axis)"
        )
    if any(v < 1 for v in value):
        raise OpArgumentError(f"{op}: attribute {name!r} is {tuple(value)}; expected values >= 1")
    return tuple(value)


def _explicit_pads(op: str, pads: Sequence[int], n: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    if not pads:
        return (0,) * n, (0,) * n
    if len(pads) != 2 * n:
        raise OpArgumentError(
            f"{op}: attribute 'pads' has {len(pads)} entries {tuple(pads)}; expected {2 * n} "
            "([begin per spatial axis..., end per spatial axis...])"
        )
    if any(p < 0 for p in pads):
        raise OpArgumentError(f"{op}: attribute 'pads' is {tuple(pads)}; expected values >= 0")
    return tuple(pads[:n]), tuple(pads[n:])


def _check_auto_pad(op: str, auto_pad: str) -> None:
    if auto_pad not in _AUTO_PADS:
        raise OpArgumentError(
            f"{op}: attribute 'auto_pad' is {auto_pad!r}; expected one of {', '.join(_AUTO_PADS)}"
        )


class _Window:
    """The validated window attributes of one call: kernel, strides, dilations, pads."""

    def __init__(self, op: str, attrs: Mapping[str, Any], kernel: Sequence[Dim], n: int) -> None:
        self.op = op
        self.auto_pad = attrs.get("auto_pad", "NOTSET")
        _check_auto_pad(op, self.auto_pad)
        self.kernel = tuple(kernel)
        self.strides = _per_axis(op, "strides", attrs.get("strides", ()), n, 1)
        self.dilations = _per_axis(op, "dilations", attrs.get("dilations", ()), n, 1)
        self.begins, self.ends = _explicit_pads(op, attrs.get("pads", ()), n)
        if self.auto_pad == "VALID":
            self.begins = self.ends = (0,) * n
        self.ceil_mode = bool(attrs.get("ceil_mode", 0))

    def output_sizes(self, sizes: Sequence[Dim]) -> tuple[Dim, ...]:
        """The output size along each spatial axis (symbolic sizes allowed)."""
        out = []
        for axis, (n, k, s, d, b, e) in enumerate(
            zip(sizes, self.kernel, self.strides, self.dilations, self.begins, self.ends)
        ):
            if self.auto_pad in _SAME:
                out.append(floordiv(n + s - 1, s))
                continue
            span = n + b + e - d * (k - 1) - 1
            if isinstance(span, int) and span < 0:
                raise OpArgumentError(
                    f"{self.op}: spatial axis {axis}: the window (kernel {k}, dilation {d}) spans "
                    f"{d * (k - 1) + 1}, more than the padded input {n} + {b} + {e}; expected a "
                    "smaller kernel or more padding"
                )
            if self.ceil_mode:
                # A window must start inside the input or the left padding (as ONNX and torch).
                out.append(dim_min(floordiv(span + s - 1, s) + 1, floordiv(n + b - 1, s) + 1))
            else:
                out.append(floordiv(span, s) + 1)
        return tuple(out)

    def static_pads(self, sizes: Sequence[int]) -> tuple[list[int], list[int]]:
        """Begin and end pads for concrete sizes (resolving ``auto_pad=SAME_*``)."""
        if self.auto_pad not in _SAME:
            return list(self.begins), list(self.ends)
        begins, ends = [], []
        for n, k, s, d in zip(sizes, self.kernel, self.strides, self.dilations):
            out = -(-n // s)
            total = max(0, (out - 1) * s + (k - 1) * d + 1 - n)
            small, big = total // 2, total - total // 2
            begins.append(small if self.auto_pad == "SAME_UPPER" else big)
            ends.append(big if self.auto_pad == "SAME_UPPER" else small)
        return begins, ends

    def windows(
        self, x: np.ndarray, pad_value: Any, overhang_value: Any | None = None
    ) -> np.ndarray:
        """A strided view ``(N, C, *out, *kernel)`` of every window of ``x`` (N, C, *spatial).

        Explicit pads hold ``pad_value``; the overhang ``ceil_mode`` adds past the end pads holds
        ``overhang_value`` (``pad_value`` when ``None``).
        """
        sizes = x.shape[2:]
        outs = self.output_sizes(sizes)
        begins, ends = self.static_pads(sizes)
        extents = [d * (k - 1) + 1 for k, d in zip(self.kernel, self.dilations)]
        overhang = [
            max(0, (o - 1) * s + ext - (n + b + e))
            for o, s, ext, n, b, e in zip(outs, self.strides, extents, sizes, begins, ends)
        ]
        width = [(0, 0), (0, 0), *zip(begins, ends)]
        if any(begins) or any(ends):
            x = np.pad(x, width, constant_values=pad_value)
        if any(overhang):
            fill = pad_value if overhang_value is None else overhang_value
            x = np.pad(x, [(0, 0), (0, 0), *((0, h) for h in overhang)], constant_values=fill)
        n = len(sizes)
        view = sliding_window_view(x, extents, axis=tuple(range(2, 2 + n)))
        index = (
            slice(None),
            slice(None),
            *(slice(0, (o - 1) * s + 1, s) for o, s in zip(outs, self.strides)),
            *(slice(None, None, d) for d in self.dilations),
        )
        return view[index]


def _spatial_input(op: str, arg: str, x: TensorType, ranks: Sequence[int] = (3, 4, 5)) -> int:
    if x.ndim not in ranks:
        expected = " or ".join(str(r) for r in ranks)
        raise _rank_error(op, arg, x, f"of rank {expected} (N, C, spatial...)")
    return x.ndim - 2


# -- Conv -----------------------------------------------------------------------------------


def _conv_infer(types: Sequence[TensorType | None], attrs: Mapping[str, Any]) -> list[TensorType]:
    op = "Conv"
    x = require(op, "X", types[0])
    w = require(op, "W", types[1])
    b = types[2] if len(types) > 2 else None
    require_dtype(op, "X", x, FLOATS)
    require_same_dtype(op, (x, w, b), ("X", "W", "B"))
    n = _spatial_input(op, "X", x)
    if w.ndim != x.ndim:
        raise _rank_error(op, "W", w, f"of rank {x.ndim} (M, C/group, kernel...) like X")
    group = attrs["group"]
    if group < 1:
        raise OpArgumentError(f"{op}: attribute 'group' is {group}; expected a value >= 1")
    channels, out_channels, per_group = x.shape[1], w.shape[0], w.shape[1]
    if isinstance(channels, int) and isinstance(per_group, int) and channels != per_group * group:
        raise OpArgumentError(
            f"{op}: input 'W' expects {per_group} channels per group x group={group} = "
            f"{per_group * group} input channels; found {channels} in X "
            f"(X {format_shape(x.shape)}, W {format_shape(w.shape)})"
        )
    if isinstance(out_channels, int) and out_channels % group:
        raise OpArgumentError(
            f"{op}: input 'W' has {out_channels} output channels; expected a multiple of "
            f"group={group}"
        )
    kernel = w.shape[2:]
    if attrs["kernel_shape"] and tuple(attrs["kernel_shape"]) != tuple(kernel):
        raise OpArgumentError(
            f"{op}: attribute 'kernel_shape' is {tuple(attrs['kernel_shape'])}; expected W's "
            f"spatial shape {format_shape(kernel)}"
        )
    if b is not None:
        require_rank(op, "B", b, (1,))
        _check_dim(op, "B", "size", b.shape[0], out_channels)
    window = _Window(op, attrs, kernel, n)
    return [TensorType(x.dtype, (x.shape[0], out_channels, *window.output_sizes(x.shape[2:])))]


def _conv_kernel(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray | None = None,
    *,
    auto_pad: str = "NOTSET",
    dilations: Sequence[int] = (),
    group: int = 1,
    kernel_shape: Sequence[int] = (),
    pads: Sequence[int] = (),
    strides: Sequence[int] = (),
) -> np.ndarray:
    attrs = {"auto_pad": auto_pad, "dilations": dilations, "pads": pads, "strides": strides}
    n = x.ndim - 2
    window = _Window("Conv", attrs, w.shape[2:], n)
    xw, ww = _floats(x, w)
    cols = window.windows(xw, 0)  # (N, C, *out, *kernel), a view
    batch, channels = x.shape[:2]
    out_channels = w.shape[0]
    outs = cols.shape[2 : 2 + n]
    positions = math.prod(outs)
    patch = (channels // group) * math.prod(w.shape[2:])
    # im2col: gather each window's (channel, kernel) entries into one row; the only copy.
    cols = cols.reshape(batch, group, channels // group, *outs, *w.shape[2:])
    order = (0, 1, *range(3, 3 + n), 2, *range(3 + n, 3 + 2 * n))
    cols = cols.transpose(order).reshape(batch, group, positions, patch)
    weights = ww.reshape(group, out_channels // group, patch)
    if group == 1:
        y = cols.reshape(batch * positions, patch) @ weights[0].T
        y = y.reshape(batch, positions, out_channels).transpose(0, 2, 1)
    else:
        y = np.matmul(cols, weights.transpose(0, 2, 1))  # (N, G, P, M/G)
        y = y.transpose(0, 1, 3, 2)
    y = y.reshape(batch, out_channels, *outs)
    if b is not None:
        y = y + _per_channel(b, y.ndim, y.dtype)
    return y.astype(x.dtype, copy=False)


def _ref_conv(x, w, b=None, *, auto_pad, dilations, group, kernel_shape, pads, strides):  # type: ignore[no-untyped-def]
    """Direct convolution: a loop over every output element and kernel tap, in float64."""
    n = x.ndim - 2
    sizes, kernel = x.shape[2:], w.shape[2:]
    strides = strides or (1,) * n
    dilations = dilations or (1,) * n
    begins = list(pads[:n]) if pads else [0] * n
    if auto_pad == "VALID":
        begins = [0] * n
    outs = []
    for i in range(n):
        size, k, s, d = sizes[i], kernel[i], strides[i], dilations[i]
        if auto_pad in _SAME:
            out = -(-size // s)
            total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
            begins[i] = total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
        else:
            end = pads[n + i] if pads and auto_pad != "VALID" else 0
            out = (size + begins[i] + end - d * (k - 1) - 1) // s + 1
        outs.append(out)
    batch, out_channels = x.shape[0], w.shape[0]
    per_group_in, per_group_out = w.shape[1], out_channels // group
    y = np.zeros((batch, out_channels, *outs))
    for bi, m, *pos in product(range(batch), range(out_channels), *(range(o) for o in outs)):
        g = m // per_group_out
        total = 0.0 if b is None else float(b[m])
        for ci, *taps in product(range(per_group_in), *(range(k) for k in kernel)):
            src = [
                p * s + t * d - bg for p, s, t, d, bg in zip(pos, strides, taps, dilations, begins)
            ]
            if all(0 <= i < size for i, size in zip(src, sizes)):
                total += float(x[(bi, g * per_group_in + ci, *src)]) * float(w[(m, ci, *taps)])
        y[(bi, m, *pos)] = total
    return y.astype(x.dtype)


def _conv_samples() -> list[Sample]:
    out = []
    # (x shape, w shape, attrs, with bias)
    cases: list[tuple[tuple[int, ...], tuple[int, ...], dict[str, Any], bool]] = [
        ((1, 2, 5, 5), (3, 2, 3, 3), {}, True),
        ((2, 3, 7), (4, 3, 3), {"strides": (2,), "pads": (1, 2)}, True),
        ((1, 4, 6, 5), (4, 2, 3, 2), {"group": 2, "dilations": (2, 1)}, False),
        ((1, 3, 5, 5), (3, 1, 3, 3), {"group": 3, "pads": (1, 1, 1, 1)}, True),  # depthwise
        ((1, 2, 6, 5), (2, 2, 2, 3), {"auto_pad": "SAME_UPPER", "strides": (2, 2)}, False),
        ((1, 2, 6, 5), (2, 2, 2, 2), {"auto_pad": "SAME_LOWER"}, True),
        ((1, 2, 4, 6), (3, 2, 3, 3), {"auto_pad": "VALID", "strides": (1, 2)}, False),
        ((1, 1, 3, 3, 4), (2, 1, 2, 2, 3), {"pads": (0, 1, 1, 1, 0, 1)}, True),
        ((1, 1, 1, 1), (1, 1, 1, 1), {}, True),
        ((0, 2, 4, 4), (2, 2, 3, 3), {}, False),
    ]
    for dt in _SAMPLE_DTYPES:
        for xs, ws, attrs, with_bias in cases if dt != _F16 else cases[:4]:
            inputs: tuple[np.ndarray, ...] = (sample_array(xs, dt), sample_array(ws, dt, -1, 1))
            if with_bias:
                inputs += (sample_array((ws[0],), dt),)
            out.append(Sample(inputs, attrs, _ref_conv, name=f"{dt.name}{xs}*{ws}{attrs}"))
    return out


_WINDOW_ATTRS = {
    "auto_pad": Attr("str", "NOTSET", "NOTSET, SAME_UPPER, SAME_LOWER or VALID"),
    "dilations": Attr("ints", (), "per spatial axis; default 1"),
    "kernel_shape": Attr("ints", (), "per spatial axis"),
    "pads": Attr("ints", (), "[begin per axis..., end per axis...]; default 0"),
    "strides": Attr("ints", (), "per spatial axis; default 1"),
}

register(
    OpDef(
        name="Conv",
        doc="N-d convolution (1 to 3 spatial axes) of X (N, C, ...) with W (M, C/group, k...), "
        "plus an optional bias B (M,).",
        inputs=(Input("X"), Input("W"), Input("B", optional=True)),
        outputs=("Y",),
        attrs={**_WINDOW_ATTRS, "group": Attr("int", 1)},
        infer=_conv_infer,
        kernel=_conv_kernel,
        samples=_conv_samples,
        cost=_window_cost,
    )
)


# -- ConvTranspose --------------------------------------------------------------------------


class _TransposeGeometry:
    """Output sizes and pads of a ConvTranspose (the ONNX rules, symbolic sizes allowed)."""

    def __init__(self, attrs: Mapping[str, Any], kernel: Sequence[Dim], n: int) -> None:
        op = "ConvTranspose"
        self.auto_pad = attrs["auto_pad"]
        _check_auto_pad(op, self.auto_pad)
        self.kernel = tuple(kernel)
        self.strides = _per_axis(op, "strides", attrs["strides"], n, 1)
        self.dilations = _per_axis(op, "dilations", attrs["dilations"], n, 1)
        self.begins, self.ends = _explicit_pads(op, attrs["pads"], n)
        if self.auto_pad == "VALID":
            self.begins = self.ends = (0,) * n
        extra = attrs["output_padding"] or (0,) * n
        if len(extra) != n:
            raise OpArgumentError(
                f"{op}: attribute 'output_padding' has {len(extra)} entries; expected {n}"
            )
        for p, s, d in zip(extra, self.strides, self.dilations):
            if not 0 <= p < max(s, d):
                raise OpArgumentError(
                    f"{op}: attribute 'output_padding' is {tuple(extra)}; expected each entry "
                    "in [0, max(stride, dilation))"
                )
        self.output_padding = tuple(extra)
        shape = tuple(attrs["output_shape"])
        if shape and len(shape) not in (n, n + 2):
            raise OpArgumentError(
                f"{op}: attribute 'output_shape' has {len(shape)} entries; expected {n} (the "
                "spatial output sizes)"
            )
        self.output_shape = shape[-n:] if shape else ()

    def _natural(self, i: int, size: Dim) -> Dim:
        k, s, d = self.kernel[i], self.strides[i], self.dilations[i]
        return s * (size - 1) + self.output_padding[i] + (k - 1) * d + 1

    def output_sizes(self, sizes: Sequence[Dim]) -> tuple[Dim, ...]:
        if self.output_shape:
            return tuple(self.output_shape)
        if self.auto_pad in _SAME:
            return tuple(n * s for n, s in zip(sizes, self.strides))
        out = []
        for i, n in enumerate(sizes):
            size = self._natural(i, n) - self.begins[i] - self.ends[i]
            if isinstance(size, int) and size < 1:
                raise OpArgumentError(
                    f"ConvTranspose: spatial axis {i}: pads {self.begins[i]} + {self.ends[i]} "
                    f"leave an output of size {size}; expected smaller pads"
                )
            out.append(size)
        return tuple(out)

    def static_pads(self, sizes: Sequence[int]) -> list[int]:
        """The begin pad of each axis (what is cropped from the full scattered output)."""
        if not self.output_shape and self.auto_pad not in _SAME:
            return list(self.begins)
        outs = self.output_sizes(sizes)
        begins = []
        for i, (n, o) in enumerate(zip(sizes, outs)):
            total = int(self._natural(i, n)) - int(o)
            upper = self.auto_pad == "SAME_UPPER"
            begins.append(total // 2 if upper else total - total // 2)
        return begins


def _conv_transpose_infer(
    types: Sequence[TensorType | None], attrs: Mapping[str, Any]
) -> list[TensorType]:
    op = "ConvTranspose"
    x = require(op, "X", types[0])
    w = require(op, "W", types[1])
    b = types[2] if len(types) > 2 else None
    require_dtype(op, "X", x, FLOATS)
    require_same_dtype(op, (x, w, b), ("X", "W", "B"))
    n = _spatial_input(op, "X", x)
    if w.ndim != x.ndim:
        raise _rank_error(op, "W", w, f"of rank {x.ndim} (C, M/group, kernel...) like X")
    group = attrs["group"]
    if group < 1:
        raise OpArgumentError(f"{op}: attribute 'group' is {group}; expected a value >= 1")
    _check_dim(op, "W", "input channels (axis 0)", w.shape[0], x.shape[1])
    if isinstance(w.shape[0], int) and w.shape[0] % group:
        raise OpArgumentError(
            f"{op}: input 'W' has {w.shape[0]} input channels; expected a multiple of group={group}"
        )
    out_channels = w.shape[1] * group
    kernel = w.shape[2:]
    if attrs["kernel_shape"] and tuple(attrs["kernel_shape"]) != tuple(kernel):
        raise OpArgumentError(
            f"{op}: attribute 'kernel_shape' is {tuple(attrs['kernel_shape'])}; expected W's "
            f"spatial shape {format_shape(kernel)}"
        )
    if b is not None:
        require_rank(op, "B", b, (1,))
        _check_dim(op, "B", "size", b.shape[0], out_channels)
    geometry = _TransposeGeometry(attrs, kernel, n)
    outs = geometry.output_sizes(x.shape[2:])
    return [TensorType(x.dtype, (x.shape[0], out_channels, *outs))]


def _conv_transpose_kernel(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray | None = None,
    **attrs: Any,
) -> np.ndarray:
    n = x.ndim - 2
    geometry = _TransposeGeometry(attrs, w.shape[2:], n)
    group = attrs["group"]
    xw, ww = _floats(x, w)
    batch, channels, *sizes = x.shape
    kernel = w.shape[2:]
    per_out = w.shape[1]
    positions, taps = math.prod(sizes), math.prod(kernel)
    # Every input element times every kernel tap, one matrix product per group...
    cols = xw.reshape(batch, group, channels // group, positions).transpose(0, 1, 3, 2)
    weights = ww.reshape(group, channels // group, per_out * taps)
    contrib = np.matmul(cols, weights).reshape(batch, group, *sizes, per_out, *kernel)
    order = (0, 1, 2 + n, *range(3 + n, 3 + 2 * n), *range(2, 2 + n))
    contrib = contrib.transpose(order)  # (N, G, M/G, *kernel, *sizes)
    # ... then scattered onto the full output: tap t of input i lands at i*stride + t*dilation.
    full = [
        s * (size - 1) + (k - 1) * d + 1
        for size, k, s, d in zip(sizes, kernel, geometry.strides, geometry.dilations)
    ]
    outs = [int(o) for o in geometry.output_sizes(sizes)]
    begins = geometry.static_pads(sizes)
    lead = [max(0, -bg) for bg in begins]  # negative pads grow the output at the front
    length = [max(f, bg + o) + ld for f, bg, o, ld in zip(full, begins, outs, lead)]
    y = np.zeros((batch, group, per_out, *length), contrib.dtype)
    for tap in np.ndindex(*kernel):
        target = tuple(
            slice(ld + t * d, ld + t * d + s * (size - 1) + 1, s)
            for ld, t, d, s, size in zip(lead, tap, geometry.dilations, geometry.strides, sizes)
        )
        y[(slice(None), slice(None), slice(None), *target)] += contrib[(slice(None),) * 3 + tap]
    crop = tuple(slice(ld + bg, ld + bg + o) for ld, bg, o in zip(lead, begins, outs))
    y = y[(slice(None), slice(None), slice(None), *crop)].reshape(batch, group * per_out, *outs)
    if b is not None:
        y = y + _per_channel(b, y.ndim, y.dtype)
    return y.astype(x.dtype, copy=False)


def _ref_conv_transpose(x, w, b=None, **attrs):  # type: ignore[no-untyped-def]
    """Scatter loops in float64: y[o] += x[i] * w[t] where o = i*stride + t*dilation - pad."""
    n = x.ndim - 2
    sizes, kernel = x.shape[2:], w.shape[2:]
    strides = attrs["strides"] or (1,) * n
    dilations = attrs["dilations"] or (1,) * n
    out_pad = attrs["output_padding"] or (0,) * n
    natural = [
        strides[i] * (sizes[i] - 1) + out_pad[i] + (kernel[i] - 1) * dilations[i] + 1
        for i in range(n)
    ]
    pads = attrs["pads"] or (0,) * (2 * n)
    if attrs["output_shape"]:
        outs = list(attrs["output_shape"][-n:])
        totals = [natural[i] - outs[i] for i in range(n)]
        upper = attrs["auto_pad"] == "SAME_UPPER"
        begins = [t // 2 if upper else t - t // 2 for t in totals]
    elif attrs["auto_pad"] in _SAME:
        outs = [sizes[i] * strides[i] for i in range(n)]
        totals = [natural[i] - outs[i] for i in range(n)]
        upper = attrs["auto_pad"] == "SAME_UPPER"
        begins = [t // 2 if upper else t - t // 2 for t in totals]
    else:
        begins = list(pads[:n])
        outs = [natural[i] - pads[i] - pads[n + i] for i in range(n)]
    group = attrs["group"]
    batch, channels = x.shape[:2]
    per_in, per_out = channels // group, w.shape[1]
    y = np.zeros((batch, per_out * group, *outs))
    if b is not None:
        y += b.astype(np.float64).reshape(1, -1, *([1] * n))
    for bi, c, *pos in product(range(batch), range(channels), *(range(s) for s in sizes)):
        g = c // per_in
        for mo, *taps in product(range(per_out), *(range(k) for k in kernel)):
            dst = [
                p * s + t * d - bg for p, s, t, d, bg in zip(pos, strides, taps, dilations, begins)
            ]
            if all(0 <= o < size for o, size in zip(dst, outs)):
                y[(bi, g * per_out + mo, *dst)] += float(x[(bi, c, *pos)]) * float(
                    w[(c, mo, *taps)]
                )
    return y.astype(x.dtype)


def _conv_transpose_samples() -> list[Sample]:
    out = []
    cases: list[tuple[tuple[int, ...], tuple[int, ...], dict[str, Any], bool]] = [
        ((1, 2, 3, 3), (2, 3, 3, 3), {}, True),
        ((2, 2, 4), (2, 2, 3), {"strides": (2,), "pads": (1, 0)}, True),
        ((1, 2, 3, 2), (2, 1, 2, 2), {"strides": (2, 3), "output_padding": (1, 2)}, False),
        ((1, 4, 3, 3), (4, 1, 3, 3), {"group": 2, "dilations": (2, 1), "pads": (1, 1, 1, 1)}, True),
        ((1, 1, 3, 3), (1, 2, 3, 3), {"strides": (2, 2), "output_shape": (6, 7)}, False),
        ((1, 1, 2, 3), (1, 1, 2, 2), {"strides": (2, 2), "auto_pad": "SAME_UPPER"}, False),
        ((1, 1, 2, 3), (1, 1, 3, 3), {"strides": (2, 2), "auto_pad": "SAME_LOWER"}, True),
        ((1, 1, 2, 2, 2), (1, 1, 2, 2, 2), {"strides": (1, 2, 1)}, True),
        ((1, 1, 1, 1), (1, 1, 1, 1), {}, False),
    ]
    for dt in _SAMPLE_DTYPES:
        for xs, ws, attrs, with_bias in cases if dt != _F16 else cases[:3]:
            c_out = ws[1] * attrs.get("group", 1)
            inputs: tuple[np.ndarray, ...] = (sample_array(xs, dt), sample_array(ws, dt, -1, 1))
            if with_bias:
                inputs += (sample_array((c_out,), dt),)
            out.append(
                Sample(inputs, attrs, _ref_conv_transpose, name=f"{dt.name}{xs}*{ws}{attrs}")
            )
    return out


register(
    OpDef(
        name="ConvTranspose",
        doc="Transposed (fractionally strided) convolution of X (N, C, ...) with W "
        "(C, M/group, k...), plus an optional bias B (M,).",
        inputs=(Input("X"), Input("W"), Input("B", optional=True)),
        outputs=("Y",),
        attrs={
            **_WINDOW_ATTRS,
            "group": Attr("int", 1),
            "output_padding": Attr("ints", (), "extra size at the end of each spatial axis"),
            "output_shape": Attr("ints", (), "spatial output sizes; pads are derived from it"),
        },
        infer=_conv_transpose_infer,
        kernel=_conv_transpose_kernel,
        samples=_conv_transpose_samples,
        cost=_window_cost,
    )
)


# -- MaxPool, AveragePool -------------------------------------------------------------------

_MAXPOOL_DTYPES = FLOATS | {dtypes.int8, dtypes.uint8}


def _pool_infer(op: str, allowed: frozenset[np.dtype]) -> Callable[..., list[TensorType]]:
    def infer(types: Sequence[TensorType | None], attrs: Mapping[str, Any]) -> list[TensorType]:
        x = require(op, "X", types[0])
        require_dtype(op, "X", x, allowed)
        n = _spatial_input(op, "X", x)
        if not attrs["kernel_shape"]:
            raise OpArgumentError(f"{op}: attribute 'kernel_shape' is required")
        kernel = _per_axis(op, "kernel_shape", attrs["kernel_shape"], n, 1)
        if op == "MaxPool" and attrs["storage_order"] not in (0, 1):
            raise OpArgumentError(
                f"{op}: attribute 'storage_order' is {attrs['storage_order']}; expected 0 or 1"
            )
        shape = (*x.shape[:2], *_Window(op, attrs, kernel, n).output_sizes(x.shape[2:]))
        out = [TensorType(x.dtype, shape)]
        if op == "MaxPool":
            out.append(TensorType(dtypes.int64, shape))
        return out

    return infer


def _max_pool_kernel(x: np.ndarray, **attrs: Any) -> tuple[np.ndarray, np.ndarray]:
    window = _Window("MaxPool", attrs, attrs["kernel_shape"], x.ndim - 2)
    lowest = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
    view = window.windows(x, lowest)
    n = x.ndim - 2
    outs = view.shape[2 : 2 + n]
    # One pass per kernel tap over strided views (no im2col copy, no reduction over a tiny
    # inner axis, both slow in NumPy): keep the running maximum and which tap gave it. A later
    # tap wins only if strictly greater, or NaN over a number, as argmax picks the first.
    positions = list(np.ndindex(*window.kernel))
    y = np.array(view[(..., *positions[0])])
    arg = np.zeros(y.shape, np.uint8 if len(positions) < 256 else np.int64)
    floating = x.dtype.kind == "f"
    for t, tap in enumerate(positions[1:], start=1):
        v = view[(..., *tap)]
        better = v > y
        if floating:
            better |= np.isnan(v) & ~np.isnan(y)
        arg = np.where(better, arg.dtype.type(t), arg)
        np.maximum(y, v, out=y)  # NaN wins here too, as in `better`
    # Indices: the flat position in X (padding not counted) of each window's maximum. The
    # position is linear in the output coordinates and the tap, so it is a per-window base
    # plus a per-tap offset (row-major, or column-major over the spatial axes).
    begins, _ = window.static_pads(x.shape[2:])
    spatial = list(x.shape[2:])
    order = list(range(n))[::-1] if attrs["storage_order"] == 1 else list(range(n))
    stride_of = [0] * n  # the flat-index step of one unit along each spatial axis
    step = 1
    for axis in reversed(order):
        stride_of[axis] = step
        step *= spatial[axis]
    offsets = np.array(
        [
            sum(t * d * stride_of[a] for a, (t, d) in enumerate(zip(tap, window.dilations)))
            for tap in positions
        ],
        np.int64,
    )
    base = np.zeros((1, 1) + tuple(1 for _ in outs), np.int64)
    for a, (o, st, b) in enumerate(zip(outs, window.strides, begins)):
        coord = (np.arange(o, dtype=np.int64) * st - b) * stride_of[a]
        base = base + coord.reshape((1, 1) + tuple(o if i == a else 1 for i in range(n)))
    planes = np.arange(x.shape[0] * x.shape[1], dtype=np.int64).reshape(x.shape[:2] + (1,) * n)
    return y, offsets[arg] + base + planes * math.prod(x.shape[2:])


def _pool_geometry(x, attrs):  # type: ignore[no-untyped-def]
    """Output sizes and begin pads by plain integer arithmetic (the references' own rule)."""
    n = x.ndim - 2
    sizes, kernel = x.shape[2:], attrs["kernel_shape"]
    strides = attrs["strides"] or (1,) * n
    dilations = attrs.get("dilations") or (1,) * n
    pads = list(attrs["pads"] or (0,) * (2 * n))
    outs, begins, ends = [], [], []
    for i in range(n):
        size, k, s, d = sizes[i], kernel[i], strides[i], dilations[i]
        b, e = pads[i], pads[n + i]
        if attrs["auto_pad"] in _SAME:
            out = math.ceil(size / s)
            total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
            b = total // 2 if attrs["auto_pad"] == "SAME_UPPER" else total - total // 2
            e = total - b
        elif attrs["auto_pad"] == "VALID":
            b = e = 0
            out = (size - d * (k - 1) - 1) // s + 1
        elif attrs["ceil_mode"]:
            out = math.ceil((size + b + e - d * (k - 1) - 1) / s) + 1
            if (out - 1) * s >= size + b:
                out -= 1
        else:
            out = (size + b + e - d * (k - 1) - 1) // s + 1
        outs.append(out)
        begins.append(b)
        ends.append(e)
    return outs, begins, ends, strides, dilations, kernel


def _ref_pool(x, *, mode, **attrs):  # type: ignore[no-untyped-def]
    """Direct pooling by loops; max also returns the flat index of the (first) maximum."""
    outs, begins, ends, strides, dilations, kernel = _pool_geometry(x, attrs)
    sizes = x.shape[2:]
    y = np.zeros((*x.shape[:2], *outs))
    index = np.zeros(y.shape, np.int64)
    for bi, c, *pos in product(range(x.shape[0]), range(x.shape[1]), *(range(o) for o in outs)):
        best, best_at, total, count = -math.inf, 0, 0.0, 0
        for taps in product(*(range(k) for k in kernel)):
            src = [
                p * s + t * d - b for p, s, t, d, b in zip(pos, strides, taps, dilations, begins)
            ]
            inside = all(0 <= i < size for i, size in zip(src, sizes))
            in_pads = all(-b <= i < size + e for i, size, b, e in zip(src, sizes, begins, ends))
            if inside:
                v = float(x[(bi, c, *src)])
                total += v
                count += 1
                if v > best:
                    best = v
                    at = src[::-1] if attrs.get("storage_order") else src
                    dims = sizes[::-1] if attrs.get("storage_order") else sizes
                    best_at = (bi * x.shape[1] + c) * math.prod(sizes) + int(
                        np.ravel_multi_index(at, dims)
                    )
            elif in_pads and attrs.get("count_include_pad"):
                count += 1
        if mode == "max":
            y[(bi, c, *pos)], index[(bi, c, *pos)] = best, best_at
        else:
            y[(bi, c, *pos)] = total / count
    if mode == "max":
        return y.astype(x.dtype), index
    return y.astype(x.dtype)


_POOL_CASES: list[tuple[tuple[int, ...], dict[str, Any]]] = [
    ((1, 2, 5, 5), {"kernel_shape": (2, 2), "strides": (2, 2)}),
    ((2, 1, 7), {"kernel_shape": (3,), "strides": (2,), "pads": (1, 1)}),
    ((1, 2, 5, 6), {"kernel_shape": (3, 2), "strides": (2, 2), "ceil_mode": 1}),
    (
        (1, 1, 6, 7),
        {"kernel_shape": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1), "ceil_mode": 1},
    ),
    ((1, 1, 5, 5), {"kernel_shape": (2, 3), "auto_pad": "SAME_UPPER", "strides": (2, 1)}),
    ((1, 1, 5, 4), {"kernel_shape": (2, 2), "auto_pad": "SAME_LOWER"}),
    ((1, 2, 5, 5), {"kernel_shape": (3, 3), "auto_pad": "VALID", "strides": (1, 2)}),
    ((1, 1, 6, 6), {"kernel_shape": (2, 2), "dilations": (2, 2), "pads": (0, 1, 1, 0)}),
    ((1, 1, 3, 4, 4), {"kernel_shape": (2, 2, 2), "strides": (1, 2, 2)}),
    ((1, 1, 1, 1), {"kernel_shape": (1, 1)}),
    ((0, 2, 4, 4), {"kernel_shape": (2, 2)}),
]


def _max_pool_samples() -> list[Sample]:
    def ref(x: np.ndarray, **attrs: Any) -> Any:
        return _ref_pool(x, mode="max", **attrs)

    out = []
    for dt in _SAMPLE_DTYPES:
        for shape, attrs in _POOL_CASES if dt != _F16 else _POOL_CASES[:4]:
            x = sample_array(shape, dt)
            out.append(Sample((x,), attrs, ref, name=f"{dt.name}{shape}{attrs}"))
    out.append(
        Sample(
            (sample_array((1, 2, 4, 5), _F32),),
            {"kernel_shape": (2, 3), "strides": (2, 1), "storage_order": 1},
            ref,
            name="storage_order=1",
        )
    )
    out.append(
        Sample(
            (sample_array((1, 2, 5, 5), dtypes.int8, -100, 100),),
            {"kernel_shape": (3, 3), "pads": (1, 1, 1, 1)},
            ref,
            name="int8",
        )
    )
    return out


def _avg_pool_kernel(x: np.ndarray, **attrs: Any) -> np.ndarray:
    n = x.ndim - 2
    window = _Window("AveragePool", attrs, attrs["kernel_shape"], n)
    (work,) = _floats(x)
    axes = tuple(range(2 + n, 2 + 2 * n))
    sums = window.windows(work, 0).sum(axis=axes)
    # The divisor of each window: its entries inside X, plus the explicit pads when
    # count_include_pad (never the overhang ceil_mode adds).
    ones = np.ones((1, 1, *x.shape[2:]), work.dtype)
    counts = window.windows(ones, float(attrs["count_include_pad"]), 0.0).sum(axis=axes)
    return (sums / counts).astype(x.dtype, copy=False)


def _avg_pool_samples() -> list[Sample]:
    def ref(x: np.ndarray, **attrs: Any) -> Any:
        return _ref_pool(x, mode="avg", **attrs)

    out = []
    for dt in _SAMPLE_DTYPES:
        for shape, attrs in _POOL_CASES if dt != _F16 else _POOL_CASES[:4]:
            x = sample_array(shape, dt)
            out.append(Sample((x,), attrs, ref, name=f"{dt.name}{shape}{attrs}"))
            if attrs.get("pads") and dt == _F32:
                with_pad = {**attrs, "count_include_pad": 1}
                out.append(Sample((x,), with_pad, ref, name=f"{shape}{with_pad}"))
    return out


_POOL_ATTRS = {
    **_WINDOW_ATTRS,
    "kernel_shape": Attr("ints", (), "per spatial axis (required)"),
    "ceil_mode": Attr("int", 0, "1: output sizes round up"),
}

register(
    OpDef(
        name="MaxPool",
        doc="The maximum of each window of X (N, C, ...); Indices holds the flat position in X "
        "of each maximum (row-major, or column-major over the spatial axes for storage_order=1).",
        inputs=(Input("X"),),
        outputs=("Y", "Indices"),
        attrs={**_POOL_ATTRS, "storage_order": Attr("int", 0)},
        infer=_pool_infer("MaxPool", _MAXPOOL_DTYPES),
        kernel=_max_pool_kernel,
        samples=_max_pool_samples,
        cost=4,
        engine_limits=_ORT_DROPS_NAN,
    )
)

register(
    OpDef(
        name="AveragePool",
        doc="The mean of each window of X (N, C, ...); padding counts in the divisor only with "
        "count_include_pad=1.",
        inputs=(Input("X"),),
        outputs=("Y",),
        attrs={**_POOL_ATTRS, "count_include_pad": Attr("int", 0)},
        infer=_pool_infer("AveragePool", FLOATS),
        kernel=_avg_pool_kernel,
        samples=_avg_pool_samples,
        cost=4,
    )
)


# -- GlobalAveragePool, GlobalMaxPool -------------------------------------------------------


def _global_pool_infer(op: str) -> Callable[..., list[TensorType]]:
    def infer(types: Sequence[TensorType | None], attrs: Mapping[str, Any]) -> list[TensorType]:
        x = require(op, "X", types[0])
        require_dtype(op, "X", x, FLOATS)
        n = _spatial_input(op, "X", x)
        return [TensorType(x.dtype, (*x.shape[:2], *([1] * n)))]

    return infer


def _global_avg_kernel(x: np.ndarray) -> np.ndarray:
    (work,) = _floats(x)
    return work.mean(axis=tuple(range(2, x.ndim)), keepdims=True).astype(x.dtype, copy=False)


def _global_max_kernel(x: np.ndarray) -> np.ndarray:
    return x.max(axis=tuple(range(2, x.ndim)), keepdims=True)


def _global_samples(mode: str) -> Callable[[], list[Sample]]:
    def ref(x: np.ndarray) -> np.ndarray:
        y = np.zeros((*x.shape[:2], *([1] * (x.ndim - 2))))
        for bi, c in product(range(x.shape[0]), range(x.shape[1])):
            values = [float(v) for v in x[bi, c].reshape(-1)]
            y[bi, c] = max(values) if mode == "max" else math.fsum(values) / len(values)
        return y.astype(x.dtype)

    def make() -> list[Sample]:
        return [
            Sample((sample_array(shape, dt),), {}, ref, name=f"{dt.name}{shape}")
            for dt in _SAMPLE_DTYPES
            for shape in ((2, 3, 4, 5), (1, 2, 7), (1, 1, 1, 1), (0, 2, 3, 3), (1, 2, 2, 3, 2))
        ]

    return make


register(
    OpDef(
        name="GlobalAveragePool",
        doc="The mean over all spatial axes of X (N, C, ...), kept as size-1 axes.",
        inputs=(Input("X"),),
        outputs=("Y",),
        infer=_global_pool_infer("GlobalAveragePool"),
        kernel=_global_avg_kernel,
        samples=_global_samples("mean"),
    )
)

register(
    OpDef(
        name="GlobalMaxPool",
        doc="The maximum over all spatial axes of X (N, C, ...), kept as size-1 axes.",
        inputs=(Input("X"),),
        outputs=("Y",),
        infer=_global_pool_infer("GlobalMaxPool"),
        kernel=_global_max_kernel,
        samples=_global_samples("max"),
        engine_limits=_ORT_DROPS_NAN,
    )
)


# -- Dropout --------------------------------------------------------------------------------


def _dropout_infer(
    types: Sequence[TensorType | None], attrs: Mapping[str, Any]
) -> list[TensorType]:
    op = "Dropout"
    x = require(op, "data", types[0])
    require_dtype(op, "data", x, FLOATS)
    ratio = types[1] if len(types) > 1 else None
    training = types[2] if len(types) > 2 else None
    if ratio is not None:
        require_dtype(op, "ratio", ratio, FLOATS)
        require_rank(op, "ratio", ratio, (0,))
    if training is not None:
        require_dtype(op, "training_mode", training, BOOL)
        require_rank(op, "training_mode", training, (0,))
    return [TensorType(x.dtype, x.shape), TensorType(dtypes.bool_, x.shape)]


def _dropout_kernel(
    x: np.ndarray,
    ratio: np.ndarray | None = None,
    training_mode: np.ndarray | None = None,
    *,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    if training_mode is not None and bool(training_mode):
        raise OpArgumentError(
            "Dropout: input 'training_mode' is True; expected False (kiln is an inference "
            "runtime, where dropout is the identity)"
        )
    return x.copy(), np.ones(x.shape, dtype=np.bool_)


def _training_maybe_true(
    inputs: Sequence[Typed | None], outputs: Sequence[Typed], attrs: Mapping[str, Any]
) -> bool:
    """Whether a Dropout's ``training_mode`` input may be True when the graph runs: it is
    given and its value is not known to be False (a graph input, a computed value)."""
    training = inputs[2] if len(inputs) > 2 else None
    if training is None:
        return False
    value = getattr(getattr(training, "type", training), "value", None)
    return value is None or any(value)


def _dropout_samples() -> list[Sample]:
    def ref(x, ratio=None, training_mode=None, **_):  # type: ignore[no-untyped-def]
        return x, np.full(x.shape, True)

    out = []
    for dt in _SAMPLE_DTYPES:
        for shape in ((3, 4), (), (0, 2), (1,)):
            out.append(Sample((sample_array(shape, dt),), {}, ref, name=f"{dt.name}{shape}"))
    x = sample_array((2, 3), _F32)
    out.append(Sample((x, np.asarray(0.3, _F32)), {}, ref, name="ratio"))
    out.append(Sample((x, np.asarray(0.5, _F32), np.asarray(False)), {}, ref, name="inference"))
    return out


register(
    OpDef(
        name="Dropout",
        doc="Inference-mode dropout: output is data and mask is all True (training_mode=True "
        "is rejected).",
        inputs=(
            Input("data"),
            Input("ratio", optional=True),
            Input("training_mode", optional=True),
        ),
        outputs=("output", "mask"),
        attrs={"seed": Attr("int", 0)},
        infer=_dropout_infer,
        kernel=_dropout_kernel,
        samples=_dropout_samples,
        # kiln's kernel refuses training_mode=True when it runs; onnxruntime would drop
        # elements at random instead, so a training_mode that may be True keeps it off
        engine_limits={
            "onnxruntime": EngineLimit(
                "with a training_mode input not known to be False (onnxruntime would apply "
                "training-mode dropout where kiln refuses it)",
                _training_maybe_true,
            )
        },
    )
)


# -- Attention ------------------------------------------------------------------------------
#
# ONNX Attention (opset 23, with the opset-24 ``nonpad_kv_seqlen`` input; the opset-25
# left/right_window_size attributes are not taken). The 3-D form (batch, sequence,
# heads * head_size) is split into heads by q_num_heads / kv_num_heads. ``past_key`` and
# ``past_value`` are concatenated before K/V along the sequence axis (``present_key`` and
# ``present_value``). The additive bias combines attn_mask (a
# mask whose last axis is shorter than the total sequence is padded with "masked") and the
# causal frontier ``j <= i + offset``, where offset is the past length, or
# ``nonpad_kv_seqlen[b] - q_sequence_length`` for an external cache, else 0; keys at or beyond
# ``nonpad_kv_seqlen[b]`` are masked. A query row whose bias masks every key gives zeros.
#
# Outputs: Y alone for the plain form; with past_key, also present_key and present_value; and
# with ``qk_matmul_output_mode`` given (even 0; absent means the node does not produce it),
# all four, qk_matmul_output last. kiln's importer sets the mode when an ONNX node asks for that
# output, so a model's outputs map one to one.

_SOFTMAX_PRECISION = {0: None, 1: _F32, 10: _F16, 11: _F64, 16: dtypes.bfloat16}


def _attention_heads(
    op: str, q: TensorType, k: TensorType, v: TensorType, attrs: Mapping[str, Any]
):  # type: ignore[no-untyped-def]
    """(batch, q_heads, kv_heads, q_len, kv_len, head_size, v_head_size) of Q, K, V."""
    q_heads_attr, kv_heads_attr = attrs["q_num_heads"], attrs["kv_num_heads"]
    if q.ndim == 4:
        batch, q_heads, q_len, head = q.shape
        _check_dim(op, "K", "batch size", k.shape[0], batch)
        _check_dim(op, "V", "batch size", v.shape[0], batch)
        _check_dim(op, "K", "head size", k.shape[3], head)
        _check_dim(op, "V", "heads", v.shape[1], k.shape[1])
        _check_dim(op, "V", "sequence length", v.shape[2], k.shape[2])
        for name, given, found in (
            ("q_num_heads", q_heads_attr, q_heads),
            ("kv_num_heads", kv_heads_attr, k.shape[1]),
        ):
            if given and isinstance(found, int) and given != found:
                raise OpArgumentError(
                    f"{op}: attribute {name!r} is {given}, but the 4-D input has {found} heads"
                )
        return batch, q_heads, k.shape[1], q_len, k.shape[2], head, v.shape[3]
    if q_heads_attr <= 0 or kv_heads_attr <= 0:
        raise OpArgumentError(
            f"{op}: the 3-D form (batch, sequence, hidden) needs attributes q_num_heads and "
            f"kv_num_heads > 0; got q_num_heads={q_heads_attr}, kv_num_heads={kv_heads_attr}"
        )
    batch, q_len, q_hidden = q.shape
    _check_dim(op, "K", "batch size", k.shape[0], batch)
    _check_dim(op, "V", "batch size", v.shape[0], batch)
    _check_dim(op, "V", "sequence length", v.shape[1], k.shape[1])
    sizes = []
    for name, t, heads in (
        ("Q", q, q_heads_attr),
        ("K", k, kv_heads_attr),
        ("V", v, kv_heads_attr),
    ):
        hidden = t.shape[2]
        if isinstance(hidden, int) and hidden % heads:
            raise OpArgumentError(
                f"{op}: input {name!r} has hidden size {hidden}; expected a multiple of its "
                f"{heads} heads"
            )
        sizes.append(floordiv(hidden, heads))
    _check_dim(op, "K", "head size", sizes[1], sizes[0])
    return batch, q_heads_attr, kv_heads_attr, q_len, k.shape[1], sizes[0], sizes[2]


def _attention_infer(
    types: Sequence[TensorType | None], attrs: Mapping[str, Any]
) -> list[TensorType]:
    op = "Attention"
    q = require(op, "Q", types[0])
    k = require(op, "K", types[1])
    v = require(op, "V", types[2])
    extra = list(types[3:]) + [None] * (7 - len(types))
    mask, past_key, past_value, nonpad = extra[0], extra[1], extra[2], extra[3]
    require_dtype(op, "Q", q, FLOATS)
    require_same_dtype(op, (q, k, v), ("Q", "K", "V"))
    for name, t in (("Q", q), ("K", k), ("V", v)):
        if t.ndim not in (3, 4) or t.ndim != q.ndim:
            raise OpArgumentError(
                f"{op}: input {name!r} must be 4-D (batch, heads, sequence, head_size) or 3-D "
                f"(batch, sequence, hidden) like Q, got rank {t.ndim} (shape "
                f"{format_shape(t.shape)})"
            )
    batch, q_heads, kv_heads, q_len, kv_len, head, v_head = _attention_heads(op, q, k, v, attrs)
    if isinstance(q_heads, int) and isinstance(kv_heads, int) and q_heads % kv_heads:
        raise OpArgumentError(
            f"{op}: input 'K' has {kv_heads} heads; expected a divisor of Q's {q_heads} heads"
        )
    if (past_key is None) != (past_value is None):
        raise OpArgumentError(
            f"{op}: inputs 'past_key' and 'past_value' must be given together; got only "
            f"{'past_key' if past_value is None else 'past_value'}"
        )
    total = kv_len
    if past_key is not None and past_value is not None:
        if nonpad is not None:
            raise OpArgumentError(
                f"{op}: input 'nonpad_kv_seqlen' (an external cache) cannot be combined with "
                "'past_key'/'past_value' (a cache updated by the operator)"
            )
        require_same_dtype(op, (q, past_key, past_value), ("Q", "past_key", "past_value"))
        for name, t, size in (("past_key", past_key, head), ("past_value", past_value, v_head)):
            if t.ndim != 4:
                raise _rank_error(op, name, t, "4-D (batch, kv_heads, past_sequence, head_size)")
            _check_dim(op, name, "batch size", t.shape[0], batch)
            _check_dim(op, name, "heads", t.shape[1], kv_heads)
            _check_dim(op, name, "head size", t.shape[3], size)
        _check_dim(op, "past_value", "sequence length", past_value.shape[2], past_key.shape[2])
        total = past_key.shape[2] + kv_len
    if nonpad is not None:
        require_dtype(op, "nonpad_kv_seqlen", nonpad, frozenset({dtypes.int64}))
        if nonpad.ndim != 1:
            raise _rank_error(op, "nonpad_kv_seqlen", nonpad, "1-D (batch,)")
        _check_dim(op, "nonpad_kv_seqlen", "length", nonpad.shape[0], batch)
    mode = attrs["qk_matmul_output_mode"]
    if mode is not None and mode not in (0, 1, 2, 3):
        raise OpArgumentError(
            f"{op}: attribute 'qk_matmul_output_mode' is {mode}; expected 0, 1, 2 or 3"
        )
    if attrs["softcap"] < 0:
        raise OpArgumentError(f"{op}: attribute 'softcap' is {attrs['softcap']}; expected >= 0")
    if attrs["softmax_precision"] not in _SOFTMAX_PRECISION:
        raise OpArgumentError(
            f"{op}: attribute 'softmax_precision' is {attrs['softmax_precision']}; expected one "
            "of 1 (float), 10 (float16), 11 (double), 16 (bfloat16)"
        )
    target = (batch, q_heads, q_len, total)
    if mask is not None:
        if mask.dtype != dtypes.bool_ and mask.dtype != q.dtype:
            raise OpTypeError(
                f"{op}: input 'attn_mask' has dtype {mask.dtype}; expected bool or {q.dtype} "
                "(the dtype of Q)"
            )
        # the last axis may be shorter than the total sequence (it is padded as masked)
        last = mask.shape[-1] if mask.ndim else 1
        short = isinstance(last, int) and isinstance(total, int) and 1 < last < total
        checked = (*mask.shape[:-1], total) if short else mask.shape
        if mask.ndim == 0 or not _broadcasts_to(checked, target):
            raise OpArgumentError(
                f"{op}: input 'attn_mask' has shape {format_shape(mask.shape)}; expected a shape "
                f"that broadcasts to {format_shape(target)}"
            )
    dt = q.dtype
    if q.ndim == 4:
        y = TensorType(dt, (batch, q_heads, q_len, v_head))
    else:
        y = TensorType(dt, (batch, q_len, q_heads * v_head))
    out = [y]
    if past_key is not None or mode is not None:
        out += [
            TensorType(dt, (batch, kv_heads, total, head)),
            TensorType(dt, (batch, kv_heads, total, v_head)),
        ]
    if mode is not None:
        out.append(TensorType(dt, target))
    return out


def _split_heads(x: np.ndarray, heads: int) -> np.ndarray:
    """(batch, sequence, heads * size) -> (batch, heads, sequence, size)."""
    b, s, hidden = x.shape
    return x.reshape(b, s, heads, hidden // heads).transpose(0, 2, 1, 3)


def _attention_bias(
    q_len: int,
    total: int,
    dtype: np.dtype,
    attn_mask: np.ndarray | None,
    offset: int | np.ndarray,
    nonpad: np.ndarray | None,
    *,
    is_causal: int,
) -> np.ndarray:
    """The additive bias (0 or -inf, plus a float mask), broadcastable to (B, H, Sq, total)."""
    bias = np.zeros((q_len, total), dtype)
    if attn_mask is not None:
        short = total - attn_mask.shape[-1]
        if short > 0 and attn_mask.shape[-1] != 1:
            fill = False if attn_mask.dtype == np.bool_ else -np.inf
            widths = [(0, 0)] * (attn_mask.ndim - 1) + [(0, short)]
            attn_mask = np.pad(attn_mask, widths, constant_values=fill)
        if attn_mask.dtype == np.bool_:
            bias = bias + np.where(attn_mask, dtype.type(0), dtype.type(-np.inf))
        else:
            bias = bias + attn_mask.astype(dtype)
    i = np.arange(q_len).reshape(q_len, 1)
    j = np.arange(total).reshape(1, total)
    if np.ndim(offset):  # per batch (external cache): (B, 1, 1, 1) against (Sq, total)
        pos = i + np.reshape(offset, (-1, 1, 1, 1))
    else:
        pos = i + int(offset)
    allowed = np.ones(np.broadcast_shapes(np.shape(pos), j.shape), np.bool_)
    if is_causal:
        allowed &= j <= pos
    if nonpad is not None:
        allowed = allowed & (j < nonpad.reshape(-1, 1, 1, 1))
    if not allowed.all():
        bias = bias + np.where(allowed, dtype.type(0), dtype.type(-np.inf))
    return bias


def _attention_kernel(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    attn_mask: np.ndarray | None = None,
    past_key: np.ndarray | None = None,
    past_value: np.ndarray | None = None,
    nonpad_kv_seqlen: np.ndarray | None = None,
    *,
    is_causal: int = 0,
    kv_num_heads: int = 0,
    q_num_heads: int = 0,
    qk_matmul_output_mode: int | None = None,
    scale: float | None = None,
    softcap: float = 0.0,
    softmax_precision: int = 0,
) -> np.ndarray | tuple[np.ndarray, ...]:
    dtype = q.dtype
    three_d = q.ndim == 3
    if three_d:
        q, k, v = (
            _split_heads(q, q_num_heads),
            _split_heads(k, kv_num_heads),
            _split_heads(v, kv_num_heads),
        )
    if past_key is not None and past_value is not None:
        present_key = np.concatenate((past_key, k), axis=2)
        present_value = np.concatenate((past_value, v), axis=2)
        offset: int | np.ndarray = past_key.shape[2]
    else:
        present_key, present_value = k, v
        offset = 0
    q_len, total = q.shape[2], present_key.shape[2]
    if nonpad_kv_seqlen is not None and past_key is None:
        offset = nonpad_kv_seqlen.astype(np.int64) - q_len
    factor = 1.0 / math.sqrt(q.shape[3]) if scale is None else scale
    # half precision computes in float32 and rounds once, as the other kernels here
    qw, kw, vw = _floats(q, present_key, present_value)
    qw = qw * qw.dtype.type(factor)
    if kw.shape[1] != qw.shape[1]:  # grouped-query attention: each K/V head serves a group
        reps = qw.shape[1] // kw.shape[1]
        kw, vw = np.repeat(kw, reps, axis=1), np.repeat(vw, reps, axis=1)
    raw = qw @ kw.swapaxes(-1, -2)
    capped = softcap * np.tanh(raw / softcap) if softcap > 0 else raw  # before the bias
    bias = _attention_bias(
        q_len,
        total,
        raw.dtype,
        attn_mask,
        offset,
        nonpad_kv_seqlen,
        is_causal=is_causal,
    )
    scores = capped + bias
    precision = _SOFTMAX_PRECISION[softmax_precision]
    work = scores.astype(precision) if precision is not None else scores
    top = work.max(axis=-1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0)
    e = np.exp(work - top)
    sums = e.sum(axis=-1, keepdims=True)
    weights = e / np.where(sums == 0, 1, sums)
    # a row whose bias masks every key attends nothing: zeros, not NaN (decided on the bias,
    # so a NaN or infinite score cannot leak into it)
    if bias.size and total:
        empty = np.isneginf(bias.max(axis=-1, keepdims=True))
        weights = np.where(empty, weights.dtype.type(0), weights)
    y = weights.astype(vw.dtype, copy=False) @ vw  # softmax_precision may differ from vw
    if three_d:
        y = y.transpose(0, 2, 1, 3).reshape(y.shape[0], y.shape[2], -1)
    y = y.astype(dtype, copy=False)
    if qk_matmul_output_mode is None:
        return (y, present_key, present_value) if past_key is not None else y
    qk = {0: raw, 1: capped, 2: scores, 3: weights}[qk_matmul_output_mode]
    qk = np.broadcast_to(qk, y.shape[:1] + (qw.shape[1], q_len, total)).astype(dtype)
    return y, present_key, present_value, qk


def _ref_attention(q, k, v, attn_mask=None, past_key=None, past_value=None, nonpad=None, **attrs):  # type: ignore[no-untyped-def]
    """Per (batch, head, query) in float64 with Python loops: the allowed keys, their scores,
    the softmax and the weighted sum, following the operator's definition directly."""
    is_causal, scale, softcap = (
        attrs.get("is_causal", 0),
        attrs.get("scale"),
        attrs.get("softcap", 0.0),
    )
    mode = attrs.get("qk_matmul_output_mode")
    three_d = q.ndim == 3
    if three_d:
        hq, hk = attrs["q_num_heads"], attrs["kv_num_heads"]
        q = q.reshape(q.shape[0], q.shape[1], hq, -1).transpose(0, 2, 1, 3)
        k = k.reshape(k.shape[0], k.shape[1], hk, -1).transpose(0, 2, 1, 3)
        v = v.reshape(v.shape[0], v.shape[1], hk, -1).transpose(0, 2, 1, 3)
    past = 0 if past_key is None else past_key.shape[2]
    if past_key is not None:
        k = np.concatenate([past_key, k], axis=2)
        v = np.concatenate([past_value, v], axis=2)
    batch, heads, q_len, head = q.shape
    total, group = k.shape[2], heads // k.shape[1]
    factor = 1.0 / math.sqrt(head) if scale is None else scale
    y = np.zeros((batch, heads, q_len, v.shape[3]))
    qk = np.zeros((batch, heads, q_len, total))
    for b, h, i in product(range(batch), range(heads), range(q_len)):
        offset = past if nonpad is None else int(nonpad[b]) - q_len
        pos = i + offset
        logits, biases, raws, caps = [], [], [], []
        for j in range(total):
            s = factor * sum(
                float(q[b, h, i, t]) * float(k[b, h // group, j, t]) for t in range(head)
            )
            raws.append(s)
            if softcap:
                s = softcap * math.tanh(s / softcap)
            caps.append(s)
            bias = 0.0
            if attn_mask is not None:
                m = attn_mask
                while m.ndim < 4:
                    m = m[None]
                jj = j if m.shape[3] > 1 else 0
                if jj >= m.shape[3]:
                    bias = -math.inf
                else:
                    cell = m[b % m.shape[0], h % m.shape[1], i % m.shape[2], jj]
                    if m.dtype == np.bool_:
                        bias = 0.0 if cell else -math.inf
                    else:
                        bias = float(cell)
            if is_causal and j > pos:
                bias = -math.inf
            if nonpad is not None and j >= int(nonpad[b]):
                bias = -math.inf
            biases.append(bias)
            logits.append(s + bias)
        if all(x == -math.inf for x in biases) or total == 0:
            weights = [0.0] * total
        else:
            top = max(logits)
            e = [math.exp(s - top) for s in logits]
            weights = [x / math.fsum(e) for x in e]
        for j in range(total):
            y[b, h, i] += weights[j] * v[b, h // group, j].astype(np.float64)
        qk[b, h, i] = {None: raws, 0: raws, 1: caps, 2: logits, 3: weights}[mode]
    if three_d:
        y = y.transpose(0, 2, 1, 3).reshape(batch, q_len, -1)
    y = y.astype(q.dtype)
    if mode is None:
        return (y, k, v) if past_key is not None else y
    return y, k, v, qk.astype(q.dtype)


def _attention_samples() -> list[Sample]:
    out = []
    cases: list[tuple[tuple[int, ...], tuple[int, ...], int, dict[str, Any], Any]] = [
        ((2, 3, 4, 8), (2, 3, 6, 8), 8, {}, None),
        ((1, 2, 5, 4), (1, 2, 5, 4), 4, {"is_causal": 1}, None),
        ((1, 4, 3, 4), (1, 2, 3, 4), 6, {"scale": 0.3}, None),  # GQA, other value size
        ((2, 2, 3, 4), (2, 2, 5, 4), 4, {}, "bool"),
        ((1, 2, 4, 4), (1, 2, 4, 4), 4, {"is_causal": 1}, "float"),
        ((1, 1, 3, 4), (1, 1, 3, 4), 4, {"softcap": 2.0}, None),
        ((1, 1, 1, 1), (1, 1, 1, 1), 1, {}, None),
    ]
    for dt in _SAMPLE_DTYPES:
        for qs, ks, dv, attrs, mask_kind in cases if dt != _F16 else cases[:2]:
            inputs: tuple[np.ndarray | None, ...] = (
                sample_array(qs, dt),
                sample_array(ks, dt),
                sample_array((*ks[:3], dv), dt),
            )
            if mask_kind == "bool":
                mask = sample_array((qs[0], 1, qs[2], ks[2]), dtypes.bool_)
                mask[..., 0] = True  # every query sees at least one key
                inputs += (mask,)
            elif mask_kind == "float":
                inputs += (sample_array((qs[2], ks[2]), dt, -2.0, 0.0),)
            out.append(Sample(inputs, attrs, _ref_attention, name=f"{dt.name}{qs}{ks}{attrs}"))
    f32 = _F32
    # 3-D form, grouped-query, with a key/value cache (present outputs) and a causal offset
    q3, k3, v3 = (
        sample_array((2, 3, 12), f32),
        sample_array((2, 3, 6), f32),
        sample_array((2, 3, 4), f32),
    )
    pk, pv = sample_array((2, 2, 2, 3), f32), sample_array((2, 2, 2, 2), f32)
    heads3 = {"q_num_heads": 4, "kv_num_heads": 2}
    out.append(Sample((q3, k3, v3), heads3, _ref_attention, name="3d-gqa"))
    out.append(
        Sample(
            (q3, k3, v3, None, pk, pv),
            {**heads3, "is_causal": 1},
            _ref_attention,
            name="3d-past-causal",
        )
    )
    q4, k4, v4 = (
        sample_array((1, 2, 3, 4), f32),
        sample_array((1, 2, 2, 4), f32),
        sample_array((1, 2, 2, 4), f32),
    )
    pk4, pv4 = sample_array((1, 2, 3, 4), f32), sample_array((1, 2, 3, 4), f32)
    # (a mask shorter than the 5 keys, padded as masked, is in tests/ops/test_nn.py:
    # onnxruntime rejects that form)
    short = sample_array((3, 5), dtypes.bool_)
    short[:, 0] = True
    # mode 2 (scores plus bias, -inf where masked) is left to the ONNX conformance cases:
    # onnxruntime writes the lowest float there instead of -inf
    for mode in (0, 1, 3):
        attrs4 = {"qk_matmul_output_mode": mode, "softcap": 1.5}
        out.append(
            Sample(
                (q4, k4, v4, short, pk4, pv4), attrs4, _ref_attention, name=f"past-qk-mode{mode}"
            )
        )
    # a fully masked row gives zeros; an external cache (nonpad_kv_seqlen) with a window
    dead = np.ones((1, 1, 3, 2), np.bool_)
    dead[0, 0, 1] = False
    out.append(
        Sample(
            (q4, k4, v4, dead),
            {"qk_matmul_output_mode": 3},
            _ref_attention,
            name="fully-masked-row",
        )
    )
    # nonpad_kv_seqlen (opset 24) is covered by tests/ops/test_nn.py: the samples also feed
    # the ONNX export and engine tests, which write opset 23
    return out


register(
    OpDef(
        name="Attention",
        doc="Scaled dot-product attention softmax(Q K^T * scale + bias) V over 4-D Q/K/V "
        "(batch, heads, sequence, head_size) or 3-D (batch, sequence, hidden) with "
        "q_num_heads/kv_num_heads; K/V may have fewer heads (grouped-query). A bool attn_mask "
        "is True where a query may attend; a float one is added to the scores. past_key/"
        "past_value are prepended to K/V (outputs present_key/present_value); "
        "qk_matmul_output_mode, when given, adds the qk_matmul_output output.",
        inputs=(
            Input("Q"),
            Input("K"),
            Input("V"),
            Input("attn_mask", optional=True),
            Input("past_key", optional=True),
            Input("past_value", optional=True),
            Input("nonpad_kv_seqlen", optional=True, doc="int64 (batch,): valid keys (opset 24)"),
        ),
        outputs=("Y", "present_key", "present_value", "qk_matmul_output"),
        attrs={
            "is_causal": Attr(
                "int", 0, "1: query i attends keys j <= i + offset (offset: the past length)"
            ),
            "kv_num_heads": Attr("int", 0, "only for the 3-D form"),
            "q_num_heads": Attr("int", 0, "only for the 3-D form"),
            "qk_matmul_output_mode": Attr(
                "int",
                None,
                "None: no qk_matmul_output; 0 raw Q K^T, 1 after softcap, 2 plus the bias, "
                "3 the softmax",
            ),
            "scale": Attr("float", None, "None means 1/sqrt(head_size)"),
            "softcap": Attr("float", 0.0, "> 0: scores become softcap * tanh(scores / softcap)"),
            "softmax_precision": Attr("int", 0, "0: the input dtype; else an ONNX dtype code"),
        },
        infer=_attention_infer,
        kernel=_attention_kernel,
        samples=_attention_samples,
        since_version=23,
        cost=_attention_cost,
    )
)
