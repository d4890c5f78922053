"""Operator-specific tests of the nn family: infer on symbolic shapes, error messages, and
the semantics details (auto_pad, ceil_mode, groups, attention masks, stable softmax) the generic
sample harness does not single out."""

from __future__ import annotations

import math

import numpy as np
import pytest

import kiln
from kiln.errors import OpArgumentError, OpTypeError
from kiln.ops.registry import TensorType, get_op
from kiln.ops.sampling import sample_array
from kiln.symbolic import SymDim, evaluate, symbol
from kiln.tensor import dispatch

from ..numerics import assert_close

F32 = np.dtype(np.float32)
B, H, W, S = symbol("B"), symbol("H"), symbol("W"), symbol("S")


def tt(*shape, dtype=F32):
    return TensorType(np.dtype(dtype), tuple(shape))


def infer(op, *types, **attrs):
    opdef = get_op(op)
    return opdef.infer(list(types), opdef.bind_attrs(attrs))


def run(op, *arrays, **attrs):
    inputs = [None if a is None else kiln.asarray(a) for a in arrays]
    return [np.asarray(t) for t in dispatch(op, inputs, attrs)]


def rand(*shape, dtype=np.float32, seed=0):
    return np.random.default_rng(seed + sum(shape)).standard_normal(shape).astype(dtype)


def at(dim, **bindings):
    return evaluate(dim, bindings)


# -- symbolic infer -------------------------------------------------------------------------


def test_conv_infer_symbolic_batch_and_spatial():
    (y,) = infer("Conv", tt(B, 3, H, W), tt(8, 3, 3, 3), strides=(2, 2), pads=(1, 1, 1, 1))
    assert y.shape[:2] == (B, 8)
    for h, w in ((7, 9), (8, 8), (1, 1)):
        assert at(y.shape[2], H=h) == (h + 2 - 3) // 2 + 1
        assert at(y.shape[3], W=w) == (w + 2 - 3) // 2 + 1


def test_conv_infer_symbolic_agrees_with_kernel():
    x, w = rand(2, 3, 9, 6), rand(4, 3, 3, 2)
    attrs = {"strides": (2, 1), "dilations": (1, 2), "pads": (0, 1, 2, 0)}
    (y,) = infer("Conv", tt(B, 3, H, W), tt(4, 3, 3, 2), **attrs)
    (got,) = run("Conv", x, w, **attrs)
    assert tuple(at(d, B=2, H=9, W=6) for d in y.shape) == got.shape


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER"])
def test_conv_infer_same_is_ceil_of_size_over_stride(auto_pad):
    (y,) = infer("Conv", tt(B, 2, H, W), tt(4, 2, 3, 4), auto_pad=auto_pad, strides=(2, 3))
    for h, w in ((5, 7), (6, 9), (1, 1)):
        assert at(y.shape[2], H=h) == math.ceil(h / 2)
        assert at(y.shape[3], W=w) == math.ceil(w / 3)


def test_pool_infer_symbolic_ceil_mode():
    (y, idx) = infer("MaxPool", tt(B, 3, H, W), kernel_shape=(3, 3), strides=(2, 2), ceil_mode=1)
    assert idx.dtype == np.int64 and idx.shape == y.shape
    for h in (5, 6, 7, 8):
        x = rand(1, 3, h, h)
        (got, _) = run("MaxPool", x, kernel_shape=(3, 3), strides=(2, 2), ceil_mode=1)
        assert at(y.shape[2], H=h) == got.shape[2]
        assert at(y.shape[3], W=h) == got.shape[3]


def test_avg_pool_and_global_pool_infer_symbolic():
    (y,) = infer("AveragePool", tt(B, 3, S), kernel_shape=(4,), pads=(1, 2))
    assert y.shape[:2] == (B, 3) and at(y.shape[2], S=10) == (10 + 3 - 4) + 1
    (g,) = infer("GlobalAveragePool", tt(B, 5, H, W))
    assert g.shape == (B, 5, 1, 1)
    (g,) = infer("GlobalMaxPool", tt(B, 5, S))
    assert g.shape == (B, 5, 1)


