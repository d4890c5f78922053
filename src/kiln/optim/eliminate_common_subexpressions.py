"""Merge nodes that compute the same thing, and constants that hold the same data."""

from __future__ import annotations

from collections.abc import Hashable, Mapping

import numpy as np

from ..ir.graph import Constant, ModelGraph, Node, Value
from ..ir.rewrite import substitute_node
from .transform import DefaultsOptions, transform

__all__ = ["eliminate_common_subexpressions"]

_MAX_CONSTANT_BYTES = 1 << 12  # compare constants' contents up to this size


def _attr_key(attrs: Mapping[str, object]) -> Hashable:
    if not attrs:
        return ()  # most nodes of an unrolled loop: nothing to sort
    items = sorted(attrs.items())  # (the names differ: values are never compared)
    for i, (k, v) in enumerate(items):
        if isinstance(v, np.ndarray):
            items[i] = (k, (v.dtype.str, v.shape, v.tobytes()))
    return tuple(items)


def _constant_key(c: Constant) -> Hashable | None:
    if c.data.nbytes > _MAX_CONSTANT_BYTES:
        return None
    return (c.data.dtype.str, c.data.shape, c.data.tobytes())


@transform("eliminate_common_subexpressions")
def eliminate_common_subexpressions(
    graph: ModelGraph, options: DefaultsOptions
) -> tuple[ModelGraph, int]:
    """Replace a node by an earlier one with the same operator, inputs and attributes, and a
    small constant by an earlier one with the same contents. A graph output keeps its own
    node, so output names stay distinct."""
    outputs = {id(v) for v in graph.output_values}
    mapping: dict[int, Value] = {}
    merged = 0
    constants: list[Constant] = []
    seen_constants: dict[Hashable, Value] = {}
    for c in graph.constants:
        key = _constant_key(c)
        if key is not None and key in seen_constants and id(c.value) not in outputs:
            mapping[id(c.value)] = seen_constants[key]
            merged += 1
            continue
        if key is not None:
            seen_constants.setdefault(key, c.value)
        constants.append(c)
    nodes: list[Node] = []
    seen: dict[Hashable, Node] = {}
    for node in graph.nodes:
        if mapping:
            node = substitute_node(node, mapping)
        attrs = node.attrs
        # (values hash and compare by identity: the inputs tuple itself is the key's part)
        key = (node.op, node.inputs, _attr_key(attrs) if attrs else (), len(node.outputs))
        earlier = seen.get(key)
        if earlier is not None and not any(id(v) in outputs for v in node.outputs):
            for old, new in zip(node.outputs, earlier.outputs):
                mapping[id(old)] = new
            merged += 1
            continue
        seen.setdefault(key, node)
        nodes.append(node)
    if not merged:
        return graph, 0
    return graph.with_body(nodes, constants=constants), merged
