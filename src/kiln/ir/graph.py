"""The IR: :class:`Value`, :class:`Node`, :class:`Constant` and :class:`ModelGraph`.

A ``ModelGraph`` is a flat SSA program: named typed inputs, constants (initializers), nodes in
topological order, and named outputs. Values, nodes and constants are frozen plain data; a pass
builds a new graph rather than editing one in place. A node's ``op`` names a registry operator,
so every rule about it (shape, dtype, kernel, ONNX mapping) is found in one record.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, Union

import numpy as np

from ..device import as_place
from ..errors import GraphNotFinalizedError, GraphValidationError
from ..ops.control import install_graph_factory
from ..ops.registry import DATA_DEPENDENT_SHAPE, OpDef, TensorType, get_op
from ..spec import TensorSpec
from ..symbolic import ShapeGuard, SymDim, format_shape, is_fresh
from .printer import format_graph

if TYPE_CHECKING:
    import os

    from ..optim.transform import DefaultsOptions, OptimizeReport, Transform

__all__ = [
    "AttrValue",
    "Value",
    "Node",
    "Constant",
    "ModelGraph",
    "NameScope",
    "verify_graph",
    "Executable",
    "GraphRuntime",
    "install_runtime",
]

# A node's attribute: also a subgraph (``Attr("graph")``: If's branches, Loop's and Scan's body).
# Subgraphs are closed (see kiln.ops.control): every outer value a body reads is an explicit
# input of the node and of the subgraph, so passes see every dependency through node inputs.
AttrValue = Union[
    int, float, str, tuple[int, ...], tuple[float, ...], tuple[str, ...], np.ndarray, "ModelGraph"
]


@dataclass(frozen=True, slots=True, eq=False)
class Value:
    """A tensor in the graph: a unique name and a type. Compared by identity."""

    name: str
    type: TensorType

    @property
    def dtype(self) -> np.dtype:
        return self.type.dtype

    @property
    def shape(self) -> tuple[int | SymDim, ...]:
        return self.type.shape

    @property
    def spec(self) -> TensorSpec:
        """The value's type as a :class:`TensorSpec` (symbolic sizes kept)."""
        return TensorSpec(self.shape, self.dtype, self.name)

    def __repr__(self) -> str:
        return f"Value({self.name}: {self.type})"


@dataclass(frozen=True, slots=True, eq=False)
class Node:
    """One operator application. ``inputs`` holds ``None`` for an omitted optional input."""

    op: str
    inputs: tuple[Value | None, ...]
    outputs: tuple[Value, ...]
    attrs: Mapping[str, AttrValue]
    name: str
    source: str = ""  # the user's file:line that recorded it, when known

    @property
    def opdef(self) -> OpDef:
        return get_op(self.op)

    def __repr__(self) -> str:
        return f"Node({self.name}: {self.op})"


@dataclass(frozen=True, slots=True, eq=False)
class Constant:
    """A value with fixed contents (an ONNX initializer). ``data`` is read-only."""

    value: Value
    data: np.ndarray = field(repr=False)


class NameScope:
    """Hands out names unique within one graph: ``add``, ``add_1``, ``add_2``..."""

    _invalid = re.compile(r"[^A-Za-z0-9_.]")

    def __init__(self, taken: Iterable[str] = ()) -> None:
        self._taken: set[str] = set(taken)
        self._counters: dict[str, itertools.count] = {}

    def reserve(self, name: str) -> None:
        self._taken.add(name)

    def fresh(self, hint: str) -> str:
        base = _BASES.get(hint)
        if base is None:
            base = self._invalid.sub("_", hint) or "v"
            if base[0].isdigit():
                base = "_" + base
            if len(_BASES) < _CACHE_LIMIT:
                _BASES[hint] = base
        if base not in self._taken:
            self._taken.add(base)
            return base
        counter = self._counters.setdefault(base, itertools.count(1))
        while True:
            name = f"{base}_{next(counter)}"
            if name not in self._taken:
                self._taken.add(name)
                return name


# Names made from hints and operator names, computed once each (the tracer names every node
# it records: a regular expression per node was a tenth of the recording cost).
_BASES: dict[str, str] = {}
_SNAKE: dict[str, str] = {}
_CACHE_LIMIT = 1 << 16


