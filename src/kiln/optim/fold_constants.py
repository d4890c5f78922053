"""Compute nodes whose inputs are all constants once, at optimization time."""

from __future__ import annotations

from ..ir.graph import Constant, ModelGraph
from ..ops.folding import fold
from .transform import DefaultsOptions, transform

__all__ = ["fold_constants"]


@transform("fold_constants")
def fold_constants(graph: ModelGraph, options: DefaultsOptions) -> tuple[ModelGraph, int]:
    """Replace each pure node whose inputs are all constants by constants holding its results,
    as long as the results are small (``options.constant_folding_limit`` elements: the
    optimizer's limit of :class:`~kiln.ops.folding.FoldingLimits`, which keeps a saved graph
    small). The results keep the node's output values, so names and types are unchanged."""
    data = {id(c.value): c.data for c in graph.constants}
    constants = list(graph.constants)
    nodes = []
    folded = 0
    for node in graph.nodes:
        results = None
        if all(v is None or id(v) in data for v in node.inputs):
            arrays = [None if v is None else data[id(v)] for v in node.inputs]
            # The recorded shapes are checked before computing: a data-dependent size must
            # already be known, or the constant would not fit its type.
            results = fold(
                node.opdef,
                arrays,
                node.opdef.bind_attrs(node.attrs),
                limit=options.constant_folding_limit,
                shapes=[v.shape for v in node.outputs],
            )
        if results is None:
            nodes.append(node)
            continue
        for value, array in zip(node.outputs, results):
            data[id(value)] = array
            constants.append(Constant(value, array))
        folded += 1
    if not folded:
        return graph, 0
    return graph.with_body(nodes, constants=constants), folded