def test_conv_transpose_infer_symbolic():
    attrs = {"strides": (2, 2), "pads": (1, 1, 1, 1), "output_padding": (1, 0)}
    (y,) = infer("ConvTranspose", tt(B, 4, H, W), tt(4, 3, 3, 3), **attrs)
    assert y.shape[:2] == (B, 3)
    assert at(y.shape[2], H=5) == 2 * 4 + 1 + 3 - 2
    assert at(y.shape[3], W=5) == 2 * 4 + 3 - 2
    (same,) = infer(
        "ConvTranspose", tt(B, 4, H, W), tt(4, 3, 3, 3), strides=(2, 2), auto_pad="SAME_UPPER"
    )
    assert same.shape[2:] == (2 * H, 2 * W)


def test_norm_softmax_attention_infer_symbolic():
    (y, mean, inv) = infer("LayerNormalization", tt(B, S, 16), tt(16), tt(16))
    assert y.shape == (B, S, 16) and mean.shape == (B, S, 1) and inv.dtype == F32
    (y, mean, _) = infer("LayerNormalization", tt(B, S, 4, 4), tt(4, 4), axis=-2)
    assert mean.shape == (B, S, 1, 1)
    assert infer("RMSNormalization", tt(B, S, 8), tt(8))[0].shape == (B, S, 8)
    assert infer("Softmax", tt(B, S), axis=0)[0].shape == (B, S)
    (y,) = infer("Attention", tt(B, 4, S, 8), tt(B, 2, S, 8), tt(B, 2, S, 6))
    assert y.shape == (B, 4, S, 6)
    (y,) = infer("BatchNormalization", tt(B, 3, H), *[tt(3)] * 4)
    assert y.shape == (B, 3, H)


def test_symbolic_channels_skip_static_checks():
    c = symbol("C")
    (y,) = infer("Conv", tt(B, c, H, W), tt(8, c, 3, 3))
    assert isinstance(y.shape[2], SymDim) and y.shape[1] == 8


# -- error messages -------------------------------------------------------------------------


def test_conv_channel_mismatch_names_op_argument_expected_found():
    with pytest.raises(OpArgumentError, match=r"Conv: input 'W' .*= 4 input channels; found 3"):
        infer("Conv", tt(1, 3, 5, 5), tt(2, 2, 3, 3), group=2)


def test_conv_group_must_divide_output_channels():
    with pytest.raises(
        OpArgumentError,
        match="Conv: input 'W' has 3 output channels; expected a multiple of group=2",
    ):
        infer("Conv", tt(1, 4, 5, 5), tt(3, 2, 3, 3), group=2)


def test_conv_rank_and_attribute_errors():
    with pytest.raises(OpArgumentError, match="Conv: input 'X' must be of rank 3 or 4 or 5"):
        infer("Conv", tt(3, 5), tt(3, 5))
    with pytest.raises(OpArgumentError, match="Conv: input 'W' must be of rank 4"):
        infer("Conv", tt(1, 3, 5, 5), tt(2, 3, 3))
    with pytest.raises(OpArgumentError, match="Conv: attribute 'strides' has 1 entries"):
        infer("Conv", tt(1, 3, 5, 5), tt(2, 3, 3, 3), strides=(2,))
    with pytest.raises(OpArgumentError, match="Conv: attribute 'pads' has 2 entries"):
        infer("Conv", tt(1, 3, 5, 5), tt(2, 3, 3, 3), pads=(1, 1))
    with pytest.raises(OpArgumentError, match="Conv: attribute 'auto_pad' is 'SAME'"):
        infer("Conv", tt(1, 3, 5, 5), tt(2, 3, 3, 3), auto_pad="SAME")
    with pytest.raises(OpArgumentError, match="Conv: input 'B' has size 3; expected 2"):
        infer("Conv", tt(1, 3, 5, 5), tt(2, 3, 3, 3), tt(3))
    with pytest.raises(OpArgumentError, match="Conv: spatial axis 0: the window"):
        infer("Conv", tt(1, 3, 2, 5), tt(2, 3, 3, 3))
    with pytest.raises(OpTypeError, match="Conv: inputs 'X' .* and 'W'"):
        infer("Conv", tt(1, 3, 5, 5), tt(2, 3, 3, 3, dtype=np.float64))


def test_pool_errors():
    with pytest.raises(OpArgumentError, match="MaxPool: attribute 'kernel_shape' is required"):
        infer("MaxPool", tt(1, 1, 4, 4))
    with pytest.raises(OpArgumentError, match="AveragePool: attribute 'kernel_shape' has 1"):
        infer("AveragePool", tt(1, 1, 4, 4), kernel_shape=(2,))
    with pytest.raises(OpArgumentError, match="GlobalMaxPool: input 'X' must be of rank"):
        infer("GlobalMaxPool", tt(2, 3))