def snake_case(op: str) -> str:
    """``MatMul`` -> ``matmul``, ``ReduceSum`` -> ``reduce_sum``, ``kiln.Fused`` -> ``fused``."""
    name = _SNAKE.get(op)
    if name is None:
        short = op.rsplit(".", 1)[-1]
        name = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", short).lower().replace("mat_mul", "matmul")
        if len(_SNAKE) < _CACHE_LIMIT:
            _SNAKE[op] = name
    return name


class ModelGraph:
    """A recorded operator graph: the IR that is optimized, placed, finalized and run.

    Build one with :func:`kiln.trace` (or ``kiln.compile(...).take_graph()``, or
    :func:`kiln.io.load`). Only a finalized graph runs.

    Example:
        >>> import kiln, numpy as np
        >>> g = kiln.trace(lambda x: np.tanh(x) * 2, kiln.ones((2, 3), "float32")).graph
        >>> g.input_names, g.output_names
        (['x'], ['output'])
        >>> g.finalize()
        >>> g.run([np.zeros((2, 3), np.float32)])[0].shape
        (2, 3)
    """

    default_max_iterations = 8

    def __init__(
        self,
        name: str,
        inputs: Sequence[Value],
        outputs: Sequence[Value],
        nodes: Sequence[Node],
        constants: Sequence[Constant] = (),
        place: object = None,
        shape_guards: Sequence[ShapeGuard] = (),
    ) -> None:
        self.name = name
        self._inputs = tuple(inputs)
        self._outputs = tuple(outputs)
        self._nodes = tuple(nodes)
        self._constants = tuple(constants)
        self._place = place  # a Device or Stream once chosen; None = the inputs' place
        self._shape_guards = tuple(shape_guards)
        self._program: Executable | None = None  # what finalize() made, while it holds
        # Whether an optimization allowed reassociating floating-point math (DefaultsOptions):
        # the graph's results may then differ from NumPy's by rounding, and the automatic
        # engine choice accepts engines that round differently (kiln.exec.select).
        self.reassociation_allowed = False

    # -- structure ------------------------------------------------------------------------

    @property
    def nodes(self) -> tuple[Node, ...]:
        """The nodes in topological order."""
        return self._nodes

    @property
    def constants(self) -> tuple[Constant, ...]:
        return self._constants

    @property
    def input_values(self) -> tuple[Value, ...]:
        return self._inputs

    @property
    def output_values(self) -> tuple[Value, ...]:
        return self._outputs

    @property
    def input_names(self) -> list[str]:
        return [v.name for v in self._inputs]

    @property
    def output_names(self) -> list[str]:
        return [v.name for v in self._outputs]

    @property
    def inputs(self) -> list[TensorSpec]:
        """The inputs' specs (name, dtype, shape with symbolic sizes), in signature order."""
        return [v.spec for v in self._inputs]

    @property
    def outputs(self) -> list[TensorSpec]:
        """The outputs' specs, in order."""
        return [v.spec for v in self._outputs]

    @property
    def shape_guards(self) -> tuple[ShapeGuard, ...]:
        """The facts about symbolic sizes the graph was recorded under (a capture's comparisons
        of sizes: ``s0 != 1``); the graph's input check refuses sizes that break one."""
        return self._shape_guards

    @property
    def place(self) -> object:
        """Where the graph runs (a Device or Stream), or ``None`` before one is chosen."""
        return self._place

    @property
    def program(self) -> Executable | None:
        """What :meth:`finalize` made of the graph (a :class:`kiln.runtime.Program`: the
        engine's plan at the graph's place), or ``None`` while the graph is not finalized."""
        return self._program

    def values(self) -> Iterable[Value]:
        """Every value: inputs, constants, then node outputs in order."""
        yield from self._inputs
        for c in self._constants:
            yield c.value
        for node in self._nodes:
            yield from node.outputs

    def with_body(
        self,
        nodes: Sequence[Node],
        outputs: Sequence[Value] | None = None,
        constants: Sequence[Constant] | None = None,
        inputs: Sequence[Value] | None = None,
    ) -> ModelGraph:
        """A new, unfinalized graph with the same name and place and the given parts replaced."""
        graph = ModelGraph(
            self.name,
            self._inputs if inputs is None else inputs,
            self._outputs if outputs is None else outputs,
            nodes,
            self._constants if constants is None else constants,
            self._place,
            self._shape_guards,
        )
        graph.reassociation_allowed = self.reassociation_allowed
        return graph

    def with_shape_guards(self, guards: Sequence[ShapeGuard]) -> ModelGraph:
        """A new, unfinalized graph with the same body and ``guards`` as its shape guards."""
        graph = ModelGraph(
            self.name,
            self._inputs,
            self._outputs,
            self._nodes,
            self._constants,
            self._place,
            guards,
        )
        graph.reassociation_allowed = self.reassociation_allowed
        return graph

    def copy(self) -> ModelGraph:
        """An independent graph with the same contents (nodes and values are immutable, so
        they are shared); the copy is not finalized."""
        return self.with_body(self._nodes)

    def name_scope(self) -> NameScope:
        """A :class:`NameScope` that knows every name already used in this graph."""
        nodes = self._nodes
        taken = [v.name for v in self._inputs]
        taken += [c.value.name for c in self._constants]
        taken += [v.name for n in nodes for v in n.outputs]
        taken += [n.name for n in nodes]
        return NameScope(taken)

    # -- lifecycle: delegated to the runtime layer (kiln.runtime) -------------------------

    def is_finalized(self) -> bool:
        """True once :meth:`finalize` ran (and nothing has changed the graph since)."""
        return self._program is not None

    def finalize(self, engine: str | None = None) -> None:
        """Ready the graph to run at its place: build the executor's plan. Idempotent.

        Args:
            engine: Which execution engine runs the graph (``kiln.exec`` lists them); None
                picks one for the graph. Finalizing again with another engine re-plans.
        """
        program = self._program
        if program is not None and (engine is None or engine == program.requested_engine):
            return
        self._program = runtime().finalize(self, self._place, engine)

    def to(self, where: object) -> None:
        """Choose where the graph runs; on a finalized graph, move it there.

        Raises :class:`~kiln.errors.DeviceUnavailableError` for a place with no backend.
        """
        self._place = as_place(where)  # type: ignore[arg-type]
        program = self._program
        if program is not None:
            self._program = runtime().finalize(self, self._place, program.requested_engine)

    def run(self, inputs: Sequence[object] | Mapping[str, object]) -> list:
        """Run the finalized graph on flat inputs: a sequence in signature order, or a mapping
        by input name. Returns the list of output tensors.

        Raises :class:`~kiln.errors.GraphNotFinalizedError` before :meth:`finalize`, and
        :class:`~kiln.errors.InputMismatchError` naming the input and axis for wrong inputs.
        """
        program = self._program
        if program is None:
            raise GraphNotFinalizedError(
                f"graph {self.name!r} is not finalized: call graph.finalize() before run()"
            )
        return program.run(inputs)

    def optimize(
        self,
        transforms: Sequence[Transform] | None = None,
        max_num_iterations: int | None = None,
        *,
        defaults: DefaultsOptions | None = None,
    ) -> OptimizeReport:
        """Run the optimizer (the default pipeline when ``transforms`` is None) to a fixed
        point or ``max_num_iterations`` (the graph's default cap when None). The graph is
        rewritten in place; a finalized graph is finalized again. Returns the
        :class:`~kiln.optim.OptimizeReport`. With ``allow_reassociation`` in ``defaults``
        the graph keeps ``reassociation_allowed`` set: its results may differ from NumPy's by
        rounding, and the automatic engine choice then accepts an engine that rounds
        differently (:mod:`kiln.exec.select`)."""
        cap = self.default_max_iterations if max_num_iterations is None else max_num_iterations
        optimized, report = runtime().optimize(self, transforms, cap, defaults)
        self._inputs = optimized._inputs
        self._outputs = optimized._outputs
        self._nodes = optimized._nodes
        self._constants = optimized._constants
        self._shape_guards = optimized._shape_guards
        if defaults is not None and defaults.allow_reassociation:
            self.reassociation_allowed = True
        program, self._program = self._program, None
        if program is not None:
            self.finalize(program.requested_engine)
        return report

    # -- ONNX -----------------------------------------------------------------------------

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the graph as an ONNX model file (needs the ``onnx`` extra)."""
        runtime().save(self, path)

    def to_onnx(self) -> object:
        """The graph as an ``onnx.ModelProto`` (needs the ``onnx`` extra)."""
        return runtime().to_onnx(self)

    # -- checks and printing -------------------------------------------------------------

    def verify(self) -> None:
        """Check the IR's invariants; raise :class:`GraphValidationError` naming the problem."""
        verify_graph(self)

    def __str__(self) -> str:
        return format_graph(self)

    def __repr__(self) -> str:
        return (
            f"<ModelGraph {self.name!r}: {len(self._inputs)} inputs, {len(self._nodes)} nodes, "
            f"{len(self._outputs)} outputs{', finalized' if self.is_finalized() else ''}>"
        )

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_program"] = None
        return state


