"""Import an ONNX model as a :class:`~kiln.ir.graph.ModelGraph`.

Every ONNX node maps onto the registry operator of the same name. kiln implements the opset-21
form of each operator, so nodes written for an older opset are first rewritten into that form
(an attribute that became an input turns into a constant input, Upsample becomes Resize, the
2-D-coerced Softmax of opset < 13 becomes Flatten + Softmax + Reshape, ...). Graph inputs are
typed from the model (a ``dim_param`` becomes the symbol of that name, an unknown size a fresh
symbol); every other value is typed by running its operator's ``infer``, so the result passes
:meth:`ModelGraph.verify`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ..dtypes import dtype_from_onnx_code, string
from ..errors import (
    ArgumentTypeError,
    GraphValidationError,
    InputMismatchError,
    KilnError,
    UnsupportedOperationError,
)
from ..ir.builder import GraphBuilder
from ..ir.graph import ModelGraph, NameScope, Value
from ..ops.control import has_subgraphs
from ..ops.folding import FOLDING_LIMITS, fold, known_array
from ..ops.registry import TensorType, get_op
from ..symbolic import Dim, fresh_symbol, symbol
from .onnx_export import REASSOCIATION_KEY

if TYPE_CHECKING:
    import onnx

__all__ = ["load", "from_onnx", "MIN_OPSET", "MAX_OPSET", "SUPPORTED_DOMAINS"]

MIN_OPSET = 1  # older forms are rewritten where they differ (see _REWRITES)
# The newest opset kiln knows (onnx 1.23 defines 1-28, and onnxruntime 1.2x refuses newer
# ones): an operator's schema in a newer opset may mean something kiln does not implement.
MAX_OPSET = 28
SUPPORTED_DOMAINS = ("", "ai.onnx", "kiln")


def _onnx() -> Any:
    try:
        import onnx
    except ImportError:  # pragma: no cover - depends on the environment
        raise UnsupportedOperationError(
            "ONNX import needs the 'onnx' package: pip install 'tensorkiln[onnx]' (or onnx)"
        ) from None
    return onnx


def load(
    source: str | os.PathLike[str] | bytes | onnx.ModelProto,
    *,
    constant_inputs: Mapping[str, Any] | None = None,
) -> ModelGraph:
    """Read an ONNX model into a :class:`ModelGraph`.

    Args:
        source: A file path, the serialized model bytes, or an ``onnx.ModelProto``.
        constant_inputs: Graph inputs to fix to the given values: each becomes a constant of
            the graph instead of an input. kiln computes output shapes when the graph is built,
            so an input that decides a shape (a Reshape target, Reduce axes fed at run time)
            must be known; this binds it, as a specialisation of the model.

    Returns:
        The graph (not finalized), with every value typed and ``verify()`` passing.

    Raises:
        UnsupportedOperationError: for an operator, opset or domain kiln does not support,
            naming the node, its operator and what is supported.
        GraphValidationError: for what is not a valid ONNX model (bytes that are not one, a
            negative or contradicting shape, an initializer whose data does not fill its
            declared shape, a declared type the model does not compute, external data outside
            the model's folder), naming the value at fault. Nothing is allocated for a
            declared size before it is checked against the data the file holds.
        InputMismatchError: for ``constant_inputs`` that are not inputs of the model or do
            not fit their declared type.

    Example:
        >>> import kiln, numpy as np
        >>> g = kiln.trace(lambda x: np.exp(x) + 1, np.ones(3, np.float32)).graph
        >>> back = kiln.io.load(kiln.io.to_onnx(g))
        >>> [n.op for n in back.nodes]
        ['Exp', 'Add']
    """
    onnx = _onnx()
    if isinstance(source, onnx.ModelProto):
        return from_onnx(source, constant_inputs=constant_inputs)
    if isinstance(source, (bytes, bytearray, memoryview)):
        what = "the bytes given"
        model = _parse(onnx, lambda: onnx.load_from_string(bytes(source)), what)
    elif isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        what = f"the file {path!r}"
        model = _parse(onnx, lambda: onnx.load(path), what)
    else:
        raise ArgumentTypeError(
            "kiln.io.load: 'source' must be a file path, the model's bytes or an "
            f"onnx.ModelProto, got {type(source).__name__}"
        )
    _check_is_model(model, what)
    return from_onnx(model, constant_inputs=constant_inputs)


def _check_is_model(model: Any, what: str) -> None:
    """Protobuf parses many byte strings (the empty one among them) as an empty message: a
    model without a graph and without an opset is not an ONNX model."""
    if not model.HasField("graph") and not model.opset_import:
        raise GraphValidationError(
            f"{what}: not an ONNX model (it has no graph and imports no opset: an empty or "
            "foreign protobuf message, or a file of another format)"
        )


def _parse(onnx: Any, read: Callable[[], Any], what: str) -> Any:
    """``read()``, with onnx's and protobuf's refusals turned into a :class:`KilnError` that
    says what is wrong with ``what``."""
    from google.protobuf.message import DecodeError

    try:
        return read()
    except DecodeError as exc:
        raise GraphValidationError(
            f"{what}: not an ONNX model (protobuf could not parse it as an onnx.ModelProto: {exc})"
        ) from exc
    except onnx.checker.ValidationError as exc:
        # onnx refuses external data outside the model's folder (or at an absolute path)
        # before reading it; kiln keeps that refusal.
        raise GraphValidationError(
            f"{what}: refused to load the model's external data: {exc}. kiln, like onnx, "
            "reads external tensor data only from files inside the model's own folder; move "
            "the data file there and give its location relative to the model"
        ) from exc


def from_onnx(
    model: onnx.ModelProto, *, constant_inputs: Mapping[str, Any] | None = None
) -> ModelGraph:
    """The :class:`ModelGraph` of an ``onnx.ModelProto`` (what :func:`load` returns).

    Example:
        >>> import kiln, numpy as np
        >>> g = kiln.trace(lambda x: x.sum(axis=0), np.ones((2, 3), np.float32)).graph
        >>> from_onnx(kiln.io.to_onnx(g)).outputs[0].shape
        (3,)
    """
    _check_is_model(model, "the onnx.ModelProto given")
    opsets = {(o.domain or ""): o.version for o in model.opset_import}
    opset = opsets.get("", opsets.get("ai.onnx"))
    if opset is None:
        raise UnsupportedOperationError(
            "the model imports no version of the default ONNX domain; kiln imports models of "
            f"ONNX opset {MIN_OPSET} or newer"
        )
    if opset < MIN_OPSET:
        raise UnsupportedOperationError(
            f"the model uses ONNX opset {opset}; kiln imports opset {MIN_OPSET} or newer "
            "(convert it with onnx.version_converter first)"
        )
    if opset > MAX_OPSET:
        raise UnsupportedOperationError(
            f"the model uses ONNX opset {opset}; kiln knows opsets {MIN_OPSET} to {MAX_OPSET} "
            f"(as onnxruntime, it refuses newer ones, whose operators it cannot know); export "
            f"the model for opset {MAX_OPSET} or older"
        )
    importer = _Importer(model.graph, opset, dict(constant_inputs or {}))
    graph = importer.run()
    # kiln's own mark: the graph was optimized accepting engines' rounding (onnx_export)
    props = {p.key: p.value for p in model.metadata_props}
    graph.reassociation_allowed = props.get(REASSOCIATION_KEY) == "1"
    return graph


# -- the importer --------------------------------------------------------------------------


@dataclass
class _Importer:
    graph: Any  # onnx.GraphProto
    opset: int
    constant_inputs: dict[str, Any] = field(default_factory=dict)
    values: dict[str, Value] = field(default_factory=dict)
    scope: NameScope = field(default_factory=NameScope)
    declared: dict[str, Any] = field(default_factory=dict)  # value_info and outputs by name
    builder: GraphBuilder = field(init=False)

    def __post_init__(self) -> None:
        # Every value is typed by its operator's infer, completed with the contents of small
        # shape tensors the model computes from known values.
        self.builder = GraphBuilder(self.scope, refine=_with_known_values)

    def run(self) -> ModelGraph:
        onnx = _onnx()
        g = self.graph
        for name in _all_names(g):
            self.scope.reserve(name)
        initializer_names = {t.name for t in g.initializer}
        for tensor in g.initializer:
            self.add_constant(
                tensor.name, _array(onnx, tensor, where=f"initializer {tensor.name!r}")
            )
        if len(g.sparse_initializer):
            raise UnsupportedOperationError(
                "the model has sparse initializers; kiln supports dense initializers only"
            )
        input_names = {info.name for info in g.input}
        unknown = sorted(set(self.constant_inputs) - input_names)
        if unknown:
            raise InputMismatchError(
                f"constant_inputs names {unknown}, which are not inputs of the model; its inputs "
                f"are {sorted(input_names - initializer_names)}"
            )
        for info in g.input:
            where = f"graph input {info.name!r}"
            ttype = _value_type(info, where=where)
            if info.name in initializer_names:
                # An old-style model lists its initializers as inputs too: the two must agree
                # (onnxruntime refuses a model where they do not).
                _check_fits(self.values[info.name].type, ttype, f"initializer {info.name!r}", where)
                continue
            if info.name in self.constant_inputs:
                data = _constant_input(self.constant_inputs[info.name], ttype, info.name, where)
                self.add_constant(info.name, data)
                continue
            self.values[info.name] = self.builder.add_input(info.name, ttype)
        outputs = self.import_nodes(
            g, lambda name: f"graph output {name!r} is not computed by any node of the model"
        )
        self.check_declared_types()
        graph = self.builder.graph(g.name or "model", outputs)
        graph.verify()
        return graph

    def import_nodes(self, g: Any, missing: Callable[[str], str]) -> list[Value]:
        """Import the nodes of graph proto ``g`` (its inputs already bound) and return the
        values of its outputs; an output no node computes raises ``missing(name)``."""
        self.declared = {info.name: info for info in list(g.value_info) + list(g.output)}
        for node in g.node:
            self.import_node(node)
        outputs = []
        for info in g.output:
            if info.name not in self.values:
                raise UnsupportedOperationError(missing(info.name))
            outputs.append(self.values[info.name])
        return outputs

    def check_declared_types(self) -> None:
        """Each output and ``value_info`` entry whose element type the model declares must be
        the type the model computes there (onnxruntime refuses a model where it is not). A
        declared shape only completes what inference leaves open, as in onnxruntime."""
        outputs = {info.name for info in self.graph.output}
        for name, info in self.declared.items():
            value = self.values.get(name)
            if value is None or info.type.WhichOneof("value") != "tensor_type":
                continue
            code = info.type.tensor_type.elem_type
            if code == 0:  # UNDEFINED: the model leaves the type to inference
                continue
            kind = "graph output" if name in outputs else "value"
            declared = _dtype(code, f"{kind} {name!r}")
            if declared != value.dtype:
                raise GraphValidationError(
                    f"{kind} {name!r} is declared {declared.name}, but the model computes "
                    f"{value.dtype.name} there ({value.type}); fix the declaration in the model"
                )

    # -- building blocks -------------------------------------------------------------------

    def add_constant(self, name: str, data: np.ndarray) -> Value:
        if data.dtype == string:
            raise UnsupportedOperationError(
                f"constant {name!r} is a string tensor; kiln takes string tensors only as graph "
                "inputs and outputs, into and out of Cast and CastLike (no string constants)"
            )
        data = np.array(data, order="C")  # owned; 0-d stays 0-d
        data.flags.writeable = False  # so the builder keeps this copy as it is
        value = self.builder.add_constant(data, name=name)
        self.values[name] = value
        return value

    def new_constant(self, hint: str, data: np.ndarray) -> Value:
        return self.add_constant(self.scope.fresh(hint), data)

    def value(self, name: str, where: str) -> Value | None:
        if name == "":
            return None
        try:
            return self.values[name]
        except KeyError:
            raise UnsupportedOperationError(
                f"{where}: input {name!r} is not defined before it is used (the model's nodes "
                "must be in topological order)"
            ) from None

    def emit(
        self,
        op: str,
        inputs: Sequence[Value | None],
        attrs: dict[str, Any],
        output_names: Sequence[str],
        node_name: str,
        where: str,
    ) -> list[Value]:
        """Append one kiln node through the builder: outputs keep the model's names (an unnamed
        one is called after the node), and the node keeps its name where it is unique."""
        names = list(output_names)
        while names and names[-1] == "":
            names.pop()  # trailing optional outputs the model does not use
        try:
            # A variadic operator (Split) declares every output it makes; others as many as
            # the model names, at least one.
            count = None if get_op(op).variadic_outputs else max(len(names), 1)
            outputs = self.builder.add(
                op,
                inputs,
                attrs,
                outputs=[n or None for n in names],
                n_outputs=count,
                name=node_name,
                hint=node_name,
                known_shapes=[self.declared_shape(n) for n in names],
            )
        except KilnError as exc:
            raise UnsupportedOperationError(f"{where}: {exc}") from exc
        for value in outputs:
            self.values[value.name] = value
        return list(outputs)

    def declared_shape(self, name: str) -> list[Dim | None] | None:
        """The shape the model declares for value ``name`` (None for a size it leaves
        unknown), or None. The builder gives a size that depends on data (NonZero's count) the
        declared ``dim_param`` or ``dim_value``, so a kiln graph round-trips with its symbols."""
        info = self.declared.get(name) if name else None
        if info is None or info.type.WhichOneof("value") != "tensor_type":
            return None
        shape: list[Dim | None] = []
        for d in info.type.tensor_type.shape.dim:
            if d.HasField("dim_param") and d.dim_param:
                shape.append(symbol(d.dim_param))
            elif d.HasField("dim_value"):
                shape.append(int(d.dim_value))
            else:
                shape.append(None)
        return shape

    # -- one ONNX node -----------------------------------------------------------------------

    def import_node(self, proto: Any) -> None:
        onnx = _onnx()
        op_type = proto.op_type
        domain = proto.domain or ""
        label = f"node {proto.name!r} ({op_type})" if proto.name else f"node {op_type}"
        if domain not in SUPPORTED_DOMAINS:
            raise UnsupportedOperationError(
                f"{label}: domain {domain!r} is not supported; kiln imports the default ONNX "
                "domain (and its own 'kiln' domain)"
            )
        key = op_type if domain in ("", "ai.onnx") else f"{domain}.{op_type}"
        try:
            get_op(key)
        except KilnError:
            if key not in _REWRITES:
                raise UnsupportedOperationError(
                    f"{label}: operator {op_type} is not supported by kiln; supported operators: "
                    f"{', '.join(supported_operators())}"
                ) from None
        version = self.op_version(op_type, domain)
        if key in _CONTROL_OPS:
            self.import_control(proto, label, version)
            return
        attrs: dict[str, Any] = {}
        for a in proto.attribute:
            if a.ref_attr_name:
                raise UnsupportedOperationError(f"{label}: attribute references are not supported")
            attrs[a.name] = _attribute_value(onnx, a, label)
        inputs = [self.value(name, label) for name in proto.input]
        _check_no_strings(key, label, proto.input, inputs)
        call = _Call(key, inputs, attrs, list(proto.output), proto.name, label, version)
        rewrite = _REWRITES.get(key)
        if rewrite is not None:
            rewrite(self, call)
        else:
            self.finish(call)

    # -- control flow: ONNX subgraphs as kiln's closed subgraphs --------------------------

    def import_control(self, proto: Any, label: str, version: int) -> None:
        """An If/Loop/Scan node: each subgraph imported as a kiln graph whose outer-scope
        references become explicit captures (extra inputs of the node and of the subgraph,
        after the ONNX ones); small integer outer constants are copied in instead."""
        onnx = _onnx()
        op = proto.op_type
        attrs: dict[str, Any] = {}
        graphs: dict[str, Any] = {}
        for a in proto.attribute:
            if a.ref_attr_name:
                raise UnsupportedOperationError(f"{label}: attribute references are not supported")
            if a.type == onnx.AttributeProto.GRAPH:
                graphs[a.name] = a.g
            else:
                attrs[a.name] = _attribute_value(onnx, a, label)
        inputs = [self.value(name, label) for name in proto.input]
        if op == "If" and self.inline_known_branch(proto, inputs[0], graphs, label):
            return
        free: list[str] = []
        for g in graphs.values():
            free.extend(n for n in _free_names(g) if n not in free)
        # Small integer constants (shapes, axes: their type carries their contents) are
        # copied into the subgraph, so its shapes stay known; other values are captured.
        constants = {
            id(c.value): c.data
            for c in self.builder.constants
            if c.value.type.value is not None and c.data.dtype.kind in "biu"
        }
        captured = [(n, self.value(n, f"{label} (read by a subgraph)")) for n in free]
        passed = [(n, v) for n, v in captured if v is not None and id(v) not in constants]
        inlined = {n: constants[id(v)] for n, v in captured if v is not None and id(v) in constants}
        bodies: dict[str, ModelGraph] = {}
        if op == "If":
            for name, g in graphs.items():
                bodies[name] = self.import_body(g, [], passed, inlined, f"{label} {name}")
        elif op == "Loop":
            while len(inputs) < 2:
                inputs.append(None)
            flags = [TensorType(np.dtype(np.int64), ()), TensorType(np.dtype(np.bool_), ())]
            carried = [_plain(_typed(v, label).type) for v in inputs[2:]]
            bodies["body"] = self.import_loop_body(
                graphs["body"], flags, carried, [], passed, inlined, f"{label} body", 1
            )
            attrs["num_captures"] = len(passed)
        elif version < 9:  # Scan-8: a batch axis first, and sequence_lens
            self.import_scan8(proto, label, attrs, graphs["body"], inputs, passed, inlined)
            return
        else:  # Scan
            scanned = int(attrs.get("num_scan_inputs", 0))
            states = [_plain(_typed(v, label).type) for v in inputs[: len(inputs) - scanned]]
            axes = list(attrs.get("scan_input_axes", ())) or [0] * scanned
            slices = []
            for v, axis in zip(inputs[len(inputs) - scanned :], axes):
                t = _typed(v, label).type
                axis = axis % max(t.ndim, 1)
                slices.append(TensorType(t.dtype, t.shape[:axis] + t.shape[axis + 1 :]))
            bodies["body"] = self.import_loop_body(
                graphs["body"], [], states, slices, passed, inlined, f"{label} body", 0
            )
            attrs["num_captures"] = len(passed)
        attrs.update(bodies)
        self.emit(op, inputs + [v for _, v in passed], attrs, list(proto.output), proto.name, label)

    def inline_known_branch(
        self, proto: Any, cond: Value | None, graphs: dict[str, Any], label: str
    ) -> bool:
        """An If whose condition the model fixes (``Size(x) == 4`` of a static x, a constant
        attribute): the chosen branch's nodes join this graph in place of the If (the other
        branch may not even be valid for these types, as in functions that expand one op for
        several ranks). False, with nothing imported, when the condition is not known."""
        value = None if cond is None else cond.type.value
        if value is None or len(value) != 1:
            return False
        branch = graphs["then_branch" if value[0] else "else_branch"]
        defined = [t.name for t in branch.initializer] + [
            o for n in branch.node for o in n.output if o
        ]
        if len(branch.input) or any(name in self.values for name in defined):
            return False  # (a name clash with this scope: imported as an If node)
        onnx = _onnx()
        for name in defined:
            self.scope.reserve(name)
        for tensor in branch.initializer:
            self.add_constant(tensor.name, _array(onnx, tensor, where=f"{label} {tensor.name!r}"))
        declared = self.declared
        self.declared = {
            **declared,
            **{info.name: info for info in list(branch.value_info) + list(branch.output)},
        }
        try:
            for node in branch.node:
                self.import_node(node)
        finally:
            self.declared = declared
        for info, name in zip(branch.output, proto.output):
            if name:
                source = self.value(info.name, label)
                self.emit("Identity", [source], {}, [name], "", label)
        return True

    def import_scan8(
        self,
        proto: Any,
        label: str,
        attrs: dict[str, Any],
        g: Any,
        inputs: list[Value | None],
        passed: list[tuple[str, Value]],
        inlined: dict[str, np.ndarray],
    ) -> None:
        """Scan-8 (axis 0 of every input and output is a batch axis; the scan runs along
        axis 1) as a Scan over the batch whose body is the Scan of one batch entry."""
        if inputs and inputs[0] is not None:
            raise UnsupportedOperationError(
                f"{label}: Scan-8 with sequence_lens (a length per batch entry) is not supported"
            )
        data = [_typed(v, label) for v in inputs[1:]]
        scanned = int(attrs.get("num_scan_inputs", 0))
        states = len(data) - scanned
        directions = tuple(attrs.get("directions", ())) or (0,) * scanned
        one = [_plain(TensorType(v.dtype, v.shape[1:])) for v in data]  # one batch entry
        slices = [TensorType(t.dtype, t.shape[1:]) for t in one[states:]]
        inner = self.import_loop_body(g, [], one[:states], slices, passed, inlined, label, 0)
        outer = GraphBuilder()
        args = [outer.add_input(f"entry_{k}", t) for k, t in enumerate(one)]
        args += [outer.add_input(name, v.type) for name, v in passed]
        inner_attrs = {
            "body": inner,
            "num_scan_inputs": scanned,
            "scan_input_directions": directions,
            "num_captures": len(passed),
        }
        results = outer.add("Scan", args, inner_attrs)
        body = outer.graph("batch_entry", results)
        outer_attrs = {
            "body": body,
            "num_scan_inputs": len(data),
            "num_captures": len(passed),
        }
        values = [*data, *(v for _, v in passed)]
        self.emit("Scan", values, outer_attrs, list(proto.output), proto.name, label)

    def import_loop_body(
        self,
        g: Any,
        head: list[TensorType],
        carried: list[TensorType],
        tail: list[TensorType],
        passed: list[tuple[str, Value]],
        inlined: dict[str, np.ndarray],
        where: str,
        skip: int,
    ) -> ModelGraph:
        """A Loop or Scan body, its carried values typed from the node's initial values; a
        static size that an iteration changes becomes a symbol, and the body is imported again
        with it (``skip``: body outputs before the carried ones)."""
        for _ in range(3):
            body = self.import_body(g, head + carried + tail, passed, inlined, where)
            outs = body.output_values[skip : skip + len(carried)]
            widened = []
            for t, out in zip(carried, outs):
                shape = t.shape
                if out.dtype == t.dtype and out.type.ndim == t.ndim:
                    shape = tuple(
                        fresh_symbol("carried") if isinstance(a, int) and a != b else a
                        for a, b in zip(t.shape, out.shape)
                    )
                widened.append(TensorType(t.dtype, shape))
            if all(a.shape == b.shape for a, b in zip(widened, carried)):
                break
            carried = widened
        return body

    def import_body(
        self,
        g: Any,
        formal: list[TensorType],
        passed: list[tuple[str, Value]],
        inlined: dict[str, np.ndarray],
        where: str,
    ) -> ModelGraph:
        """ONNX subgraph ``g`` as a closed kiln graph: inputs ``formal`` (the ONNX ones, typed
        from the node), then one per captured outer value; outer constants as constants."""
        onnx = _onnx()
        if len(g.input) != len(formal):
            raise UnsupportedOperationError(
                f"{where}: the subgraph declares {len(g.input)} input(s), the operator passes "
                f"{len(formal)}"
            )
        sub = _Importer(g, self.opset)
        for name in [*_all_names(g), *(n for n, _ in passed), *inlined]:
            sub.scope.reserve(name)
        for tensor in g.initializer:
            sub.add_constant(tensor.name, _array(onnx, tensor, where=f"{where} {tensor.name!r}"))
        for name, data in inlined.items():
            sub.add_constant(name, data)
        for info, ttype in zip(g.input, formal):
            sub.values[info.name] = sub.builder.add_input(info.name, ttype)
        for name, value in passed:
            t = value.type  # known integer contents (a shape) stay known inside
            if t.value is not None and t.dtype.kind not in "biu":
                t = TensorType(t.dtype, t.shape)
            sub.values[name] = sub.builder.add_input(name, t)
        computed = sub.import_nodes(
            g, lambda name: f"{where}: subgraph output {name!r} is not computed by the subgraph"
        )
        outputs: list[Value] = []
        for info, value in zip(g.output, computed):
            if any(value is v for v in outputs):  # kiln's outputs have distinct names
                fresh = sub.scope.fresh(f"{info.name}_again")
                (value,) = sub.emit("Identity", [value], {}, [fresh], "", where)
            outputs.append(value)
        sub.check_declared_types()
        return sub.builder.graph(g.name or "body", outputs)

    def op_version(self, op_type: str, domain: str) -> int:
        """The version of ``op_type`` that the model's opset selects (its ``since_version``)."""
        if domain not in ("", "ai.onnx"):
            return self.opset
        try:
            return int(_onnx().defs.get_schema(op_type, self.opset, "").since_version)
        except Exception:
            return self.opset

    def finish(self, call: _Call) -> list[Value]:
        _drop_attrs(call, "consumed_inputs")  # a pre-opset-7 leftover some exporters still write
        return self.emit(call.op, call.inputs, call.attrs, call.outputs, call.name, call.where)

    def attr_to_input(
        self,
        call: _Call,
        attr: str,
        position: int,
        dtype: np.dtype | str | type[np.generic] = np.int64,
    ) -> None:
        """Move attribute ``attr`` (if given) into input ``position`` as a constant."""
        if attr not in call.attrs:
            return
        data = np.asarray(call.attrs.pop(attr), dtype=dtype)
        value = self.new_constant(f"{call.name or call.op.lower()}_{attr}", data)
        while len(call.inputs) < position:
            call.inputs.append(None)
        if len(call.inputs) == position:
            call.inputs.append(value)
        else:
            call.inputs[position] = value


