"""The runtime layer: what a :class:`~kiln.io.ModelGraph`'s lifecycle methods delegate to.

The IR (:mod:`kiln.ir`) is data. Finalizing a graph needs the executors (:mod:`kiln.exec`),
optimizing it the optimizer (:mod:`kiln.optim`), saving it the exporter (:mod:`kiln.io`); all
of them import the IR, so the IR cannot import them. This module, the one layer above all
three, implements the IR's :class:`~kiln.ir.graph.GraphRuntime` and installs itself when kiln
is imported. It owns what a finalized graph is: a :class:`Program`, the plan of one engine at
one place.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .exec import build_plan
from .exec.plan import Plan
from .io.onnx_export import save, to_onnx
from .ir.graph import ModelGraph, install_runtime
from .optim.pipeline import run_pipeline
from .optim.transform import DefaultsOptions, OptimizeReport, Transform

__all__ = ["Program", "GraphRuntime"]


class Program:
    """A finalized graph: the plan that runs it on one engine at one place.

    ``check_inputs`` and ``run_arrays`` are the plan's own callables (no indirection on the
    replay path); ``run`` checks, runs and wraps the results as tensors.

    Example:
        >>> import kiln
        >>> g = kiln.trace(lambda x: x * 2, kiln.ones((3,), "float32")).graph
        >>> g.finalize("numpy")
        >>> g.program.engine
        'numpy'
    """

    __slots__ = ("plan", "place", "requested_engine", "check_inputs", "run_arrays")

    def __init__(self, graph: ModelGraph, place: object, engine: str | None) -> None:
        self.plan: Plan = build_plan(graph, place, engine)
        self.place = place
        self.requested_engine = engine  # None: chosen by measurement (see kiln.exec.select)
        self.check_inputs = self.plan.check_inputs
        self.run_arrays = self.plan.run_arrays

    @property
    def engine(self) -> str:
        """The engine that runs the graph (``"numpy"``, ``"jax"``, ``"onnxruntime"``, ...)."""
        return self.plan.engine

    def run(self, inputs: Sequence[Any] | Mapping[str, Any]) -> list:
        """Run on flat inputs (signature order, or by name); returns the output tensors."""
        return self.plan.run(inputs)

    def bindings(self, arrays: Sequence[np.ndarray]) -> dict[str, int]:
        """The size each named symbolic dimension takes for checked input ``arrays``."""
        return self.plan.bindings(arrays)

    def __repr__(self) -> str:
        return f"<Program on {self.engine}: {self.plan!r}>"


class GraphRuntime:
    """:class:`~kiln.ir.graph.GraphRuntime`: finalize, optimize and save graphs."""

    def finalize(self, graph: ModelGraph, place: object, engine: str | None) -> Program:
        return Program(graph, place, engine)

    def optimize(
        self,
        graph: ModelGraph,
        transforms: Sequence[Transform] | None,
        max_num_iterations: int,
        defaults: DefaultsOptions | None,
    ) -> tuple[ModelGraph, OptimizeReport]:
        return run_pipeline(graph, transforms, max_num_iterations, defaults)

    def save(self, graph: ModelGraph, path: str | os.PathLike[str]) -> None:
        save(graph, path)

    def to_onnx(self, graph: ModelGraph) -> object:
        return to_onnx(graph)


install_runtime(GraphRuntime())
