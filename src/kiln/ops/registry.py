"""The operator registry: one :class:`OpDef` record per operator, holding every rule it has.

An operator has the name and semantics of the ONNX operator of the same name (opset 21 or newer,
unless ``domain`` says it is kiln's own), so a graph maps 1:1 onto ONNX. Its record carries:

* ``inputs`` and ``attrs``: what it takes, with defaults;
* ``infer``: the shape-and-dtype rule, which works on symbolic dimensions
  (:mod:`kiln.symbolic`) and validates the call, raising errors that name the operator;
* ``kernel``: the CPU implementation over NumPy arrays;
* ``traits``: facts passes and executors rely on (elementwise, reduction, ...);
* ``samples``: inputs its tests run, each with an independent reference where one exists;
* what the engines need to know beyond the kernel: ``cost`` (how the engine selection weighs
  it), ``fast_kernel`` (a faster call the NumPy engine may write for some nodes) and
  ``engine_limits`` (nodes another engine would compute differently, so must not run).

The tracer, the interpreters, the optimizer and ONNX import/export all read this registry;
nothing else lists operators. Adding an operator is one ``register(OpDef(...))`` in the module
of its family.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import numpy as np

from ..errors import OpArgumentError, OpTypeError
from ..symbolic import Dim, Shape, format_shape

__all__ = [
    "TensorType",
    "Typed",
    "NodeRule",
    "KernelCall",
    "EngineLimit",
    "any_limit",
    "float64_differs",
    "float_input",
    "integer_input",
    "first_input_dtype",
    "same_dtype",
    "Input",
    "Attr",
    "Sample",
    "OpDef",
    "NodeBuilder",
    "ExpandFn",
    "BatchFn",
    "REQUIRED",
    "register",
    "get_op",
    "all_ops",
    "ELEMENTWISE",
    "REDUCTION",
    "SHAPE",
    "LAYOUT",
    "PURE",
    "COMMUTATIVE",
    "DATA_DEPENDENT_SHAPE",
    "SHAPE_ONLY",
    "VIEW",
    "NEW_ARRAY",
]

# Traits.
ELEMENTWISE = "elementwise"  # output[i] depends on input[i] only (after broadcasting)
REDUCTION = "reduction"  # reduces axes
SHAPE = "shape"  # computes on shapes (Shape, Size, ConstantOfShape, Range)
LAYOUT = "layout"  # moves data without arithmetic (Reshape, Transpose, Slice, ...)
PURE = "pure"  # no side effects, same inputs give the same outputs
COMMUTATIVE = "commutative"  # f(a, b) == f(b, a)
DATA_DEPENDENT_SHAPE = "data_dependent_shape"  # an output size depends on input values
SHAPE_ONLY = "shape_only"  # reads its inputs' shapes only, never their contents (Shape, Size)
# A NumPy view function (slicing, transpose, reshape where NumPy gives a view): the kernel may
# return a view of its first input, and a write through the result reaches that input. Any
# other operator's output never shares memory with its inputs (NumPy gives a new array).
VIEW = "view"
# The kernel always returns arrays it allocated (never an input, nor a view of one: checked on
# every sample by tests/ops/test_samples.py): a plan may then write into its result in place.
NEW_ARRAY = "new_array"


@dataclass(frozen=True, slots=True)
class TensorType:
    """The static knowledge about a tensor: dtype, shape, and for small integer tensors the
    contents when known (``value``, flat, as ints or symbolic sizes; small 1-D float tensors
    carry Python floats, which is how Resize learns its scales).

    ``value`` is what lets shape arithmetic stay symbolic: ``Shape(x)`` of a ``(B, 3)`` input
    has value ``(B, 3)``, and ``Reshape`` reads its target shape from it.
    """

    dtype: np.dtype
    shape: Shape
    value: tuple[Dim | float, ...] | None = None

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __str__(self) -> str:
        return f"{self.dtype.name}{format_shape(self.shape)}"


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()

# "graph": a subgraph (a kiln.ir.ModelGraph, closed: see kiln.ops.control), kept as it is
_ATTR_KINDS = ("int", "float", "str", "ints", "floats", "strs", "tensor", "graph")


@dataclass(frozen=True, slots=True)
class Input:
    """One formal input. ``variadic`` takes every remaining actual input (Concat, Max, ...);
    ``values_only``: the operator reads only its values (a shape, axes, bounds, pads), so no
    output is ever a view of its buffer."""

    name: str
    optional: bool = False
    variadic: bool = False
    doc: str = ""
    values_only: bool = False


@dataclass(frozen=True, slots=True)
class Attr:
    """One attribute: its ONNX kind (``int float str ints floats strs tensor``) and default."""

    kind: str
    default: Any = REQUIRED
    doc: str = ""

    def __post_init__(self) -> None:
        if self.kind not in _ATTR_KINDS:
            raise ValueError(f"unknown attribute kind {self.kind!r}; expected one of {_ATTR_KINDS}")


@dataclass(frozen=True)
class Sample:
    """A test input for an operator.

    ``reference`` computes the expected outputs from the same inputs and attributes, written
    independently of ``kernel`` (loops, float64 math, a textbook formula); ``None`` means the
    kernel is itself the NumPy reference (``np.exp`` for Exp). ``rtol``/``atol`` override the
    per-dtype tolerances of the test suite where a formula is legitimately less exact.
    """

    inputs: tuple[np.ndarray | None, ...]
    attrs: Mapping[str, Any] = field(default_factory=dict)
    reference: Callable[..., Any] | None = None
    name: str = ""
    rtol: float | None = None
    atol: float | None = None


InferFn = Callable[[Sequence["TensorType | None"], Mapping[str, Any]], Sequence[TensorType]]
KernelFn = Callable[..., Any]


class NodeBuilder(Protocol):
    """What an ``expand`` hook builds its nodes with (:class:`kiln.ir.GraphBuilder` is one).

    The operators sit below the IR and cannot import it, so the graph values passed around
    here are typed ``Any``; they are :class:`kiln.ir.Value` objects.
    """

    def add(
        self,
        op: str,
        inputs: Sequence[Any],
        attrs: Mapping[str, Any] | None = None,
        *,
        outputs: Sequence[Any] = (),
    ) -> tuple[Any, ...]:
        """Add a node of operator ``op`` (attributes bound, output types inferred, outputs
        named) and return its output values; ``outputs`` are existing values it defines."""
        ...

    def add_constant(self, data: Any, *, hint: str = "const") -> Any:
        """A constant holding ``data`` (small integer vectors carry their contents)."""
        ...

    def constant_data(self, value: Any) -> np.ndarray | None:
        """The contents of ``value`` when it is a constant this builder added, else None."""
        ...


# ``expand(builder, inputs, attrs, outputs)``: for a kiln-domain (fused) operator, add to
# ``builder`` ONNX-domain nodes that compute the node's ``outputs`` from its ``inputs`` (None:
# an omitted input); ``attrs`` are the node's, bound. The nodes making the outputs define the
# node's own values (``builder.add(..., outputs=[...])``), so the rest of the graph still reads
# them. kiln.ir.expand_node runs it.
ExpandFn = Callable[[NodeBuilder, Sequence[Any], Mapping[str, Any], Sequence[Any]], None]


# ``batch(builder, op, inputs, batched, attrs)``: operator ``op`` over a batch, where input i
# has a leading batch axis when ``batched[i]`` and is shared otherwise; returns the outputs,
# batch axis first, or None where the rule does not cover the node. See kiln.ops.batching.
BatchFn = Callable[
    [NodeBuilder, str, Sequence[Any], Sequence[bool], Mapping[str, Any]], "Sequence[Any] | None"
]


# -- what engines read of a record beyond the kernel -----------------------------------------


class Typed(Protocol):
    """What an engine rule reads of a node's input or output: an IR value or a TensorType."""

    @property
    def dtype(self) -> np.dtype: ...

    @property
    def shape(self) -> Shape: ...