# -- the runtime the lifecycle methods delegate to ---------------------------------------


class Executable(Protocol):
    """What finalizing a graph makes (:class:`kiln.runtime.Program`), as the IR sees it."""

    requested_engine: str | None
    check_inputs: Callable[[Any], list[np.ndarray]]
    run_arrays: Callable[[Sequence[np.ndarray]], list[np.ndarray]]

    @property
    def engine(self) -> str: ...

    def run(self, inputs: Sequence[object] | Mapping[str, object]) -> list: ...

    def bindings(self, arrays: Sequence[np.ndarray]) -> dict[str, int]: ...


class GraphRuntime(Protocol):
    """The layer above the IR that finalizes, optimizes and saves graphs.

    The IR cannot import the executors, the optimizer or the exporter (they import the IR), so
    the layer that knows them all (:mod:`kiln.runtime`) installs itself here with
    :func:`install_runtime` when kiln is imported.
    """

    def finalize(self, graph: ModelGraph, place: object, engine: str | None) -> Executable: ...

    def optimize(
        self,
        graph: ModelGraph,
        transforms: Sequence[Transform] | None,
        max_num_iterations: int,
        defaults: DefaultsOptions | None,
    ) -> tuple[ModelGraph, OptimizeReport]: ...

    def save(self, graph: ModelGraph, path: str | os.PathLike[str]) -> None: ...

    def to_onnx(self, graph: ModelGraph) -> object: ...