def test_norm_errors():
    with pytest.raises(
        OpArgumentError, match="LayerNormalization: input 'Scale' has shape \\(3,\\)"
    ):
        infer("LayerNormalization", tt(2, 4), tt(3))
    with pytest.raises(OpArgumentError, match="LayerNormalization: axis=2 is out of range"):
        infer("LayerNormalization", tt(2, 4), tt(4), axis=2)
    with pytest.raises(OpArgumentError, match="stash_type' is 7"):
        infer("RMSNormalization", tt(2, 4), tt(4), stash_type=7)
    with pytest.raises(
        OpArgumentError, match="BatchNormalization: input 'input_var' has size 2; expected 3"
    ):
        infer("BatchNormalization", tt(1, 3, 2), tt(3), tt(3), tt(3), tt(2))
    with pytest.raises(
        OpArgumentError, match="BatchNormalization: training_mode=1 is not supported"
    ):
        infer("BatchNormalization", tt(1, 3, 2), *[tt(3)] * 4, training_mode=1)


def test_dropout_training_mode_is_rejected():
    x = rand(2, 3)
    out, mask = run("Dropout", x, np.asarray(0.5, np.float32), np.asarray(False))
    assert_close(out, x)
    assert mask.dtype == np.bool_ and mask.all()
    with pytest.raises(OpArgumentError, match="Dropout: input 'training_mode' is True"):
        run("Dropout", x, np.asarray(0.5, np.float32), np.asarray(True))


def test_attention_errors():
    with pytest.raises(OpArgumentError, match="Attention: the 3-D form .* needs attributes"):
        infer("Attention", tt(2, 4, 8), tt(2, 4, 8), tt(2, 4, 8))
    with pytest.raises(OpArgumentError, match="Attention: input 'Q' has hidden size 8; expected"):
        infer("Attention", tt(2, 4, 8), tt(2, 4, 8), tt(2, 4, 8), q_num_heads=3, kv_num_heads=1)
    with pytest.raises(OpArgumentError, match="'past_key' and 'past_value' must be given together"):
        infer("Attention", tt(1, 2, 3, 4), tt(1, 2, 3, 4), tt(1, 2, 3, 4), None, tt(1, 2, 1, 4))
    with pytest.raises(OpArgumentError, match="Attention: input 'past_key' has head size 5"):
        infer(
            "Attention",
            tt(1, 2, 3, 4),
            tt(1, 2, 3, 4),
            tt(1, 2, 3, 4),
            None,
            tt(1, 2, 1, 5),
            tt(1, 2, 1, 4),
        )
    with pytest.raises(OpArgumentError, match="'qk_matmul_output_mode' is 4"):
        infer("Attention", tt(1, 2, 3, 4), tt(1, 2, 3, 4), tt(1, 2, 3, 4), qk_matmul_output_mode=4)
    with pytest.raises(OpArgumentError, match="Attention: input 'K' has head size 5; expected 4"):
        infer("Attention", tt(1, 2, 3, 4), tt(1, 2, 3, 5), tt(1, 2, 3, 4))
    with pytest.raises(
        OpArgumentError, match="Attention: input 'K' has 3 heads; expected a divisor of Q's 4"
    ):
        infer("Attention", tt(1, 4, 3, 4), tt(1, 3, 3, 4), tt(1, 3, 3, 4))
    with pytest.raises(OpArgumentError, match="Attention: input 'attn_mask' has shape"):
        infer("Attention", tt(1, 2, 3, 4), tt(1, 2, 5, 4), tt(1, 2, 5, 4), tt(2, 5, dtype=np.bool_))
    with pytest.raises(OpTypeError, match="Attention: input 'attn_mask' has dtype int32"):
        infer("Attention", tt(1, 2, 3, 4), tt(1, 2, 5, 4), tt(1, 2, 5, 4), tt(3, 5, dtype=np.int32))


# -- semantics details ----------------------------------------------------------------------


def test_softmax_is_stable_on_large_values():
    x = np.array([[1e4, 1e4 + 1, 1e4 + 2], [-1e4, 0.0, 1e4]], np.float32)
    (y,) = run("Softmax", x)
    (log_y,) = run("LogSoftmax", x)
    assert np.isfinite(y).all() and np.isfinite(log_y).all()
    e = np.exp([0.0, 1.0, 2.0])
    assert_close(y[0], (e / e.sum()).astype(np.float32))
    assert_close(log_y[1], np.array([-2e4, -1e4, 0.0], np.float32))


