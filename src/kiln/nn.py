"""Neural-network functions: ``kiln.nn.relu``, ``softmax``, ``layer_norm``, ``conv2d``, ...

Signatures follow jax.nn and torch.nn.functional (an ``axis`` keyword, NumPy's word, where they
reduce). Each lowers onto registry operators through the same dispatch as every other call, so
the functions run eagerly and record identically inside a trace. Inputs may be kiln tensors,
NumPy arrays or Python scalars; several inputs are promoted to their NumPy result dtype first.

Example:
    >>> import kiln
    >>> x = kiln.tensor([[1.0, 2.0, 3.0]], dtype=kiln.float32)
    >>> kiln.nn.softmax(x, axis=-1).shape
    (1, 3)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import dtypes
from .dtypes import onnx_dtype_code
from .errors import OpArgumentError
from .functions.operands import as_tensor, constant, same_dtype_operands, shape_tensor
from .ops.rules import normalize_axis
from .symbolic import Dim, format_shape
from .tensor import Tensor, call, dispatch

__all__ = [
    "adaptive_avg_pool2d",
    "avg_pool1d",
    "avg_pool2d",
    "batch_norm",
    "conv1d",
    "conv2d",
    "conv_transpose2d",
    "dropout",
    "elu",
    "gelu",
    "hard_sigmoid",
    "hard_swish",
    "instance_norm",
    "interpolate",
    "layer_norm",
    "leaky_relu",
    "linear",
    "log_sigmoid",
    "log_softmax",
    "max_pool1d",
    "max_pool2d",
    "mish",
    "one_hot",
    "relu",
    "relu6",
    "rms_norm",
    "scaled_dot_product_attention",
    "selu",
    "sigmoid",
    "silu",
    "softmax",
    "softplus",
    "softsign",
    "swish",
    "tanh",
]

# SELU's constants as jax.nn and torch use them (ONNX's defaults are rounded to float32).
_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def _promote(name: str, *operands: Any) -> list[Tensor | None]:
    """Operands (``None`` kept in place) as tensors of their NumPy result dtype."""
    present = same_dtype_operands(*operands, name=name)
    it = iter(present)
    return [None if x is None else next(it) for x in operands]


def _unary(name: str, x: Any) -> Tensor:
    (t,) = _promote(name, x)
    assert t is not None
    return t


def _scalar(value: float, like: Tensor) -> Tensor:
    return constant(np.asarray(value, dtype=like.dtype))


def _shape_error(fn: str, arg: str, t: Tensor, expected: str) -> OpArgumentError:
    return OpArgumentError(
        f"{fn}: argument {arg!r} must be {expected}, got shape {format_shape(t.shape)} "
        f"(rank {t.ndim})"
    )


def _ones(shape: Sequence[Dim], dtype: np.dtype) -> Tensor:
    """Ones of ``shape``; a symbolic shape stays symbolic (ConstantOfShape over its sizes)."""
    if all(isinstance(d, int) for d in shape):
        return constant(np.ones(tuple(int(d) for d in shape), dtype=dtype))
    return call("ConstantOfShape", shape_tensor(shape), value=np.ones(1, dtype=dtype))


def _zeros(shape: Sequence[Dim], dtype: np.dtype) -> Tensor:
    if all(isinstance(d, int) for d in shape):
        return constant(np.zeros(tuple(int(d) for d in shape), dtype=dtype))
    return call("ConstantOfShape", shape_tensor(shape), value=np.zeros(1, dtype=dtype))


def _stash_type(dtype: np.dtype) -> int:
    """Statistics in float32, or float64 for float64 inputs (never less precise than x)."""
    return onnx_dtype_code(dtypes.float64 if dtype == dtypes.float64 else dtypes.float32)


# -- activations ----------------------------------------------------------------------------


def relu(x: Any) -> Tensor:
    """max(x, 0) elementwise.

    Example:
        >>> import kiln
        >>> kiln.nn.relu(kiln.tensor([-1.0, 2.0])).tolist()
        [0.0, 2.0]
    """
    return call("Relu", _unary("relu", x))


def relu6(x: Any) -> Tensor:
    """min(max(x, 0), 6) elementwise.

    Example:
        >>> import kiln
        >>> kiln.nn.relu6(kiln.tensor([-1.0, 3.0, 9.0])).tolist()
        [0.0, 3.0, 6.0]
    """
    t = _unary("relu6", x)
    return call("Clip", t, _scalar(0, t), _scalar(6, t))


def leaky_relu(x: Any, negative_slope: float = 0.01) -> Tensor:
    """x where x >= 0, else negative_slope * x.

    Example:
        >>> import kiln
        >>> kiln.nn.leaky_relu(kiln.tensor([-2.0, 2.0]), 0.5).tolist()
        [-1.0, 2.0]
    """
    return call("LeakyRelu", _unary("leaky_relu", x), alpha=negative_slope)


def elu(x: Any, alpha: float = 1.0) -> Tensor:
    """x where x > 0, else alpha * (exp(x) - 1).

    Example:
        >>> import kiln
        >>> kiln.nn.elu(kiln.tensor([0.0, 2.0])).tolist()
        [0.0, 2.0]
    """
    return call("Elu", _unary("elu", x), alpha=alpha)


def selu(x: Any) -> Tensor:
    """scale * elu(x, alpha) with the self-normalizing constants of jax.nn/torch.

    Example:
        >>> import kiln
        >>> kiln.nn.selu(kiln.tensor([0.0])).tolist()
        [0.0]
    """
    return call("Selu", _unary("selu", x), alpha=_SELU_ALPHA, gamma=_SELU_SCALE)


def gelu(x: Any, approximate: str | bool = "none") -> Tensor:
    """The Gaussian error linear unit x * Phi(x).

    ``approximate`` is ``"none"`` (the exact erf form, torch's default), ``"tanh"`` (the tanh
    approximation), or a bool as in jax.nn (``True`` means ``"tanh"``).

    Example:
        >>> import kiln
        >>> kiln.nn.gelu(kiln.tensor([0.0])).tolist()
        [0.0]
    """
    if isinstance(approximate, bool):
        mode = "tanh" if approximate else "none"
    elif approximate in ("none", "tanh"):
        mode = approximate
    else:
        raise OpArgumentError(
            f"gelu: argument 'approximate' is {approximate!r}; expected 'none', 'tanh' or a bool"
        )
    return call("Gelu", _unary("gelu", x), approximate=mode)


def sigmoid(x: Any) -> Tensor:
    """1 / (1 + exp(-x)) elementwise.

    Example:
        >>> import kiln
        >>> kiln.nn.sigmoid(kiln.tensor([0.0])).tolist()
        [0.5]
    """
    return call("Sigmoid", _unary("sigmoid", x))


def silu(x: Any) -> Tensor:
    """x * sigmoid(x) (also called swish).

    Example:
        >>> import kiln
        >>> kiln.nn.silu(kiln.tensor([0.0])).tolist()
        [0.0]
    """
    t = _unary("silu", x)
    return call("Mul", t, call("Sigmoid", t))


swish = silu


def tanh(x: Any) -> Tensor:
    """The hyperbolic tangent elementwise.

    Example:
        >>> import kiln
        >>> kiln.nn.tanh(kiln.tensor([0.0])).tolist()
        [0.0]
    """
    return call("Tanh", _unary("tanh", x))


def softplus(x: Any) -> Tensor:
    """log(1 + exp(x)) elementwise.

    Example:
        >>> import kiln
        >>> round(kiln.nn.softplus(kiln.tensor([0.0])).item(), 4)
        0.6931
    """
    return call("Softplus", _unary("softplus", x))


def softsign(x: Any) -> Tensor:
    """x / (1 + |x|) elementwise.

    Example:
        >>> import kiln
        >>> kiln.nn.softsign(kiln.tensor([1.0])).tolist()
        [0.5]
    """
    return call("Softsign", _unary("softsign", x))


def hard_sigmoid(x: Any) -> Tensor:
    """relu6(x + 3) / 6, as jax.nn and torch (ONNX HardSigmoid with alpha=1/6, beta=1/2).

    Example:
        >>> import kiln
        >>> kiln.nn.hard_sigmoid(kiln.tensor([0.0, 3.0])).tolist()
        [0.5, 1.0]
    """
    return call("HardSigmoid", _unary("hard_sigmoid", x), alpha=1.0 / 6.0, beta=0.5)


def hard_swish(x: Any) -> Tensor:
    """x * hard_sigmoid(x).

    Example:
        >>> import kiln
        >>> kiln.nn.hard_swish(kiln.tensor([0.0, 3.0])).tolist()
        [0.0, 3.0]
    """
    return call("HardSwish", _unary("hard_swish", x))


def mish(x: Any) -> Tensor:
    """x * tanh(softplus(x)).

    Example:
        >>> import kiln
        >>> kiln.nn.mish(kiln.tensor([0.0])).tolist()
        [0.0]
    """
    return call("Mish", _unary("mish", x))


def log_sigmoid(x: Any) -> Tensor:
    """log(sigmoid(x)) = -softplus(-x).

    Example:
        >>> import kiln
        >>> round(kiln.nn.log_sigmoid(kiln.tensor([0.0])).item(), 4)
        -0.6931
    """
    t = _unary("log_sigmoid", x)
    return call("Neg", call("Softplus", call("Neg", t)))


def softmax(x: Any, axis: int = -1) -> Tensor:
    """exp(x) / sum(exp(x)) along ``axis`` (numerically stable).

    Example:
        >>> import kiln
        >>> kiln.nn.softmax(kiln.tensor([0.0, 0.0])).tolist()
        [0.5, 0.5]
    """
    t = _unary("softmax", x)
    normalize_axis("softmax", axis, t.ndim, scalar=False)
    return call("Softmax", t, axis=axis)


def log_softmax(x: Any, axis: int = -1) -> Tensor:
    """x - logsumexp(x) along ``axis`` (numerically stable).

    Example:
        >>> import kiln
        >>> round(kiln.nn.log_softmax(kiln.tensor([0.0, 0.0])).tolist()[0], 4)
        -0.6931
    """
    t = _unary("log_softmax", x)
    normalize_axis("log_softmax", axis, t.ndim, scalar=False)
    return call("LogSoftmax", t, axis=axis)


# -- normalization --------------------------------------------------------------------------


def layer_norm(
    x: Any, weight: Any = None, bias: Any = None, eps: float = 1e-5, axis: int = -1
) -> Tensor:
    """Normalize over the axes ``[axis, ndim)`` to zero mean and unit variance, then scale
    by ``weight`` and shift by ``bias`` (both of the normalized shape, or broadcastable to it).

    Example:
        >>> import kiln
        >>> kiln.nn.layer_norm(kiln.tensor([[1.0, 3.0]])).tolist()
        [[-0.9999950000374997, 0.9999950000374997]]
    """
    t, w, b = _promote("layer_norm", x, weight, bias)
    assert t is not None
    if t.ndim == 0:
        raise _shape_error("layer_norm", "x", t, "at least 1-D")
    start = normalize_axis("layer_norm", axis, t.ndim, scalar=False)
    if w is None:
        w = _ones(t.shape[start:], t.dtype)
    attrs = {"axis": start, "epsilon": eps, "stash_type": _stash_type(t.dtype)}
    return dispatch("LayerNormalization", [t, w, b], attrs)[0]


def rms_norm(x: Any, weight: Any = None, eps: float = 1e-6, axis: int = -1) -> Tensor:
    """x / sqrt(mean(x**2) + eps) over the axes ``[axis, ndim)``, times ``weight``.

    Example:
        >>> import kiln, numpy as np
        >>> y = kiln.nn.rms_norm(kiln.tensor([[3.0, 4.0]], dtype=kiln.float64), eps=0.0)
        >>> np.round(np.asarray(y), 4).tolist()
        [[0.8485, 1.1314]]
    """
    t, w = _promote("rms_norm", x, weight)
    assert t is not None
    if t.ndim == 0:
        raise _shape_error("rms_norm", "x", t, "at least 1-D")
    start = normalize_axis("rms_norm", axis, t.ndim, scalar=False)
    if w is None:
        w = _ones(t.shape[start:], t.dtype)
    attrs = {"axis": start, "epsilon": eps, "stash_type": _stash_type(t.dtype)}
    return call("RMSNormalization", t, w, **attrs)


def _channel_affine(fn: str, t: Tensor, w: Tensor | None, b: Tensor | None) -> list[Tensor]:
    channels = t.shape[1]
    return [
        _ones((channels,), t.dtype) if w is None else w,
        _zeros((channels,), t.dtype) if b is None else b,
    ]


def batch_norm(
    x: Any,
    running_mean: Any,
    running_var: Any,
    weight: Any = None,
    bias: Any = None,
    eps: float = 1e-5,
    *,
    training: bool = False,
    momentum: float = 0.1,
) -> Tensor:
    """Inference batch normalization over axis 1 with the running statistics:
    (x - running_mean) / sqrt(running_var + eps) * weight + bias.

    Example:
        >>> import kiln, numpy as np
        >>> x = np.ones((1, 2, 1, 1), np.float32)
        >>> kiln.nn.batch_norm(x, np.zeros(2, np.float32), np.ones(2, np.float32), eps=0.0).shape
        (1, 2, 1, 1)
    """
    if training:
        raise OpArgumentError(
            "batch_norm: training=True is not supported; expected training=False (kiln is an "
            "inference runtime: batch statistics are not computed or updated)"
        )
    t, mean, var, w, b = _promote("batch_norm", x, running_mean, running_var, weight, bias)
    assert t is not None and mean is not None and var is not None
    if t.ndim < 2:
        raise _shape_error("batch_norm", "x", t, "at least 2-D (N, C, ...)")
    scale, shift = _channel_affine("batch_norm", t, w, b)
    return call("BatchNormalization", t, scale, shift, mean, var, epsilon=eps)


def instance_norm(x: Any, weight: Any = None, bias: Any = None, eps: float = 1e-5) -> Tensor:
    """Normalize each sample's channel over its spatial axes, then scale and shift per channel.

    Example:
        >>> import kiln, numpy as np
        >>> kiln.nn.instance_norm(np.ones((1, 2, 3), np.float32)).shape
        (1, 2, 3)
    """
    t, w, b = _promote("instance_norm", x, weight, bias)
    assert t is not None
    if t.ndim < 3:
        raise _shape_error("instance_norm", "x", t, "at least 3-D (N, C, spatial...)")
    scale, shift = _channel_affine("instance_norm", t, w, b)
    return call("InstanceNormalization", t, scale, shift, epsilon=eps)


def dropout(x: Any, rate: float = 0.5, deterministic: bool = True) -> Tensor:
    """Dropout at inference: the identity (kiln is an inference runtime).

    Example:
        >>> import kiln
        >>> kiln.nn.dropout(kiln.tensor([1.0, 2.0])).tolist()
        [1.0, 2.0]
    """
    if not deterministic:
        raise OpArgumentError(
            "dropout: deterministic=False (training-mode dropout) is not supported; expected "
            "deterministic=True (kiln is an inference runtime, where dropout is the identity)"
        )
    if not 0.0 <= rate < 1.0:
        raise OpArgumentError(f"dropout: argument 'rate' is {rate}; expected 0 <= rate < 1")
    return as_tensor(x)


# -- linear and convolution -----------------------------------------------------------------


def linear(x: Any, weight: Any, bias: Any = None) -> Tensor:
    """x @ weight.T + bias, with ``weight`` of shape (out_features, in_features).

    Example:
        >>> import kiln, numpy as np
        >>> kiln.nn.linear(np.ones((2, 3), np.float32), np.ones((4, 3), np.float32)).shape
        (2, 4)
    """
    t, w, b = _promote("linear", x, weight, bias)
    assert t is not None and w is not None
    if w.ndim != 2:
        raise _shape_error("linear", "weight", w, "2-D (out_features, in_features)")
    if t.ndim == 0:
        raise _shape_error("linear", "x", t, "at least 1-D (..., in_features)")
    found, expected = t.shape[-1], w.shape[1]
    if isinstance(found, int) and isinstance(expected, int) and found != expected:
        raise OpArgumentError(
            f"linear: argument 'x' has {found} features (last axis of shape "
            f"{format_shape(t.shape)}); expected in_features={expected} from 'weight' "
            f"{format_shape(w.shape)}"
        )
    if b is not None and b.ndim > 1:
        raise _shape_error("linear", "bias", b, "0-D or 1-D (out_features,)")
    if t.ndim == 2:
        return call("Gemm", t, w, b, transB=1)
    y = call("MatMul", t, call("Transpose", w, perm=(1, 0)))
    return y if b is None else call("Add", y, b)


def _tuple(fn: str, arg: str, value: Any, n: int) -> tuple[int, ...]:
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return (int(value),) * n
    if (
        isinstance(value, (tuple, list))
        and len(value) == n
        and all(isinstance(v, (int, np.integer)) for v in value)
    ):
        return tuple(int(v) for v in value)
    raise OpArgumentError(f"{fn}: argument {arg!r} is {value!r}; expected an int or {n} ints")


def _padding_attrs(fn: str, padding: Any, n: int, strides: tuple[int, ...]) -> dict[str, Any]:
    if isinstance(padding, str):
        if padding == "valid":
            return {"pads": (0,) * (2 * n)}
        if padding == "same":
            if any(s != 1 for s in strides):
                raise OpArgumentError(
                    f"{fn}: padding='same' needs stride 1, got stride={strides}; pass explicit "
                    "padding for strided convolutions"
                )
            return {"auto_pad": "SAME_UPPER"}  # odd total padding: the extra goes at the end
        raise OpArgumentError(
            f"{fn}: argument 'padding' is {padding!r}; expected 'same', 'valid', an int or {n} ints"
        )
    pads = _tuple(fn, "padding", padding, n)
    return {"pads": pads + pads}


_LAYOUTS = {1: "(N, C, L)", 2: "(N, C, H, W)"}


def _check_spatial(fn: str, arg: str, t: Tensor, n: int, layout: str | None = None) -> None:
    if t.ndim != n + 2:
        raise _shape_error(fn, arg, t, f"{n + 2}-D {layout or _LAYOUTS.get(n, '')}".rstrip())


def _conv(
    fn: str,
    n: int,
    x: Any,
    weight: Any,
    bias: Any,
    stride: Any,
    padding: Any,
    dilation: Any,
    groups: int,
) -> Tensor:
    t, w, b = _promote(fn, x, weight, bias)
    assert t is not None and w is not None
    _check_spatial(fn, "x", t, n)
    _check_spatial(fn, "weight", w, n, "(out_channels, in_channels/groups, kernel...)")
    strides = _tuple(fn, "stride", stride, n)
    attrs: dict[str, Any] = {
        "strides": strides,
        "dilations": _tuple(fn, "dilation", dilation, n),
        "group": groups,
        **_padding_attrs(fn, padding, n, strides),
    }
    return call("Conv", t, w, b, **attrs)


def conv1d(
    x: Any,
    weight: Any,
    bias: Any = None,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
) -> Tensor:
    """1-D convolution of x (N, C, L) with weight (out, C/groups, k), as torch's conv1d.

    Example:
        >>> import kiln, numpy as np
        >>> kiln.nn.conv1d(np.ones((1, 2, 5), np.float32), np.ones((3, 2, 3), np.float32)).shape
        (1, 3, 3)
    """
    return _conv("conv1d", 1, x, weight, bias, stride, padding, dilation, groups)


def conv2d(
    x: Any,
    weight: Any,
    bias: Any = None,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
) -> Tensor:
    """2-D convolution of x (N, C, H, W) with weight (out, C/groups, kh, kw), as torch's conv2d.

    ``padding`` is an int, a pair, ``"valid"`` (none) or ``"same"`` (output size = input size;
    stride 1 only).

    Example:
        >>> import kiln, numpy as np
        >>> x, w = np.ones((1, 2, 5, 5), np.float32), np.ones((3, 2, 3, 3), np.float32)
        >>> kiln.nn.conv2d(x, w, padding="same").shape
        (1, 3, 5, 5)
    """
    return _conv("conv2d", 2, x, weight, bias, stride, padding, dilation, groups)


def conv_transpose2d(
    x: Any,
    weight: Any,
    bias: Any = None,
    stride: Any = 1,
    padding: Any = 0,
    output_padding: Any = 0,
    groups: int = 1,
    dilation: Any = 1,
) -> Tensor:
    """2-D transposed convolution of x (N, C, H, W) with weight (C, out/groups, kh, kw), as
    torch's conv_transpose2d.

    Example:
        >>> import kiln, numpy as np
        >>> x, w = np.ones((1, 2, 3, 3), np.float32), np.ones((2, 4, 2, 2), np.float32)
        >>> kiln.nn.conv_transpose2d(x, w, stride=2).shape
        (1, 4, 6, 6)
    """
    fn = "conv_transpose2d"
    t, w, b = _promote(fn, x, weight, bias)
    assert t is not None and w is not None
    _check_spatial(fn, "x", t, 2)
    _check_spatial(fn, "weight", w, 2, "(in_channels, out_channels/groups, kh, kw)")
    pads = _tuple(fn, "padding", padding, 2)
    attrs = {
        "strides": _tuple(fn, "stride", stride, 2),
        "pads": pads + pads,
        "output_padding": _tuple(fn, "output_padding", output_padding, 2),
        "group": groups,
        "dilations": _tuple(fn, "dilation", dilation, 2),
    }
    return call("ConvTranspose", t, w, b, **attrs)


# -- pooling --------------------------------------------------------------------------------


def _pool_attrs(
    fn: str, n: int, kernel_size: Any, stride: Any, padding: Any, ceil_mode: bool
) -> dict[str, Any]:
    kernel = _tuple(fn, "kernel_size", kernel_size, n)
    strides = kernel if stride is None else _tuple(fn, "stride", stride, n)
    pads = _tuple(fn, "padding", padding, n)
    for p, k in zip(pads, kernel):
        if p > k // 2:
            raise OpArgumentError(
                f"{fn}: padding={pads} is more than half of kernel_size={kernel}; expected "
                "padding <= kernel_size // 2"
            )
    return {
        "kernel_shape": kernel,
        "strides": strides,
        "pads": pads + pads,
        "ceil_mode": int(ceil_mode),
    }


def _max_pool(fn: str, n: int, x: Any, *args: Any, dilation: Any) -> Tensor:
    t = _unary(fn, x)
    _check_spatial(fn, "x", t, n)
    attrs = _pool_attrs(fn, n, *args)
    attrs["dilations"] = _tuple(fn, "dilation", dilation, n)
    return dispatch("MaxPool", [t], attrs)[0]


def _avg_pool(fn: str, n: int, x: Any, *args: Any, count_include_pad: bool) -> Tensor:
    t = _unary(fn, x)
    _check_spatial(fn, "x", t, n)
    attrs = _pool_attrs(fn, n, *args)
    attrs["count_include_pad"] = int(count_include_pad)
    return call("AveragePool", t, **attrs)


def max_pool1d(
    x: Any,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    dilation: Any = 1,
    ceil_mode: bool = False,
) -> Tensor:
    """1-D max pooling of x (N, C, L); ``stride`` defaults to ``kernel_size``.

    Example:
        >>> import kiln, numpy as np
        >>> kiln.nn.max_pool1d(np.arange(4.0).reshape(1, 1, 4), 2).tolist()
        [[[1.0, 3.0]]]
    """
    return _max_pool("max_pool1d", 1, x, kernel_size, stride, padding, ceil_mode, dilation=dilation)


def max_pool2d(
    x: Any,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    dilation: Any = 1,
    ceil_mode: bool = False,
) -> Tensor:
    """2-D max pooling of x (N, C, H, W); ``stride`` defaults to ``kernel_size``.

    Example:
        >>> import kiln, numpy as np
        >>> kiln.nn.max_pool2d(np.ones((1, 1, 4, 4), np.float32), 2).shape
        (1, 1, 2, 2)
    """
    return _max_pool("max_pool2d", 2, x, kernel_size, stride, padding, ceil_mode, dilation=dilation)


def avg_pool1d(
    x: Any,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
) -> Tensor:
    """1-D average pooling of x (N, C, L); ``stride`` defaults to ``kernel_size``.

    Example:
        >>> import kiln, numpy as np
        >>> kiln.nn.avg_pool1d(np.arange(4.0).reshape(1, 1, 4), 2).tolist()
        [[[0.5, 2.5]]]
    """
    return _avg_pool(
        "avg_pool1d",
        1,
        x,
        kernel_size,
        stride,
        padding,
        ceil_mode,
        count_include_pad=count_include_pad,
    )


def avg_pool2d(
    x: Any,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
) -> Tensor:
    """2-D average pooling of x (N, C, H, W); ``stride`` defaults to ``kernel_size`` and the
    zero padding counts in the divisor unless ``count_include_pad=False`` (as torch).

    Example:
        >>> import kiln, numpy as np
        >>> kiln.nn.avg_pool2d(np.ones((1, 1, 4, 4), np.float32), 2).tolist()
        [[[[1.0, 1.0], [1.0, 1.0]]]]
    """
    return _avg_pool(
        "avg_pool2d",
        2,
        x,
        kernel_size,
        stride,
        padding,
        ceil_mode,
        count_include_pad=count_include_pad,
    )


def adaptive_avg_pool2d(x: Any, output_size: Any) -> Tensor:
    """Average pooling of x (N, C, H, W) to ``output_size`` (an int or a pair).

    Size 1 is the global average; other sizes must divide the (static) input sizes, and then
    are an ordinary average pooling.

    Example:
        >>> import kiln, numpy as np
        >>> kiln.nn.adaptive_avg_pool2d(np.ones((2, 3, 4, 4), np.float32), 1).shape
        (2, 3, 1, 1)
    """
    fn = "adaptive_avg_pool2d"
    t = _unary(fn, x)
    _check_spatial(fn, "x", t, 2)
    outs = _tuple(fn, "output_size", output_size, 2)
    if outs == (1, 1):
        return call("GlobalAveragePool", t)
    kernel = []
    for size, out in zip(t.shape[2:], outs):
        if not isinstance(size, int) or out < 1 or size % out:
            raise OpArgumentError(
                f"{fn}: output_size={outs} must divide the input's spatial sizes "
                f"{format_shape(t.shape[2:])} (static); only evenly divisible sizes lower onto "
                "AveragePool"
            )
        kernel.append(size // out)
    return call("AveragePool", t, kernel_shape=tuple(kernel), strides=tuple(kernel))


# -- attention ------------------------------------------------------------------------------


def _axes(*axes: int) -> Tensor:
    return constant(np.asarray(axes, dtype=np.int64))


def scaled_dot_product_attention(
    q: Any,
    k: Any,
    v: Any,
    mask: Any = None,
    scale: float | None = None,
    is_causal: bool = False,
) -> Tensor:
    """softmax(q @ k^T * scale + mask) @ v, as torch's scaled_dot_product_attention.

    ``q``/``k``/``v`` are (batch, heads, seq, head_dim), or (batch, seq, dim) for a single
    head. ``mask`` is a bool tensor (True: may attend) or a float tensor added to the scores;
    ``scale`` defaults to 1/sqrt(head_dim); ``is_causal`` lets query i see keys j <= i only.

    Example:
        >>> import kiln, numpy as np
        >>> q = np.ones((1, 2, 3, 4), np.float32)
        >>> kiln.nn.scaled_dot_product_attention(q, q, q, is_causal=True).shape
        (1, 2, 3, 4)
    """
    fn = "scaled_dot_product_attention"
    qt, kt, vt = _promote(fn, q, k, v)
    assert qt is not None and kt is not None and vt is not None
    m: Tensor | None = None
    if mask is not None:
        m = as_tensor(mask)
        if m.dtype != dtypes.bool_:
            m = as_tensor(m, qt.dtype)
    ndim = qt.ndim
    for arg, t in (("k", kt), ("v", vt)):
        if t.ndim != ndim:
            raise _shape_error(fn, arg, t, f"{ndim}-D like q")
    if ndim not in (3, 4):
        raise _shape_error(fn, "q", qt, "3-D (batch, seq, dim) or 4-D (batch, heads, seq, dim)")
    attrs: dict[str, Any] = {"is_causal": int(bool(is_causal))}
    if scale is not None:
        attrs["scale"] = float(scale)
    if ndim == 4:
        return call("Attention", qt, kt, vt, m, **attrs)
    qt, kt, vt = (call("Unsqueeze", t, _axes(1)) for t in (qt, kt, vt))
    if m is not None and m.ndim == 3:
        m = call("Unsqueeze", m, _axes(1))
    return call("Squeeze", call("Attention", qt, kt, vt, m, **attrs), _axes(1))


# -- one_hot, interpolate -------------------------------------------------------------------


def one_hot(x: Any, num_classes: int, *, dtype: Any = dtypes.float32, axis: int = -1) -> Tensor:
    """1 where ``x`` equals the class index along the new axis ``axis``, else 0 (indices
    outside [0, num_classes) give all zeros, as jax.nn.one_hot).

    Example:
        >>> import kiln, numpy as np
        >>> kiln.nn.one_hot(np.array([0, 2]), 3).tolist()
        [[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]
    """
    fn = "one_hot"
    t = as_tensor(x)
    if not dtypes.is_integer(t.dtype):
        raise OpArgumentError(f"{fn}: argument 'x' has dtype {t.dtype}; expected integer indices")
    if not isinstance(num_classes, (int, np.integer)) or num_classes < 0:
        raise OpArgumentError(f"{fn}: num_classes={num_classes!r}; expected an int >= 0")
    where = normalize_axis(fn, axis, t.ndim + 1, scalar=False)
    classes = np.arange(int(num_classes), dtype=t.dtype).reshape(
        (int(num_classes),) + (1,) * (t.ndim - where)
    )
    hits = call("Equal", call("Unsqueeze", t, _axes(where)), constant(classes))
    return call("Cast", hits, to=onnx_dtype_code(dtypes.as_dtype(dtype)))


_INTERPOLATE_MODES = {"nearest": 0, "linear": 0, "bilinear": 2}


def interpolate(
    x: Any,
    size: Any = None,
    scale_factor: Any = None,
    mode: str = "nearest",
    align_corners: bool | None = None,
) -> Tensor:
    """Resize the spatial axes of x (N, C, ...) to ``size`` or by ``scale_factor``, as torch's
    interpolate: ``"nearest"`` (floor of the scaled index) or ``"linear"``/``"bilinear"``
    (half-pixel centres, or the corners with ``align_corners=True``).

    Example:
        >>> import kiln, numpy as np
        >>> kiln.nn.interpolate(np.ones((1, 1, 2, 2), np.float32), scale_factor=2).shape
        (1, 1, 4, 4)
    """
    fn = "interpolate"
    t = _unary(fn, x)
    if mode not in _INTERPOLATE_MODES:
        raise OpArgumentError(
            f"{fn}: mode={mode!r}; expected one of {', '.join(_INTERPOLATE_MODES)}"
        )
    n = t.ndim - 2
    if n < 1 or (_INTERPOLATE_MODES[mode] and n != _INTERPOLATE_MODES[mode]):
        expected = "4-D (N, C, H, W)" if mode == "bilinear" else "at least 3-D (N, C, ...)"
        raise _shape_error(fn, "x", t, expected)
    if (size is None) == (scale_factor is None):
        raise OpArgumentError(f"{fn}: give exactly one of 'size' and 'scale_factor'")
    if mode == "nearest":
        if align_corners is not None:
            raise OpArgumentError(f"{fn}: align_corners only applies to the linear modes")
        attrs = {
            "mode": "nearest",
            "coordinate_transformation_mode": "asymmetric",
            "nearest_mode": "floor",
        }
    else:
        transform = "align_corners" if align_corners else "half_pixel"
        attrs = {"mode": "linear", "coordinate_transformation_mode": transform}
    if size is not None:
        sizes = _tuple(fn, "size", size, n)
        target = shape_tensor([*t.shape[:2], *sizes])
        return call("Resize", t, None, None, target, **attrs)
    if isinstance(scale_factor, (int, float)):
        factors = (float(scale_factor),) * n
    elif isinstance(scale_factor, (tuple, list)) and len(scale_factor) == n:
        factors = tuple(float(f) for f in scale_factor)
    else:
        raise OpArgumentError(
            f"{fn}: scale_factor={scale_factor!r}; expected a number or {n} numbers"
        )
    if any(not math.isfinite(f) or f <= 0 for f in factors):
        raise OpArgumentError(f"{fn}: scale_factor={scale_factor!r}; expected positive numbers")
    scales = constant(np.asarray((1.0, 1.0, *factors), dtype=np.float32))
    return call("Resize", t, None, scales, **attrs)
