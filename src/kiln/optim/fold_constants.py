"""Compute nodes whose inputs are all constants once, at optimization time."""

from __future__ import annotations

from ..ir.graph import Constant, ModelGraph
from ..ops.dispatch import run_kernel
from ..ops.registry import PURE
from ..symbolic import prod
from .transform import DefaultsOptions, transform

__all__ = ["fold_constants"]


@transform("fold_constants")
def fold_constants(graph: ModelGraph, options: DefaultsOptions) -> tuple[ModelGraph, int]:
    """Replace each pure node whose inputs are all constants by constants holding its results,
    as long as the results are small (``options.constant_folding_limit`` elements). The
    results keep the node's output values, so names and types are unchanged."""
    data = {id(c.value): c.data for c in graph.constants}
    constants = list(graph.constants)
    nodes = []
    folded = 0
    for node in graph.nodes:
        opdef = node.opdef
        foldable = (
            PURE in opdef.traits
            and all(v is None or id(v) in data for v in node.inputs)
            # a data-dependent size must already be known, or the constant would not fit its type
            and _small(node.outputs, options.constant_folding_limit)
        )
        if not foldable:
            nodes.append(node)
            continue
        arrays = [None if v is None else data[id(v)] for v in node.inputs]
        results = run_kernel(opdef, arrays, opdef.bind_attrs(node.attrs))
        for value, array in zip(node.outputs, results):
            array.flags.writeable = False
            data[id(value)] = array
            constants.append(Constant(value, array))
        folded += 1
    if not folded:
        return graph, 0
    return graph.with_body(nodes, constants=constants), folded


def _small(values: tuple, limit: int) -> bool:
    total = 0
    for v in values:
        size = prod(v.shape)
        if not isinstance(size, int):
            return False
        total += size
    return total <= limit
