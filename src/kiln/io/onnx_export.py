"""Export a :class:`~kiln.ir.graph.ModelGraph` as an ONNX model.

kiln's operators carry the semantics of the ONNX operators of the same name, so export is a 1:1
translation: graph inputs and outputs become typed ``ValueInfoProto`` (symbolic sizes as named
``dim_param``), constants become initializers, each node becomes a ``NodeProto`` with the same
name, inputs, outputs and attributes. Operators of kiln's own domain (fused operators) are
written through their ``expand`` hook, which rewrites them into ONNX-domain nodes.

The opset recorded is 21, or 23 when an operator needs it (``OpDef.since_version``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from ..dtypes import onnx_dtype_code
from ..errors import UnsupportedOperationError
from ..ir.builder import expand_node
from ..ir.graph import Node, Value
from ..ops.registry import REQUIRED, Attr, OpDef, TensorType, get_op
from ..symbolic import SymDim

if TYPE_CHECKING:
    import onnx

    from ..ir.graph import ModelGraph

__all__ = ["to_onnx", "save", "DEFAULT_OPSET", "NEWEST_OPSET"]

DEFAULT_OPSET = 21  # kiln's operators follow opset 21 semantics
NEWEST_OPSET = 23  # recorded when an operator (Attention, RMSNormalization) needs it
_IR_VERSION = 10  # the IR version that goes with opsets 21-23


def _onnx() -> Any:
    try:
        import onnx
    except ImportError:  # pragma: no cover - depends on the environment
        raise UnsupportedOperationError(
            "ONNX export needs the 'onnx' package: pip install 'tensorkiln[onnx]' (or onnx)"
        ) from None
    return onnx


def save(graph: ModelGraph, path: str | os.PathLike[str], *, opset: int | None = None) -> None:
    """Write ``graph`` to ``path`` as an ONNX model file.

    Args:
        graph: The graph to write.
        path: The file to create (``.onnx`` by convention).
        opset: The ONNX opset to record; None picks 21, or 23 where an operator needs it.

    Example:
        >>> import kiln, numpy as np, tempfile, os
        >>> g = kiln.trace(lambda x: np.tanh(x), np.ones(2, np.float32)).graph
        >>> path = os.path.join(tempfile.mkdtemp(), "tanh.onnx")
        >>> kiln.io.save(g, path)
        >>> kiln.io.load(path).output_names
        ['output']
    """
    onnx = _onnx()
    onnx.save_model(to_onnx(graph, opset=opset), os.fspath(path))


def to_onnx(graph: ModelGraph, *, opset: int | None = None) -> onnx.ModelProto:
    """``graph`` as an ``onnx.ModelProto`` that ``onnx.checker`` accepts.

    Args:
        graph: The graph to convert.
        opset: The ONNX opset to record; None picks 21, or 23 where an operator needs it.

    Raises:
        UnsupportedOperationError: for a kiln-domain operator without an ``expand`` hook, or
            an attribute the chosen opset does not have.

    Example:
        >>> import kiln, numpy as np
        >>> g = kiln.trace(lambda x: x * 2, np.ones((2, 3), np.float32)).graph
        >>> model = kiln.io.to_onnx(g)
        >>> [n.op_type for n in model.graph.node], model.opset_import[0].version
        (['Mul'], 21)
    """
    onnx = _onnx()
    helper = onnx.helper
    nodes = _onnx_domain_nodes(graph)
    if opset is None:
        newest = max((_required_opset(n) for n in nodes), default=DEFAULT_OPSET)
        opset = DEFAULT_OPSET if newest <= DEFAULT_OPSET else max(NEWEST_OPSET, newest)
    graph_inputs = {id(v) for v in graph.input_values}
    graph_outputs = {id(v) for v in graph.output_values}
    initializers = [_tensor_proto(c.data, c.value.name) for c in graph.constants]
    node_protos = [_node_proto(node, opset) for node in nodes]
    # Intermediate types, so a reader sees every shape (symbolic sizes by name) without running
    # shape inference; outputs and inputs carry theirs in the signature.
    value_info = [
        _value_info(v)
        for node in nodes
        for v in node.outputs
        if id(v) not in graph_outputs and id(v) not in graph_inputs
    ]
    body = helper.make_graph(
        node_protos,
        graph.name or "kiln_graph",
        [_value_info(v) for v in graph.input_values],
        [_value_info(v) for v in graph.output_values],
        initializer=initializers,
        value_info=value_info,
    )
    model = helper.make_model(
        body,
        opset_imports=[helper.make_opsetid("", opset)],
        producer_name="kiln",
        ir_version=_IR_VERSION if opset <= NEWEST_OPSET else _ir_version_for(opset),
    )
    onnx.checker.check_model(model)
    return model


# -- nodes ---------------------------------------------------------------------------------


def _onnx_domain_nodes(graph: ModelGraph) -> list[Node]:
    """The graph's nodes with every kiln-domain operator expanded into ONNX-domain nodes."""
    scope = graph.name_scope()
    out: list[Node] = []

    def emit(node: Node, depth: int) -> None:
        opdef = get_op(node.op)
        if not opdef.domain:
            out.append(node)
            return
        if opdef.expand is None:
            raise UnsupportedOperationError(
                f"node {node.name!r}: operator {opdef.qualified_name} has no ONNX form (its "
                "OpDef has no expand hook), so the graph cannot be exported; run the graph "
                "without fusing it, or give the operator an expand(builder, inputs, attrs, "
                "outputs) hook"
            )
        if depth > 16:
            raise UnsupportedOperationError(
                f"node {node.name!r}: expanding {opdef.qualified_name} does not terminate"
            )
        for sub in expand_node(node, scope):
            emit(sub, depth + 1)

    for node in graph.nodes:
        emit(node, 0)
    return out