@dataclass
class _Call:
    """One ONNX node on its way to becoming a kiln node (mutable while it is normalised)."""

    op: str
    inputs: list[Value | None]
    attrs: dict[str, Any]
    outputs: list[str]
    name: str
    where: str
    version: int


_CONTROL_OPS = ("If", "Loop", "Scan")


def _typed(value: Value | None, where: str) -> Value:
    if value is None:
        raise UnsupportedOperationError(f"{where}: an omitted input where a value is needed")
    return value


def _plain(t: TensorType) -> TensorType:
    """``t`` without known contents (a loop-carried value changes)."""
    return TensorType(t.dtype, t.shape)


def _free_names(g: Any) -> list[str]:
    """The names ONNX subgraph ``g`` (and the subgraphs inside it) reads from outer scopes,
    in order of first use."""
    onnx = _onnx()
    defined = {i.name for i in g.input} | {t.name for t in g.initializer}
    defined |= {o for n in g.node for o in n.output if o}
    free: list[str] = []

    def use(name: str) -> None:
        if name and name not in defined and name not in free:
            free.append(name)

    for node in g.node:
        for name in node.input:
            use(name)
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                for name in _free_names(a.g):
                    use(name)
            for sub in a.graphs:
                for name in _free_names(sub):
                    use(name)
    for info in g.output:
        use(info.name)
    return free


