"""Control flow: ``If``, ``Loop`` and ``Scan``, operators whose attributes are subgraphs.

A subgraph attribute (:class:`~kiln.ops.registry.Attr` kind ``"graph"``) holds a
:class:`kiln.ir.ModelGraph`. kiln's subgraphs are *closed*: a body reads nothing from the
graph around it. Every outer value it needs is passed explicitly, as an extra input of the node
(after the inputs ONNX defines) and an extra input of the subgraph (after the ones ONNX
defines), so every pass sees the dependency through the node's inputs. ONNX import turns a
subgraph's outer-scope references into such captures; export turns them back.

* ``If(cond, *captures)``: ``then_branch`` and ``else_branch`` each take the captures.
* ``Loop(M, cond, *v_initial, *captures)``: ``body(i, cond, *v, *captures) -> (cond, *v,
  *scan_outputs)``; ``num_captures`` (kiln's, not ONNX's) says how many inputs are captures.
* ``Scan(*state, *scan_inputs, *captures)``: ``body(*state, *scan_slices, *captures) ->
  (*state, *scan_output_slices)``; ``num_scan_inputs`` as in ONNX, ``num_captures`` as Loop.

The operators sit below the IR, so they read a subgraph by duck typing (``input_values``,
``output_values``, each value's ``type``). Their kernels run a subgraph through a *compile*
function (subgraph -> ``run(arrays) -> arrays``): the NumPy engine compiles each subgraph once
into its own plan (:func:`bind_subgraphs`), the reference engine into its interpreter; the
registry kernel (eager calls, plan-time folding) finalizes the subgraph on the NumPy engine.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from .. import dtypes
from ..errors import OpArgumentError, OpTypeError
from ..symbolic import Dim, SymDim, fresh_symbol, is_fresh
from .registry import (
    DATA_DEPENDENT_SHAPE,
    PURE,
    Attr,
    EngineLimit,
    Input,
    OpDef,
    Sample,
    TensorType,
    get_op,
    register,
)

__all__ = [
    "CONTROL_OPS",
    "Runner",
    "Compile",
    "has_subgraphs",
    "subgraph_attrs",
    "bind_subgraphs",
    "install_graph_factory",
]

CONTROL_OPS = ("If", "Loop", "Scan")

Runner = Callable[[Sequence[np.ndarray]], Sequence[np.ndarray]]
Compile = Callable[[Any], Runner]  # a subgraph -> the function running it on arrays


def has_subgraphs(opdef: OpDef) -> bool:
    """Whether the operator has subgraph attributes (its kernel runs graphs)."""
    return any(a.kind == "graph" for a in opdef.attrs.values())


def subgraph_attrs(opdef: OpDef, attrs: Mapping[str, Any]) -> dict[str, Any]:
    """The subgraphs among a node's attributes, by attribute name."""
    return {k: v for k, v in attrs.items() if k in opdef.attrs and opdef.attrs[k].kind == "graph"}


# -- subgraph types, seen from the node ------------------------------------------------------


def _in_types(graph: Any) -> list[TensorType]:
    return [v.type for v in graph.input_values]


def _out_types(graph: Any) -> list[TensorType]:
    return [v.type for v in graph.output_values]


def _check_inputs(
    op: str, attr: str, graph: Any, given: Sequence[TensorType | None], what: Sequence[str]
) -> dict[str, Dim]:
    """Check that subgraph ``attr`` takes ``given`` (count, dtypes, ranks, static sizes) and
    return how its input symbols map onto the node's sizes."""
    formal = _in_types(graph)
    if len(formal) != len(given):
        raise OpArgumentError(
            f"{op}: subgraph {attr!r} takes {len(formal)} input(s), but the node passes "
            f"{len(given)} ({', '.join(what) or 'none'})"
        )
    mapping: dict[str, Dim] = {}
    for k, (f, g) in enumerate(zip(formal, given)):
        if g is None:
            continue
        name = graph.input_values[k].name
        if f.dtype != g.dtype or f.ndim != g.ndim:
            raise OpTypeError(
                f"{op}: subgraph {attr!r} input {k} ({name!r}, the {what[k]}) is typed {f}, "
                f"but the node passes {g}"
            )
        for fd, gd in zip(f.shape, g.shape):
            if isinstance(fd, SymDim) and fd.is_symbol():
                mapping.setdefault(fd.name, gd)
            elif isinstance(fd, int) and isinstance(gd, int) and fd != gd:
                raise OpTypeError(
                    f"{op}: subgraph {attr!r} input {k} ({name!r}, the {what[k]}) is typed "
                    f"{f}, but the node passes {g}"
                )
    return mapping


