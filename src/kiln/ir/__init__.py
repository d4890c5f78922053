"""kiln's graph IR: values, nodes, constants, :class:`ModelGraph`, and the one builder of
typed nodes, :class:`GraphBuilder`."""

from __future__ import annotations

from .builder import GraphBuilder, expand_node
from .graph import Constant, ModelGraph, NameScope, Node, Value, verify_graph

__all__ = [
    "Constant",
    "GraphBuilder",
    "ModelGraph",
    "NameScope",
    "Node",
    "Value",
    "expand_node",
    "verify_graph",
]