def _check_no_strings(
    op: str, label: str, names: Sequence[str], inputs: Sequence[Value | None]
) -> None:
    """String tensors (``dtypes.string``) go only into Cast and CastLike."""
    if op in ("Cast", "CastLike"):
        return
    for name, v in zip(names, inputs):
        if v is not None and v.dtype == string:
            raise UnsupportedOperationError(
                f"{label}: input {name!r} is a string tensor; ONNX element type STRING is not "
                f"supported by kiln as an input of {op} (kiln takes string tensors only as the "
                "input or output of Cast and CastLike)"
            )


def _drop_attrs(call: _Call, *names: str) -> None:
    for name in names:
        call.attrs.pop(name, None)


# -- older-opset forms rewritten into the opset-21 form ------------------------------------


def _axes_as_input(position: int) -> Callable[[_Importer, _Call], None]:
    def rewrite(imp: _Importer, call: _Call) -> None:
        imp.attr_to_input(call, "axes", position)
        imp.finish(call)

    return rewrite


def _split(imp: _Importer, call: _Call) -> None:
    imp.attr_to_input(call, "split", 1)
    has_sizes = len(call.inputs) > 1 and call.inputs[1] is not None
    count = call.attrs.get("num_outputs")
    if not has_sizes and count is None:
        call.attrs["num_outputs"] = len(call.outputs)  # before opset 18: as many as declared
    elif count is not None and count != len(call.outputs):
        # As onnxruntime: the node declares its outputs (and a huge num_outputs costs nothing).
        raise GraphValidationError(
            f"{call.where}: num_outputs is {count}, but the node declares "
            f"{len(call.outputs)} output(s)"
        )
    imp.finish(call)


