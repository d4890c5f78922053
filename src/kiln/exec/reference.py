"""The reference executor: interprets a graph node by node through the registry kernels.

It is the oracle every faster executor is tested against, so it stays obviously right: read
the inputs of each node from an environment, run the kernel, write the outputs back. All state
of a run lives in a local list, so concurrent runs of one plan are safe.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..ops.dispatch import as_outputs
from ..ops.registry import get_op
from .inputs import InputChecker
from .plan import Plan

if TYPE_CHECKING:
    from ..ir.graph import ModelGraph

__all__ = ["ReferencePlan", "interpret"]


class ReferencePlan(Plan):
    """A finalized graph's plan on the reference interpreter."""

    def __init__(self, graph: ModelGraph) -> None:
        self.graph = graph
        self.checker = InputChecker(graph)
        self.check_inputs = self.checker
        slot: dict[int, int] = {}
        for v in graph.values():
            slot[id(v)] = len(slot)
        self.size = len(slot)
        self.input_slots = tuple(slot[id(v)] for v in graph.input_values)
        self.constants = tuple((slot[id(c.value)], c.data) for c in graph.constants)
        self.steps = tuple(
            (
                get_op(node.op).kernel,
                tuple(-1 if v is None else slot[id(v)] for v in node.inputs),
                tuple(slot[id(v)] for v in node.outputs),
                get_op(node.op).bind_attrs(node.attrs),
            )
            for node in graph.nodes
        )
        self.output_slots = tuple(slot[id(v)] for v in graph.output_values)

    def run_arrays(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        env: list[Any] = [None] * self.size
        for s, data in self.constants:
            env[s] = data
        for s, array in zip(self.input_slots, arrays):
            env[s] = array
        with np.errstate(all="ignore"):  # kernels' contract: warnings silenced (see run_kernel)
            for kernel, ins, outs, attrs in self.steps:
                results = as_outputs(kernel(*[None if i < 0 else env[i] for i in ins], **attrs))
                for s, r in zip(outs, results):
                    env[s] = r
        return [env[s] for s in self.output_slots]


def interpret(graph: ModelGraph, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Run ``graph`` on ``arrays`` (signature order) with the reference interpreter."""
    return ReferencePlan(graph).run_arrays(list(arrays))