def _substitute(d: Dim, mapping: Mapping[str, Dim], hint: str) -> Dim:
    """``d`` (a size inside a subgraph) in the node's sizes: its symbols replaced by what the
    node passes for them; a size the node does not determine becomes a fresh symbol."""
    if isinstance(d, int):
        return d
    if not d.symbols <= mapping.keys():
        return fresh_symbol(hint)
    total: Dim = 0
    for mono, coef in d._terms:
        term: Dim = coef
        for atom, power in mono:
            if not isinstance(atom, str):
                return fresh_symbol(hint)  # an opaque size (a // b): known when run
            for _ in range(power):
                term = term * mapping[atom]
        total = total + term
    return total


def _outer(t: TensorType, mapping: Mapping[str, Dim], hint: str) -> TensorType:
    """A subgraph output's type seen from the node (known contents kept: a branch computing
    a shape from the node's shapes)."""
    shape = tuple(_substitute(d, mapping, hint) for d in t.shape)
    value = t.value
    if value is not None:
        value = tuple(_substitute(d, mapping, hint) if isinstance(d, SymDim) else d for d in value)
        if any(isinstance(d, SymDim) and not (d.symbols <= mapping.keys()) for d in t.value):
            value = None  # (a fresh size inside: unknown)
    return TensorType(t.dtype, shape, value)


def _unify(op: str, what: str, a: TensorType, b: TensorType, hint: str) -> TensorType:
    """One type for values typed ``a`` or ``b`` (If's two branches, a loop's carried value
    before and after an iteration): sizes that differ become a fresh symbol."""
    if a.dtype != b.dtype or a.ndim != b.ndim:
        raise OpTypeError(f"{op}: {what} is {a} in one case and {b} in the other")
    shape = tuple(x if x == y else fresh_symbol(hint) for x, y in zip(a.shape, b.shape))
    return TensorType(a.dtype, shape, a.value if a.value == b.value else None)


def _scalar_like(op: str, arg: str, t: TensorType | None, dtype: np.dtype) -> None:
    if t is None:
        return
    if t.dtype != dtype:
        raise OpTypeError(f"{op}: input {arg!r} must be {dtype.name}, got {t}")
    if t.ndim > 1 or (t.ndim == 1 and isinstance(t.shape[0], int) and t.shape[0] != 1):
        raise OpTypeError(f"{op}: input {arg!r} must hold one element, got {t}")


# -- If ----------------------------------------------------------------------------------------


def _if_infer(types: Sequence[TensorType | None], attrs: Mapping[str, Any]) -> list[TensorType]:
    if not types or types[0] is None:
        raise OpArgumentError("If: input 'cond' is required")
    _scalar_like("If", "cond", types[0], dtypes.bool_)
    captures = list(types[1:])
    what = [f"captured value {k}" for k in range(len(captures))]
    branches = []
    for attr in ("then_branch", "else_branch"):
        graph = attrs[attr]
        mapping = _check_inputs("If", attr, graph, captures, what)
        branches.append([_outer(t, mapping, "if") for t in _out_types(graph)])
    then, other = branches
    if len(then) != len(other):
        raise OpArgumentError(
            f"If: then_branch has {len(then)} output(s) but else_branch has {len(other)}; both "
            "branches must make the node's outputs"
        )
    known = types[0].value
    if known is not None and len(known) == 1:  # the branch is known: its types are exact
        chosen = then if known[0] else other
        for k, (a, b) in enumerate(zip(then, other)):
            _unify("If", f"output {k}", a, b, "if")  # (both branches must still agree)
        return chosen
    return [_unify("If", f"output {k}", a, b, "if") for k, (a, b) in enumerate(zip(then, other))]


def _if_run(
    inputs: Sequence[np.ndarray | None], attrs: Mapping[str, Any], run: Mapping[str, Runner]
) -> tuple[np.ndarray, ...]:
    cond = inputs[0]
    branch = run["then_branch"] if bool(np.asarray(cond).reshape(-1)[0]) else run["else_branch"]
    return tuple(branch(list(inputs[1:])))