def _required_opset(node: Node) -> int:
    """The oldest opset whose schema expresses ``node``: the operator's ``since_version``, or
    a newer one where kiln uses a form ONNX added later."""
    needed = get_op(node.op).since_version
    first = node.inputs[0] if node.inputs else None
    floating = first is not None and first.dtype.kind == "f" or (
        first is not None and first.dtype.name == "bfloat16"
    )
    if node.op == "Attention" and len(node.inputs) > 6:
        needed = max(needed, 24)  # the nonpad_kv_seqlen input
    elif node.op == "Range" and first is not None and first.dtype.name in ("float16", "bfloat16"):
        needed = max(needed, 27)
    elif node.op == "Mod" and floating and not node.attrs.get("fmod", 0):
        needed = max(needed, 28)  # floor-mod on floats
    return needed


def _ir_version_for(opset: int) -> int:
    import onnx

    return int(onnx.helper.find_min_ir_version_for([onnx.helper.make_opsetid("", opset)]))


def _node_proto(node: Node, opset: int) -> onnx.NodeProto:
    onnx = _onnx()
    opdef = get_op(node.op)
    inputs = [("" if v is None else v.name) for v in node.inputs]
    while inputs and inputs[-1] == "":  # trailing omitted optionals are simply left out
        inputs.pop()
    attributes = [
        _attribute(opdef, name, value)
        for name, value in _exported_attrs(opdef, node, opset).items()
    ]
    proto = onnx.helper.make_node(
        opdef.name, inputs, [v.name for v in node.outputs], name=node.name
    )
    proto.attribute.extend(attributes)
    if node.source:
        proto.doc_string = node.source
    return proto


def _exported_attrs(opdef: OpDef, node: Node, opset: int) -> dict[str, Any]:
    """The attributes worth writing: values of None (ONNX's "absent") and empty-list defaults
    are left out, and so is a default-valued attribute the opset's schema does not know (kiln
    may carry a newer opset's attribute at its default)."""
    known = _schema_attributes(opdef.name, opset)
    written: dict[str, Any] = {}
    for name, value in node.attrs.items():
        spec = opdef.attrs.get(name)
        if value is None or spec is None:
            continue
        is_default = spec.default is not REQUIRED and _same_attr(value, spec.default)
        if is_default and (spec.default in ((), None) or (known is not None and name not in known)):
            continue
        if known is not None and name not in known:
            raise UnsupportedOperationError(
                f"node {node.name!r}: {opdef.name} attribute {name!r}={value!r} does not exist "
                f"in ONNX opset {opset}; export with a newer opset"
            )
        written[name] = value
    return written


def _schema_attributes(op: str, opset: int) -> set[str] | None:
    onnx = _onnx()
    try:
        return set(onnx.defs.get_schema(op, opset, "").attributes)
    except Exception:  # an operator the installed onnx does not know: the checker will say so
        return None


def _same_attr(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return False
    return bool(a == b)


def _attribute(opdef: OpDef, name: str, value: Any) -> onnx.AttributeProto:
    onnx = _onnx()
    helper = onnx.helper
    kind = opdef.attrs[name].kind if name in opdef.attrs else Attr("int").kind
    types = onnx.AttributeProto
    if kind == "int":
        return helper.make_attribute(name, int(value), attr_type=types.INT)
    if kind == "float":
        return helper.make_attribute(name, float(value), attr_type=types.FLOAT)
    if kind == "str":
        return helper.make_attribute(name, str(value), attr_type=types.STRING)
    if kind == "ints":
        return helper.make_attribute(name, [int(v) for v in value], attr_type=types.INTS)
    if kind == "floats":
        return helper.make_attribute(name, [float(v) for v in value], attr_type=types.FLOATS)
    if kind == "strs":
        return helper.make_attribute(name, [str(v) for v in value], attr_type=types.STRINGS)
    return helper.make_attribute(name, _tensor_proto(np.asarray(value), ""), attr_type=types.TENSOR)


# -- values and tensors --------------------------------------------------------------------


def _tensor_proto(data: np.ndarray, name: str) -> onnx.TensorProto:
    onnx = _onnx()
    # np.ascontiguousarray would turn a 0-d array into a 1-d one
    proto = onnx.numpy_helper.from_array(np.array(data, order="C"), name)
    if proto.data_type != onnx_dtype_code(data.dtype):
        raise UnsupportedOperationError(
            f"tensor {name!r}: dtype {data.dtype} is stored as ONNX type {proto.data_type}, "
            f"expected {onnx_dtype_code(data.dtype)}"
        )
    return proto


def dims_for_onnx(shape: Iterable[int | SymDim]) -> list[int | str]:
    """A kiln shape as ``make_tensor_value_info`` dims: ints stay, a symbolic size becomes its
    name (an expression such as ``2*B`` is written as that text).

    Example:
        >>> from kiln.symbolic import symbol
        >>> dims_for_onnx((symbol("B"), 3))
        ['B', 3]
    """
    return [d if isinstance(d, int) else str(d) for d in shape]


def _value_info(value: Value) -> onnx.ValueInfoProto:
    return _value_info_of(value.name, value.type)


def _value_info_of(name: str, ttype: TensorType) -> onnx.ValueInfoProto:
    onnx = _onnx()
    return onnx.helper.make_tensor_value_info(
        name, onnx_dtype_code(ttype.dtype), dims_for_onnx(ttype.shape)
    )
