"""The default optimizer pipeline: the transforms ``optimize()`` runs when given none.

One iteration runs, in order:

0. dead code elimination first: a trace holds results nothing reads (the reads a write into a
   slice records, views made and dropped), and the passes after it need not look at them;
1. folding and simplification: shapes and constants fold, algebraic identities apply, and
   common subexpressions merge (so later patterns see one ``x - mean`` instead of two), and
   the iterations of an unrolled loop are batched back into array operations;
2. pattern fusions onto registry operators: LayerNorm, RMSNorm, GELU, softmax, then attention
   (it matches the ``Softmax`` node the softmax fusion made);
3. matrix products: transposes fold into Gemm flags, MatMul + bias becomes Gemm;
4. elementwise fusion last, so it only groups what no pattern claimed (only when asked for:
   see :func:`default_pipeline`);
5. dead code elimination, removing what the rewrites left unused.

The driver repeats the iteration until nothing changes (``ModelGraph.default_max_iterations``
caps it); every pass is idempotent, so optimizing an optimized graph reports zero changes.
A pass is a function of the graph alone, so the driver does not run one again on the very
graph it last left unchanged (the last iteration, which only confirms the fixed point, then
runs just the passes before the last change). Every pass, and the rewrite driver of
:mod:`kiln.optim.pattern`, must do work linear in the size of the graph (issue 13: traces of
unrolled loops reach 100,000 nodes); ``tests/test_graph_size.py`` counts it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..errors import GraphValidationError
from ..ir.collector import collector_paused
from .eliminate_common_subexpressions import eliminate_common_subexpressions
from .eliminate_dead_code import eliminate_dead_code
from .fold_constants import fold_constants
from .fold_full_overwrites import fold_full_overwrites
from .fold_scatters import fold_scatters
from .fold_shapes import fold_shapes
from .fold_transpose_into_matmul import fold_transpose_into_matmul
from .forward_scatter_reads import forward_scatter_reads
from .fuse_attention import fuse_attention
from .fuse_elementwise import fuse_elementwise
from .fuse_gelu import fuse_gelu
from .fuse_gemm import fuse_gemm
from .fuse_layer_norm import fuse_layer_norm
from .fuse_rms_norm import fuse_rms_norm
from .fuse_softmax import fuse_softmax
from .lower_contiguous_writes import lower_contiguous_writes
from .pattern import remember_declines
from .scatter_writes import forget_writes
from .simplify_algebra import simplify_algebra
from .transform import DefaultsOptions, OptimizeReport, Transform
from .vectorize_loops import vectorize_loops

if TYPE_CHECKING:
    from ..ir.graph import ModelGraph

__all__ = ["default_pipeline", "run_pipeline", "verify_every_transform"]

# Check the graph after every transform even when the options do not ask for it. Off in use
# (verify costs about as much as a pass); the test suite turns it on (tests/conftest.py), so a
# transform that breaks the IR fails the test that ran it, naming the transform.
_verify_always = False


def verify_every_transform(enabled: bool = True) -> bool:
    """Check ``graph.verify()`` before the pipeline and after every transform of every
    :func:`run_pipeline` from now on (``enabled``), or only when ``DefaultsOptions.verify``
    asks (not ``enabled``); returns the previous setting.

    Example:
        >>> previous = verify_every_transform(True)
        >>> _ = verify_every_transform(previous)
    """
    global _verify_always
    previous = _verify_always
    _verify_always = bool(enabled)
    return previous


def default_pipeline(elementwise_fusion: bool = False) -> list[Transform]:
    """The built-in transforms, in the order one iteration applies them.

    Args:
        elementwise_fusion: Also run :func:`~kiln.optim.fuse_elementwise` (numexpr) last. Off
            by default: measured on the 2-core development machine, numexpr evaluated a fused
            tanh-GELU on 4096x1024 float32 in 33-75 ms against 8-13 ms for NumPy's own
            operators (NumPy 2's SIMD ``tanh`` is about 100x faster than numexpr's without
            VML), and even pure arithmetic chains ran about 2x slower.

    Example:
        >>> [t.name for t in default_pipeline()][:3]
        ['eliminate_dead_code', 'fold_shapes', 'fold_constants']
    """
    return [
        eliminate_dead_code,  # what the trace recorded and nothing reads
        fold_shapes,
        fold_constants,
        simplify_algebra,
        fold_scatters,  # functionalized writes: chains of constant-index scatters
        fold_full_overwrites,
        forward_scatter_reads,
        lower_contiguous_writes,
        eliminate_common_subexpressions,
        vectorize_loops,  # unrolled loops (a Concat of alike iterations) batched back
        eliminate_dead_code,
        fuse_layer_norm,
        fuse_rms_norm,
        fuse_gelu,
        fuse_softmax,
        fuse_attention,
        fold_transpose_into_matmul,
        fuse_gemm,
        *([fuse_elementwise] if elementwise_fusion else []),
        eliminate_dead_code,
    ]


def run_pipeline(
    graph: ModelGraph,
    transforms: Sequence[Transform] | None,
    max_num_iterations: int,
    defaults: DefaultsOptions | None,
) -> tuple[ModelGraph, OptimizeReport]:
    """Apply ``transforms`` (the default pipeline when None) to a fixed point or the cap."""
    if max_num_iterations < 1:
        raise ValueError(f"max_num_iterations must be at least 1, got {max_num_iterations}")
    options = defaults or DefaultsOptions()
    pipeline = list(default_pipeline() if transforms is None else transforms)
    for t in pipeline:
        if not isinstance(t, Transform):
            raise TypeError(f"optimize() takes kiln.optim.Transform objects, got {t!r}")
    verify = options.verify or _verify_always
    if verify:
        graph.verify()  # a broken input is not the first transform's fault
    report = OptimizeReport(nodes_before=len(graph.nodes))
    start = time.perf_counter()
    current = graph
    remember_declines(True)  # which rules declined at which nodes, across passes
    try:
        with collector_paused():  # (kiln.ir.collector: full collections walk every node)
            current = _iterate(current, pipeline, max_num_iterations, options, verify, report)
    finally:
        forget_writes()  # what the passes over writes remembered of this run's graphs
        remember_declines(False)
    report.nodes_after = len(current.nodes)
    report.seconds = time.perf_counter() - start
    return current, report


def _iterate(
    current: ModelGraph,
    pipeline: Sequence[Transform],
    max_num_iterations: int,
    options: DefaultsOptions,
    verify: bool,
    report: OptimizeReport,
) -> ModelGraph:
    # For each position in the pipeline, the graph its pass last changed nothing in: a pass
    # is a function of the graph (and the options), so it would change nothing there again.
    settled: list[ModelGraph | None] = [None] * len(pipeline)
    for _ in range(max_num_iterations):
        counts: dict[str, int] = {}
        for position, t in enumerate(pipeline):
            if settled[position] is current:
                counts[t.name] = counts.get(t.name, 0)
                continue
            before = current
            current, n = t(current, options)
            counts[t.name] = counts.get(t.name, 0) + n
            settled[position] = current if not n and current is before else None
            if verify:
                try:
                    current.verify()
                except GraphValidationError as exc:
                    raise GraphValidationError(
                        f"the optimizer pass {t.name} left an invalid graph: {exc}"
                    ) from exc
        report.rewrites.append(counts)
        report.iterations += 1
        if not any(counts.values()):
            report.fixed_point = True
            break
    return current