_T = TypeVar("_T")
# A rule over one node's recorded types: ``rule(inputs, outputs, attrs)``, with ``None`` for an
# omitted optional input and the attributes bound (defaults filled in, see OpDef.bind_attrs).
NodeRule = Callable[[Sequence["Typed | None"], Sequence[Typed], Mapping[str, Any]], _T]


@dataclass(frozen=True, slots=True)
class KernelCall:
    """One call the NumPy engine writes into its generated code to run a node.

    ``template`` is a Python expression over the node's inputs (``{0}``, ``{1}``, ...) and the
    objects of ``binds`` (``{b0}``, ``{b1}``, ...), which the plan binds once; so
    ``KernelCall("{b0}({0}, {1})", (np.divide,))`` runs ``np.divide(a, b)``.

    Attributes:
        template: The call, as a format string (see above).
        binds: The objects the template names, in order.
        returns_view: The result may be a view of an input or of a constant
            (``"{0}.reshape({b0})"``), so the run must never write into it.
        ufunc: The elementwise ufunc the template calls with the inputs as they are, when the
            plan may add ``out=`` an input buffer that no later node reads.
        takes_out: The call (not a ufunc) also takes ``out=``: an array of the output's dtype
            and shape, possibly one of its inputs, that it fills and returns (Softmax). The
            plan may then hand it an input buffer no later node reads, or a donated input.

    Example:
        >>> KernelCall("{b0}({0}, {1})", (np.divide,), ufunc=np.divide).returns_view
        False
    """

    template: str
    binds: tuple[Any, ...] = ()
    returns_view: bool = False
    ufunc: np.ufunc | None = None
    takes_out: bool = False


