"""kiln.nn functions against independent NumPy references: value, dtype and shape.

References are written here from the textbook formulas (float64 math, direct loops for
convolution and pooling), never by calling kiln's kernels, and follow torch.nn.functional /
jax.nn conventions where those differ from ONNX defaults (padding="same", stride=None for pools,
count_include_pad, SELU constants, hard_sigmoid's slope).
"""

from __future__ import annotations

import math
from itertools import product

import numpy as np
import pytest

import kiln
from kiln import nn
from kiln.errors import OpArgumentError

from .numerics import assert_close

_erf = np.vectorize(math.erf, otypes=[np.float64])  # an independent oracle (no scipy needed)

FLOATS = [np.float32, np.float64]


def data(shape, dtype, low=-3.0, high=3.0, seed=0):
    rng = np.random.default_rng(seed + len(shape) * 7 + sum(shape))
    return (rng.random(shape) * (high - low) + low).astype(dtype)


def check(got, expected, dtype, **tol):
    assert isinstance(got, kiln.Tensor)
    assert_close(got, np.asarray(expected).astype(dtype), **tol)


# -- activations ----------------------------------------------------------------------------

SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


def _softplus(x):
    return np.where(x > 0, x + np.log1p(np.exp(-np.abs(x))), np.log1p(np.exp(x)))


ACTIVATIONS = {
    "relu": (nn.relu, lambda x: np.where(x > 0, x, 0.0)),
    "relu6": (nn.relu6, lambda x: np.minimum(np.maximum(x, 0.0), 6.0)),
    "leaky_relu": (nn.leaky_relu, lambda x: np.where(x >= 0, x, 0.01 * x)),
    "elu": (nn.elu, lambda x: np.where(x > 0, x, np.expm1(x))),
    "selu": (nn.selu, lambda x: SELU_SCALE * np.where(x > 0, x, SELU_ALPHA * np.expm1(x))),
    "gelu": (nn.gelu, lambda x: 0.5 * x * (1 + _erf(x / math.sqrt(2)))),
    "sigmoid": (nn.sigmoid, lambda x: 1 / (1 + np.exp(-x))),
    "silu": (nn.silu, lambda x: x / (1 + np.exp(-x))),
    "swish": (nn.swish, lambda x: x / (1 + np.exp(-x))),
    "tanh": (nn.tanh, np.tanh),
    "softplus": (nn.softplus, _softplus),
    "softsign": (nn.softsign, lambda x: x / (1 + np.abs(x))),
    "hard_sigmoid": (nn.hard_sigmoid, lambda x: np.clip(x + 3, 0, 6) / 6),
    "hard_swish": (nn.hard_swish, lambda x: x * np.clip(x + 3, 0, 6) / 6),
    "mish": (nn.mish, lambda x: x * np.tanh(_softplus(x))),
    "log_sigmoid": (nn.log_sigmoid, lambda x: -_softplus(-x)),
}


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
@pytest.mark.parametrize("dtype", FLOATS)
def test_activation(name, dtype):
    fn, ref = ACTIVATIONS[name]
    x = data((3, 5), dtype, -7.0, 7.0)
    check(fn(kiln.asarray(x)), ref(x.astype(np.float64)), dtype, rtol=1e-5, atol=1e-6)
    check(fn(x), ref(x.astype(np.float64)), dtype, rtol=1e-5, atol=1e-6)  # NumPy input


def test_activation_shapes_size_one_and_empty():
    for shape in ((), (1,), (0, 3)):
        x = data(shape, np.float32) if shape else np.float32(0.5)
        assert nn.relu(x).shape == np.shape(x)
        assert nn.sigmoid(x).dtype == np.float32


def test_leaky_relu_and_elu_parameters():
    x = data((4,), np.float64, -2.0, 2.0)
    check(nn.leaky_relu(x, negative_slope=0.2), np.where(x >= 0, x, 0.2 * x), np.float64)
    check(nn.elu(x, alpha=0.5), np.where(x > 0, x, 0.5 * np.expm1(x)), np.float64)