def _clip(imp: _Importer, call: _Call) -> None:
    if "min" in call.attrs or "max" in call.attrs:  # opset < 11
        x = call.inputs[0]
        dtype = x.dtype if x is not None else np.float32
        low = call.attrs.pop("min", None)
        high = call.attrs.pop("max", None)
        call.inputs = [
            x,
            None if low is None else imp.new_constant(f"{call.name}_min", np.asarray(low, dtype)),
            None if high is None else imp.new_constant(f"{call.name}_max", np.asarray(high, dtype)),
        ]
    imp.finish(call)


def _pad(imp: _Importer, call: _Call) -> None:
    if "pads" in call.attrs:  # opset < 11
        x = call.inputs[0]
        value = call.attrs.pop("value", 0.0)
        imp.attr_to_input(call, "pads", 1)
        fill = np.asarray(value, dtype=x.dtype if x is not None else np.float32)
        call.inputs = call.inputs[:2] + [imp.new_constant(f"{call.name}_value", fill)]
    imp.finish(call)


def _slice(imp: _Importer, call: _Call) -> None:
    if "starts" in call.attrs:  # opset < 10
        axes = call.attrs.pop("axes", None)
        imp.attr_to_input(call, "starts", 1)
        imp.attr_to_input(call, "ends", 2)
        if axes is not None:
            call.attrs["axes"] = axes
            imp.attr_to_input(call, "axes", 3)
    imp.finish(call)