def same_dtype(inputs: Sequence[Typed | None], outputs: Sequence[Typed]) -> bool:
    """True when every given input has the first output's dtype (NumPy then computes in that
    dtype, and a ufunc may write its result into an input buffer); a guard of fast kernels.

    Example:
        >>> f32 = TensorType(np.dtype(np.float32), (2,))
        >>> same_dtype([f32, None], [f32])
        True
    """
    out = outputs[0].dtype if outputs else None
    return all(v.dtype == out for v in inputs if v is not None)


@dataclass(frozen=True, slots=True)
class EngineLimit:
    """Nodes of an operator that one engine must not run, because it would compute them
    differently from NumPy's semantics (NaN propagation, signed zeros, division by zero,
    rounding), or not at all, or would crash the process: the engine refuses such a graph, a
    forced engine names the node, and the automatic selection leaves it to another engine
    (SPEC 5b, docs/design.md "Engines never change an answer").

    Attributes:
        reason: Completes the sentence "<operator> ...", as the engine's refusal says it:
            ``"on float64 (computed in lower precision)"``.
        when: ``when(inputs, outputs, attrs)``, whether a node with these types and bound
            attributes is concerned (a :data:`NodeRule`); None: every node of the operator.
        on_empty: The limit concerns only nodes that have an input with no elements (the
            engine crashes on them): the engine refuses a node whose input is empty by its
            recorded shape, and routes a call whose symbolic sizes make it empty to the
            NumPy plan (``when`` further narrows the nodes concerned).
        parts: Several limits of one engine on one operator (see :func:`any_limit`).

    Example:
        >>> EngineLimit("of an empty tensor").applies([], [], {})
        True
    """

    reason: str
    when: NodeRule[bool] | None = None
    on_empty: bool = False
    parts: tuple[EngineLimit, ...] = ()

    def applies(
        self, inputs: Sequence[Typed | None], outputs: Sequence[Typed], attrs: Mapping[str, Any]
    ) -> bool:
        """Whether a node with these types and (bound) attributes must not run there
        (for an ``on_empty`` limit: whether it would, were an input empty)."""
        return self.when is None or self.when(inputs, outputs, attrs)

    def reason_for(
        self, inputs: Sequence[Typed | None], outputs: Sequence[Typed], attrs: Mapping[str, Any]
    ) -> str | None:
        """Why a node with these types must not run there, or None when it may. An
        ``on_empty`` limit answers only for inputs empty by their recorded shape; see
        :meth:`empty_limits` for the ones an engine checks at run time."""
        for part in self.parts or (self,):
            if not part.applies(inputs, outputs, attrs):
                continue
            if not part.on_empty or any(v is not None and 0 in v.shape for v in inputs):
                return part.reason
        return None

    def empty_limits(
        self, inputs: Sequence[Typed | None], outputs: Sequence[Typed], attrs: Mapping[str, Any]
    ) -> list[EngineLimit]:
        """The ``on_empty`` parts concerning a node with these types."""
        return [
            part
            for part in self.parts or (self,)
            if part.on_empty and part.applies(inputs, outputs, attrs)
        ]


