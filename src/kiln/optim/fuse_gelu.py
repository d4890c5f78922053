"""GELU written from primitive operations into one ``Gelu``.

Recognised, with the factors in any order NumPy code writes them (``0.5 * x * f``,
``x * 0.5 * f``, ``x * (0.5 * f)``, ``0.5 * (x * f)``, ``x * f / 2``, ``x / 2 * f``)::

    f = 1 + erf(x / sqrt(2))                                   -> Gelu(x)
    f = 1 + erf(x * (1 / sqrt(2)))                             -> Gelu(x)
    f = 1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x ** 3))       -> Gelu(x, approximate="tanh")

``x ** 3`` may already be ``x * x * x`` (after :mod:`simplify_algebra`). Each constant must
equal its exact value up to the rounding of its dtype; anything else is left alone. The
``Gelu`` kernel computes one order of these operations, which rounds unlike the others: the
rewrite runs only with ``DefaultsOptions(allow_reassociation=True)``.
"""

from __future__ import annotations

import math

from .. import dtypes
from ..ir.graph import ModelGraph
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

__all__ = ["fuse_gelu", "GELU_RULES"]

X = var("x")
SQRT_2 = math.sqrt(2.0)
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
TANH_CUBIC = 0.044715

_ERF_FACTOR = op(
    "Add", const(1), op("Erf", either(op("Div", X, const(SQRT_2)), op("Mul", X, const(1 / SQRT_2))))
)
_CUBE = either(op("Pow", X, const(3)), op("Mul", op("Mul", X, X), X))
_CUBIC_TERM = either(
    op("Mul", const(TANH_CUBIC), _CUBE),  # 0.044715 * x**3, x**3 * 0.044715
    op("Mul", op("Mul", op("Mul", const(TANH_CUBIC), X), X), X),  # 0.044715 * x * x * x
)
_TANH_FACTOR = op(
    "Add",
    const(1),
    op("Tanh", op("Mul", const(SQRT_2_OVER_PI), op("Add", X, _CUBIC_TERM))),
)


def _half_x_times(factor: Pattern) -> Pattern:
    """``0.5 * x * factor`` in each order of the products."""
    return either(
        op("Mul", op("Mul", const(0.5), X), factor),  # 0.5 * x * f, x * 0.5 * f
        op("Mul", X, op("Mul", const(0.5), factor)),  # x * (0.5 * f)
        op("Mul", const(0.5), op("Mul", X, factor)),  # 0.5 * (x * f)
        op("Div", op("Mul", X, factor), const(2)),  # x * f / 2
        op("Mul", op("Div", X, const(2)), factor),  # x / 2 * f
    )


def _gelu(approximate: str):  # type: ignore[no-untyped-def]
    def build(m: Match, b: Builder, options: DefaultsOptions) -> Replacement:
        # The kernel's order of operations (x*x*x, then * 0.044715; ((1 + t) * x) * 0.5) is
        # one of the many the formula is written in: the others round otherwise (an ulp here
        # and there, more near subnormals), so only reassociation allows the rewrite.
        if not options.allow_reassociation or not dtypes.is_floating(m["x"].dtype):
            return None
        return b.op("Gelu", m["x"], approximate=approximate)

    return build


GELU_RULES: list[Rule] = [
    # 0.5 * x * (1 + erf(x / sqrt(2))) -> Gelu(x)
    Rule(_half_x_times(_ERF_FACTOR), _gelu("none"), "gelu-erf", exclusive=True),
    # 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))) -> Gelu(x, approximate="tanh")
    Rule(_half_x_times(_TANH_FACTOR), _gelu("tanh"), "gelu-tanh", exclusive=True),
]


@transform("fuse_gelu")
def fuse_gelu(graph: ModelGraph, options: DefaultsOptions) -> tuple[ModelGraph, int]:
    """Rewrite the erf and tanh formulas of GELU into ``Gelu`` (``approximate`` "none" or
    "tanh")."""
    return rewrite_with_rules(graph, GELU_RULES, options)