@pytest.mark.parametrize("approximate", ["tanh", True])
def test_gelu_tanh_approximation(approximate):
    x = data((2, 3), np.float64)
    inner = math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)
    check(nn.gelu(x, approximate=approximate), 0.5 * x * (1 + np.tanh(inner)), np.float64)


def test_gelu_rejects_unknown_approximation():
    with pytest.raises(OpArgumentError, match="gelu: argument 'approximate'"):
        nn.gelu(np.zeros(2, np.float32), approximate="erf")


# -- softmax --------------------------------------------------------------------------------


def _ref_softmax(x, axis):
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("axis", [-1, 0, 1, -2])
def test_softmax_and_log_softmax(dtype, axis):
    x = data((2, 3, 4), dtype)
    expected = _ref_softmax(x, axis)
    check(nn.softmax(x, axis=axis), expected, dtype)
    check(nn.log_softmax(x, axis=axis), np.log(expected), dtype, atol=1e-5)


def test_softmax_large_values_stay_finite():
    x = np.array([[1000.0, 1001.0, 1002.0]], np.float32)
    got = np.asarray(nn.softmax(x))
    assert np.all(np.isfinite(got))
    check(nn.softmax(x), _ref_softmax(x, -1), np.float32)
    check(nn.log_softmax(x), np.log(_ref_softmax(x, -1)), np.float32)


def test_softmax_axis_error_names_function():
    with pytest.raises(OpArgumentError, match="softmax: axis=2"):
        nn.softmax(np.zeros((2, 2), np.float32), axis=2)


# -- normalization --------------------------------------------------------------------------


def _ref_layer_norm(x, weight, bias, eps, axis):
    axes = tuple(range(axis % x.ndim, x.ndim))
    x = x.astype(np.float64)
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    y = (x - mean) / np.sqrt(var + eps)
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y


@pytest.mark.parametrize("dtype", FLOATS)
def test_layer_norm_last_axis(dtype):
    x = data((3, 5), dtype)
    w, b = data((5,), dtype, 0.5, 2.0), data((5,), dtype)
    check(nn.layer_norm(x, w, b), _ref_layer_norm(x, w, b, 1e-5, -1), dtype, atol=1e-5)
    check(nn.layer_norm(x), _ref_layer_norm(x, None, None, 1e-5, -1), dtype, atol=1e-5)


@pytest.mark.parametrize("dtype", FLOATS)
def test_layer_norm_over_several_trailing_axes(dtype):
    x = data((2, 3, 4, 5), dtype)
    w = data((4, 5), dtype, 0.5, 2.0)
    expected = _ref_layer_norm(x, w, None, 1e-3, -2)
    check(nn.layer_norm(x, w, eps=1e-3, axis=-2), expected, dtype, atol=1e-5)
    check(nn.layer_norm(x, axis=1), _ref_layer_norm(x, None, None, 1e-5, 1), dtype, atol=1e-5)


