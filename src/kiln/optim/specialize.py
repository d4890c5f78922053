"""Specialize a graph to concrete input sizes: every symbolic size becomes an int.

Used by finalization with ``specialize=True``: the specialized graph's types are re-inferred
with the sizes bound, after which shape arithmetic folds away (:mod:`fold_shapes`,
:mod:`fold_constants`) and the executor can plan for fixed shapes.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..ir.graph import Constant, ModelGraph, Node, Value
from ..ops.registry import DATA_DEPENDENT_SHAPE, TensorType, get_op
from ..symbolic import SymDim, evaluate

__all__ = ["specialize_graph"]


def _bind(ttype: TensorType, sizes: Mapping[str, int]) -> TensorType:
    shape = tuple(
        evaluate(d, sizes) if isinstance(d, SymDim) and d.symbols <= sizes.keys() else d
        for d in ttype.shape
    )
    return TensorType(ttype.dtype, shape, ttype.value)


def specialize_graph(graph: ModelGraph, sizes: Mapping[str, int]) -> ModelGraph:
    """A copy of ``graph`` whose inputs have the symbolic sizes in ``sizes`` bound to ints,
    with every node's output types inferred again. Data-dependent sizes stay symbolic."""
    mapping: dict[int, Value] = {}
    inputs = []
    for v in graph.input_values:
        new = Value(v.name, _bind(TensorType(v.dtype, v.shape), sizes))
        mapping[id(v)] = new
        inputs.append(new)
    constants = []
    for c in graph.constants:
        new = Value(c.value.name, c.value.type)
        mapping[id(c.value)] = new
        constants.append(Constant(new, c.data))
    nodes = []
    for node in graph.nodes:
        opdef = get_op(node.op)
        ins = tuple(None if v is None else mapping[id(v)] for v in node.inputs)
        attrs = opdef.bind_attrs(node.attrs)
        inferred = list(opdef.infer([None if v is None else v.type for v in ins], attrs))
        outs = []
        for old, ttype in zip(node.outputs, inferred):
            if DATA_DEPENDENT_SHAPE in opdef.traits:
                ttype = TensorType(ttype.dtype, old.shape, ttype.value)
            new = Value(old.name, ttype)
            mapping[id(old)] = new
            outs.append(new)
        nodes.append(Node(node.op, ins, tuple(outs), node.attrs, node.name, node.source))
    return graph.with_body(nodes, [mapping[id(v)] for v in graph.output_values], constants, inputs)