def _topk(imp: _Importer, call: _Call) -> None:
    if "k" in call.attrs:  # opset < 10
        call.attrs["k"] = [call.attrs["k"]]
        imp.attr_to_input(call, "k", 1)
    imp.finish(call)


def _dropout(imp: _Importer, call: _Call) -> None:
    _drop_attrs(call, "is_test")
    if "ratio" in call.attrs:  # opset < 12; the ratio does not matter at inference
        call.attrs.pop("ratio")
    imp.finish(call)


def _batch_norm(imp: _Importer, call: _Call) -> None:
    """kiln's BatchNormalization makes Y alone (inference mode). Outputs beyond Y that a node
    asks for in inference mode are the running statistics, which inference leaves as they
    are: ``input_mean`` and ``input_var``. Before opset 14 extra outputs without ``is_test=1``
    are the training form (ONNX's "output case #1"), refused as training_mode=1 is."""
    spatial = call.attrs.pop("spatial", 1)
    is_test = call.attrs.pop("is_test", 0)  # opset < 7
    if spatial != 1:
        raise UnsupportedOperationError(
            f"{call.where}: BatchNormalization with spatial=0 (opset < 9) is not supported"
        )
    extra = [(i, name) for i, name in enumerate(call.outputs[1:], 1) if name]
    if extra and call.version < 14:
        if not is_test:
            raise UnsupportedOperationError(
                f"{call.where}: BatchNormalization: training mode (opset {call.version} reads "
                f"a node with outputs beyond Y, here {len(call.outputs)}, as training mode) is "
                "not supported; expected the single output Y (kiln is an inference runtime: "
                "running statistics are inputs)"
            )
        saved = [name for i, name in extra if i >= 3]
        if saved:
            raise UnsupportedOperationError(
                f"{call.where}: BatchNormalization: outputs saved_mean/saved_var ({saved}) "
                "exist for training only and are not supported; kiln makes Y, and in "
                "inference mode mean and var (the input statistics, unchanged)"
            )
    call.outputs = call.outputs[:1]
    imp.finish(call)  # training_mode=1 is refused here, by the operator's infer
    for i, name in extra:  # running_mean, running_var: unchanged at inference
        imp.emit("Identity", [call.inputs[2 + i]], {}, [name], "", call.where)