def test_layer_norm_promotes_like_numpy():
    x = data((2, 4), np.float32)
    w = data((4,), np.float64, 0.5, 2.0)
    got = nn.layer_norm(x, w)
    assert got.dtype == np.float64
    check(got, _ref_layer_norm(x, w, None, 1e-5, -1), np.float64, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", FLOATS)
def test_rms_norm(dtype):
    x = data((2, 3, 6), dtype)
    w = data((6,), dtype, 0.5, 2.0)
    x64 = x.astype(np.float64)
    rms = np.sqrt((x64**2).mean(axis=-1, keepdims=True) + 1e-6)
    check(nn.rms_norm(x, w), x64 / rms * w, dtype, atol=1e-5)
    rms2 = np.sqrt((x64**2).mean(axis=(1, 2), keepdims=True) + 1e-2)
    check(nn.rms_norm(x, eps=1e-2, axis=1), x64 / rms2, dtype, atol=1e-5)


@pytest.mark.parametrize("dtype", FLOATS)
def test_batch_norm(dtype):
    x = data((2, 3, 4, 4), dtype)
    mean, var = data((3,), dtype, -1, 1), data((3,), dtype, 0.5, 2)
    w, b = data((3,), dtype, 0.5, 2), data((3,), dtype)
    c = (1, 3, 1, 1)
    x64 = x.astype(np.float64)
    expected = (x64 - mean.reshape(c)) / np.sqrt(var.reshape(c) + 1e-5) * w.reshape(c)
    check(nn.batch_norm(x, mean, var, w, b), expected + b.reshape(c), dtype, atol=1e-5)
    plain = (x64 - mean.reshape(c)) / np.sqrt(var.reshape(c) + 1e-3)
    check(nn.batch_norm(x, mean, var, eps=1e-3), plain, dtype, atol=1e-5)


def test_batch_norm_training_is_rejected():
    x = np.zeros((1, 2, 2), np.float32)
    with pytest.raises(OpArgumentError, match="batch_norm: training=True"):
        nn.batch_norm(x, np.zeros(2, np.float32), np.ones(2, np.float32), training=True)


@pytest.mark.parametrize("dtype", FLOATS)
def test_instance_norm(dtype):
    x = data((2, 3, 4, 5), dtype)
    w, b = data((3,), dtype, 0.5, 2), data((3,), dtype)
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=(2, 3), keepdims=True)
    var = x64.var(axis=(2, 3), keepdims=True)
    expected = (x64 - mean) / np.sqrt(var + 1e-5) * w.reshape(1, 3, 1, 1) + b.reshape(1, 3, 1, 1)
    check(nn.instance_norm(x, w, b), expected, dtype, atol=1e-5)
    check(nn.instance_norm(x), (x64 - mean) / np.sqrt(var + 1e-5), dtype, atol=1e-5)


def test_dropout_is_identity_at_inference():
    x = data((3, 4), np.float32)
    check(nn.dropout(x, rate=0.3), x, np.float32)
    with pytest.raises(OpArgumentError, match="dropout: deterministic=False"):
        nn.dropout(x, deterministic=False)


# -- linear ---------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", [(5,), (3, 5), (2, 3, 5)])
def test_linear(dtype, shape):
    x = data(shape, dtype)
    w, b = data((4, 5), dtype), data((4,), dtype)
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    expected = np.einsum("...i,oi->...o", x64, w64)
    check(nn.linear(x, w), expected, dtype, rtol=1e-5, atol=1e-5)
    check(nn.linear(x, w, b), expected + b, dtype, rtol=1e-5, atol=1e-5)


def test_linear_feature_mismatch():
    with pytest.raises(OpArgumentError, match="linear: argument 'x' has 3 features"):
        nn.linear(np.zeros((2, 3), np.float32), np.zeros((4, 5), np.float32))


# -- convolution ----------------------------------------------------------------------------