def any_limit(*limits: EngineLimit) -> EngineLimit:
    """One engine's several limits on one operator, as one :class:`EngineLimit` (its
    ``reason_for`` names the limit that applies).

    Example:
        >>> both = any_limit(EngineLimit("on float64", first_input_dtype(np.float64)),
        ...                  EngineLimit("on an empty input", on_empty=True))
        >>> both.reason_for([TensorType(np.dtype(np.float64), (2,))], [], {})
        'on float64'
    """
    rules = [limit.when for limit in limits]

    def applies(
        inputs: Sequence[Typed | None], outputs: Sequence[Typed], attrs: Mapping[str, Any]
    ) -> bool:
        return any(rule is None or rule(inputs, outputs, attrs) for rule in rules)

    return EngineLimit(" or ".join(limit.reason for limit in limits), applies, parts=limits)


def float64_differs(
    limits: Mapping[str, EngineLimit] | None = None, **ulps: int
) -> dict[str, EngineLimit]:
    """``limits`` plus, for each engine of ``ulps`` (``jax=4``, ``onnxruntime=2``: the most
    ulps its results were measured to differ from NumPy's), a limit keeping the operator's
    float64 nodes off that engine: a float64 user asks for NumPy's digits, and a later
    operation can magnify an ulp (SPEC 5b). Measured by tools/engine_ulps.py.

    Example:
        >>> float64_differs(jax=2)["jax"].reason
        'on float64 (jax differs from NumPy by up to 2 ulp)'
    """
    out = dict(limits or {})
    for engine, ulp in ulps.items():
        limit = EngineLimit(
            f"on float64 ({engine} differs from NumPy by up to {ulp} ulp)",
            first_input_dtype("float64"),
        )
        out[engine] = any_limit(out[engine], limit) if engine in out else limit
    return out


def float_input(
    inputs: Sequence[Typed | None], outputs: Sequence[Typed], attrs: Mapping[str, Any]
) -> bool:
    """An :attr:`EngineLimit.when` rule: the node's first input is floating-point (where NaN,
    signed zeros and rounding live).

    Example:
        >>> float_input([TensorType(np.dtype(np.float32), (2,))], [], {})
        True
    """
    first = inputs[0] if inputs else None
    return first is not None and (first.dtype.kind == "f" or first.dtype.name == "bfloat16")


def integer_input(
    inputs: Sequence[Typed | None], outputs: Sequence[Typed], attrs: Mapping[str, Any]
) -> bool:
    """An :attr:`EngineLimit.when` rule: the node's first input is an integer (where division
    by zero traps or differs).

    Example:
        >>> integer_input([TensorType(np.dtype(np.int32), (2,))], [], {})
        True
    """
    first = inputs[0] if inputs else None
    return first is not None and first.dtype.kind in "iu"


def first_input_dtype(*dtypes: Any) -> NodeRule[bool]:
    """An :attr:`EngineLimit.when` rule: the node's first input has one of ``dtypes``.

    Example:
        >>> rule = first_input_dtype(np.float64)
        >>> rule([TensorType(np.dtype(np.float64), (2,))], [], {})
        True
    """
    wanted = frozenset(np.dtype(d) for d in dtypes)

    def applies(
        inputs: Sequence[Typed | None], outputs: Sequence[Typed], attrs: Mapping[str, Any]
    ) -> bool:
        first = inputs[0] if inputs else None
        return first is not None and first.dtype in wanted

    return applies