def test_softmax_float16_computes_without_overflow():
    x = np.array([60000.0, 60000.0], np.float16)
    (y,) = run("Softmax", x)
    assert y.dtype == np.float16
    assert_close(y, np.array([0.5, 0.5], np.float16))


def _direct_conv(x, w, pads, group):
    """2-D convolution by loops over outputs (pads: top, left, bottom, right), stride 1."""
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    xp = np.zeros((n, c, h + pads[0] + pads[2], wd + pads[1] + pads[3]))
    xp[:, :, pads[0] : pads[0] + h, pads[1] : pads[1] + wd] = x
    oh, ow = xp.shape[2] - kh + 1, xp.shape[3] - kw + 1
    y = np.zeros((n, m, oh, ow))
    for mo in range(m):
        g = mo // (m // group)
        for i in range(oh):
            for j in range(ow):
                patch = xp[:, g * cg : (g + 1) * cg, i : i + kh, j : j + kw]
                y[:, mo, i, j] = (patch * w[mo]).sum(axis=(1, 2, 3))
    return y


@pytest.mark.parametrize(
    "auto_pad, pads", [("SAME_UPPER", (0, 0, 1, 1)), ("SAME_LOWER", (1, 1, 0, 0))]
)
def test_conv_auto_pad_puts_odd_padding_at_the_right_end(auto_pad, pads):
    x, w = rand(1, 2, 5, 6, dtype=np.float64), rand(3, 2, 2, 2, dtype=np.float64)
    (y,) = run("Conv", x, w, auto_pad=auto_pad)
    assert y.shape == (1, 3, 5, 6)
    assert_close(y, _direct_conv(x, w, pads, 1))


@pytest.mark.parametrize("group, c, m", [(1, 4, 6), (2, 4, 6), (4, 4, 4), (4, 4, 8)])
def test_conv_groups_including_depthwise(group, c, m):
    x, w = rand(2, c, 5, 5, dtype=np.float64), rand(m, c // group, 3, 3, dtype=np.float64)
    (y,) = run("Conv", x, w, group=group, pads=(1, 1, 1, 1))
    assert_close(y, _direct_conv(x, w, (1, 1, 1, 1), group))


def test_maxpool_ceil_mode_drops_window_starting_in_right_padding():
    # size 6, kernel 2, stride 2, pads 1/1: ceil gives 5 windows, but the 5th would start at
    # padded index 8 = input size + left pad (pure padding), so ONNX/torch keep 4.
    x = rand(1, 1, 6, 6)
    (y, _) = run("MaxPool", x, kernel_shape=(2, 2), strides=(2, 2), pads=(1, 1, 1, 1), ceil_mode=1)
    assert y.shape == (1, 1, 4, 4)
    (y, _) = run("MaxPool", x, kernel_shape=(3, 3), strides=(2, 2), ceil_mode=1)
    assert y.shape == (1, 1, 3, 3)
    assert y[0, 0, 2, 2] == x[0, 0, 4:, 4:].max()  # the overhanging window sees 2x2 values


def test_maxpool_indices():
    x = rand(2, 3, 4, 4)
    (y, idx) = run("MaxPool", x, kernel_shape=(2, 2), strides=(2, 2))
    assert_close(x.reshape(-1)[idx], y)
    (_, idx_col) = run("MaxPool", x, kernel_shape=(2, 2), strides=(2, 2), storage_order=1)
    plane = idx // 16 * 16
    row, col = (idx - plane) // 4, (idx - plane) % 4
    np.testing.assert_array_equal(idx_col, plane + col * 4 + row)


def test_average_pool_count_include_pad():
    x = np.ones((1, 1, 3, 3), np.float32)
    (excl,) = run("AveragePool", x, kernel_shape=(2, 2), pads=(1, 1, 1, 1))
    (incl,) = run("AveragePool", x, kernel_shape=(2, 2), pads=(1, 1, 1, 1), count_include_pad=1)
    assert_close(excl, np.ones((1, 1, 4, 4), np.float32))
    assert incl[0, 0, 0, 0] == 0.25 and incl[0, 0, 1, 1] == 1.0 and incl[0, 0, 0, 1] == 0.5


def _attention(q, k, v, bias):
    scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1]) + bias
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)) @ v


