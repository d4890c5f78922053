"""Export a :class:`~kiln.ir.graph.ModelGraph` as an ONNX model.

kiln's operators carry the semantics of the ONNX operators of the same name, so export is a 1:1
translation: graph inputs and outputs become typed ``ValueInfoProto`` (symbolic sizes as named
``dim_param``), constants become initializers, each node becomes a ``NodeProto`` with the same
name, inputs, outputs and attributes. Operators of kiln's own domain (fused operators) are
written through their ``expand`` hook, which rewrites them into ONNX-domain nodes.

A graph's shape guards (``ModelGraph.shape_guards``) are not dropped: a size a guard pins
(``d0 == 7``) is written static, and every other guard becomes a check computed from the
inputs' shapes that makes the model fail at run time for sizes it refuses (see
:class:`_GuardChecks` and "Exporting shape guards" in docs/design.md).

The opset recorded is 21, or 23 when an operator needs it (``OpDef.since_version``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from ..dtypes import onnx_dtype_code
from ..errors import GraphValidationError, UnsupportedOperationError
from ..ir.builder import expand_node
from ..ir.graph import NameScope, Node, Value
from ..ir.sizes import bind_sizes, pinned_sizes
from ..ops.control import has_subgraphs
from ..ops.registry import REQUIRED, Attr, OpDef, TensorType, get_op
from ..symbolic import Dim, ShapeGuard, SymDim

if TYPE_CHECKING:
    import onnx

    from ..ir.graph import ModelGraph

__all__ = ["to_onnx", "save", "DEFAULT_OPSET", "NEWEST_OPSET"]

DEFAULT_OPSET = 21  # kiln's operators follow opset 21 semantics
NEWEST_OPSET = 23  # recorded when an operator (Attention, RMSNormalization) needs it
_IR_VERSION = 10  # the IR version that goes with opsets 21-23
_GUARDS_KEY = "kiln.shape_guards"  # model metadata: the guards the model checks, one a line
# model metadata "1": the graph was optimized with allow_reassociation, accepting that engines
# round otherwise than NumPy (ModelGraph.reassociation_allowed; kept by a save and load)
REASSOCIATION_KEY = "kiln.reassociation_allowed"


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

    A size that the graph's shape guards pin is written static; the other guards become
    checks that make the model fail at run time for sizes they refuse (a ``Gather`` node
    named after the guard raises), so the model never answers for sizes the graph does not
    hold for.

    Raises:
        UnsupportedOperationError: for complex numbers (ONNX has no complex operators), a
            kiln-domain operator without an ``expand`` hook, an attribute the chosen opset
            does not have, or a shape guard on a size that no input axis gives.
        GraphValidationError: for shape guards that no size satisfies.

    Example:
        >>> import kiln, numpy as np
        >>> g = kiln.trace(lambda x: x * 2, np.ones((2, 3), np.float32)).graph
        >>> model = kiln.io.to_onnx(g)
        >>> [n.op_type for n in model.graph.node], model.opset_import[0].version
        (['Mul'], 21)
    """
    onnx = _onnx()
    helper = onnx.helper
    _refuse_complex(graph)
    if graph.shape_guards:
        graph = _pin_guarded_sizes(graph)
    scope = graph.name_scope()
    nodes = _onnx_domain_nodes(graph, scope)
    if opset is None:
        newest = max((_required_opset(n) for n in nodes), default=DEFAULT_OPSET)
        opset = DEFAULT_OPSET if newest <= DEFAULT_OPSET else max(NEWEST_OPSET, newest)
    graph_inputs = {id(v) for v in graph.input_values}
    graph_outputs = {id(v) for v in graph.output_values}
    initializers = [_tensor_proto(c.data, c.value.name) for c in graph.constants]
    node_protos = [_any_node_proto(node, opset, scope, _own_name) for node in nodes]
    # Intermediate types, so a reader sees every shape (symbolic sizes by name) without running
    # shape inference; outputs and inputs carry theirs in the signature.
    value_info = [
        _value_info(v)
        for node in nodes
        for v in node.outputs
        if id(v) not in graph_outputs and id(v) not in graph_inputs
    ]
    guards = [g for g in graph.shape_guards if not g.is_static()]  # static ones hold
    if guards:
        checks = _GuardChecks(graph, scope)
        node_protos, value_info = checks.encode(guards, node_protos, value_info)
        initializers += checks.initializers
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
    props = {}
    if guards:  # for readers of the model (Netron shows them); the checks enforce them
        props[_GUARDS_KEY] = "\n".join(str(g) for g in guards)
    if graph.reassociation_allowed:
        props[REASSOCIATION_KEY] = "1"
    if props:
        helper.set_model_props(model, props)
    onnx.checker.check_model(model)
    return model


