"""Executors: turn a finalized graph into a plan for its place, and run it.

A plan has ``check_inputs(inputs) -> arrays``, ``run_arrays(arrays) -> list[np.ndarray]`` and
``run(inputs) -> list[Tensor]``. :func:`build_plan` picks the engine:

* ``"numpy"``: :class:`~kiln.exec.cpu.CpuPlan`, straight-line generated NumPy code (the
  embedded default, fast for small graphs);
* ``"jax"``: :class:`~kiln.exec.jax_engine.JaxPlan`, the graph lowered to XLA (needs jax);
* ``"onnxruntime"``: :class:`~kiln.exec.ort_engine.OrtPlan` (needs onnxruntime and onnx);
* ``"reference"``: :class:`ReferencePlan`, the node-by-node interpreter every engine is
  tested against;
* ``None``: chosen per graph among the installed engines that run every node with NumPy's
  answer, by measured cost with a stable rule (:func:`kiln.exec.select.choose`). Engines
  never change an answer (SPEC 5b): a forced engine that cannot run a node exactly raises
  :class:`~kiln.errors.UnsupportedOperationError` naming the node.

An accelerator executor plugs in here by device type.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..device import as_device, require_backend
from .cpu import CpuPlan
from .reference import ReferencePlan

if TYPE_CHECKING:
    from ..ir.graph import ModelGraph

__all__ = ["ENGINES", "build_plan", "CpuPlan", "ReferencePlan"]


ENGINES = ("numpy", "jax", "onnxruntime", "reference")


def build_plan(
    graph: ModelGraph,
    place: object,
    engine: str | None = None,
    reference: tuple[Sequence[np.ndarray], Sequence[np.ndarray]] | None = None,
) -> Any:
    """The plan that runs ``graph`` at ``place`` (``None``: the CPU) on ``engine``
    (``None``: the fastest installed engine for this graph that gives NumPy's answer, see
    :mod:`kiln.exec.select`; ``reference``, checked inputs and the outputs they must give,
    is what each candidate is also checked against).

    Raises :class:`~kiln.errors.DeviceUnavailableError` saying what to install when an engine
    asked for by name is not installed, and
    :class:`~kiln.errors.UnsupportedOperationError` when it cannot run the graph.

    Example:
        >>> import kiln
        >>> g = kiln.trace(lambda x: x * 2, kiln.ones((3,), "float32")).graph
        >>> type(build_plan(g, None, "numpy")).__name__
        'CpuPlan'
    """
    device = as_device(place)  # type: ignore[arg-type]
    require_backend(device)
    if engine not in (None, *ENGINES):
        raise ValueError(f"unknown engine {engine!r}; kiln has {list(ENGINES)}")
    if engine == "reference":
        return ReferencePlan(graph)
    if engine == "numpy":
        return CpuPlan(graph)
    if engine == "jax":
        from .jax_engine import JaxPlan

        return JaxPlan(graph)
    if engine == "onnxruntime":
        from .ort_engine import OrtPlan

        return OrtPlan(graph)
    from .select import choose

    return choose(graph, reference=reference)