# -- Loop --------------------------------------------------------------------------------------


def _loop_split(n_inputs: int, attrs: Mapping[str, Any]) -> tuple[int, int]:
    """(number of loop-carried values, number of captures) of a Loop node."""
    captures = int(attrs.get("num_captures", 0))
    carried = n_inputs - 2 - captures
    if carried < 0 or captures < 0:
        raise OpArgumentError(
            f"Loop: num_captures={captures} does not fit the node's {n_inputs} input(s) (M, "
            "cond, the loop-carried values, then the captured values)"
        )
    return carried, captures


def _trip_count(types: Sequence[TensorType | None], body: Any) -> int | None:
    """The number of iterations, when known from the types: a known M, and a condition that
    stays true (no cond input, or a known true one, that the body passes through)."""
    m, cond = types[0], types[1]
    if m is None or m.value is None or len(m.value) != 1 or not isinstance(m.value[0], int):
        return None
    if cond is not None and not (cond.value is not None and all(cond.value)):
        return None
    out = body.output_values[0]
    if out is not body.input_values[1]:
        if out.type.value is None or not all(out.type.value):
            return None
    return max(int(m.value[0]), 0)


def _loop_infer(types: Sequence[TensorType | None], attrs: Mapping[str, Any]) -> list[TensorType]:
    carried, captures = _loop_split(len(types), attrs)
    _scalar_like("Loop", "M", types[0], dtypes.int64)
    _scalar_like("Loop", "cond", types[1], dtypes.bool_)
    body = attrs["body"]
    i64, flag = TensorType(dtypes.int64, ()), TensorType(dtypes.bool_, ())
    formal = _in_types(body)
    given: list[TensorType | None] = [
        formal[0] if formal and formal[0].dtype == dtypes.int64 else i64,
        formal[1] if len(formal) > 1 and formal[1].dtype == dtypes.bool_ else flag,
        *types[2:],
    ]
    what = ["iteration number", "condition"]
    what += [f"loop-carried value {k}" for k in range(carried)]
    what += [f"captured value {k}" for k in range(captures)]
    mapping = _check_inputs("Loop", "body", body, given, what)
    outs = [_outer(t, mapping, "loop") for t in _out_types(body)]
    if len(outs) < 1 + carried:
        raise OpArgumentError(
            f"Loop: the body makes {len(outs)} output(s), fewer than the condition and the "
            f"{carried} loop-carried value(s)"
        )
    _scalar_like("Loop", "the body's condition output", outs[0], dtypes.bool_)
    results = []
    for k in range(carried):
        initial = types[2 + k]
        assert initial is not None
        results.append(_unify("Loop", f"loop-carried value {k}", initial, outs[1 + k], "loop"))
    count = _trip_count(types, body)
    n: Dim = fresh_symbol("loop") if count is None else count
    for t in outs[1 + carried :]:
        results.append(TensorType(t.dtype, (n, *t.shape)))
    return results


def _empty_like(t: TensorType, lead: int = 0) -> np.ndarray:
    return np.empty((lead, *(d if isinstance(d, int) else 0 for d in t.shape)), t.dtype)


_TRUE = np.array(True)
_TRUE.flags.writeable = False


def _loop_run(
    inputs: Sequence[np.ndarray | None], attrs: Mapping[str, Any], run: Mapping[str, Runner]
) -> tuple[np.ndarray, ...]:
    carried, _ = _loop_split(len(inputs), attrs)
    m, cond = inputs[0], inputs[1]
    limit = None if m is None else int(np.asarray(m).reshape(-1)[0])
    keep = True if cond is None else bool(np.asarray(cond).reshape(-1)[0])
    state = list(inputs[2 : 2 + carried])
    captured = list(inputs[2 + carried :])
    body = run["body"]
    graph = attrs["body"]
    head = 1 + carried
    scans: list[list[np.ndarray]] = [[] for _ in graph.output_values[head:]]
    i = 0
    while keep and (limit is None or i < limit):
        outs = body([np.array(i, np.int64), _TRUE, *state, *captured])
        keep = bool(outs[0])  # (a one-element array)
        state = outs[1:head]
        for parts, part in zip(scans, outs[head:]):
            parts.append(part)
        i += 1
    if i == 0:
        state = [np.array(s, copy=True) for s in state]  # never hand out an input
        elements = _out_types(graph)[head:]
        return (*state, *(_empty_like(t) for t in elements))
    return (*state, *(np.stack(parts) for parts in scans))


