"""Scaled dot-product attention written from primitive operations into one ``Attention``.

Recognised (after :mod:`fuse_softmax` has made the softmax one node)::

    softmax(q @ k^T * scale (+ mask), axis=-1) @ v      scale as `* c`, `/ c`, or absent,
                                                        or applied to q first: (q * c) @ k^T

``k^T`` is ``Transpose(k)`` swapping the last two axes, or any value already transposed (then a
Transpose making K is inserted). Q, K, V of rank 4 (batch, heads, sequence, head size) map
directly onto ONNX ``Attention``; rank 3 (batch, sequence, head size) gets a heads axis of
size 1 around it. The mask must be additive (Q's dtype) and broadcast to the scores.
"""

from __future__ import annotations

import numpy as np

from .. import dtypes
from ..ir.graph import ModelGraph, Value
from .pattern import (
    Builder,
    Match,
    Replacement,
    Rule,
    const,
    either,
    op,
    rewrite_with_rules,
    var,
)
from .transform import DefaultsOptions, transform

__all__ = ["fuse_attention", "ATTENTION_RULES"]

Q, V = var("q"), var("v")
_KEY_T = either(op("Transpose", var("k"), name="kt_node"), var("kt"))
_SCORES = either(
    op("MatMul", op("Mul", Q, const(name="q_scale")), _KEY_T),  # (q * c) @ k^T
    op("MatMul", Q, _KEY_T),
)
_SCALED = either(
    op("Mul", _SCORES, const(name="scale")),
    op("Div", _SCORES, const(name="divisor")),
    _SCORES,
)
_LOGITS = either(op("Add", _SCALED, var("mask")), _SCALED)
_ATTENTION = op("MatMul", op("Softmax", _LOGITS, name="softmax"), V)


def _swap_last(rank: int) -> tuple[int, ...]:
    return (*range(rank - 2), rank - 1, rank - 2)


def _scale(m: Match) -> float | None:
    factor = 1.0
    for name, invert in (("q_scale", False), ("scale", False), ("divisor", True)):
        if name in m.values:
            c = m.scalar(name)
            if c is None or c == 0:
                return None
            factor *= 1.0 / c if invert else c
    return factor


def _key(m: Match, b: Builder) -> Value | None:
    """K itself: the input of a transpose of the last two axes, or one made from ``kt``."""
    rank = len(m["q"].shape)
    if "k" in m.values:
        perm = m.attrs("kt_node")["perm"]
        if perm is not None and tuple(perm) == _swap_last(rank):
            return m["k"]
        return None  # another permutation: the `kt` alternative takes it as a plain value
    kt = m["kt"]
    if len(kt.shape) != rank:
        return None
    return b.op("Transpose", kt, perm=_swap_last(rank))


def _attention(m: Match, b: Builder, options: DefaultsOptions) -> Replacement:
    if not options.allow_reassociation:
        # The Attention kernel's order (the scale, the softmax, the products) rounds unlike
        # the operations as written: an ulp here and there (tools/exactness_audit.py).
        return None
    q, v = m["q"], m["v"]
    rank = len(q.shape)
    if rank not in (3, 4) or len(v.shape) != rank or not dtypes.is_floating(q.dtype):
        return None
    if m.attrs("softmax")["axis"] % len(m.node("softmax").outputs[0].shape) != rank - 1:
        return None
    scale = _scale(m)
    mask = m.values.get("mask")
    if scale is None or (mask is not None and mask.dtype != q.dtype):
        return None
    k = _key(m, b)
    if k is None:
        return None
    if rank == 4:
        return b.op("Attention", q, k, v, *([mask] if mask is not None else []), scale=scale)
    # 3-D: (batch, sequence, size) gets a heads axis of size 1 for ONNX's 4-D Attention.
    axis = b.const(np.array([1], np.int64), "axes")
    q4, k4, v4 = (b.op("Unsqueeze", t, axis) for t in (q, k, v))
    extra = []
    if mask is not None:
        extra = [b.op("Unsqueeze", mask, axis) if len(mask.shape) == 3 else mask]
    y = b.op("Attention", q4, k4, v4, *extra, scale=scale)
    return b.op("Squeeze", y, axis)


ATTENTION_RULES: list[Rule] = [
    # softmax(q @ k^T * scale + mask) @ v -> Attention(q, k, v, mask, scale=scale)
    Rule(_ATTENTION, _attention, "attention", exclusive=True),
]


@transform("fuse_attention")
def fuse_attention(graph: ModelGraph, options: DefaultsOptions) -> tuple[ModelGraph, int]:
    """Rewrite ``softmax(q @ k^T * scale (+ mask)) @ v`` on 3-D or 4-D tensors into ONNX
    ``Attention`` (run :func:`~kiln.optim.fuse_softmax` first)."""
    return rewrite_with_rules(graph, ATTENTION_RULES, options)
