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
from .registry import Attr, Input, OpDef, Sample, TensorType, register
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


def _softmax_kernel(x: np.ndarray, *, axis: int = -1) -> np.ndarray:
    (work,) = _floats(x)
    if x.shape[axis] == 0:
        return np.empty(x.shape, x.dtype)
    shifted = work - work.max(axis=axis, keepdims=True)  # exp never overflows
    e = np.exp(shifted)
    return (e / e.sum(axis=axis, keepdims=True)).astype(x.dtype, copy=False)


def _log_softmax_kernel(x: np.ndarray, *, axis: int = -1) -> np.ndarray:
    (work,) = _floats(x)
    if x.shape[axis] == 0:
        return np.empty(x.shape, x.dtype)
    shifted = work - work.max(axis=axis, keepdims=True)
    lse = np.log(np.exp(shifted).sum(axis=axis, keepdims=True))
    return (shifted - lse).astype(x.dtype, copy=False)


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
    flat = view.reshape(*view.shape[: 2 + n], math.prod(window.kernel))
    arg = flat.argmax(axis=-1)
    y = np.take_along_axis(flat, arg[..., None], axis=-1)[..., 0]
    # Indices: the flat position in X (padding not counted) of each window's maximum.
    taps = np.unravel_index(arg, window.kernel)
    begins, _ = window.static_pads(x.shape[2:])
    grid = np.indices(outs, sparse=True)
    coords = [
        g * s + t * d - b
        for g, t, s, d, b in zip(grid, taps, window.strides, window.dilations, begins)
    ]
    spatial = x.shape[2:]
    if attrs["storage_order"] == 1:  # column-major over the spatial axes
        coords, spatial = coords[::-1], spatial[::-1]
    index = np.zeros(y.shape, np.int64)
    for c, size in zip(coords, spatial):
        index = index * size + c
    planes = np.arange(x.shape[0] * x.shape[1], dtype=np.int64).reshape(x.shape[:2] + (1,) * n)
    return y, index + planes * math.prod(x.shape[2:])


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
    )
)


# -- Attention ------------------------------------------------------------------------------


def _attention_infer(
    types: Sequence[TensorType | None], attrs: Mapping[str, Any]
) -> list[TensorType]:
    op = "Attention"
    q = require(op, "Q", types[0])
    k = require(op, "K", types[1])
    v = require(op, "V", types[2])
    mask = types[3] if len(types) > 3 else None
    for name, t in (("past_key", 4), ("past_value", 5)):
        if len(types) > t and types[t] is not None:
            raise OpArgumentError(
                f"{op}: input {name!r} (a key/value cache) is not supported; expected it "
                "omitted (concatenate the cache onto K and V first)"
            )
    require_dtype(op, "Q", q, FLOATS)
    require_same_dtype(op, (q, k, v), ("Q", "K", "V"))
    for name, t in (("Q", q), ("K", k), ("V", v)):
        if t.ndim != 4:
            raise OpArgumentError(
                f"{op}: input {name!r} must be 4-D (batch, heads, sequence, head_size), got "
                f"rank {t.ndim} (shape {format_shape(t.shape)}); the 3-D form is not supported "
                "(kiln.nn.scaled_dot_product_attention adds the heads axis for you)"
            )
    batch, q_heads, q_len, head = q.shape
    _check_dim(op, "K", "batch size", k.shape[0], batch)
    _check_dim(op, "V", "batch size", v.shape[0], batch)
    _check_dim(op, "K", "head size", k.shape[3], head)
    _check_dim(op, "V", "heads", v.shape[1], k.shape[1])
    _check_dim(op, "V", "sequence length", v.shape[2], k.shape[2])
    kv_heads = k.shape[1]
    if isinstance(q_heads, int) and isinstance(kv_heads, int) and q_heads % kv_heads:
        raise OpArgumentError(
            f"{op}: input 'K' has {kv_heads} heads; expected a divisor of Q's {q_heads} heads"
        )
    if attrs["qk_matmul_output_mode"] != 0:
        raise OpArgumentError(
            f"{op}: attribute 'qk_matmul_output_mode' is {attrs['qk_matmul_output_mode']}; "
            "expected 0 (only the output Y is computed)"
        )
    if attrs["softcap"] < 0:
        raise OpArgumentError(f"{op}: attribute 'softcap' is {attrs['softcap']}; expected >= 0")
    if mask is not None:
        if mask.dtype != dtypes.bool_ and mask.dtype != q.dtype:
            raise OpTypeError(
                f"{op}: input 'attn_mask' has dtype {mask.dtype}; expected bool or {q.dtype} "
                "(the dtype of Q)"
            )
        target = (batch, q_heads, q_len, k.shape[2])
        if not _broadcasts_to(mask.shape, target):
            raise OpArgumentError(
                f"{op}: input 'attn_mask' has shape {format_shape(mask.shape)}; expected a shape "
                f"that broadcasts to {format_shape(target)}"
            )
    return [TensorType(q.dtype, (batch, q_heads, q_len, v.shape[3]))]