def _ref_conv2d(x, w, b, stride, pad, dilation, groups):
    """Direct loops; ``pad`` is ((top, bottom), (left, right))."""
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    (pt, pb), (pl, pr) = pad
    (sh, sw), (dh, dw) = stride, dilation
    oh = (h + pt + pb - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + pl + pr - dw * (kw - 1) - 1) // sw + 1
    y = np.zeros((n, m, oh, ow))
    for bi, mo, i, j in product(range(n), range(m), range(oh), range(ow)):
        g = mo // (m // groups)
        acc = 0.0 if b is None else float(b[mo])
        for ci, u, v in product(range(cg), range(kh), range(kw)):
            r, s = i * sh + u * dh - pt, j * sw + v * dw - pl
            if 0 <= r < h and 0 <= s < wd:
                acc += float(x[bi, g * cg + ci, r, s]) * float(w[mo, ci, u, v])
        y[bi, mo, i, j] = acc
    return y


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(
    "stride, padding, dilation, groups",
    [(1, 0, 1, 1), (2, 1, 1, 1), ((1, 2), (2, 0), (2, 1), 1), (1, 1, 1, 2), (1, 1, 1, 4)],
)
def test_conv2d(dtype, stride, padding, dilation, groups):
    x = data((2, 4, 6, 7), dtype)
    w = data((4, 4 // groups, 3, 3), dtype, -1, 1)
    b = data((4,), dtype)
    s = stride if isinstance(stride, tuple) else (stride, stride)
    p = padding if isinstance(padding, tuple) else (padding, padding)
    d = dilation if isinstance(dilation, tuple) else (dilation, dilation)
    expected = _ref_conv2d(x, w, b, s, ((p[0], p[0]), (p[1], p[1])), d, groups)
    got = nn.conv2d(x, w, b, stride=stride, padding=padding, dilation=dilation, groups=groups)
    check(got, expected, dtype, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kernel, dilation", [((3, 3), 1), ((2, 4), 1), ((2, 3), 2)])
def test_conv2d_padding_same_matches_torch(kernel, dilation):
    # torch pads (d*(k-1)) in total, the odd extra at the end, and keeps the input size.
    x = data((1, 2, 5, 6), np.float64)
    w = data((3, 2, *kernel), np.float64)
    pads = []
    for k in kernel:
        total = dilation * (k - 1)
        pads.append((total // 2, total - total // 2))
    expected = _ref_conv2d(x, w, None, (1, 1), pads, (dilation, dilation), 1)
    got = nn.conv2d(x, w, padding="same", dilation=dilation)
    assert got.shape == (1, 3, 5, 6)
    check(got, expected, np.float64)


def test_conv2d_padding_valid_and_errors():
    x, w = data((1, 2, 5, 5), np.float32), data((3, 2, 3, 3), np.float32)
    assert nn.conv2d(x, w, padding="valid").shape == (1, 3, 3, 3)
    with pytest.raises(OpArgumentError, match="conv2d: argument 'x' must be 4-D"):
        nn.conv2d(x[0], w)
    with pytest.raises(OpArgumentError, match="padding='same' needs stride 1"):
        nn.conv2d(x, w, stride=2, padding="same")
    with pytest.raises(OpArgumentError, match="Conv: input 'W'"):
        nn.conv2d(x, data((3, 3, 3, 3), np.float32))


@pytest.mark.parametrize("dtype", FLOATS)
def test_conv1d(dtype):
    x, w, b = data((2, 3, 9), dtype), data((4, 3, 3), dtype), data((4,), dtype)
    expected = _ref_conv2d(x[:, :, None], w[:, :, None], b, (1, 2), ((0, 0), (1, 1)), (1, 1), 1)
    check(nn.conv1d(x, w, b, stride=2, padding=1), expected[:, :, 0], dtype, rtol=1e-5, atol=1e-5)


def _ref_conv_transpose2d(x, w, b, stride, pad, out_pad, dilation, groups):
    n, c, h, wd = x.shape
    _, mg, kh, kw = w.shape
    oh = (h - 1) * stride - 2 * pad + dilation * (kh - 1) + out_pad + 1
    ow = (wd - 1) * stride - 2 * pad + dilation * (kw - 1) + out_pad + 1
    y = np.zeros((n, mg * groups, oh, ow))
    cg = c // groups
    for bi, ci, i, j in product(range(n), range(c), range(h), range(wd)):
        g = ci // cg
        for mo, u, v in product(range(mg), range(kh), range(kw)):
            r, s = i * stride + u * dilation - pad, j * stride + v * dilation - pad
            if 0 <= r < oh and 0 <= s < ow:
                y[bi, g * mg + mo, r, s] += float(x[bi, ci, i, j]) * float(w[ci, mo, u, v])
    if b is not None:
        y += b.reshape(1, -1, 1, 1)
    return y


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(
    "stride, padding, output_padding, dilation, groups",
    [(1, 0, 0, 1, 1), (2, 1, 1, 1, 1), (2, 0, 0, 2, 2), (3, 1, 2, 1, 1)],
)
def test_conv_transpose2d(dtype, stride, padding, output_padding, dilation, groups):
    x = data((1, 4, 3, 4), dtype)
    w = data((4, 2, 3, 3), dtype, -1, 1)
    b = data((2 * groups,), dtype)
    expected = _ref_conv_transpose2d(x, w, b, stride, padding, output_padding, dilation, groups)
    got = nn.conv_transpose2d(
        x, w, b, stride=stride, padding=padding, output_padding=output_padding,
        groups=groups, dilation=dilation,
    )  # fmt: skip
    check(got, expected, dtype, rtol=1e-5, atol=1e-5)


# -- pooling --------------------------------------------------------------------------------


def _ref_pool2d(x, kernel, stride, pad, mode, count_include_pad=True, ceil_mode=False):
    n, c, h, w = x.shape
    (kh, kw), (sh, sw), (ph, pw) = kernel, stride, pad

    def out_size(size, k, s, p):
        if not ceil_mode:
            return (size + 2 * p - k) // s + 1
        o = -(-(size + 2 * p - k) // s) + 1
        return o - 1 if (o - 1) * s >= size + p else o

    oh, ow = out_size(h, kh, sh, ph), out_size(w, kw, sw, pw)
    y = np.zeros((n, c, oh, ow))
    for bi, ci, i, j in product(range(n), range(c), range(oh), range(ow)):
        values, count = [], 0
        for u, v in product(range(kh), range(kw)):
            r, s = i * sh + u - ph, j * sw + v - pw
            if 0 <= r < h and 0 <= s < w:
                values.append(float(x[bi, ci, r, s]))
                count += 1
            elif r < h + ph and s < w + pw and count_include_pad:
                count += 1
        y[bi, ci, i, j] = max(values) if mode == "max" else sum(values) / count
    return y


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(
    "kernel, stride, padding",
    [(2, None, 0), (3, 2, 1), ((2, 3), (1, 2), (1, 0)), (3, None, 1)],
)
def test_max_pool2d(dtype, kernel, stride, padding):
    x = data((2, 3, 7, 8), dtype)
    k = kernel if isinstance(kernel, tuple) else (kernel, kernel)
    s = k if stride is None else stride if isinstance(stride, tuple) else (stride, stride)
    p = padding if isinstance(padding, tuple) else (padding, padding)
    expected = _ref_pool2d(x, k, s, p, "max")
    check(nn.max_pool2d(x, kernel, stride, padding), expected, dtype)


def test_max_pool2d_ceil_mode():
    x = data((1, 2, 7, 7), np.float32)
    expected = _ref_pool2d(x, (2, 2), (2, 2), (0, 0), "max", ceil_mode=True)
    got = nn.max_pool2d(x, 2, ceil_mode=True)
    assert got.shape == (1, 2, 4, 4)
    check(got, expected, np.float32)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("count_include_pad", [True, False])
@pytest.mark.parametrize("kernel, stride, padding", [(2, None, 0), (3, 2, 1), ((3, 2), 1, (1, 1))])
def test_avg_pool2d(dtype, count_include_pad, kernel, stride, padding):
    x = data((2, 2, 6, 7), dtype)
    k = kernel if isinstance(kernel, tuple) else (kernel, kernel)
    s = k if stride is None else (stride, stride)
    p = padding if isinstance(padding, tuple) else (padding, padding)
    expected = _ref_pool2d(x, k, s, p, "avg", count_include_pad)
    got = nn.avg_pool2d(x, kernel, stride, padding, count_include_pad=count_include_pad)
    check(got, expected, dtype)


def test_avg_pool2d_ceil_mode_divisor_excludes_overhang():
    x = data((1, 1, 5, 5), np.float64)
    expected = _ref_pool2d(x, (2, 2), (2, 2), (1, 1), "avg", True, ceil_mode=True)
    check(nn.avg_pool2d(x, 2, padding=1, ceil_mode=True), expected, np.float64)


def test_pool1d():
    x = data((2, 3, 9), np.float64)
    check(nn.max_pool1d(x, 3), x.reshape(2, 3, 3, 3).max(axis=-1), np.float64)
    check(nn.avg_pool1d(x, 3), x.reshape(2, 3, 3, 3).mean(axis=-1), np.float64)


def test_pool_errors():
    x = np.zeros((1, 1, 4, 4), np.float32)
    with pytest.raises(OpArgumentError, match="max_pool2d: argument 'x' must be 4-D"):
        nn.max_pool2d(x[0], 2)
    with pytest.raises(OpArgumentError, match="avg_pool2d: padding"):
        nn.avg_pool2d(x, 2, padding=2)


@pytest.mark.parametrize("dtype", FLOATS)
def test_adaptive_avg_pool2d(dtype):
    x = data((2, 3, 6, 4), dtype)
    check(nn.adaptive_avg_pool2d(x, 1), x.mean(axis=(2, 3), keepdims=True), dtype)
    check(nn.adaptive_avg_pool2d(x, (1, 1)), x.mean(axis=(2, 3), keepdims=True), dtype)
    expected = x.astype(np.float64).reshape(2, 3, 3, 2, 2, 2).mean(axis=(3, 5))
    check(nn.adaptive_avg_pool2d(x, (3, 2)), expected, dtype)
    with pytest.raises(OpArgumentError, match="adaptive_avg_pool2d: output_size"):
        nn.adaptive_avg_pool2d(x, (4, 4))


# -- attention ------------------------------------------------------------------------------


def _ref_attention(q, k, v, mask=None, scale=None, is_causal=False):
    q, k, v = (a.astype(np.float64) for a in (q, k, v))
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = np.einsum("...id,...jd->...ij", q, k) * scale
    if mask is not None:
        scores = np.where(mask, scores, -np.inf) if mask.dtype == bool else scores + mask
    if is_causal:
        i, j = np.indices(scores.shape[-2:])
        scores = np.where(j <= i, scores, -np.inf)
    return np.einsum("...ij,...jd->...id", _ref_softmax(scores, -1), v)


@pytest.mark.parametrize("dtype", FLOATS)
def test_sdpa_4d(dtype):
    q, k, v = data((2, 3, 4, 8), dtype), data((2, 3, 5, 8), dtype), data((2, 3, 5, 6), dtype)
    check(nn.scaled_dot_product_attention(q, k, v), _ref_attention(q, k, v), dtype, atol=1e-5)
    got = nn.scaled_dot_product_attention(q, k, v, scale=0.2)
    check(got, _ref_attention(q, k, v, scale=0.2), dtype, atol=1e-5)


@pytest.mark.parametrize("dtype", FLOATS)
def test_sdpa_masks_and_causal(dtype):
    q = data((1, 2, 4, 4), dtype)
    bool_mask = data((1, 1, 4, 4), np.float64, 0, 1) > 0.4
    bool_mask[..., 0] = True
    float_mask = data((4, 4), dtype, -2, 0)
    got = nn.scaled_dot_product_attention(q, q, q, mask=bool_mask)
    check(got, _ref_attention(q, q, q, mask=bool_mask), dtype, atol=1e-5)
    got = nn.scaled_dot_product_attention(q, q, q, mask=float_mask)
    check(got, _ref_attention(q, q, q, mask=float_mask), dtype, atol=1e-5)
    got = nn.scaled_dot_product_attention(q, q, q, is_causal=True)
    check(got, _ref_attention(q, q, q, is_causal=True), dtype, atol=1e-5)


def test_sdpa_3d_adds_and_removes_heads_axis():
    q, k, v = data((2, 3, 4), np.float32), data((2, 5, 4), np.float32), data((2, 5, 4), np.float32)
    mask = data((2, 3, 5), np.float64, 0, 1) > 0.3
    mask[..., 0] = True
    got = nn.scaled_dot_product_attention(q, k, v, mask=mask)
    assert got.shape == (2, 3, 4)
    check(got, _ref_attention(q, k, v, mask=mask), np.float32, atol=1e-5)


def test_sdpa_rank_error():
    with pytest.raises(OpArgumentError, match="scaled_dot_product_attention: argument 'q'"):
        x = np.zeros((2, 3), np.float32)
        nn.scaled_dot_product_attention(x, x, x)


# -- one_hot, interpolate -------------------------------------------------------------------


def test_one_hot():
    x = np.array([[0, 2], [1, 5]])
    expected = (x[..., None] == np.arange(3)).astype(np.float32)
    check(nn.one_hot(x, 3), expected, np.float32)  # 5 is out of range: all zeros
    check(nn.one_hot(x, 3, axis=0), np.moveaxis(expected, -1, 0), np.float32)
    check(nn.one_hot(x, 3, dtype=np.int64), expected, np.int64)


def _ref_nearest(x, out_h, out_w, scale_h, scale_w):
    h, w = x.shape[2:]
    rows = np.minimum(np.floor(np.arange(out_h) / scale_h).astype(int), h - 1)
    cols = np.minimum(np.floor(np.arange(out_w) / scale_w).astype(int), w - 1)
    return x[:, :, rows][:, :, :, cols]


def _ref_bilinear(x, out_h, out_w, align_corners):
    h, w = x.shape[2:]
    y = np.zeros((*x.shape[:2], out_h, out_w))

    def src(o, out, size):
        if align_corners:
            return o * (size - 1) / (out - 1) if out > 1 else 0.0
        return max((o + 0.5) * size / out - 0.5, 0.0)

    for i, j in product(range(out_h), range(out_w)):
        r, s = src(i, out_h, h), src(j, out_w, w)
        r0, s0 = min(int(r), h - 1), min(int(s), w - 1)
        r1, s1 = min(r0 + 1, h - 1), min(s0 + 1, w - 1)
        a, b = r - r0, s - s0
        y[:, :, i, j] = (
            x[:, :, r0, s0] * (1 - a) * (1 - b)
            + x[:, :, r0, s1] * (1 - a) * b
            + x[:, :, r1, s0] * a * (1 - b)
            + x[:, :, r1, s1] * a * b
        )
    return y


@pytest.mark.parametrize("dtype", FLOATS)
def test_interpolate_nearest(dtype):
    x = data((1, 2, 3, 4), dtype)
    check(nn.interpolate(x, scale_factor=2), _ref_nearest(x, 6, 8, 2, 2), dtype)
    check(nn.interpolate(x, size=(5, 6)), _ref_nearest(x, 5, 6, 5 / 3, 6 / 4), dtype)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("align_corners", [False, True])
def test_interpolate_bilinear(dtype, align_corners):
    x = data((1, 2, 3, 4), dtype)
    got = nn.interpolate(x, size=(5, 7), mode="bilinear", align_corners=align_corners)
    check(got, _ref_bilinear(x, 5, 7, align_corners), dtype, atol=1e-5)


def test_interpolate_errors():
    x = np.zeros((1, 1, 2, 2), np.float32)
    with pytest.raises(OpArgumentError, match="interpolate: give exactly one"):
        nn.interpolate(x)
    with pytest.raises(OpArgumentError, match="interpolate: mode='cubic'"):
        nn.interpolate(x, size=3, mode="cubic")


def test_all_exports_exist():
    for name in nn.__all__:
        assert callable(getattr(nn, name)), name


# -- symbolic sizes inside a trace ----------------------------------------------------------


@pytest.mark.parametrize(
    "fn, spec, shapes",
    [
        (lambda x: nn.layer_norm(x, axis=-2), ("B", "S", 8), [(2, 5, 8), (1, 1, 8)]),
        (lambda x: nn.rms_norm(x), ("B", "D"), [(3, 4), (1, 7)]),
        (lambda x: nn.instance_norm(x), ("B", "C", 5), [(2, 3, 5), (1, 1, 5)]),
        (
            lambda x: nn.conv2d(x, np.ones((4, 3, 3, 3), np.float32), padding="same"),
            ("B", 3, "H", "W"),
            [(1, 3, 5, 6), (2, 3, 4, 4)],
        ),
        (lambda x: nn.max_pool2d(x, 2, ceil_mode=True), ("B", 2, "H", "W"), [(1, 2, 5, 5)]),
        (
            lambda x: nn.scaled_dot_product_attention(x, x, x, is_causal=True),
            ("B", "S", 4),
            [(2, 3, 4), (1, 1, 4)],
        ),
    ],
)
def test_traced_graph_with_symbolic_sizes_matches_eager(fn, spec, shapes):
    graph = kiln.trace(fn, signature=[kiln.TensorSpec(spec, kiln.float32)])
    graph.finalize()
    for shape in shapes:
        x = data(shape, np.float32)
        (got,) = graph.run([x])
        check(got, np.asarray(fn(x)), np.float32)
