"""Small helpers passes share to rebuild nodes after values are replaced, and to drop what
no output needs."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from .graph import ModelGraph, Node, Value

__all__ = ["substitute", "substitute_node", "uses", "remove_unused"]


def substitute_node(node: Node, mapping: Mapping[int, Value]) -> Node:
    """``node`` with each input found in ``mapping`` (by id) replaced; the same node if none."""
    inputs = tuple(None if v is None else mapping.get(id(v), v) for v in node.inputs)
    if all(a is b for a, b in zip(inputs, node.inputs)):
        return node
    return Node(node.op, inputs, node.outputs, node.attrs, node.name, node.source)


def substitute(nodes: Iterable[Node], mapping: Mapping[int, Value]) -> list[Node]:
    """Every node with its inputs substituted through ``mapping``."""
    if not mapping:
        return list(nodes)
    return [substitute_node(n, mapping) for n in nodes]


def uses(nodes: Iterable[Node]) -> dict[int, int]:
    """How many times each value (by id) is used as a node input."""
    counts: dict[int, int] = {}
    for node in nodes:
        for v in node.inputs:
            if v is not None:
                counts[id(v)] = counts.get(id(v), 0) + 1
    return counts


def remove_unused(graph: ModelGraph) -> tuple[ModelGraph, int]:
    """``graph`` without the nodes and constants no graph output depends on, and how many were
    removed (0: ``graph`` itself comes back). Every kiln operator is pure, so an unused result
    can go. The ``eliminate_dead_code`` pass, and the rewrite driver after each sweep, use it.

    Example:
        >>> import kiln, numpy as np
        >>> def f(x):
        ...     kiln.exp(x)  # computed, never used
        ...     return x + 1.0
        >>> g, n = remove_unused(kiln.trace(f, np.ones(2, np.float32)).graph)
        >>> n, [node.op for node in g.nodes]
        (1, ['Add'])
    """
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
