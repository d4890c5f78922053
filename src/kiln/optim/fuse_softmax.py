"""Softmax written from primitive operations into one ``Softmax``.

Recognised, along one axis with keepdims::

    e = exp(x - x.max(axis, keepdims=True));  e / e.sum(axis, keepdims=True)  -> Softmax(x, axis)
    e = exp(x);                               e / e.sum(axis, keepdims=True)  -> Softmax(x, axis)

Without the max subtraction the recorded formula overflows for large inputs where Softmax
does not; the rewrite only makes it more accurate. The max and the sum must reduce the same
single axis.
"""

from __future__ import annotations

from collections.abc import Callable

from .. import dtypes
from ..ir.graph import ModelGraph
from .pattern import Builder, Match, Pattern, Replacement, Rule, op, rewrite_with_rules, var
from .transform import DefaultsOptions, transform

__all__ = ["fuse_softmax", "SOFTMAX_RULES"]

X = var("x")


def _exp_over_sum(exp: Callable[[str], Pattern]) -> Pattern:
    # Each occurrence of the exponential gets its own capture names: code that writes
    # ``np.exp(x - x.max(...))`` twice records two nodes until common subexpressions merge.
    return op("Div", exp("a"), op("ReduceSum", exp("b"), var(), name="sum"))


def _shifted_exp(tag: str) -> Pattern:
    return op("Exp", op("Sub", X, op("ReduceMax", X, var(), name=f"max_{tag}")))


def _exp(tag: str) -> Pattern:
    return op("Exp", X)


def _single_axis(m: Match, name: str) -> int | None:
    rank = len(m["x"].shape)
    axes = m.axes(name)
    node = m.node(name)
    if axes is None or len(axes) != 1 or not m.attrs(name)["keepdims"]:
        return None
    if len(node.inputs[0].shape) != rank:  # type: ignore[union-attr]
        return None
    return axes[0]


def _softmax(m: Match, b: Builder, options: DefaultsOptions) -> Replacement:
    x = m["x"]
    if not dtypes.is_floating(x.dtype) or not x.shape:
        return None
    axis = _single_axis(m, "sum")
    maxima = [name for name in ("max_a", "max_b") if name in m.nodes]
    if axis is None or any(_single_axis(m, name) != axis for name in maxima):
        return None
    return b.op("Softmax", x, axis=axis)


SOFTMAX_RULES: list[Rule] = [
    # exp(x - max(x)) / sum(exp(x - max(x))) -> Softmax(x)
    Rule(_exp_over_sum(_shifted_exp), _softmax, "softmax", exclusive=True),
    # exp(x) / sum(exp(x)) -> Softmax(x)
    Rule(_exp_over_sum(_exp), _softmax, "softmax-unshifted", exclusive=True),
]


@transform("fuse_softmax")
def fuse_softmax(graph: ModelGraph, options: DefaultsOptions) -> tuple[ModelGraph, int]:
    """Rewrite ``exp(x - max) / sum(exp(x - max))`` (or without the max) along one axis into
    ``Softmax``."""
    return rewrite_with_rules(graph, SOFTMAX_RULES, options)