def test_attention_causal_is_top_left_aligned():
    q, k, v = (
        rand(1, 2, 3, 4, dtype=np.float64),
        rand(1, 2, 5, 4, dtype=np.float64),
        rand(1, 2, 5, 4, dtype=np.float64),
    )
    (y,) = run("Attention", q, k, v, is_causal=1)
    i, j = np.indices((3, 5))
    assert_close(y, _attention(q, k, v, np.where(j <= i, 0.0, -np.inf)))
    # The first query sees only the first key: its output is exactly V's first row.
    assert_close(y[0, :, 0], v[0, :, 0])


def test_attention_bool_and_float_masks():
    q = rand(2, 2, 3, 4, dtype=np.float64)
    k, v = rand(2, 2, 4, 4, dtype=np.float64, seed=1), rand(2, 2, 4, 4, dtype=np.float64, seed=2)
    keep = np.array([[True, False, True, False]] * 3)
    (y,) = run("Attention", q, k, v, keep)
    assert_close(y, _attention(q, k, v, np.where(keep, 0.0, -np.inf)))
    added = rand(2, 1, 3, 4, dtype=np.float64, seed=3)
    (y,) = run("Attention", q, k, v, added)
    assert_close(y, _attention(q, k, v, added))
    (y,) = run("Attention", q, k, v, keep, is_causal=1)  # both: mask and causal combine
    i, j = np.indices((3, 4))
    assert_close(y, _attention(q, k, v, np.where(keep & (j <= i), 0.0, -np.inf)))


def test_attention_grouped_query_heads_repeat_each_kv_head():
    q = rand(1, 4, 3, 4, dtype=np.float64)
    k, v = rand(1, 2, 3, 4, dtype=np.float64, seed=1), rand(1, 2, 3, 4, dtype=np.float64, seed=2)
    (y,) = run("Attention", q, k, v)
    expected = _attention(q, np.repeat(k, 2, axis=1), np.repeat(v, 2, axis=1), 0.0)
    assert_close(y, expected)


def test_attention_scale_and_softcap():
    q, k, v = (rand(1, 1, 3, 4, dtype=np.float64, seed=s) for s in range(3))
    (y,) = run("Attention", q, k, v, scale=0.1, softcap=1.5)
    scores = 1.5 * np.tanh((q @ np.swapaxes(k, -1, -2)) * 0.1 / 1.5)
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    assert_close(y, (e / e.sum(axis=-1, keepdims=True)) @ v)


def test_layer_norm_statistics_outputs():
    x = rand(2, 3, 4)
    y, mean, inv = run("LayerNormalization", x, np.ones((3, 4), np.float32), axis=1)
    x64 = x.astype(np.float64)
    assert mean.shape == (2, 1, 1) and inv.shape == (2, 1, 1) and mean.dtype == np.float32
    assert_close(mean, x64.mean(axis=(1, 2), keepdims=True).astype(np.float32))
    std = np.sqrt(x64.var(axis=(1, 2), keepdims=True) + 1e-5)
    assert_close(inv, (1 / std).astype(np.float32))
    assert_close(y, ((x64 - x64.mean(axis=(1, 2), keepdims=True)) / std).astype(np.float32))


# -- Attention: the full ONNX form ----------------------------------------------------------


def test_attention_output_count_follows_cache_and_mode():
    b, s = symbol("B"), symbol("S")
    q = tt(b, s, 12)
    kv = tt(b, s, 6)
    heads = {"q_num_heads": 4, "kv_num_heads": 2}
    (y,) = infer("Attention", q, kv, kv, **heads)
    assert y.shape == (b, s, 12)  # 3-D in, 3-D out: heads * v_head_size
    past = tt(b, 2, 5, 3)
    y, pk, pv = infer("Attention", q, kv, kv, None, past, past, **heads)
    assert pk.shape == (b, 2, 5 + s, 3) and pv.shape == pk.shape
    outs = infer("Attention", q, kv, kv, **heads, qk_matmul_output_mode=0)
    assert [t.shape for t in outs][3] == (b, 4, s, s)


def test_attention_cache_is_concatenated_and_causal_is_offset():
    q = sample_array((1, 1, 2, 4), F32)
    k, v = sample_array((1, 1, 2, 4), F32), sample_array((1, 1, 2, 4), F32)
    pk, pv = sample_array((1, 1, 3, 4), F32), sample_array((1, 1, 3, 4), F32)
    y, present_k, present_v = run("Attention", q, k, v, None, pk, pv, is_causal=1)
    np.testing.assert_array_equal(present_k, np.concatenate([pk, k], axis=2))
    np.testing.assert_array_equal(present_v, np.concatenate([pv, v], axis=2))
    # bottom-right causal: query 0 (absolute position 3) sees keys 0..3, query 1 sees all 5
    full_k, full_v = present_k[0, 0].astype(np.float64), present_v[0, 0].astype(np.float64)
    for i, visible in ((0, 4), (1, 5)):
        logits = full_k[:visible] @ q[0, 0, i].astype(np.float64) / 2.0
        w = np.exp(logits - logits.max())
        assert_close(y[0, 0, i], ((w / w.sum()) @ full_v[:visible]).astype(F32))


