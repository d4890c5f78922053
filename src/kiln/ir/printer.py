"""A readable printout of a :class:`~kiln.ir.graph.ModelGraph`: one line per node.

Example output::

    graph block(x: float32[B, 256]) -> (output: float32[B, 256])
      constants: w: float32[256, 256], b: float32[256]
      matmul: float32[B, 256] = MatMul(x, w)
      output: float32[B, 256] = Add(matmul, b)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..symbolic import Dim

if TYPE_CHECKING:
    from .graph import ModelGraph, Node, Value

__all__ = ["format_graph", "format_type", "format_node"]

_MAX_INLINE = 4  # constants this small print their values


def format_type(value: Value) -> str:
    return f"{value.dtype.name}[{', '.join(_dim(d) for d in value.shape)}]"


def _dim(d: Dim) -> str:
    return str(d)


def _attr(value: object) -> str:
    if isinstance(value, np.ndarray):
        if value.size <= _MAX_INLINE:
            return repr(value.tolist())
        return f"<{value.dtype.name}{list(value.shape)}>"
    if isinstance(value, float):
        return f"{value:g}"
    return repr(value)


def format_node(node: Node) -> str:
    outs = ", ".join(f"{v.name}: {format_type(v)}" for v in node.outputs)
    args = ", ".join("_" if v is None else v.name for v in node.inputs)
    attrs = ", ".join(f"{k}={_attr(v)}" for k, v in sorted(node.attrs.items()))
    call = f"{node.op}({args}{', ' if args and attrs else ''}{attrs})"
    line = f"{outs} = {call}"
    return line if node.name == node.outputs[0].name else f"{line}  # {node.name}"


def format_graph(graph: ModelGraph) -> str:
    ins = ", ".join(f"{v.name}: {format_type(v)}" for v in graph.input_values)
    outs = ", ".join(f"{v.name}: {format_type(v)}" for v in graph.output_values)
    lines = [f"graph {graph.name}({ins}) -> ({outs})"]
    if graph.constants:
        shown = []
        for c in graph.constants:
            text = f"{c.value.name}: {format_type(c.value)}"
            if c.data.size <= _MAX_INLINE:
                text += f" = {c.data.tolist()!r}"
            shown.append(text)
        lines.append("  constants: " + ", ".join(shown))
    lines.extend("  " + format_node(n) for n in graph.nodes)
    return "\n".join(lines)
