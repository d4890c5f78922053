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
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import numpy as np

from .exec import build_plan
from .exec.plan import Plan
from .io.onnx_export import save, to_onnx
from .ir.graph import ModelGraph, install_runtime
from .optim.pipeline import run_pipeline
from .optim.transform import DefaultsOptions, OptimizeReport, Transform

__all__ = ["Program", "GraphRuntime", "selection_reference"]

Reference = tuple[Sequence[np.ndarray], Sequence[np.ndarray]]
# What the automatic engine selection checks its candidates against while a graph is finalized
# inside selection_reference(...): checked inputs and the outputs they must give.
_REFERENCE: ContextVar[Reference | None] = ContextVar("kiln_selection_reference", default=None)


@contextmanager
def selection_reference(
    inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray]
) -> Iterator[None]:
    """Within the block, finalizing a graph with the automatic engine choice checks each
    candidate engine's outputs on ``inputs`` (the graph's inputs, in order) against
    ``outputs`` (what NumPy gave: a compiled function passes its first call's eager result),
    and keeps an engine only if they agree (:func:`kiln.exec.select.same_answer`).

    Example:
        >>> import kiln, numpy as np
        >>> g = kiln.trace(lambda x: x * 2, kiln.ones((3,), "float32")).graph
        >>> x = np.ones(3, np.float32)
        >>> with selection_reference([x], [x * 2]):
        ...     g.finalize()
        >>> g.program.engine
        'numpy'
    """
    token = _REFERENCE.set((list(inputs), list(outputs)))
    try:
        yield
    finally:
        _REFERENCE.reset(token)


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

    def __init__(
        self,
        graph: ModelGraph,
        place: object,
        engine: str | None,
        reference: Reference | None = None,
    ) -> None:
        self.plan: Plan = build_plan(graph, place, engine, reference)
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
        reference = _REFERENCE.get() if engine is None else None
        if reference is not None and not _fits(graph, reference):
            reference = None  # not this graph's inputs and outputs
        return Program(graph, place, engine, reference)

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


def _fits(graph: ModelGraph, reference: Reference) -> bool:
    """Whether ``reference`` holds an array of the right dtype and rank for each input and
    output of ``graph``."""
    inputs, outputs = reference
    pairs = [*zip(graph.input_values, inputs), *zip(graph.output_values, outputs)]
    return (
        len(inputs) == len(graph.input_values)
        and len(outputs) == len(graph.output_values)
        and all(
            isinstance(a, np.ndarray) and a.dtype == v.dtype and a.ndim == len(v.shape)
            for v, a in pairs
        )
    )


install_runtime(GraphRuntime())
