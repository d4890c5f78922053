"""The default optimizer pipeline: the transforms ``optimize()`` runs when given none."""

from __future__ import annotations

from .eliminate_common_subexpressions import eliminate_common_subexpressions
from .eliminate_dead_code import eliminate_dead_code
from .fold_constants import fold_constants
from .fold_shapes import fold_shapes
from .transform import Transform

__all__ = ["default_pipeline"]


def default_pipeline() -> list[Transform]:
    """The built-in transforms, in the order one iteration applies them."""
    return [fold_shapes, fold_constants, eliminate_common_subexpressions, eliminate_dead_code]