_runtime: GraphRuntime | None = None


def install_runtime(graph_runtime: GraphRuntime) -> None:
    """Make ``graph_runtime`` the layer :class:`ModelGraph`'s lifecycle methods delegate to."""
    global _runtime
    _runtime = graph_runtime


def runtime() -> GraphRuntime:
    """The installed :class:`GraphRuntime` (``import kiln`` installs :mod:`kiln.runtime`)."""
    if _runtime is None:
        raise RuntimeError("no graph runtime is installed: import kiln (kiln.runtime) first")
    return _runtime


def _types_agree(recorded: TensorType, inferred: TensorType, data_dependent: bool) -> bool:
    if recorded.dtype != inferred.dtype or len(recorded.shape) != len(inferred.shape):
        return False
    for r, i in zip(recorded.shape, inferred.shape):
        if r == i:
            continue
        if (data_dependent and isinstance(i, SymDim)) or is_fresh(i):
            continue
        return False
    return True


def verify_graph(graph: ModelGraph) -> None:
    """The checks of :meth:`ModelGraph.verify`."""
    problems: list[str] = []
    defined: set[int] = set()
    names: dict[str, str] = {}

    def define(value: Value, owner: str) -> None:
        if id(value) in defined:
            problems.append(f"value {value.name!r} is defined twice (again by {owner})")
        defined.add(id(value))
        if value.name in names:
            problems.append(f"name {value.name!r} is used by {names[value.name]} and by {owner}")
        names[value.name] = owner

    for v in graph.input_values:
        define(v, f"input {v.name!r}")
    for c in graph.constants:
        define(c.value, f"constant {c.value.name!r}")
        if c.data.dtype != c.value.dtype or tuple(c.data.shape) != tuple(c.value.shape):
            problems.append(
                f"constant {c.value.name!r} holds {c.data.dtype}{format_shape(c.data.shape)} "
                f"but is typed {c.value.type}"
            )
    node_names: set[str] = set()
    for index, node in enumerate(graph.nodes):
        where = f"node {index} {node.name!r} ({node.op})"
        if node.name in node_names:
            problems.append(f"{where}: node name is not unique")
        node_names.add(node.name)
        try:
            opdef = get_op(node.op)
        except Exception:
            problems.append(f"{where}: no operator {node.op!r} is registered")
            continue
        for i, arg in enumerate(node.inputs):
            if arg is not None and id(arg) not in defined:
                problems.append(
                    f"{where}: input {i} {arg.name!r} is used before it is defined "
                    "(not topologically ordered, or from another graph)"
                )
        for key, sub in node.attrs.items():
            if isinstance(sub, ModelGraph):  # closed: checked on its own, then against the node
                try:
                    verify_graph(sub)
                except GraphValidationError as exc:
                    problems.append(f"{where}: subgraph {key!r}: {exc}")
        try:
            attrs = opdef.bind_attrs(node.attrs)
            opdef.check_arity(len(node.inputs))
            inferred = list(
                opdef.infer([None if v is None else v.type for v in node.inputs], attrs)
            )
        except Exception as exc:  # the op's own validation message says what is wrong
            problems.append(f"{where}: {exc}")
            inferred = None
        if inferred is not None:
            if len(inferred) < len(node.outputs) and not opdef.variadic_outputs:
                problems.append(
                    f"{where}: has {len(node.outputs)} outputs, the operator makes {len(inferred)}"
                )
            data_dependent = DATA_DEPENDENT_SHAPE in opdef.traits
            for out, want in zip(node.outputs, inferred):
                if not _types_agree(out.type, want, data_dependent):
                    problems.append(
                        f"{where}: output {out.name!r} is typed {out.type} but {node.op} "
                        f"infers {want}"
                    )
        for out in node.outputs:
            define(out, where)
    for v in graph.output_values:
        if id(v) not in defined:
            problems.append(f"graph output {v.name!r} is not defined by the graph")
    if len(set(graph.output_names)) != len(graph.output_names):
        problems.append(f"graph outputs repeat a name: {graph.output_names}")
    bound = {
        d.name
        for v in graph.input_values
        for d in v.shape
        if isinstance(d, SymDim) and d.is_symbol()
    }
    for guard in graph.shape_guards:
        if not guard.symbols <= bound:
            unbound = ", ".join(sorted(guard.symbols - bound))
            problems.append(
                f"shape guard {guard} uses size(s) {unbound} that no input shape binds, so the "
                "input check cannot evaluate it"
            )
    if problems:
        listing = "\n  ".join(problems)
        raise GraphValidationError(f"graph {graph.name!r} is invalid:\n  {listing}")