def _softmax(imp: _Importer, call: _Call) -> None:
    """Softmax, LogSoftmax before opset 13: the input is coerced to 2-D at ``axis`` (default
    1) and normalised over the flattened trailing part."""
    if call.version >= 13:
        imp.finish(call)
        return
    x = call.inputs[0]
    assert x is not None
    axis = call.attrs.pop("axis", 1)
    rank = x.type.ndim
    axis = axis + rank if axis < 0 else axis
    if axis >= rank - 1:
        call.attrs["axis"] = -1
        imp.finish(call)
        return
    base = call.name or call.op.lower()
    (flat,) = imp.emit(
        "Flatten", [x], {"axis": axis}, [imp.scope.fresh(f"{base}_2d")], "", call.where
    )
    (normalised,) = imp.emit(
        call.op, [flat], {"axis": -1}, [imp.scope.fresh(f"{base}_flat")], call.name, call.where
    )
    (shape,) = imp.emit("Shape", [x], {}, [imp.scope.fresh(f"{base}_shape")], "", call.where)
    imp.emit("Reshape", [normalised, shape], {}, call.outputs, "", call.where)


def _resize(imp: _Importer, call: _Call) -> None:
    if call.version < 11:  # (X, scales): asymmetric coordinates, floor for nearest
        _upsample_like(imp, call)
        return
    imp.finish(call)


def _attention(imp: _Importer, call: _Call) -> None:
    """kiln's Attention makes qk_matmul_output only when qk_matmul_output_mode is given (its
    outputs stay Y alone for the plain form): a node that asks for it (output 3) gets the
    ONNX default mode 0 written out."""
    wants_qk = len(call.outputs) > 3 and call.outputs[3] != ""
    if wants_qk and call.attrs.get("qk_matmul_output_mode") is None:
        call.attrs["qk_matmul_output_mode"] = 0
    imp.finish(call)


def _prelu(imp: _Importer, call: _Call) -> None:
    """PRelu before opset 7: a 1-D slope of C entries is per channel (axis 1), not NumPy-style
    aligned with the last axis; it becomes (C, 1, ..., 1)."""
    x, slope = call.inputs[0], call.inputs[1]
    if call.version < 7 and x is not None and slope is not None:
        trailing = x.type.ndim - 2
        if slope.type.ndim == 1 and trailing > 0 and slope.type.shape[0] != 1:
            axes = np.arange(1, 1 + trailing, dtype=np.int64)
            axes_value = imp.new_constant(f"{call.name or 'prelu'}_slope_axes", axes)
            (slope,) = imp.emit(
                "Unsqueeze",
                [slope, axes_value],
                {},
                [imp.scope.fresh(f"{slope.name}_per_channel")],
                "",
                call.where,
            )
            call.inputs[1] = slope
    imp.finish(call)


def _upsample(imp: _Importer, call: _Call) -> None:
    if "scales" in call.attrs:  # Upsample 7-8: scales as an attribute
        scales = np.asarray(call.attrs.pop("scales"), np.float32)
        call.inputs = [call.inputs[0], imp.new_constant(f"{call.name}_scales", scales)]
    _drop_attrs(call, "width_scale", "height_scale")
    _upsample_like(imp, call)