def _refuse_complex(graph: ModelGraph) -> None:
    """Raise naming the first operator that computes on complex numbers, which ONNX (and so
    onnxruntime) has no form of: ONNX's complex64/complex128 tensor types exist, but no
    operator takes them."""
    for node in graph.nodes:
        for v in (*node.inputs, *node.outputs):
            if v is not None and v.dtype.kind == "c":
                raise UnsupportedOperationError(
                    f"node {node.name!r}: ONNX has no complex {node.op} ({v.name!r} is "
                    f"{v.dtype}), so the graph cannot be exported nor run by onnxruntime; keep "
                    "complex numbers out of a graph meant for ONNX (split them into real and "
                    "imaginary parts), or run it with kiln (engine='numpy')"
                )
    for v in graph.input_values:
        if v.dtype.kind == "c":
            raise UnsupportedOperationError(
                f"input {v.name!r} is {v.dtype}: ONNX has no complex operators, so the graph "
                "cannot be exported; run it with kiln (engine='numpy')"
            )


# -- nodes ---------------------------------------------------------------------------------


def _onnx_domain_nodes(graph: ModelGraph, scope: NameScope) -> list[Node]:
    """The graph's nodes with every kiln-domain operator expanded into ONNX-domain nodes
    (new values named in ``scope``)."""
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
    floating = (
        first is not None
        and first.dtype.kind == "f"
        or (first is not None and first.dtype.name == "bfloat16")
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


# -- control flow: kiln's closed subgraphs as ONNX subgraphs with outer-scope references ----


def _own_name(value: Value) -> str:
    return value.name


def _any_node_proto(
    node: Node, opset: int, scope: NameScope, rename: Callable[[Value], str]
) -> onnx.NodeProto:
    """``node`` as a NodeProto, its values named by ``rename``; If/Loop/Scan with their
    subgraphs (see :func:`_control_proto`)."""
    if has_subgraphs(get_op(node.op)):
        return _control_proto(node, opset, scope, rename)
    proto = _node_proto(node, opset)
    if rename is not _own_name:
        for fields, values in ((proto.input, node.inputs), (proto.output, node.outputs)):
            for i, v in enumerate(values[: len(fields)]):
                if v is not None:
                    fields[i] = rename(v)
    return proto


def _captures(node: Node) -> int:
    """How many of a control-flow node's inputs are captured values (kiln's closed form)."""
    if node.op == "If":
        return len(node.inputs) - 1
    return int(node.attrs.get("num_captures", 0))


def _control_proto(
    node: Node, opset: int, scope: NameScope, rename: Callable[[Value], str]
) -> onnx.NodeProto:
    """An If/Loop/Scan node in ONNX form: the captured inputs leave the node and its
    subgraphs read those outer values by name (ONNX's outer-scope references)."""
    onnx = _onnx()
    opdef = get_op(node.op)
    count = _captures(node)
    formal = node.inputs[: len(node.inputs) - count]
    outer = [rename(v) for v in node.inputs[len(formal) :] if v is not None]
    inputs = ["" if v is None else rename(v) for v in formal]
    while inputs and inputs[-1] == "" and node.op != "Loop":
        inputs.pop()
    plain = {
        k: v
        for k, v in node.attrs.items()
        if k != "num_captures" and opdef.attrs[k].kind != "graph"
    }
    stripped = Node(node.op, node.inputs, node.outputs, plain, node.name, node.source)
    attributes = [
        _attribute(opdef, name, value)
        for name, value in _exported_attrs(opdef, stripped, opset).items()
    ]
    for name, sub in sorted(node.attrs.items()):
        if opdef.attrs[name].kind == "graph":
            body = _subgraph_proto(sub, outer, opset, scope)
            attributes.append(onnx.helper.make_attribute(name, body))
    proto = onnx.helper.make_node(
        opdef.name, inputs, [rename(v) for v in node.outputs], name=node.name
    )
    proto.attribute.extend(attributes)
    if node.source:
        proto.doc_string = node.source
    return proto


def _subgraph_proto(
    sub: ModelGraph, outer: list[str], opset: int, scope: NameScope
) -> onnx.GraphProto:
    """A kiln subgraph as an ONNX GraphProto: its captured inputs (the last ``len(outer)``)
    become references to the outer values ``outer``; every other value gets a name unique in
    the whole model (``scope``). Sizes of the subgraph's inputs and outputs are left unknown
    (they may change from one iteration to the next)."""
    onnx = _onnx()
    helper = onnx.helper
    n_formal = len(sub.input_values) - len(outer)
    names: dict[int, str] = {}
    for k, v in enumerate(sub.input_values):
        names[id(v)] = outer[k - n_formal] if k >= n_formal else scope.fresh(v.name)
    for c in sub.constants:
        names[id(c.value)] = scope.fresh(c.value.name)
    for n in sub.nodes:
        for v in n.outputs:
            names[id(v)] = scope.fresh(v.name)

    def rename(v: Value) -> str:
        return names.get(id(v), v.name)  # (values an expansion made are named in scope)

    protos = [_any_node_proto(n, opset, scope, rename) for n in _onnx_domain_nodes(sub, scope)]
    made = {id(v) for n in sub.nodes for v in n.outputs}
    outputs: list[onnx.ValueInfoProto] = []
    seen: set[int] = set()
    for v in sub.output_values:
        name = rename(v)
        if id(v) not in made or id(v) in seen:  # an input, capture or constant: copied out
            name = scope.fresh(f"{v.name}_out")
            protos.append(helper.make_node("Identity", [rename(v)], [name], name=name))
        seen.add(id(v))
        outputs.append(_loose_value_info(name, v.type))
    return helper.make_graph(
        protos,
        scope.fresh(sub.name or "body"),
        [_loose_value_info(rename(v), v.type) for v in sub.input_values[:n_formal]],
        outputs,
        initializer=[_tensor_proto(c.data, rename(c.value)) for c in sub.constants],
    )


def _loose_value_info(name: str, ttype: TensorType) -> onnx.ValueInfoProto:
    onnx = _onnx()
    dims = [d if isinstance(d, int) else None for d in ttype.shape]
    return onnx.helper.make_tensor_value_info(name, onnx_dtype_code(ttype.dtype), dims)


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


# -- shape guards --------------------------------------------------------------------------


def _pin_guarded_sizes(graph: ModelGraph) -> ModelGraph:
    """``graph`` with the sizes its shape guards pin made static in every type (a loop over
    ``range(x.shape[0])`` holds for one size only); refuses guards that no size satisfies."""
    pins = pinned_sizes(graph.shape_guards)
    for guard in graph.shape_guards:
        bound = guard.bind(pins)
        if bound.is_static() and not bound.holds({}):
            pinned = ", ".join(f"{k} = {v}" for k, v in sorted(pins.items()))
            raise GraphValidationError(
                f"graph {graph.name!r}: its shape guard {_guard_text(guard)} is false"
                + (f" with the sizes its guards pin ({pinned})" if pins else "")
                + ", so the graph accepts no input and has no ONNX form; trace the function "
                "again (kiln.trace with example inputs of the sizes the model is for)"
            )
    if pins:
        graph = bind_sizes(graph, pins)
    return graph


def _guard_text(guard: ShapeGuard) -> str:
    """``d0 > 1`` with what the code compared and where (for messages and node names)."""
    what = guard.what if guard.what != str(guard) else ""
    origin = " at ".join(part for part in (what, guard.where) if part)
    return f"`{guard}`" + (f" ({origin})" if origin else "")


_COMPARE = {"==": "Equal", "<": "Less", "<=": "LessOrEqual", ">": "Greater", ">=": "GreaterOrEqual"}


class _GuardChecks:
    """ONNX nodes that make a model fail at run time for sizes its shape guards refuse.

    Each guard ``left op right`` is computed from the inputs' shapes (``Shape`` of the axis
    that gives each symbol, then the guard's size arithmetic on int64 ``[1]`` tensors) into
    ``ok`` (1 or 0), and checked by a ``Gather`` from the one-element tensor ``[1]`` at index
    ``1 - ok``: ``[1]`` when the guard holds, an index out of range, a run-time error naming
    the guard (the node's name), when it does not. The checks' product (``[1]``) then feeds
    every graph output that a node computes: ``y = Reshape(y_raw, Shape(y_raw) * check)``, a
    no-op reshape, so no runtime can compute an output without the checks. A runtime that
    drops that reshape by types (kiln's optimizer, after ``kiln.io.load``) still runs the
    checks: a ``Gather`` whose index is unknown can raise, so neither kiln's dead-code removal
    nor onnxruntime skips it when nothing uses its result.
    """

    def __init__(self, graph: ModelGraph, scope: NameScope) -> None:
        self.graph = graph
        self.scope = scope
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._constants: dict[int, str] = {}
        self._sizes: dict[object, str] = {}  # Dim or atom -> the int64 [1] value computing it
        self._divisors: dict[str, str] = {}  # a symbolic divisor's value -> its text
        self._sources: dict[str, tuple[str, int]] = {}  # symbol -> (input name, axis)
        for v in graph.input_values:
            for axis, d in enumerate(v.shape):
                if isinstance(d, SymDim) and d.is_symbol():
                    self._sources.setdefault(d.name, (v.name, axis))

    def encode(
        self,
        guards: list[ShapeGuard],
        body: list[onnx.NodeProto],
        value_info: list[onnx.ValueInfoProto],
    ) -> tuple[list[onnx.NodeProto], list[onnx.ValueInfoProto]]:
        """The model's nodes and value infos with the checks of ``guards`` added."""
        checks = [self._check(g) for g in guards]
        checks += [self._nonzero(name, text) for name, text in self._divisors.items()]
        check = checks[0]
        for other in checks[1:]:
            check = self._node("Mul", [check, other], "shape_guards")
        produced = {name for proto in body for name in proto.output}
        renamed = {
            v.name: self.scope.fresh(f"{v.name}_unguarded")
            for v in self.graph.output_values
            if v.name in produced
        }
        for proto in body:
            for field in (proto.input, proto.output):
                for i, name in enumerate(field):
                    field[i] = renamed.get(name, name)
        tail: list[onnx.NodeProto] = []
        guarded = self.nodes
        self.nodes = tail
        for v in self.graph.output_values:
            if v.name in renamed:
                raw = renamed[v.name]
                value_info.append(_value_info_of(raw, v.type))
                shape = self._node("Shape", [raw], f"{v.name}_shape")
                shape = self._node("Mul", [shape, check], f"{v.name}_shape")
                name = self.scope.fresh(f"{v.name}_guarded")
                self._node("Reshape", [raw, shape], v.name, out=v.name, name=name, allowzero=1)
        return guarded + body + tail, value_info

    # -- one guard ------------------------------------------------------------------------

    def _check(self, guard: ShapeGuard) -> str:
        """The int64 ``[1]`` value ``[1]``, computed by a node that fails unless ``guard``
        holds for the inputs' sizes."""
        missing = sorted(guard.symbols - self._sources.keys())
        if missing:
            raise UnsupportedOperationError(
                f"graph {self.graph.name!r}: shape guard {_guard_text(guard)} uses the size(s) "
                f"{', '.join(missing)}, which no input axis gives, so an ONNX model cannot check "
                "it; trace the function with static sizes (or kiln.trace with example inputs "
                "whose dynamic axes are the graph's inputs' axes) to export it"
            )
        diff = self._size(guard.left - guard.right)
        zero = self._constant(0)
        if guard.op == "!=":
            ok = self._node("Not", [self._node("Equal", [diff, zero], "guard_eq")], "guard_ok")
        else:
            ok = self._node(_COMPARE[guard.op], [diff, zero], "guard_ok")
        return self._fail_unless(ok, f"kiln shape guard {_guard_text(guard)}")

    def _nonzero(self, divisor: str, text: str) -> str:
        zero = self._node("Equal", [divisor, self._constant(0)], "divisor_zero")
        ok = self._node("Not", [zero], "guard_ok")
        return self._fail_unless(ok, f"kiln shape guard `{text} != 0` (a divisor of a guard)")

    def _fail_unless(self, ok: str, what: str) -> str:
        onnx = _onnx()
        flag = self._node("Cast", [ok], "guard_flag", to=onnx.TensorProto.INT64)
        index = self._node("Sub", [self._constant(1), flag], "guard_index")
        out = self.scope.fresh("shape_guard")
        message = f"{what} is false for these input sizes, which the model does not hold for"
        self._node("Gather", [self._constant(1), index], out, out=out, name=f"{out}: {message}")
        return out

    # -- sizes as int64 [1] tensors -------------------------------------------------------

    def _size(self, d: Dim) -> str:
        """The value computing size ``d`` from the inputs' shapes."""
        if isinstance(d, int):
            return self._constant(d)
        cached = self._sizes.get(d)
        if cached is not None:
            return cached
        total: str | None = None
        # The canonical polynomial (sum of coefficient * product of atoms), as the tracer's
        # size_tensor reads it.
        for mono, coef in d._terms:
            term = None if coef == 1 and mono else self._constant(coef)
            for atom, power in mono:
                for _ in range(power):
                    factor = self._atom(atom)
                    term = factor if term is None else self._node("Mul", [term, factor], "size")
            assert term is not None
            total = term if total is None else self._node("Add", [total, term], "size")
        assert total is not None
        self._sizes[d] = total
        return total

    def _atom(self, atom: Any) -> str:
        cached = self._sizes.get(atom)
        if cached is not None:
            return cached
        if isinstance(atom, str):
            name, axis = self._sources[atom]
            out = self._node("Shape", [name], atom, start=axis, end=axis + 1)
        else:
            kind, a, b = atom
            ta, tb = self._size(a), self._size(b)
            if kind in ("//", "%"):
                if not isinstance(b, int):  # Python raises for a zero divisor: so does the check
                    self._divisors.setdefault(tb, str(b))
                    is_zero = self._node("Equal", [tb, self._constant(0)], "divisor_zero")
                    tb = self._node("Where", [is_zero, self._constant(1), tb], "divisor")
                rem = self._node("Mod", [ta, tb], "size_mod", fmod=0)  # Python's %
                if kind == "%":
                    out = rem
                else:  # floor division: exact after taking away the remainder
                    out = self._node("Div", [self._node("Sub", [ta, rem], "size"), tb], "size")
            elif kind in ("max", "min"):
                out = self._node(kind.capitalize(), [ta, tb], f"size_{kind}")
            else:  # bcast: b where a is 1, else a
                is_one = self._node("Equal", [ta, self._constant(1)], "size_is_one")
                out = self._node("Where", [is_one, tb, ta], "size_bcast")
        self._sizes[atom] = out
        return out

    def _constant(self, n: int) -> str:
        name = self._constants.get(n)
        if name is None:
            name = self.scope.fresh(f"guard_const_{n}".replace("-", "neg"))
            self.initializers.append(_tensor_proto(np.asarray([n], dtype=np.int64), name))
            self._constants[n] = name
        return name

    def _node(
        self,
        op: str,
        inputs: list[str],
        hint: str,
        *,
        out: str | None = None,
        name: str = "",
        **attrs: Any,
    ) -> str:
        """Add one node; its output is ``out`` or a fresh name from ``hint``."""
        out = out or self.scope.fresh(hint)
        node = _onnx().helper.make_node(op, inputs, [out], name=name or out, **attrs)
        self.nodes.append(node)
        return out


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
