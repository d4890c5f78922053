"""kiln's graph IR: values, nodes, constants and :class:`ModelGraph`."""

from __future__ import annotations

from .graph import Constant, ModelGraph, NameScope, Node, Value, verify_graph

__all__ = ["Constant", "ModelGraph", "NameScope", "Node", "Value", "verify_graph"]