@dataclass(frozen=True)
class OpDef:
    """Everything kiln knows about one operator.

    Besides its semantics (``inputs``, ``attrs``, ``infer``, ``kernel``, ``traits``,
    ``samples``), a record carries the facts engines need about the operator, so no engine
    lists operators by name (an engine's own lowering table aside):

    Attributes:
        cost: Element operations per output element, relative to an add, by which the
            engine selection (:func:`kiln.exec.select.work_estimate`) weighs a node: a number
            (Tanh: 6, NumPy's time for it relative to an add), or a :data:`NodeRule` giving
            it from the node's types and attributes (MatMul: 2 * K multiply-adds per output).
        fast_kernel: A :data:`NodeRule` the NumPy engine asks for a faster
            :class:`KernelCall` than the registry kernel for one node, or None where there is
            none (Div on float32: ``np.divide`` itself). It returns None for the nodes it
            does not cover; the call must compute exactly what ``kernel`` computes.
        engine_limits: Engine name (``"jax"``, ``"onnxruntime"``) to the
            :class:`EngineLimit` saying which nodes of this operator that engine must not run,
            and why (Gelu on float64 in onnxruntime). The NumPy and reference engines run
            every node.
        raises_on_values: Whether the kernel can raise on the values of its inputs, not only
            on their types and sizes (NumPy's error for an integer to a negative integer
            power, an index out of range): True, or a :data:`NodeRule` narrowing it to some
            nodes. Such a node is kept even when its result is unused
            (:func:`kiln.ir.rewrite.remove_unused`), so a run raises where NumPy does.
        batch: How the operator runs over a batch of inputs at once (a
            :class:`kiln.ops.batching.BatchRule`), for the loop vectorizer; None: the
            elementwise rule for an elementwise operator, else none (see
            :func:`kiln.ops.batching.batching_rule`).
        bit_exact: Whether every engine that runs the operator with its semantics computes
            NumPy's very bits: its real floating-point results are single correctly rounded
            IEEE operations (add, divide, square root, a cast), comparisons or selections,
            never a math library's approximation (exp, tanh: each engine has its own) nor a
            sum in an order the engine chooses (a reduction, a matrix product). True, or a
            :data:`NodeRule` narrowing it. Read through :meth:`is_bit_exact`, which also
            counts as exact every node with no floating-point output and every layout
            operator. The automatic engine choice without ``allow_reassociation``
            takes another engine than NumPy only for graphs whose nodes are all bit-exact
            (:func:`kiln.exec.select.rounding_differs`).
    """

    name: str
    doc: str
    inputs: tuple[Input, ...]
    outputs: tuple[str, ...]
    infer: InferFn
    kernel: KernelFn
    attrs: Mapping[str, Attr] = field(default_factory=dict)
    traits: frozenset[str] = frozenset({PURE})
    samples: Callable[[], Sequence[Sample]] = tuple
    domain: str = ""  # "" is the ONNX domain; "kiln" marks kiln's own (fused) operators
    since_version: int = 21
    variadic_outputs: bool = False  # Split: as many outputs as the node declares
    # For kiln-domain (fused) operators: the ONNX-domain nodes computing the same outputs
    # from the same inputs (see ExpandFn). ONNX export and executors without a kernel for the
    # fused op use it.
    expand: ExpandFn | None = None
    cost: float | NodeRule[float] = 1
    fast_kernel: NodeRule[KernelCall | None] | None = None
    engine_limits: Mapping[str, EngineLimit] = field(default_factory=dict)
    raises_on_values: bool | NodeRule[bool] = False
    batch: Any = None  # a kiln.ops.batching.BatchRule (defined over this module)
    bit_exact: bool | NodeRule[bool] = False
    # Precomputed from ``traits`` for the eager door, which reads it on every call: whether
    # the kernel may return a view of its first input (the ``VIEW`` trait).
    is_view: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "is_view", VIEW in self.traits)

    @property
    def qualified_name(self) -> str:
        return self.name if not self.domain else f"{self.domain}.{self.name}"

    def has(self, trait: str) -> bool:
        return trait in self.traits

    def may_raise(
        self, inputs: Sequence[Typed | None], outputs: Sequence[Typed], attrs: Mapping[str, Any]
    ) -> bool:
        """Whether a node with these types and (bound) attributes can raise on its inputs'
        values at run time (see ``raises_on_values``)."""
        rule = self.raises_on_values
        return bool(rule(inputs, outputs, attrs)) if callable(rule) else bool(rule)

    def is_bit_exact(
        self, inputs: Sequence[Typed | None], outputs: Sequence[Typed], attrs: Mapping[str, Any]
    ) -> bool:
        """Whether any engine computes NumPy's bits for a node with these types and (bound)
        attributes (see ``bit_exact``): no real or complex floating-point output, a layout
        operator, or a real result the record declares exact. Complex arithmetic is
        never counted exact (its formulas differ between libraries)."""
        kinds = {o.dtype.kind if o.dtype.name != "bfloat16" else "f" for o in outputs}
        if not kinds & {"f", "c"} or LAYOUT in self.traits:
            return True
        if "c" in kinds:
            return False
        rule = self.bit_exact
        return bool(rule(inputs, outputs, attrs)) if callable(rule) else bool(rule)

    # -- validation used by dispatch, the IR and ONNX import -------------------------------

    def bind_attrs(self, attrs: Mapping[str, Any] | None) -> dict[str, Any]:
        """Complete ``attrs`` with defaults, normalising values; reject unknown or missing ones."""
        given = dict(attrs) if attrs else {}
        bound: dict[str, Any] = {}
        for name, spec in self.attrs.items():
            if name in given:
                value = given.pop(name)
                if value is None and spec.default is None:  # "absent", as ONNX means it
                    bound[name] = None
                else:
                    bound[name] = _normalise_attr(self.name, name, spec, value)
            elif spec.default is REQUIRED:
                raise OpArgumentError(f"{self.name}: attribute {name!r} is required")
            else:
                bound[name] = spec.default
        if given:
            unknown = ", ".join(sorted(given))
            known = ", ".join(self.attrs) or "none"
            raise OpArgumentError(
                f"{self.name}: unknown attribute(s) {unknown}; its attributes are: {known}"
            )
        return bound

    def input_at(self, position: int) -> Input | None:
        """The formal input an actual input at ``position`` binds to (a variadic last input
        takes every remaining one); None past the formal inputs."""
        if position < len(self.inputs):
            return self.inputs[position]
        if self.inputs and self.inputs[-1].variadic:
            return self.inputs[-1]
        return None

    def check_arity(self, count: int) -> None:
        """Raise unless ``count`` actual inputs fit the formal inputs."""
        required = sum(1 for i in self.inputs if not i.optional and not i.variadic)
        variadic = any(i.variadic for i in self.inputs)
        if count < required or (not variadic and count > len(self.inputs)):
            names = ", ".join(
                i.name + ("..." if i.variadic else "?" if i.optional else "") for i in self.inputs
            )
            raise OpArgumentError(f"{self.name} takes inputs ({names}); got {count} input(s)")