def _upsample_like(imp: _Importer, call: _Call) -> None:
    mode = call.attrs.pop("mode", "nearest")
    if mode == "bilinear":
        mode = "linear"
    attrs = {"mode": mode, "coordinate_transformation_mode": "asymmetric"}
    if mode == "nearest":
        attrs["nearest_mode"] = "floor"
    if call.attrs:
        unknown = ", ".join(sorted(call.attrs))
        raise UnsupportedOperationError(f"{call.where}: unsupported attribute(s) {unknown}")
    x, scales = call.inputs[0], call.inputs[1]
    call.op = "Resize"
    call.inputs = [x, None, scales]
    call.attrs = attrs
    imp.finish(call)


def _legacy_broadcast(imp: _Importer, call: _Call) -> None:
    """Binary operators before opset 7: ``broadcast=1`` with ``axis`` aligns B's dims with A's
    starting at ``axis`` (not right-aligned); without ``axis`` it is NumPy-style already."""
    if call.version >= 7:
        imp.finish(call)
        return
    broadcast = call.attrs.pop("broadcast", 0)
    axis = call.attrs.pop("axis", None)
    a, b = call.inputs[0], call.inputs[1]
    if broadcast and axis is not None and a is not None and b is not None:
        trailing = a.type.ndim - (axis % max(a.type.ndim, 1)) - b.type.ndim
        if trailing > 0:
            axes = np.arange(b.type.ndim, b.type.ndim + trailing, dtype=np.int64)
            axes_value = imp.new_constant(f"{call.name or call.op.lower()}_axes", axes)
            (b,) = imp.emit(
                "Unsqueeze",
                [b, axes_value],
                {},
                [imp.scope.fresh(f"{b.name}_aligned")],
                "",
                call.where,
            )
            call.inputs[1] = b
    imp.finish(call)


def _reshape(imp: _Importer, call: _Call) -> None:
    imp.attr_to_input(call, "shape", 1)  # Reshape-1: the target shape as an attribute
    imp.finish(call)


def _gemm(imp: _Importer, call: _Call) -> None:
    _drop_attrs(call, "broadcast")  # Gemm < 7: C broadcasts unidirectionally, as now
    imp.finish(call)


_REWRITES: dict[str, Callable[[_Importer, _Call], None]] = {
    **{
        op: _legacy_broadcast
        for op in (
            "Add",
            "Sub",
            "Mul",
            "Div",
            "Pow",
            "And",
            "Or",
            "Xor",
            "Equal",
            "Greater",
            "Less",
        )
    },
    "Reshape": _reshape,
    "Gemm": _gemm,
    **{
        op: _axes_as_input(1)
        for op in (
            "ReduceL1",
            "ReduceL2",
            "ReduceLogSum",
            "ReduceLogSumExp",
            "ReduceMax",
            "ReduceMean",
            "ReduceMin",
            "ReduceProd",
            "ReduceSum",
            "ReduceSumSquare",
            "Squeeze",
            "Unsqueeze",
        )
    },
    "Split": _split,
    "Clip": _clip,
    "Pad": _pad,
    "Slice": _slice,
    "TopK": _topk,
    "Dropout": _dropout,
    "BatchNormalization": _batch_norm,
    "Softmax": _softmax,
    "LogSoftmax": _softmax,
    "Resize": _resize,
    "Upsample": _upsample,
    "Attention": _attention,
    "PRelu": _prelu,
}


# -- types, tensors, attributes ------------------------------------------------------------


def _with_known_values(
    opdef: Any, inputs: Sequence[Value | None], attrs: dict[str, Any], types: list[TensorType]
) -> list[TensorType]:
    """Types completed with the contents of small integer/bool outputs whose inputs are all
    known (``Where(Equal(Shape(x), 4), ...)`` in a model's shape arithmetic), computed with the
    operator's kernel, so a later Reshape/Expand still knows its target shape. Types only:
    the graph itself is unchanged. Each output keeps contents up to the ``known_ints`` limit
    of :class:`~kiln.ops.folding.FoldingLimits`, as every type does."""
    if not inputs or all(t.value is not None for t in types) or has_subgraphs(opdef):
        return types  # (a loop is not run at load time)
    if not all(t.dtype.kind in "biu" and t.ndim <= 1 for t in types):
        return types
    arrays: list[np.ndarray | None] = []
    for v in inputs:
        if v is None:
            arrays.append(None)
            continue
        array = known_array(v.type)
        if array is None:
            return types
        arrays.append(array)
    limit = FOLDING_LIMITS.known_ints
    try:
        # The inferred shapes are checked before the kernel runs: a 100-byte model's
        # Range(0, 4e8) or ConstantOfShape([1e8]) is typed, never computed, at load time.
        shapes = [t.shape for t in types]
        results = fold(opdef, arrays, attrs, limit=limit * len(types), shapes=shapes)
    except Exception:  # folding is an optimisation of typing; the kernel runs again later
        return types
    if results is None:
        return types
    out = []
    for t, r in zip(types, results):
        if t.value is None and r.size <= limit and tuple(r.shape) == tuple(t.shape):
            t = TensorType(t.dtype, t.shape, tuple(int(x) for x in r.reshape(-1)))
        out.append(t)
    return out + types[len(out) :]


def supported_operators() -> list[str]:
    """The ONNX operators :func:`load` accepts (the registry's, plus older forms it rewrites).

    Example:
        >>> "Upsample" in supported_operators() and "MatMul" in supported_operators()
        True
    """
    from ..ops.registry import all_ops

    names = {op.name for op in all_ops() if not op.domain} | {k for k in _REWRITES if "." not in k}
    return sorted(names)


def _all_names(g: Any) -> list[str]:
    names = [t.name for t in g.initializer] + [i.name for i in g.input]
    for node in g.node:
        names.extend(n for n in node.output if n)
        if node.name:
            names.append(node.name)
    return names