# -- Scan --------------------------------------------------------------------------------------


def _scan_layout(n_inputs: int, attrs: Mapping[str, Any]) -> tuple[int, int, int]:
    """(states, scan inputs, captures) of a Scan node."""
    scanned = int(attrs["num_scan_inputs"])
    captures = int(attrs.get("num_captures", 0))
    states = n_inputs - scanned - captures
    if scanned < 1 or captures < 0 or states < 0:
        raise OpArgumentError(
            f"Scan: num_scan_inputs={scanned} and num_captures={captures} do not fit the "
            f"node's {n_inputs} input(s) (the states, the scan inputs, the captured values)"
        )
    return states, scanned, captures


def _axes(op: str, name: str, given: Sequence[int] | None, count: int) -> list[int]:
    axes = list(given) if given else [0] * count
    if len(axes) != count:
        raise OpArgumentError(f"{op}: {name} has {len(axes)} entries, expected {count}")
    return axes


def _norm(op: str, axis: int, rank: int, what: str) -> int:
    if not -rank <= axis < rank:
        raise OpArgumentError(f"{op}: {what} axis {axis} is out of range for rank {rank}")
    return axis % rank


def _scan_infer(types: Sequence[TensorType | None], attrs: Mapping[str, Any]) -> list[TensorType]:
    states, scanned, captures = _scan_layout(len(types), attrs)
    body = attrs["body"]
    in_axes = _axes("Scan", "scan_input_axes", attrs.get("scan_input_axes"), scanned)
    _axes("Scan", "scan_input_directions", attrs.get("scan_input_directions"), scanned)
    length: Dim | None = None
    given: list[TensorType | None] = list(types[:states])
    for j in range(scanned):
        t = types[states + j]
        if t is None:
            raise OpArgumentError(f"Scan: scan input {j} is required")
        axis = _norm("Scan", in_axes[j], t.ndim, f"scan input {j}'s")
        size = t.shape[axis]
        if length is None or (isinstance(length, SymDim) and isinstance(size, int)):
            length = size
        elif isinstance(size, int) and isinstance(length, int) and size != length:
            raise OpArgumentError(
                f"Scan: scan input {j} has {size} steps along axis {axis}, the first has {length}"
            )
        given.append(TensorType(t.dtype, t.shape[:axis] + t.shape[axis + 1 :]))
    given.extend(types[states + scanned :])
    what = [f"state {k}" for k in range(states)]
    what += [f"slice of scan input {k}" for k in range(scanned)]
    what += [f"captured value {k}" for k in range(captures)]
    mapping = _check_inputs("Scan", "body", body, given, what)
    outs = [_outer(t, mapping, "scan") for t in _out_types(body)]
    if len(outs) < states:
        raise OpArgumentError(
            f"Scan: the body makes {len(outs)} output(s), fewer than the {states} state(s)"
        )
    results = []
    for k in range(states):
        initial = types[k]
        assert initial is not None
        results.append(_unify("Scan", f"state {k}", initial, outs[k], "scan"))
    n_scan_out = len(outs) - states
    out_axes = _axes("Scan", "scan_output_axes", attrs.get("scan_output_axes"), n_scan_out)
    _axes("Scan", "scan_output_directions", attrs.get("scan_output_directions"), n_scan_out)
    assert length is not None
    for j, t in enumerate(outs[states:]):
        axis = _norm("Scan", out_axes[j], t.ndim + 1, f"scan output {j}'s")
        results.append(TensorType(t.dtype, (*t.shape[:axis], length, *t.shape[axis:])))
    return results


