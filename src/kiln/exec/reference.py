"""The reference executor: interprets a graph node by node through the registry kernels.

It is the oracle every faster executor is tested against, so it stays obviously right: read
the inputs of each node from an environment, run the kernel, write the outputs back. All state
of a run lives in a local list, so concurrent runs of one plan are safe. Outputs share memory
with no input, constant or other output (:func:`~kiln.exec.plan.output_copies`): one that
might is copied.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..ops.control import bind_subgraphs, has_subgraphs
from ..ops.dispatch import as_outputs
from ..ops.registry import get_op
from .inputs import InputChecker
from .plan import Plan, output_copies

if TYPE_CHECKING:
    from ..ir.graph import ModelGraph, Node

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
                *_kernel(node),
                tuple(-1 if v is None else slot[id(v)] for v in node.inputs),
                tuple(slot[id(v)] for v in node.outputs),
            )
            for node in graph.nodes
        )
        self.output_slots = tuple(slot[id(v)] for v in graph.output_values)
        ufunc_outputs = {
            id(v)
            for node in graph.nodes
            if isinstance(get_op(node.op).kernel, np.ufunc)
            for v in node.outputs
        }
        # (output index, its slot, always copy, slots of the arrays it must not be) per
        # output that could share memory with an input, a constant or another output.
        copies = output_copies(graph, lambda v: id(v) in ufunc_outputs)
        self.copies = tuple(
            (k, s, copy.action == "copy", tuple(slot[id(w)] for w in copy.distinct))
            for k, (s, copy) in enumerate(zip(self.output_slots, copies))
            if copy.action != "keep"
        )

    def run_arrays(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        env: list[Any] = [None] * self.size
        for s, data in self.constants:
            env[s] = data
        for s, array in zip(self.input_slots, arrays):
            env[s] = array
        with np.errstate(all="ignore"):  # kernels' contract: warnings silenced (see run_kernel)
            for kernel, attrs, ins, outs in self.steps:
                results = as_outputs(kernel(*[None if i < 0 else env[i] for i in ins], **attrs))
                for s, r in zip(outs, results):
                    env[s] = r
        outputs = [env[s] for s in self.output_slots]
        for k, s, always, distinct in self.copies:
            array = env[s]
            if always:
                outputs[k] = array.copy()
            elif array.base is not None or any(array is env[d] for d in distinct):
                outputs[k] = env[s] = array.copy()
        return outputs


def _kernel(node: Node) -> tuple[Callable[..., Any], dict[str, Any]]:
    """The registry kernel of ``node`` and its bound attributes; for If/Loop/Scan, a kernel
    running the subgraphs on this interpreter too."""
    opdef = get_op(node.op)
    attrs = opdef.bind_attrs(node.attrs)
    if has_subgraphs(opdef):
        return bind_subgraphs(node.op, attrs, lambda g: ReferencePlan(g).run_arrays), {}
    return opdef.kernel, attrs


def interpret(graph: ModelGraph, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Run ``graph`` on ``arrays`` (signature order) with the reference interpreter."""
    return ReferencePlan(graph).run_arrays(list(arrays))
