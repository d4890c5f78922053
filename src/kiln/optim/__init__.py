"""The graph optimizer: transforms, options, the report, and the default pipeline."""

from __future__ import annotations

from .eliminate_common_subexpressions import eliminate_common_subexpressions
from .eliminate_dead_code import eliminate_dead_code
from .fold_constants import fold_constants
from .fold_shapes import fold_shapes
from .pipeline import default_pipeline
from .specialize import specialize_graph
from .transform import DefaultsOptions, OptimizeReport, Transform, run_pipeline, transform

__all__ = [
    "DefaultsOptions",
    "OptimizeReport",
    "Transform",
    "default_pipeline",
    "eliminate_common_subexpressions",
    "eliminate_dead_code",
    "fold_constants",
    "fold_shapes",
    "specialize_graph",
    "run_pipeline",
    "transform",
]
