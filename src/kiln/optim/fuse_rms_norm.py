"""RMSNorm written from primitive operations into one ``RMSNormalization``.

Recognised: ``x / sqrt(mean(x ** 2, axes, keepdims=True) + eps)`` (also ``x * x``, ``** 0.5``,
``x * (1 / sqrt(...))``, a Reciprocal), then ``* w`` absorbed as the scale. The reduction must
cover the trailing axes ``[a, rank)`` with keepdims; epsilon must be a one-element constant.
"""

from __future__ import annotations

import numpy as np

from .. import dtypes
from ..ir.graph import ModelGraph
from .norm_patterns import (
    normalize,
    normalized_axis,
    rounds_as_written,
    rsqrt_of,
    square,
    stash_type,
)
from .pattern import Builder, Match, Replacement, Rule, const, op, rewrite_with_rules, var
from .transform import DefaultsOptions, transform

__all__ = ["fuse_rms_norm", "RMS_NORM_RULES"]

X = var("x")
_MEAN_SQUARE = op("ReduceMean", square(X, X), var(), name="ms")
_RMS_NORM = normalize(X, rsqrt_of(_MEAN_SQUARE)[0])


def _rms_norm(m: Match, b: Builder, options: DefaultsOptions) -> Replacement:
    x = m["x"]
    eps = m.scalar("eps")
    axis = normalized_axis(m, ["ms"], x)
    if not dtypes.is_floating(x.dtype) or axis is None or eps is None or eps < 0:
        return None
    if not rounds_as_written(m, x, options):
        return None
    scale = b.const(np.ones((1,), x.dtype), "scale")
    return b.op(
        "RMSNormalization", x, scale, axis=axis, epsilon=eps, stash_type=stash_type(x.dtype)
    )


def _absorb_scale(m: Match, b: Builder, options: DefaultsOptions) -> Replacement:
    return b.op("RMSNormalization", m["x"], m["w"], **m.attrs("rms"))


RMS_NORM_RULES: list[Rule] = [
    Rule(_RMS_NORM, _rms_norm, "rms-norm", exclusive=True),  # x / sqrt(mean(x**2) + eps)
    # RMSNormalization(x, 1) * w -> RMSNormalization(x, w)
    Rule(
        op("Mul", op("RMSNormalization", X, const(1), name="rms"), var("w")),
        _absorb_scale,
        "rms-norm-scale",
        exclusive=True,
    ),
]


@transform("fuse_rms_norm")
def fuse_rms_norm(graph: ModelGraph, options: DefaultsOptions) -> tuple[ModelGraph, int]:
    """Rewrite root-mean-square normalization written from primitive operations into
    ``RMSNormalization`` (absorbing a following ``* w``)."""
    return rewrite_with_rules(graph, RMS_NORM_RULES, options)
