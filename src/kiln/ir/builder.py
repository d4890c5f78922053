"""The one place a typed node is built: :class:`GraphBuilder`.

Adding a node by operator name binds its attributes (defaults filled in, values normalised),
checks its arity, infers its output types with the operator's ``infer``, names its outputs
uniquely in the graph's :class:`~kiln.ir.graph.NameScope`, and records it with the user's
source line. The tracer, the pattern rewriter, the ONNX importer, ``OpDef.expand`` and
specialization all build their nodes here, so a node is typed and named the same way whoever
makes it. What one of them needs beyond that is an option of :meth:`GraphBuilder.add`
(the importer's own names, the sizes a model declares for data-dependent outputs) or of the
builder (a hook that completes inferred types).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from .. import dtypes
from ..errors import KilnError, OpArgumentError, OpTypeError
from ..ops.registry import DATA_DEPENDENT_SHAPE, OpDef, TensorType, get_op
from ..symbolic import Dim, SymDim, is_fresh
from ..tensor import Tensor, asarray
from .graph import Constant, ModelGraph, NameScope, Node, Value, snake_case

__all__ = ["GraphBuilder", "TypeHook", "expand_node", "infer_key"]

# NumPy's own np.array (a capture routes the numpy module's: kiln.capture.numpy_creation).
_np_array = getattr(np.array, "__kiln_original__", np.array)

# The dtypes kiln supports, in native byte order: a constant of one needs no conversion.
_NATIVE_DTYPES = frozenset(d for d in dtypes.ALL_DTYPES if d.isnative)

# ``refine(opdef, inputs, attrs, types) -> types``: sees every node's inferred output types
# before the node is recorded and may complete them (the ONNX importer fills in the contents of
# small shape tensors that the model computes from known values).
TypeHook = Callable[
    [OpDef, Sequence[Value | None], dict[str, Any], list[TensorType]], list[TensorType]
]


class GraphBuilder:
    """Builds typed nodes, constants and inputs, and the graph that holds them.

    Args:
        scope: Where fresh names come from; pass ``graph.name_scope()`` to add nodes that will
            join an existing graph. A new, empty scope by default.
        source: The source line recorded on nodes that do not give their own.
        refine: A hook completing each node's inferred output types (see :data:`TypeHook`).

    Example:
        >>> import numpy as np
        >>> from kiln.ops.registry import TensorType
        >>> b = GraphBuilder()
        >>> x = b.add_input("x", TensorType(np.dtype("float32"), (2, 3)))
        >>> (y,) = b.add("Exp", [x])
        >>> (z,) = b.add("Add", [y, b.add_constant(np.float32(1))])
        >>> g = b.graph("g", [z])
        >>> print(g)
        graph g(x: float32[2, 3]) -> (add: float32[2, 3])
          const: float32[] = 1
          exp: float32[2, 3] = Exp(x)
          add: float32[2, 3] = Add(exp, const)
    """

    def __init__(
        self, scope: NameScope | None = None, source: str = "", *, refine: TypeHook | None = None
    ) -> None:
        self.scope = NameScope() if scope is None else scope
        self.source = source
        self._refine = refine
        self._inputs: list[Value] = []
        self._constants: list[Constant] = []
        self._constant_data: dict[int, np.ndarray] = {}
        self._nodes: list[Node] = []
        self._node_names: set[str] = set()
        # What ``infer`` gave for an operator on static input types and attributes (an
        # unrolled loop records the same few calls over and over): see infer_key. Builders
        # without a refine hook share one memo (the optimizer makes a builder per attempted
        # rewrite: the ~1,600 reshapes of one pass would each infer again); one with a hook
        # keeps none, since the hook may change what ``infer`` gave.
        self._inferred = _SHARED_INFERRED if refine is None else None

    # -- what was built -------------------------------------------------------------------

    @property
    def inputs(self) -> tuple[Value, ...]:
        return tuple(self._inputs)

    @property
    def constants(self) -> tuple[Constant, ...]:
        return tuple(self._constants)

    @property
    def nodes(self) -> tuple[Node, ...]:
        """The nodes added so far, in order (a pass splices them into its graph)."""
        return tuple(self._nodes)

    def last_nodes(self, n: int) -> Sequence[Node]:
        """The last ``n`` nodes added (without copying all of them, as :attr:`nodes` does)."""
        return self._nodes[-n:]

    @property
    def node_count(self) -> int:
        """How many nodes were added so far (without copying them, as :attr:`nodes` does)."""
        return len(self._nodes)

    def graph(self, name: str, outputs: Sequence[Value]) -> ModelGraph:
        """The graph of everything added, with ``outputs`` as its outputs."""
        return ModelGraph(name, self._inputs, outputs, self._nodes, self._constants)

    # -- inputs and constants -------------------------------------------------------------

    def add_input(self, name: str, ttype: TensorType) -> Value:
        """A graph input called exactly ``name`` (input names are the caller's to choose)."""
        self.scope.reserve(name)
        value = Value(name, ttype)
        self._inputs.append(value)
        return value

    def add_constant(
        self, data: np.ndarray | float | int, *, name: str | None = None, hint: str = "const"
    ) -> Value:
        """A constant holding ``data``, called ``name`` or a fresh name from ``hint``.

        A read-only array is kept as it is (a traced tensor shares its memory with the graph);
        anything else is copied and made read-only, so the constant cannot change under the
        graph. Its type is a tensor's over the data (small integer vectors carry their contents).
        """
        if isinstance(data, np.ndarray) and not data.flags.writeable:
            array = data
        else:
            array = _np_array(data)
            array.flags.writeable = False
        if name is None:
            name = self.scope.fresh(hint)
        else:
            self.scope.reserve(name)
        if array.dtype in _NATIVE_DTYPES:  # the tracer adds one per Python scalar or index
            ttype = Tensor._wrap(array).type
        else:  # asarray checks the dtype (and makes the type's byte order native)
            ttype = asarray(array).type
        value = Value(name, ttype)
        self._constants.append(Constant(value, array))
        self._constant_data[id(value)] = array
        return value

    def constant_data(self, value: Value) -> np.ndarray | None:
        """The contents of ``value`` when it is a constant this builder added, else None."""
        return self._constant_data.get(id(value))

    # -- nodes ----------------------------------------------------------------------------

    def add(
        self,
        op: str | OpDef,
        inputs: Sequence[Value | None],
        attrs: Mapping[str, Any] | None = None,
        *,
        outputs: Sequence[str | Value | None] = (),
        n_outputs: int | None = None,
        name: str | None = None,
        hint: str | None = None,
        known_shapes: Sequence[Sequence[Dim | None] | None] = (),
        source: str | None = None,
    ) -> tuple[Value, ...]:
        """Add a node of operator ``op`` over ``inputs`` (None: an omitted optional input).

        The attributes are bound (defaults filled in) and recorded bound; the output types are
        the operator's ``infer`` (after the builder's ``refine`` hook).

        Args:
            outputs: For the first outputs, in order: a name to give the output (the caller
                keeps names unique, as the ONNX importer does with the model's), or an existing
                value the node defines (``OpDef.expand`` defines the fused node's own outputs;
                its type must be what the operator infers), or None for a fresh name.
            n_outputs: How many of the operator's outputs the node declares (default: all).
            name: The node's name, kept unless another node of this builder has it. Without
                one a node is named after its first output when that name is fresh (``add``
                makes value ``add``), else it gets a fresh name.
            hint: Fresh output names are ``{hint}_{the operator's name for the output}``
                (``conv1_Y``); without a hint they come from the operator (``add``, ``add_1``).
            known_shapes: Shapes the caller already knows for the outputs (the model's declared
                shapes, the graph being rebuilt): where the operator leaves a size symbolic
                because it depends on data, the known size (not None) replaces it.
            source: The user's file:line (default: the builder's).

        Returns:
            The node's output values.

        Raises:
            OpArgumentError, OpTypeError: the operator's own error when the inputs or attributes
                do not fit, or when the node declares outputs the operator does not make.

        Example:
            >>> import numpy as np
            >>> from kiln.ops.registry import TensorType
            >>> b = GraphBuilder()
            >>> x = b.add_input("x", TensorType(np.dtype("float32"), (4, 6)))
            >>> [v.name for v in b.add("Split", [x], {"num_outputs": 2}, hint="halves")]
            ['halves_outputs', 'halves_outputs_1']
        """
        opdef = op if isinstance(op, OpDef) else get_op(op)
        bound = opdef.bind_attrs(attrs)
        types = self._infer(opdef, inputs, bound)
        values = self._outputs(opdef, types, outputs, n_outputs, hint, known_shapes)
        node_name = self._node_name(name, values, outputs, opdef)
        node = Node(
            opdef.qualified_name,
            tuple(inputs),
            values,
            bound,
            node_name,
            self.source if source is None else source,
        )
        self._nodes.append(node)
        return values

    def add_typed(
        self,
        opdef: OpDef,
        inputs: tuple[Value | None, ...],
        bound: dict[str, Any],
        types: Sequence[TensorType],
        source: str,
    ) -> tuple[Value, ...]:
        """:meth:`add` of a node whose output types the caller already has: ``infer``'s
        answer for these inputs and bound attributes, which the caller just ran or remembers
        from an earlier call on the same static input types (the tracer's hot path, keyed by
        :func:`infer_key`). Every output gets a fresh name and the node is named after the
        first, as :meth:`add` does without names or hints; no binding, arity check, ``infer``
        or ``refine`` hook here."""
        fresh = self.scope.fresh
        base = snake_case(opdef.name)
        values = tuple([Value(fresh(base), ttype) for ttype in types])
        name = values[0].name if values else fresh(base)
        self._node_names.add(name)  # (the scope already holds it: fresh took it)
        self._nodes.append(Node(opdef.qualified_name, inputs, values, bound, name, source))
        return values

    def rebuild(self, node: Node, inputs: Sequence[Value | None]) -> tuple[Value, ...]:
        """``node`` again over ``inputs`` (values standing for its inputs, perhaps more
        precisely typed): the same operator, attributes, name, source and output names, with
        the output types inferred again. Sizes that depend on data keep the node's own.

        Example:
            >>> import numpy as np
            >>> from kiln.ops.registry import TensorType
            >>> from kiln.symbolic import symbol
            >>> b = GraphBuilder()
            >>> x = b.add_input("x", TensorType(np.dtype("float32"), (symbol("n"),)))
            >>> (y,) = b.add("Exp", [x])
            >>> special = GraphBuilder()
            >>> x5 = special.add_input("x", TensorType(np.dtype("float32"), (5,)))
            >>> [(v.name, v.shape) for v in special.rebuild(b.nodes[0], [x5])]
            [('exp', (5,))]
        """
        opdef = node.opdef
        types = self._infer(opdef, inputs, opdef.bind_attrs(node.attrs))
        names = [v.name for v in node.outputs]
        shapes = [v.shape for v in node.outputs]
        values = self._outputs(opdef, types, names, len(names), None, shapes)
        self._node_names.add(node.name)
        self.scope.reserve(node.name)
        self._nodes.append(Node(node.op, tuple(inputs), values, node.attrs, node.name, node.source))
        return values

    def _infer(
        self, opdef: OpDef, inputs: Sequence[Value | None], bound: dict[str, Any]
    ) -> list[TensorType]:
        in_types = [None if v is None else v.type for v in inputs]
        memo = self._inferred
        key = None if memo is None else infer_key(opdef, in_types, bound)
        if key is not None:
            try:
                known = memo.get(key)
            except TypeError:  # an attribute that is not hashable (an array)
                key = known = None
            if known is not None and known[0] is opdef:
                return list(known[1])
        opdef.check_arity(len(inputs))
        types = list(opdef.infer(in_types, bound))
        if self._refine is not None:
            types = list(self._refine(opdef, inputs, bound, types))
        elif memo is not None and key is not None and infer_key(opdef, types, None) is not None:
            # (not a fresh size: a data-dependent size is a new symbol at every node)
            if len(memo) >= _INFER_MEMO_LIMIT:
                memo.clear()
            memo[key] = (opdef, tuple(types))
        return types

    def _outputs(
        self,
        opdef: OpDef,
        types: Sequence[TensorType],
        given: Sequence[str | Value | None],
        n_outputs: int | None,
        hint: str | None,
        known_shapes: Sequence[Sequence[Dim | None] | None],
    ) -> tuple[Value, ...]:
        if n_outputs is None and not given and hint is None and not known_shapes:
            # What the tracer asks for at every op it records: every output, fresh names.
            base, fresh = snake_case(opdef.name), self.scope.fresh
            return tuple([Value(fresh(base), ttype) for ttype in types])
        count = len(types) if n_outputs is None else n_outputs
        declared = max(count, len(given))
        if declared > len(types):
            raise OpArgumentError(
                f"{opdef.name}: the node has {declared} outputs but the operator makes "
                f"{len(types)} ({', '.join(opdef.outputs)})"
            )
        data_dependent = DATA_DEPENDENT_SHAPE in opdef.traits
        values = []
        for i, ttype in enumerate(types[:declared]):
            known = known_shapes[i] if i < len(known_shapes) else None
            if data_dependent and known is not None:
                ttype = _with_known_sizes(ttype, known)
            wanted = given[i] if i < len(given) else None
            if isinstance(wanted, Value):
                if not _fits(wanted.type, ttype, data_dependent):
                    raise OpTypeError(
                        f"{opdef.name}: output {wanted.name!r} is typed {wanted.type} but the "
                        f"operator infers {ttype}"
                    )
                values.append(wanted)
                continue
            if wanted is None:
                formal = opdef.outputs[min(i, len(opdef.outputs) - 1)] if opdef.outputs else "out"
                wanted = self.scope.fresh(
                    snake_case(opdef.name) if hint is None else f"{hint}_{formal}"
                )
            else:
                self.scope.reserve(wanted)
            values.append(Value(wanted, ttype))
        return tuple(values)

    def _node_name(
        self,
        name: str | None,
        values: Sequence[Value],
        given: Sequence[str | Value | None],
        opdef: OpDef,
    ) -> str:
        if name and name not in self._node_names:
            chosen = name
        elif name:
            chosen = self.scope.fresh(name)  # an ONNX model may repeat a node name
        elif values and (not given or given[0] is None):
            chosen = values[0].name  # the first output's name was made fresh for this node
        else:
            # The first output's name came from the caller and may be another node's name.
            chosen = self.scope.fresh(values[0].name if values else snake_case(opdef.name))
        self._node_names.add(chosen)
        self.scope.reserve(chosen)
        return chosen


_INFER_MEMO_LIMIT = 4096
# The memo of every builder without a refine hook (see GraphBuilder.__init__): ``infer`` is a
# function of the operator, the static input types and the attributes, whoever asks.
_SHARED_INFERRED: dict[tuple[Any, ...], tuple[OpDef, tuple[TensorType, ...]]] = {}


def infer_key(
    opdef: OpDef, types: Sequence[TensorType | None], bound: Mapping[str, Any] | None
) -> tuple[Any, ...] | None:
    """The key under which ``infer``'s answer for these input types and bound attributes is
    remembered, or None when it must run: a symbolic size anywhere (comparing one may record
    a shape guard, which a remembered answer would skip). An attribute that is not hashable
    (an array) makes the lookup fail: the caller then runs ``infer``. ``infer`` is a
    function of the types (contents included) and the attributes, and a remembered answer
    is one it gave, so the call it stands for passed the arity check and every check
    ``infer`` makes. (``bound`` None: only whether the types are all static.)"""
    parts: list[Any] = []
    for t in types:
        if t is None:
            parts.append(None)
            continue
        for d in t.shape:
            if type(d) is not int:
                return None
        value = t.value
        if value is not None:
            for item in value:
                if type(item) is not int:  # (floats: 0.0 and -0.0 would share a key)
                    return None
        parts.append((t.dtype, t.shape, value))  # a tuple hashes in C, a TensorType does not
    if bound is None:
        return ()
    return (opdef.name, opdef.domain, tuple(parts), tuple(bound.items()) if bound else ())


def _with_known_sizes(ttype: TensorType, known: Sequence[Dim | None]) -> TensorType:
    if len(known) != len(ttype.shape):
        return ttype
    shape = tuple(
        k if isinstance(d, SymDim) and k is not None else d for d, k in zip(ttype.shape, known)
    )
    return TensorType(ttype.dtype, shape, ttype.value)


def _fits(recorded: TensorType, inferred: TensorType, data_dependent: bool) -> bool:
    """True when a value typed ``recorded`` may be the output the operator infers as
    ``inferred`` (a data-dependent size the operator leaves symbolic may be anything)."""
    if recorded.dtype != inferred.dtype or len(recorded.shape) != len(inferred.shape):
        return False
    return all(
        r == i or (data_dependent and isinstance(i, SymDim)) or is_fresh(i)
        for r, i in zip(recorded.shape, inferred.shape)
    )


def expand_node(node: Node, scope: NameScope) -> list[Node]:
    """The ONNX-domain nodes a kiln-domain ``node`` stands for, made by its ``OpDef.expand``:
    the same inputs, and the last nodes define ``node``'s own output values. New values are
    named in ``scope`` (pass the graph's); the nodes keep ``node``'s source line.

    Raises:
        KilnError: when the operator has no ``expand`` hook, or its expansion leaves one of
            the node's outputs undefined.

    Example:
        >>> import kiln, numpy as np
        >>> from kiln.optim.fuse_elementwise import fuse_elementwise_regions
        >>> g = kiln.trace(lambda x: np.tanh(x * 2.0), np.ones(4, np.float32)).graph
        >>> fused, _ = fuse_elementwise_regions(g, min_elements=1)
        >>> [n.op for n in expand_node(fused.nodes[0], fused.name_scope())]
        ['Mul', 'Tanh']
    """
    opdef = node.opdef
    if opdef.expand is None:
        raise KilnError(f"node {node.name!r}: operator {opdef.qualified_name} has no expand hook")
    builder = GraphBuilder(scope, node.source)
    opdef.expand(builder, node.inputs, opdef.bind_attrs(node.attrs), node.outputs)
    defined = {id(v) for n in builder.nodes for v in n.outputs}
    missing = [v.name for v in node.outputs if id(v) not in defined]
    if missing:
        raise KilnError(
            f"node {node.name!r}: the expansion of {opdef.qualified_name} does not define its "
            f"output(s) {', '.join(missing)}"
        )
    return list(builder.nodes)
