"""Remove nodes and constants no graph output depends on."""

from __future__ import annotations

from ..ir.graph import ModelGraph
from .transform import DefaultsOptions, transform

__all__ = ["eliminate_dead_code"]


@transform("eliminate_dead_code")
def eliminate_dead_code(graph: ModelGraph, options: DefaultsOptions) -> tuple[ModelGraph, int]:
    """Drop every node whose outputs are unused and every unused constant (all kiln operators
    are pure, so an unused result can go)."""
    live = {id(v) for v in graph.output_values}
    kept = []
    for node in reversed(graph.nodes):
        if any(id(v) in live for v in node.outputs):
            kept.append(node)
            live.update(id(v) for v in node.inputs if v is not None)
    kept.reverse()
    constants = [c for c in graph.constants if id(c.value) in live]
    removed = len(graph.nodes) - len(kept) + len(graph.constants) - len(constants)
    if not removed:
        return graph, 0
    return graph.with_body(kept, constants=constants), removed
