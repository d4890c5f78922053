"""Small helpers passes share to rebuild nodes after values are replaced."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from .graph import Node, Value

__all__ = ["substitute", "substitute_node", "uses"]


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