def _dtype(code: int, where: str) -> np.dtype:
    try:
        return dtype_from_onnx_code(code)
    except KilnError:
        onnx = _onnx()
        try:
            type_name = onnx.TensorProto.DataType.Name(code)
        except ValueError:
            type_name = str(code)
        raise UnsupportedOperationError(
            f"{where}: ONNX element type {type_name} is not supported by kiln (it supports bool, "
            "int8-64, uint8-64, float16, bfloat16, float32, float64)"
        ) from None


def _value_type(info: Any, where: str) -> TensorType:
    kind = info.type.WhichOneof("value")
    if kind != "tensor_type":
        raise UnsupportedOperationError(
            f"{where}: has type {kind or 'unknown'}; kiln supports tensor values only"
        )
    tensor_type = info.type.tensor_type
    dtype = _dtype(tensor_type.elem_type, where)
    if not tensor_type.HasField("shape"):
        raise UnsupportedOperationError(f"{where}: has no shape (not even a rank); kiln needs one")
    dims: list[Dim] = []
    for i, d in enumerate(tensor_type.shape.dim):
        if d.HasField("dim_value") and d.dim_value >= 0:
            dims.append(int(d.dim_value))
        elif d.HasField("dim_param") and d.dim_param:
            dims.append(_symbol(d.dim_param))
        else:
            dims.append(fresh_symbol(f"{info.name}_{i}"))
    return TensorType(dtype, tuple(dims))


def _check_fits(found: TensorType, declared: TensorType, what: str, where: str) -> None:
    """``found`` (an initializer's type) must fit the ``declared`` type of the graph input
    of the same name: same dtype and rank, and the same size on every static axis."""
    same = found.dtype == declared.dtype and found.ndim == declared.ndim
    if same:
        same = all(not isinstance(d, int) or d == f for f, d in zip(found.shape, declared.shape))
    if not same:
        raise GraphValidationError(
            f"{what} is {found}, but the {where} of the same name is declared {declared}; "
            "the two must agree"
        )


def _constant_input(given: Any, declared: TensorType, name: str, where: str) -> np.ndarray:
    """The value bound by ``constant_inputs[name]`` as an array that fits the input's declared
    type (Python lists and scalars take the declared dtype; an array must have it)."""
    label = f"constant_inputs[{name!r}]"
    if isinstance(given, np.ndarray):
        data = given
    else:
        try:
            data = np.asarray(given, dtype=declared.dtype)
        except (TypeError, ValueError) as exc:
            raise InputMismatchError(
                f"{label} ({type(given).__name__}) cannot be read as a {declared.dtype.name} "
                f"array for the {where} ({declared}): {exc}"
            ) from None
    if data.dtype != declared.dtype or data.ndim != declared.ndim:
        raise InputMismatchError(
            f"{label} is {data.dtype.name}{list(data.shape)}, but the {where} is declared "
            f"{declared}; pass an array of that dtype and rank"
        )
    for axis, (want, got) in enumerate(zip(declared.shape, data.shape)):
        if isinstance(want, int) and want != got:
            raise InputMismatchError(
                f"{label} has size {got} on axis {axis}, but the {where} is declared "
                f"{declared} (size {want} there); pass an array of the declared shape"
            )
    return data


def _symbol(text: str) -> Dim:
    """The symbol named ``text``; a name that is not an identifier (``2*B + 1``, written by
    an exporter for a computed size) is kept as one opaque symbol of that text."""
    return symbol(text)


def _array(onnx: Any, tensor: Any, where: str) -> np.ndarray:
    dtype = _dtype(tensor.data_type, where)
    if tensor.data_location == onnx.TensorProto.EXTERNAL:
        raise UnsupportedOperationError(
            f"{where}: its data is stored in an external file that was not loaded; load the "
            "model from its path (kiln.io.load(path)) so the external data is found"
        )
    _check_stored_size(onnx, tensor, dtype, where)  # before anything is allocated
    array = onnx.numpy_helper.to_array(tensor)
    return np.asarray(array, dtype=dtype).reshape(tuple(tensor.dims))


def _check_stored_size(onnx: Any, tensor: Any, dtype: np.dtype, where: str) -> None:
    """A tensor's declared dims must be non-negative and its stored data must hold exactly
    that many elements: checked on the dims and the data's length, so a 100-byte file that
    declares a (10**6, 10**6) initializer is refused without allocating anything."""
    dims = tuple(int(d) for d in tensor.dims)
    if any(d < 0 for d in dims):
        raise GraphValidationError(
            f"{where} declares shape {list(dims)}, with a negative size; sizes are >= 0"
        )
    count = 1
    for d in dims:
        count *= d
    if tensor.HasField("raw_data"):
        stored, unit = len(tensor.raw_data), dtype.itemsize
        what = f"{stored} byte(s) of raw data"
    else:
        field = onnx.helper.tensor_dtype_to_field(tensor.data_type)
        stored = len(getattr(tensor, field))
        unit = 2 if dtype.kind == "c" else 1  # complex: real and imaginary parts
        what = f"{stored} value(s) in {field}"
    if stored != count * unit:
        raise GraphValidationError(
            f"{where} declares shape {list(dims)} ({count} {dtype.name} elements), but the "
            f"model stores {what}; the model is corrupt or was cut short"
        )


def _attribute_value(onnx: Any, a: Any, where: str) -> Any:
    t = onnx.AttributeProto
    if a.type == t.INT:
        return int(a.i)
    if a.type == t.FLOAT:
        return float(a.f)
    if a.type == t.STRING:
        return a.s.decode()
    if a.type == t.INTS:
        return tuple(int(v) for v in a.ints)
    if a.type == t.FLOATS:
        return tuple(float(v) for v in a.floats)
    if a.type == t.STRINGS:
        return tuple(s.decode() for s in a.strings)
    if a.type == t.TENSOR:
        return _array(onnx, a.t, f"{where} attribute {a.name!r}")
    raise UnsupportedOperationError(
        f"{where}: attribute {a.name!r} has type {t.AttributeType.Name(a.type)}; kiln supports "
        "int, float, string, ints, floats, strings and tensor attributes (subgraphs on If, "
        "Loop and Scan)"
    )