def _normalise_attr(op: str, name: str, spec: Attr, value: Any) -> Any:
    kind = spec.kind
    try:
        if kind == "int":
            if isinstance(value, (bool, np.bool_)):
                return int(value)
            if isinstance(value, (int, np.integer)):
                return int(value)
        elif kind == "float":
            if isinstance(value, (int, float, np.integer, np.floating)):
                return float(value)
        elif kind == "str":
            if isinstance(value, str):
                return value
            if isinstance(value, bytes):
                return value.decode()
        elif kind == "ints":
            if isinstance(value, (int, np.integer)):
                return (int(value),)
            return tuple(int(v) for v in value if _is_int(v) or _raise())
        elif kind == "floats":
            return tuple(float(v) for v in value)
        elif kind == "strs":
            return tuple(str(v) for v in value)
        elif kind == "tensor":
            return np.asarray(value)
        elif kind == "graph":
            if hasattr(value, "input_values") and hasattr(value, "output_values"):
                return value
    except (TypeError, ValueError):
        pass
    raise OpTypeError(f"{op}: attribute {name!r} must be of kind {kind}, got {value!r}")


def _is_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def _raise() -> bool:
    raise TypeError


_REGISTRY: dict[str, OpDef] = {}


def register(op: OpDef) -> OpDef:
    """Add ``op`` to the registry; its qualified name must be new."""
    key = op.qualified_name
    if key in _REGISTRY:
        raise ValueError(f"operator {key} is registered twice")
    _REGISTRY[key] = op
    return op


def get_op(name: str) -> OpDef:
    """The operator called ``name`` (``"Add"``, or ``"kiln.FusedElementwise"``)."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise OpArgumentError(f"no operator named {name!r} is registered") from None


def all_ops() -> list[OpDef]:
    """Every registered operator, sorted by qualified name."""
    return [_REGISTRY[k] for k in sorted(_REGISTRY)]