def _scan_run(
    inputs: Sequence[np.ndarray | None], attrs: Mapping[str, Any], run: Mapping[str, Runner]
) -> tuple[np.ndarray, ...]:
    states, scanned, _ = _scan_layout(len(inputs), attrs)
    state = list(inputs[:states])
    xs = [np.asarray(x) for x in inputs[states : states + scanned]]
    captured = list(inputs[states + scanned :])
    in_axes = [
        a % x.ndim for a, x in zip(_axes("Scan", "", attrs.get("scan_input_axes"), scanned), xs)
    ]
    in_dirs = _axes("Scan", "", attrs.get("scan_input_directions"), scanned)
    length = xs[0].shape[in_axes[0]]
    body = run["body"]
    steps: list[list[np.ndarray]] | None = None
    for t in range(length):
        slices = [
            x[(slice(None),) * a + (length - 1 - t if d else t,)]
            for x, a, d in zip(xs, in_axes, in_dirs)
        ]
        outs = body([*state, *slices, *captured])
        state = list(outs[:states])
        if steps is None:
            steps = [[] for _ in range(len(outs) - states)]
        for parts, part in zip(steps, outs[states:]):
            parts.append(part)
    if length == 0:
        state = [np.array(s, copy=True) for s in state]
        elements = _out_types(attrs["body"])[states:]
        steps = [[] for _ in elements]
    assert steps is not None
    out_axes = _axes("Scan", "", attrs.get("scan_output_axes"), len(steps))
    out_dirs = _axes("Scan", "", attrs.get("scan_output_directions"), len(steps))
    results = []
    for j, parts in enumerate(steps):
        if not parts:
            element = _out_types(attrs["body"])[states + j]
            stacked = np.moveaxis(_empty_like(element), 0, out_axes[j] % (element.ndim + 1))
        else:
            if out_dirs[j]:
                parts = parts[::-1]
            stacked = np.stack(parts, axis=out_axes[j] % (parts[0].ndim + 1))
        results.append(stacked)
    return (*state, *results)


# -- kernels -----------------------------------------------------------------------------------

_RUNS: dict[str, Callable[..., tuple[np.ndarray, ...]]] = {
    "If": _if_run,
    "Loop": _loop_run,
    "Scan": _scan_run,
}


def bind_subgraphs(op: str, attrs: Mapping[str, Any], compile: Compile) -> Callable[..., Any]:
    """The kernel of one control-flow node with its subgraphs compiled once by ``compile``:
    ``kernel(*inputs) -> outputs``. ``attrs`` are the node's, bound."""
    opdef = get_op(op)
    runners = {k: compile(g) for k, g in subgraph_attrs(opdef, attrs).items()}
    impl = _RUNS[opdef.name]

    def kernel(*inputs: np.ndarray | None) -> tuple[np.ndarray, ...]:
        return impl(inputs, attrs, runners)

    return kernel


def _finalized(graph: Any) -> Runner:
    """A subgraph run by its own NumPy plan (finalizing a graph is idempotent, so the plan is
    made once per subgraph and kept on it)."""
    graph.finalize("numpy")
    return graph.program.run_arrays  # type: ignore[no-any-return]


def _registry_kernel(op: str) -> Callable[..., tuple[np.ndarray, ...]]:
    def kernel(*inputs: np.ndarray | None, **attrs: Any) -> tuple[np.ndarray, ...]:
        return bind_subgraphs(op, attrs, _finalized)(*inputs)

    kernel.__name__ = f"{op.lower()}_kernel"
    return kernel


def _may_raise(inputs: Sequence[Any], outputs: Sequence[Any], attrs: Mapping[str, Any]) -> bool:
    """A control-flow node can raise where a node of one of its subgraphs can."""
    for graph in attrs.values():
        if not hasattr(graph, "nodes"):
            continue
        for node in graph.nodes:
            opdef = get_op(node.op)
            bound = opdef.bind_attrs(node.attrs)
            if opdef.raises_on_values and opdef.may_raise(node.inputs, node.outputs, bound):
                return True
    return False


def _numel(shape: Sequence[Any]) -> int:
    n = 1
    for d in shape:
        n *= d if isinstance(d, int) else 1  # (a size known at run time: counted as 1)
    return n


def _work(graph: Any) -> float:
    """Element operations of one run of a subgraph (as the engine selection weighs nodes)."""
    total = 0.0
    for node in graph.nodes:
        opdef = get_op(node.op)
        cost = opdef.cost
        if callable(cost):
            cost = cost(node.inputs, node.outputs, opdef.bind_attrs(node.attrs))
        total += float(cost) * sum(_numel(v.shape) for v in node.outputs)
    return total