def graph_from_ops(
    inputs: Sequence[TensorType],
    nodes: Sequence[tuple[str, Sequence[int], Mapping[str, Any]]],
    outputs: Sequence[int],
    name: str = "body",
) -> ModelGraph:
    """A small graph from a listing: input types, then ``(op, refs, attrs)`` per node, where
    ``refs`` index the values so far (the inputs, then each node's outputs in order), then the
    refs of the outputs. Types are inferred; names are made up (``x0``, ``add``, ...).

    Example:
        >>> f32 = TensorType(np.dtype("float32"), (2,))
        >>> print(graph_from_ops([f32, f32], [("Add", (0, 1), {})], [2]))
        graph body(x0: float32[2], x1: float32[2]) -> (add: float32[2])
          add: float32[2] = Add(x0, x1)
    """
    scope = NameScope()
    values: list[Value] = [Value(scope.fresh(f"x{k}"), t) for k, t in enumerate(inputs)]
    graph_inputs = list(values)
    made: list[Node] = []
    for op, refs, attrs in nodes:
        opdef = get_op(op)
        bound = opdef.bind_attrs(attrs)
        args = [values[r] for r in refs]
        types = opdef.infer([v.type for v in args], bound)
        outs = tuple(Value(scope.fresh(snake_case(op)), t) for t in types)
        made.append(Node(opdef.qualified_name, tuple(args), outs, bound, outs[0].name))
        values.extend(outs)
    return ModelGraph(name, graph_inputs, [values[r] for r in outputs], made)


install_graph_factory(graph_from_ops)
