"""The operator registry: one :class:`OpDef` record per operator, holding every rule it has.

An operator has the name and semantics of the ONNX operator of the same name (opset 21 or newer,
unless ``domain`` says it is kiln's own), so a graph maps 1:1 onto ONNX. Its record carries:

* ``inputs`` and ``attrs``: what it takes, with defaults;
* ``infer``: the shape-and-dtype rule, which works on symbolic dimensions
  (:mod:`kiln.symbolic`) and validates the call, raising errors that name the operator;
* ``kernel``: the CPU implementation over NumPy arrays;
* ``traits``: facts passes and executors rely on (elementwise, reduction, ...);
* ``samples``: inputs its tests run, each with an independent reference where one exists.

The tracer, the interpreters, the optimizer and ONNX import/export all read this registry;
nothing else lists operators. Adding an operator is one ``register(OpDef(...))`` in the module
of its family.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import OpArgumentError, OpTypeError
from ..symbolic import Dim, Shape, format_shape

__all__ = [
    "TensorType",
    "Input",
    "Attr",
    "Sample",
    "OpDef",
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
]

# Traits.
ELEMENTWISE = "elementwise"  # output[i] depends on input[i] only (after broadcasting)
REDUCTION = "reduction"  # reduces axes
SHAPE = "shape"  # computes on shapes (Shape, Size, ConstantOfShape, Range)
LAYOUT = "layout"  # moves data without arithmetic (Reshape, Transpose, Slice, ...)
PURE = "pure"  # no side effects, same inputs give the same outputs
COMMUTATIVE = "commutative"  # f(a, b) == f(b, a)
DATA_DEPENDENT_SHAPE = "data_dependent_shape"  # an output size depends on input values


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

_ATTR_KINDS = ("int", "float", "str", "ints", "floats", "strs", "tensor")


@dataclass(frozen=True, slots=True)
class Input:
    """One formal input. ``variadic`` takes every remaining actual input (Concat, Max, ...)."""

    name: str
    optional: bool = False
    variadic: bool = False
    doc: str = ""


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


@dataclass(frozen=True)
class OpDef:
    """Everything kiln knows about one operator."""

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
    # For kiln-domain (fused) operators: ``expand(node, scope) -> list[Node]``, ONNX-domain
    # nodes computing the same outputs from the same inputs (``scope`` names new values). ONNX
    # export and executors without a kernel for the fused op use it.
    expand: Callable[..., Any] | None = None

    @property
    def qualified_name(self) -> str:
        return self.name if not self.domain else f"{self.domain}.{self.name}"

    def has(self, trait: str) -> bool:
        return trait in self.traits

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