def _control_cost(inputs: Sequence[Any], outputs: Sequence[Any], attrs: Mapping[str, Any]) -> float:
    """Element operations per output element: the subgraphs' work times the iterations (a
    trip count known only at run time counts once)."""
    bodies = [_work(g) for g in attrs.values() if hasattr(g, "nodes")]
    work = max(bodies, default=0.0)
    if "num_scan_inputs" in attrs:  # Scan: once per step of its scan inputs
        states = len(inputs) - attrs["num_scan_inputs"] - attrs.get("num_captures", 0)
        first = inputs[states] if states < len(inputs) else None
        axes = attrs.get("scan_input_axes") or (0,)
        if first is not None and first.shape:
            steps = first.shape[axes[0] % len(first.shape)]
            work *= steps if isinstance(steps, int) else 1
    elif "body" in attrs:  # Loop: M times when M is known
        m = inputs[0].type.value if inputs and hasattr(inputs[0], "type") else None
        if m is not None and len(m) == 1 and isinstance(m[0], int):
            work *= max(m[0], 0)
    return max(work / max(sum(_numel(v.shape) for v in outputs), 1), 1.0)


def _fresh_output(inputs: Sequence[Any], outputs: Sequence[Any], attrs: Mapping[str, Any]) -> bool:
    return any(is_fresh(d) for v in outputs for d in v.shape)


# XLA compiles for static shapes: jax runs If as lax.cond, Loop as lax.while_loop (lax.scan
# with scan outputs) and Scan as lax.scan, but not a node with an output size only the run
# knows.
_JAX_LIMITS = {
    "jax": EngineLimit(
        "with an output size known only when it runs (branches of different sizes, a trip "
        "count unknown when compiling, or a loop-carried value changing size)",
        _fresh_output,
    )
}


# -- samples: built through the IR's graph factory -------------------------------------------

# ``factory(inputs, nodes, outputs) -> ModelGraph``: ``inputs`` are TensorTypes; each node is
# ``(op, refs, attrs)`` where refs index the values so far (inputs, then node outputs in
# order); ``outputs`` are refs. The IR installs it (kiln.ir.graph), so samples can hold graphs.
_graph_factory: Callable[..., Any] | None = None


def install_graph_factory(factory: Callable[..., Any]) -> None:
    """Let this module's samples build subgraphs (the IR layer installs its factory)."""
    global _graph_factory
    _graph_factory = factory


def _graph(inputs: Sequence[TensorType], nodes: Sequence[Any], outputs: Sequence[int]) -> Any:
    if _graph_factory is None:
        raise RuntimeError("kiln.ir is not imported: control-flow samples need its graphs")
    return _graph_factory(inputs, nodes, outputs)


def _t(dtype: Any, *shape: int) -> TensorType:
    return TensorType(np.dtype(dtype), tuple(shape))


def _if_samples() -> list[Sample]:
    f32 = _t(np.float32, 2, 3)
    then = _graph([f32, f32], [("Add", (0, 1), {}), ("Mul", (2, 0), {})], [3, 2])
    other = _graph([f32, f32], [("Sub", (0, 1), {})], [2, 1])
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y = np.full((2, 3), 0.5, np.float32)

    def ref(c: np.ndarray, a: np.ndarray, b: np.ndarray, **_: Any) -> tuple[np.ndarray, ...]:
        return ((a + b) * a, a + b) if c else (a - b, b.copy())

    attrs = {"then_branch": then, "else_branch": other}
    return [
        Sample((np.array(True), x, y), attrs, ref, name="then"),
        Sample((np.array([False]), x, y), attrs, ref, name="else"),
    ]


def _loop_samples() -> list[Sample]:
    i64, flag, f32 = _t(np.int64), _t(np.bool_), _t(np.float32, 3)
    # body(i, cond, acc, w) -> (cond, acc * w + i, acc)
    body = _graph(
        [i64, flag, f32, f32],
        [("Cast", (0,), {"to": 1}), ("Mul", (2, 3), {}), ("Add", (5, 4), {})],
        [1, 6, 2],
    )
    acc = np.array([1.0, 2.0, -1.0], np.float32)
    w = np.array([0.5, 2.0, 1.5], np.float32)

    def ref(m: Any, cond: Any, a: np.ndarray, b: np.ndarray, **_: Any) -> tuple[np.ndarray, ...]:
        seen = []
        for i in range(int(m)):
            seen.append(a)
            a = (a * b + np.float32(i)).astype(np.float32)
        return a, np.array(seen, np.float32).reshape(len(seen), 3)

    attrs = {"body": body, "num_captures": 1}
    return [
        Sample((np.array(4, np.int64), None, acc, w), attrs, ref, name="trip4"),
        Sample((np.array(0, np.int64), None, acc, w), attrs, ref, name="trip0"),
    ]