def _attention_kernel(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    attn_mask: np.ndarray | None = None,
    past_key: np.ndarray | None = None,
    past_value: np.ndarray | None = None,
    *,
    is_causal: int = 0,
    kv_num_heads: int = 0,
    q_num_heads: int = 0,
    qk_matmul_output_mode: int = 0,
    scale: float | None = None,
    softcap: float = 0.0,
    softmax_precision: int = 0,
) -> np.ndarray:
    qw, kw, vw = _floats(q, k, v)
    if k.shape[1] != q.shape[1]:  # grouped-query attention: each K/V head serves a group
        reps = q.shape[1] // k.shape[1]
        kw, vw = np.repeat(kw, reps, axis=1), np.repeat(vw, reps, axis=1)
    factor = 1.0 / math.sqrt(q.shape[3]) if scale is None else scale
    scores = (qw * qw.dtype.type(factor)) @ kw.swapaxes(-1, -2)
    if softcap > 0:  # before the mask, so masked scores stay -inf
        scores = softcap * np.tanh(scores / softcap)
    if attn_mask is not None:
        if attn_mask.dtype == np.bool_:
            scores = np.where(attn_mask, scores, -np.inf)
        else:
            scores = scores + attn_mask.astype(scores.dtype, copy=False)
    if is_causal:
        allowed = np.tri(q.shape[2], k.shape[2], dtype=np.bool_)  # query i sees keys j <= i
        scores = np.where(allowed, scores, -np.inf)
    scores = scores - scores.max(axis=-1, keepdims=True)
    weights = np.exp(scores)
    weights /= weights.sum(axis=-1, keepdims=True)
    return (weights @ vw).astype(q.dtype, copy=False)


def _ref_attention(q, k, v, attn_mask=None, *_, is_causal, scale, softcap, **__):  # type: ignore[no-untyped-def]
    """Per (batch, head, query) in float64: softmax of q.k / sqrt(d) over the allowed keys."""
    batch, heads, q_len, head = q.shape
    kv_len, group = k.shape[2], heads // k.shape[1]
    factor = 1.0 / math.sqrt(head) if scale is None else scale
    mask = None
    if attn_mask is not None:
        mask = np.broadcast_to(attn_mask, (batch, heads, q_len, kv_len))
    y = np.zeros((batch, heads, q_len, v.shape[3]))
    for b, h, i in product(range(batch), range(heads), range(q_len)):
        logits = []
        for j in range(kv_len):
            s = factor * sum(
                float(q[b, h, i, t]) * float(k[b, h // group, j, t]) for t in range(head)
            )
            if softcap:
                s = softcap * math.tanh(s / softcap)
            if mask is not None:
                if mask.dtype == np.bool_:
                    s = s if mask[b, h, i, j] else -math.inf
                else:
                    s += float(mask[b, h, i, j])
            if is_causal and j > i:
                s = -math.inf
            logits.append(s)
        top = max(logits)
        e = [math.exp(s - top) for s in logits]
        total = math.fsum(e)
        for j in range(kv_len):
            y[b, h, i] += e[j] / total * v[b, h // group, j].astype(np.float64)
    return y.astype(q.dtype)


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
            inputs: tuple[np.ndarray, ...] = (
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
    return out


register(
    OpDef(
        name="Attention",
        doc="Scaled dot-product attention softmax(Q K^T * scale + mask) V over 4-D Q/K/V "
        "(batch, heads, sequence, head_size); K/V may have fewer heads (grouped-query). A bool "
        "attn_mask is True where a query may attend; a float one is added to the scores.",
        inputs=(
            Input("Q"),
            Input("K"),
            Input("V"),
            Input("attn_mask", optional=True),
            Input("past_key", optional=True),
            Input("past_value", optional=True),
        ),
        outputs=("Y",),
        attrs={
            "is_causal": Attr("int", 0, "1: query i attends keys j <= i (top-left aligned)"),
            "kv_num_heads": Attr("int", 0, "only for the 3-D form"),
            "q_num_heads": Attr("int", 0, "only for the 3-D form"),
            "qk_matmul_output_mode": Attr("int", 0),
            "scale": Attr("float", None, "None means 1/sqrt(head_size)"),
            "softcap": Attr("float", 0.0, "> 0: scores become softcap * tanh(scores / softcap)"),
            "softmax_precision": Attr("int", 0),
        },
        infer=_attention_infer,
        kernel=_attention_kernel,
        samples=_attention_samples,
        since_version=23,
    )
)
