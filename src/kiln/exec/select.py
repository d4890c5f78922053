"""Choosing an engine for a graph by measured cost.

:func:`choose` builds the NumPy plan (always possible), and, when the graph's static work is
large enough for a compiler to matter (:func:`work_estimate`), the plans of the optional
engines that are installed and can run it; it times each on synthetic inputs of the graph's
static shapes and keeps the fastest. Tiny graphs never pay for the measurement: below
:data:`AUTO_MIN_WORK` the NumPy plan is returned at once. The timings are kept on the chosen
plan (``plan.selection``) so ``kiln.explain``-style tools and the benchmarks can show why.

Example:
    >>> import kiln, numpy as np
    >>> g = kiln.trace(lambda x: x + 1, kiln.ones((8,), "float32")).graph
    >>> choose(g).engine
    'numpy'
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ..ops.registry import get_op

if TYPE_CHECKING:
    from ..ir.graph import ModelGraph, Node

__all__ = ["AUTO_MIN_WORK", "work_estimate", "synthetic_inputs", "choose", "OPTIONAL_ENGINES"]

# Below this many estimated element operations (about 1 ms of NumPy), the NumPy plan wins or
# loses by microseconds and measuring costs more than it could save.
AUTO_MIN_WORK = 1_000_000
# How long one block of runs of a candidate may take (after its warm-up call), the runs in a
# block, and the passes over all candidates. Up to ~0.2 s for three engines on a big graph.
MEASURE_SECONDS = 0.03
MEASURE_MAX_RUNS = 30
MEASURE_PASSES = 2

OPTIONAL_ENGINES = ("jax", "onnxruntime")


def work_estimate(graph: ModelGraph) -> float | None:
    """Estimated element operations of one run: each node's output elements times its
    operator's ``cost`` per element (:class:`~kiln.ops.registry.OpDef`; multiply-adds for
    matrix products and convolutions). None when a shape is symbolic."""
    total = 0.0
    for node in graph.nodes:
        sizes = []
        for v in node.outputs:
            if not all(isinstance(d, int) for d in v.shape):
                return None
            sizes.append(math.prod(v.shape))
        total += float(sum(sizes)) * _cost_per_element(node)
    return total


def _cost_per_element(node: Node) -> float:
    """The element operations ``node`` spends per output element, from its operator's record."""
    opdef = get_op(node.op)
    if callable(opdef.cost):
        return opdef.cost(node.inputs, node.outputs, opdef.bind_attrs(node.attrs))
    return opdef.cost


def synthetic_inputs(graph: ModelGraph, seed: int = 0) -> list[np.ndarray] | None:
    """Inputs of the graph's static shapes (None when a shape is symbolic): floats in
    [-1, 1), integers 0 (a valid index everywhere), booleans False."""
    rng = np.random.default_rng(seed)
    arrays = []
    for v in graph.input_values:
        if not all(isinstance(d, int) for d in v.shape):
            return None
        shape = tuple(v.shape)
        if v.dtype.kind == "f" or v.dtype.name == "bfloat16":
            arrays.append(rng.uniform(-1, 1, shape).astype(v.dtype))
        else:
            arrays.append(np.zeros(shape, v.dtype))
    return arrays


def _best_seconds(runs: dict[str, Callable[[], Any]]) -> dict[str, float]:
    """The best time of each candidate, measured in blocks of consecutive runs (a replay runs
    one engine over and over, with its thread pool warm; interleaving engines would measure
    their thread pools fighting instead), in two passes so that a burst of load on the machine
    does not decide alone."""
    best = dict.fromkeys(runs, math.inf)
    for _ in range(MEASURE_PASSES):
        for name, run in runs.items():
            run()  # warm-up: compiles, allocates, wakes the engine's threads
            spent = 0.0
            for _ in range(MEASURE_MAX_RUNS):
                start = time.perf_counter()
                run()
                took = time.perf_counter() - start
                best[name] = min(best[name], took)
                spent += took
                if spent > MEASURE_SECONDS:
                    break
    return best


def _candidate(graph: ModelGraph, engine: str, numpy_plan: Any) -> Any:
    """The plan of optional ``engine`` for ``graph``, or None when it is not installed or
    cannot run the graph."""
    if engine == "jax":
        from . import jax_engine

        if not jax_engine.available() or jax_engine.unsupported_ops(graph):
            return None
        return jax_engine.JaxPlan(graph, fallback=numpy_plan)
    from . import ort_engine

    if not ort_engine.available():
        return None
    return ort_engine.OrtPlan(graph)


def choose(graph: ModelGraph, engines: tuple[str, ...] = OPTIONAL_ENGINES) -> Any:
    """The fastest plan for ``graph`` among NumPy and the installed optional ``engines``."""
    from .cpu import CpuPlan

    numpy_plan = CpuPlan(graph)
    work = work_estimate(graph)
    numpy_plan.selection = {"work": work}
    if work is None or work < AUTO_MIN_WORK:
        return numpy_plan
    arrays = synthetic_inputs(graph)
    if arrays is None:
        return numpy_plan
    plans: dict[str, Any] = {"numpy": numpy_plan}
    for engine in engines:
        try:
            plan = _candidate(graph, engine, numpy_plan)
            if plan is not None:
                plan.run_arrays(arrays)  # an engine that cannot run it is skipped silently
                plans[engine] = plan
        except Exception:
            continue
    try:
        timings = _best_seconds(
            {name: (lambda p=plan: p.run_arrays(arrays)) for name, plan in plans.items()}
        )
    except Exception:  # the synthetic inputs do not suit this graph: stay on NumPy
        return numpy_plan
    best = min(timings, key=timings.__getitem__)
    best_plan = plans[best]
    best_plan.selection = {"work": work, "seconds": timings, "chosen": best}
    return best_plan