def _scan_samples() -> list[Sample]:
    f32 = _t(np.float32, 2)
    # body(total, x, scale) -> (total + x * scale, total)
    body = _graph([f32, f32, f32], [("Mul", (1, 2), {}), ("Add", (0, 3), {})], [4, 0])
    xs = np.arange(8, dtype=np.float32).reshape(4, 2)
    scale = np.array([1.0, -0.5], np.float32)
    init = np.zeros(2, np.float32)

    def ref(s: np.ndarray, x: np.ndarray, c: np.ndarray, **kw: Any) -> tuple[np.ndarray, ...]:
        reverse = bool((kw.get("scan_input_directions") or (0,))[0])
        rows = range(len(x) - 1, -1, -1) if reverse else range(len(x))
        seen = []
        for r in rows:
            seen.append(s)
            s = s + x[r] * c
        return s, np.array(seen, np.float32)

    attrs = {"body": body, "num_scan_inputs": 1, "num_captures": 1}
    backward = {**attrs, "scan_input_directions": (1,)}
    return [
        Sample((init, xs, scale), attrs, ref, name="forward"),
        Sample((init, xs, scale), backward, ref, name="backward"),
    ]


# -- the records ---------------------------------------------------------------------------------

_CONTROL = frozenset({PURE, DATA_DEPENDENT_SHAPE})

register(
    OpDef(
        name="If",
        doc="then_branch(*captures) when cond is true, else else_branch(*captures) (kiln's "
        "closed form of ONNX If: the values the branches read are the node's inputs after cond).",
        inputs=(Input("cond"), Input("captures", variadic=True)),
        outputs=("outputs",),
        attrs={"then_branch": Attr("graph"), "else_branch": Attr("graph")},
        infer=_if_infer,
        kernel=_registry_kernel("If"),
        traits=_CONTROL,
        samples=_if_samples,
        since_version=13,
        variadic_outputs=True,
        raises_on_values=_may_raise,
        engine_limits=_JAX_LIMITS,
        cost=_control_cost,
    )
)

register(
    OpDef(
        name="Loop",
        doc="Run body while the iteration count is below M and cond holds, carrying values "
        "from one iteration to the next and stacking its scan outputs (kiln's closed form of "
        "ONNX Loop: the last num_captures inputs are values the body reads).",
        inputs=(
            Input("M", optional=True),
            Input("cond", optional=True),
            Input("v_initial", variadic=True),
        ),
        outputs=("v_final_and_scan_outputs",),
        attrs={"body": Attr("graph"), "num_captures": Attr("int", 0)},
        infer=_loop_infer,
        kernel=_registry_kernel("Loop"),
        traits=_CONTROL,
        samples=_loop_samples,
        since_version=13,
        variadic_outputs=True,
        raises_on_values=_may_raise,
        engine_limits=_JAX_LIMITS,
        cost=_control_cost,
    )
)

register(
    OpDef(
        name="Scan",
        doc="Run body once per slice of the scan inputs, carrying states and stacking the "
        "scan outputs (kiln's closed form of ONNX Scan: the last num_captures inputs are "
        "values the body reads).",
        inputs=(Input("initial_state_and_scan_inputs", variadic=True),),
        outputs=("final_state_and_scan_outputs",),
        attrs={
            "body": Attr("graph"),
            "num_scan_inputs": Attr("int"),
            "scan_input_axes": Attr("ints", ()),
            "scan_input_directions": Attr("ints", ()),
            "scan_output_axes": Attr("ints", ()),
            "scan_output_directions": Attr("ints", ()),
            "num_captures": Attr("int", 0),
        },
        infer=_scan_infer,
        kernel=_registry_kernel("Scan"),
        traits=_CONTROL,
        samples=_scan_samples,
        since_version=16,
        variadic_outputs=True,
        raises_on_values=_may_raise,
        engine_limits=_JAX_LIMITS,
        cost=_control_cost,
    )
)
