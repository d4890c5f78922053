"""A readable printout of a :class:`~kiln.ir.graph.ModelGraph`: one line per node.

Example output::

    graph block(x: float32[B, 256]) -> (output: float32[B, 256])
      guard B != 1  # model.py:12 (block)
      w: float32[256, 256] = <65536 values>
      eps: float32[] = 1e-05
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


def _values(data: np.ndarray) -> str:
    """Small contents, floats in short form: ``1e-05``, ``[2, -1]``."""
    flat = [f"{v:.6g}" if isinstance(v, float) else repr(v) for v in data.reshape(-1).tolist()]
    return flat[0] if data.ndim == 0 else "[" + ", ".join(flat) + "]"


def _is_graph(value: object) -> bool:
    return hasattr(value, "output_values") and hasattr(value, "nodes")


def _attr(value: object) -> str:
    if _is_graph(value):
        return f"<graph {value.name}>"  # type: ignore[attr-defined]  # printed below the node
    if isinstance(value, np.ndarray):
        if value.size <= _MAX_INLINE:
            return _values(value)
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
    """The graph, one line per node; a node's subgraphs (If's branches, a Loop's body) follow
    it, indented, each headed by its attribute's name."""
    ins = ", ".join(f"{v.name}: {format_type(v)}" for v in graph.input_values)
    outs = ", ".join(f"{v.name}: {format_type(v)}" for v in graph.output_values)
    lines = [f"graph {graph.name}({ins}) -> ({outs})"]
    for guard in graph.shape_guards:
        where = f"  # {guard.where}" if guard.where else ""
        lines.append(f"  guard {guard}{where}")
    for c in graph.constants:
        text = f"  {c.value.name}: {format_type(c.value)} = "
        if c.data.size <= _MAX_INLINE:
            text += _values(c.data)
        else:
            text += f"<{c.data.size} values>"
        lines.append(text)
    for n in graph.nodes:
        lines.append("  " + format_node(n))
        for key, sub in sorted(n.attrs.items()):
            if _is_graph(sub):
                first, *rest = format_graph(sub).split("\n")  # type: ignore[arg-type]
                lines.append(f"    {key}: {first}")
                lines.extend("    " + line for line in rest)
    return "\n".join(lines)