def test_attention_fully_masked_row_is_zero_not_nan():
    q = sample_array((1, 1, 2, 4), F32)
    mask = np.array([[True, True], [False, False]])
    y, _, _, probs = run("Attention", q, q, q, mask, qk_matmul_output_mode=3)
    assert np.isfinite(y).all() and not y[0, 0, 1].any() and not probs[0, 0, 1].any()
    assert_close(probs[0, 0, 0].sum(), np.float32(1.0))


def test_attention_short_mask_and_nonpad_kv_seqlen():
    q = sample_array((2, 1, 1, 4), F32)
    k = sample_array((2, 1, 4, 4), F32)
    mask = np.array([[True, True]])  # 2 keys of 4: the rest count as masked
    _, _, _, probs = run("Attention", q, k, k, mask, qk_matmul_output_mode=3)
    assert not probs[..., 2:].any()
    nonpad = np.array([3, 1], np.int64)
    _, _, _, probs = run("Attention", q, k, k, None, None, None, nonpad, qk_matmul_output_mode=3)
    assert not probs[0, ..., 3:].any() and not probs[1, ..., 1:].any()


def test_lrn_and_hardmax():
    x = np.arange(1.0, 6.0, dtype=F32).reshape(1, 5, 1, 1)
    (y,) = run("LRN", x, size=3, alpha=1.0, beta=1.0, bias=1.0)
    # channel 0 sums channels 0..1: 1 + (1 + 4) / 3
    assert_close(y[0, 0, 0, 0], np.float32(1.0 / (1.0 + 5.0 / 3.0)))
    with pytest.raises(OpArgumentError, match="LRN: attribute 'size' is 0"):
        infer("LRN", tt(1, 3, 2, 2), size=0)
    (h,) = run("Hardmax", np.array([[1.0, 5.0, 5.0], [0.0, -1.0, -2.0]], F32))
    np.testing.assert_array_equal(h, [[0, 1, 0], [1, 0, 0]])


def test_lrn_even_size_and_other_ranks_follow_the_onnx_window():
    from kiln.ops.nn import _ref_lrn

    for shape, attrs in (
        ((1, 6, 4), {"size": 4, "alpha": 0.01, "beta": 0.5, "bias": 2.0}),
        ((1, 3, 2, 2, 2), {"size": 2}),
    ):
        x = sample_array(shape, F32, -3.0, 3.0)
        (y,) = run("LRN", x, **attrs)
        assert_close(y, _ref_lrn(x, **attrs))


def test_attention_3d_gqa_matches_4d():
    q, k, v = (
        sample_array((2, 3, 8), F32),
        sample_array((2, 4, 4), F32),
        sample_array((2, 4, 6), F32),
    )
    (y3,) = run("Attention", q, k, v, q_num_heads=4, kv_num_heads=2)
    split = [
        a.reshape(2, -1, h, a.shape[2] // h).transpose(0, 2, 1, 3)
        for a, h in ((q, 4), (k, 2), (v, 2))
    ]
    (y4,) = run("Attention", *split)
    assert_close(y3, y4.transpose(0, 2, 1, 3).reshape(2, 3, 12))


def test_max_pool_ties_pick_the_first_tap_and_nan_propagates() -> None:
    from kiln.ops.registry import get_op

    op = get_op("MaxPool")
    x = np.array([[[[1.0, 1.0], [1.0, 1.0]]]], np.float32)
    y, index = op.kernel(x, **op.bind_attrs({"kernel_shape": (2, 2)}))
    assert y.tolist() == [[[[1.0]]]] and index.tolist() == [[[[0]]]]
    x = np.array([[[[1.0, np.nan], [3.0, 2.0]]]], np.float32)
    y, index = op.kernel(x, **op.bind_attrs({"kernel_shape": (2, 2)}))
    assert np.isnan(y).all() and index.tolist() == [[[[1]]]]  # as np.max / np.argmax
