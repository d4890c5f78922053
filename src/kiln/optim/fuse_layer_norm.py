"""LayerNorm written from primitive operations into one ``LayerNormalization``.

Recognised (``mu = x.mean(axes, keepdims=True)``, axes the trailing ``[a, rank)``)::

    (x - mu) / sqrt(var + eps)        var = ((x - mu) ** 2).mean(...), mean((x - mu) * (x - mu)),
    (x - mu) * (1 / sqrt(var + eps))        or x.var(...) (ReduceSumSquare / count)
    ... * w, ... + b                  then absorbed as Scale and B

``sqrt`` may be ``** 0.5`` and ``1 / sqrt`` a Reciprocal. Every reduction must use the same
axes with ``keepdims``; epsilon must be a one-element constant.
"""

from __future__ import annotations

import numpy as np

from .. import dtypes
from ..ir.graph import ModelGraph
from ..symbolic import prod
from .norm_patterns import (
    normalize,
    normalized_axis,
    rounds_as_written,
    rsqrt_of,
    square,
    stash_type,
)
from .pattern import (
    Builder,
    Match,
    Pattern,
    Replacement,
    Rule,
    const,
    either,
    op,
    rewrite_with_rules,
    var,
)
from .transform import DefaultsOptions, transform

__all__ = ["fuse_layer_norm", "LAYER_NORM_RULES"]

X = var("x")


def centered(tag: str) -> Pattern:
    """``x - x.mean(...)``; each occurrence captures its own mean node (before common
    subexpressions are merged, ``x - mu`` is recorded once per use)."""
    return op("Sub", X, op("ReduceMean", X, var(), name=f"mean_{tag}"))


_VARIANCE = either(
    op("ReduceMean", square(centered("a"), centered("b")), var(), name="var"),
    op("Div", op("ReduceSumSquare", centered("a"), var(), name="var"), const(name="count")),
)
_LAYER_NORM = normalize(centered("x"), rsqrt_of(_VARIANCE)[0])


def _epsilon(m: Match) -> float | None:
    eps = m.scalar("eps")
    return eps if eps is not None and eps >= 0 else None


def _layer_norm(m: Match, b: Builder, options: DefaultsOptions) -> Replacement:
    x = m["x"]
    if not dtypes.is_floating(x.dtype) or not rounds_as_written(m, x, options):
        return None
    axis = normalized_axis(m, ["mean_x", "mean_a", "mean_b", "var"], x)
    eps = _epsilon(m)
    if axis is None or eps is None:
        return None
    if "count" in m.values:  # x.var(): the sum of squares over the count of elements
        count = prod(x.shape[axis:])
        if not isinstance(count, int) or m.scalar("count") != float(count):
            return None
    scale = b.const(np.ones((1,), x.dtype), "scale")
    return b.op(
        "LayerNormalization", x, scale, axis=axis, epsilon=eps, stash_type=stash_type(x.dtype)
    )


def _absorb(which: str):  # type: ignore[no-untyped-def]
    """``LayerNormalization(x, 1) * w -> LayerNormalization(x, w)``, and ``+ b`` into B."""

    def build(m: Match, b: Builder, options: DefaultsOptions) -> Replacement:
        attrs = m.attrs("ln")
        node = m.node("ln")
        if which == "scale":
            return b.op("LayerNormalization", node.inputs[0], m["w"], **attrs)
        return b.op("LayerNormalization", *node.inputs[:2], m["w"], **attrs)

    return build


LAYER_NORM_RULES: list[Rule] = [
    Rule(_LAYER_NORM, _layer_norm, "layer-norm", exclusive=True),  # (x - mu) / sqrt(var + eps)
    # LayerNormalization(x, 1) * w -> LayerNormalization(x, w)
    Rule(
        op("Mul", op("LayerNormalization", X, const(1), name="ln"), var("w")),
        _absorb("scale"),
        "layer-norm-scale",
        exclusive=True,
    ),
    # LayerNormalization(x, s) + b -> LayerNormalization(x, s, b)
    Rule(
        op("Add", op("LayerNormalization", X, var(), name="ln"), var("w")),
        _absorb("bias"),
        "layer-norm-bias",
        exclusive=True,
    ),
]


@transform("fuse_layer_norm")
def fuse_layer_norm(graph: ModelGraph, options: DefaultsOptions) -> tuple[ModelGraph, int]:
    """Rewrite layer normalization written from means, a square root and a division into
    ``LayerNormalization`` (absorbing a following ``* w`` and ``+ b``)."""
    return rewrite_with_rules(graph, LAYER_NORM_RULES, options)
