"""The graph optimizer: transforms, options, the report, and the default pipeline."""

from __future__ import annotations

from .eliminate_common_subexpressions import eliminate_common_subexpressions
from .eliminate_dead_code import eliminate_dead_code
from .fold_constants import fold_constants
from .fold_shapes import fold_shapes
from .fold_transpose_into_matmul import fold_transpose_into_matmul
from .fuse_attention import fuse_attention
from .fuse_elementwise import fuse_elementwise
from .fuse_gelu import fuse_gelu
from .fuse_gemm import fuse_gemm
from .fuse_layer_norm import fuse_layer_norm
from .fuse_rms_norm import fuse_rms_norm
from .fuse_softmax import fuse_softmax
from .pipeline import default_pipeline, run_pipeline
from .simplify_algebra import simplify_algebra
from .specialize import specialize_graph
from .transform import DefaultsOptions, OptimizeReport, Transform, transform
from .vectorize_loops import vectorize_loops

__all__ = [
    "DefaultsOptions",
    "OptimizeReport",
    "Transform",
    "default_pipeline",
    "eliminate_common_subexpressions",
    "eliminate_dead_code",
    "fold_constants",
    "fold_shapes",
    "fold_transpose_into_matmul",
    "fuse_attention",
    "fuse_elementwise",
    "fuse_gelu",
    "fuse_gemm",
    "fuse_layer_norm",
    "fuse_rms_norm",
    "fuse_softmax",
    "simplify_algebra",
    "specialize_graph",
    "run_pipeline",
    "transform",
    "vectorize_loops",
]
