"""Recording ``kiln.cond``, ``kiln.fori_loop`` and ``kiln.scan`` as one If/Loop/Scan node.

Each function the call receives is traced once by a :class:`_BodyTracer` into a subgraph.
kiln's subgraphs are closed (see :mod:`kiln.ops.control`): a tensor of an enclosing trace that
a body uses (or an array the enclosing capture lifts as an implicit input) becomes a *capture*:
an extra input of the subgraph, and the enclosing tracer passes that tensor as an extra input
of the node. The node is then recorded by the enclosing tracer like any other call, so the
value the traced function sees is computed by the node's own kernel.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..errors import ArgumentError, ArgumentTypeError, CaptureError
from ..functions.control import install_control_capture
from ..ir.graph import ModelGraph, Value
from ..ops.dispatch import handler_scope
from ..ops.registry import TensorType, get_op
from ..symbolic import guard_scope
from ..tensor import Tensor, asarray
from ..tree import flatten, unflatten
from .trace import Tracer, TraceRef

__all__ = ["record_control"]

_I64 = TensorType(np.dtype(np.int64), ())
_BOOL = TensorType(np.dtype(np.bool_), ())


def _plain(t: TensorType) -> TensorType:
    return TensorType(t.dtype, t.shape)


class _BodyTracer(Tracer):
    """Traces one function into a closed subgraph of ``parent``'s graph."""

    def __init__(self, parent: Tracer, what: str) -> None:
        super().__init__(compute=False)
        self.parent = parent
        self.what = what
        # id(the enclosing value) -> (the enclosing tensor, the subgraph's input), in order
        self.captured: dict[int, tuple[Tensor, Value, Value]] = {}

    def _root(self) -> Tracer:
        tracer: Tracer = self
        while isinstance(tracer, _BodyTracer):
            tracer = tracer.parent
        return tracer

    def _lifted(self, t: Tensor) -> bool:
        """Whether the enclosing capture makes concrete ``t`` an input (a closure array)."""
        root = self._root()
        if id(t) in root._implicit:
            return True
        known = root._constant_of.get(id(t))
        return known is not None and any(known[1] is v for v in root.builder.inputs)

    def value_of(self, t: Tensor) -> Value:
        ref = t._trace
        mine = isinstance(ref, TraceRef) and ref.tracer is self
        if mine or (not isinstance(ref, TraceRef) and not self._lifted(t)):
            return super().value_of(t)  # its own values, and constants of its own
        outer = self.parent.value_of(t)
        hit = self.captured.get(id(outer))
        if hit is None:
            inner = self.builder.add_input(self.builder.scope.fresh(outer.name), _plain(outer.type))
            hit = self.captured[id(outer)] = (t, outer, inner)
        return hit[2]

    def host_read(self, tensor: Tensor, what: str) -> Any:
        raise CaptureError(
            f"{self.what}: the function reads a value on the host ({what}) while it is traced "
            "into a subgraph, where values are only known when the graph runs; compute with "
            "tensor operations (kiln.where, kiln.cond) instead"
        )

    def trace(self, fn: Callable[..., Any], args: Sequence[Any]) -> tuple[list[Tensor], Any]:
        """Call ``fn(*args)`` recording into this tracer (the subgraph's own inputs already
        added); its result's leaves (tensors) and structure."""
        with handler_scope(self), guard_scope(self):
            result = fn(*args)
            leaves, spec = flatten(result)
            tensors = [x if isinstance(x, Tensor) else asarray(x) for x in leaves]
        if self.pins:
            raise CaptureError(
                f"{self.what}: the function fixes a dynamic size to one value "
                f"({self.pins[0][2]}), which a subgraph cannot do; trace with static sizes"
            )
        if self.written_inputs() or self.written_implicit():
            raise CaptureError(
                f"{self.what}: the function writes into an array it receives; return the new "
                "value instead (as with jax.lax)"
            )
        self.parent.shape_guards.extend(self.shape_guards)
        return tensors, spec

    def graph(self, name: str, outputs: Sequence[Tensor]) -> ModelGraph:
        names = [f"{name}_out{k}" for k in range(len(outputs))]
        return self.finish(name, outputs, names)


def _align(
    graph: ModelGraph, n_formal: int, inner: dict[int, Value], order: list[Value]
) -> ModelGraph:
    """``graph`` taking, after its ``n_formal`` own inputs, one input per value of ``order``
    (the enclosing values captured by either branch): its own capture of it, or an unused
    input of its type."""
    scope = graph.name_scope()
    captures = [inner.get(id(v)) or Value(scope.fresh(v.name), _plain(v.type)) for v in order]
    return graph.with_body(graph.nodes, inputs=[*graph.input_values[:n_formal], *captures])


def _check_carried(
    what: str, init: Sequence[Tensor], new: Sequence[Tensor], spec: Any, got: Any
) -> None:
    if spec != got:
        raise ArgumentTypeError(
            f"{what}: the function returns the structure {got}, but the carried value has the "
            f"structure {spec}; return the same structure"
        )
    for k, (a, b) in enumerate(zip(init, new)):
        if a.dtype != b.dtype or tuple(a.shape) != tuple(b.shape):
            raise ArgumentTypeError(
                f"{what}: carried leaf {k} enters the loop as {a.type} but the function "
                f"returns {b.type}; keep its dtype and shape (cast or reshape it)"
            )


def _tensors(leaves: Sequence[Any]) -> list[Tensor]:
    return [x if isinstance(x, Tensor) else asarray(x) for x in leaves]


def _cond(tracer: Tracer, pred: Tensor, true_fn: Any, false_fn: Any, operands: tuple) -> Any:
    if pred.size != 1:
        raise ArgumentError(f"kiln.cond: the predicate must hold one element, got {pred.type}")
    if pred.dtype != np.bool_:
        pred = pred.astype(np.bool_)
    bodies = []
    for fn, label in ((true_fn, "then_branch"), (false_fn, "else_branch")):
        sub = _BodyTracer(tracer, f"kiln.cond ({label})")
        outs, spec = sub.trace(fn, operands)
        bodies.append((sub, sub.graph(label, outs), spec))
    (a, then, spec), (b, other, other_spec) = bodies
    if spec != other_spec:
        raise ArgumentTypeError(
            f"kiln.cond: the branches return different structures ({spec} and {other_spec}); "
            "both must return the same structure"
        )
    order: list[Value] = []
    tensors: list[Tensor] = []
    for sub in (a, b):
        for t, outer, _ in sub.captured.values():
            if all(v is not outer for v in order):
                order.append(outer)
                tensors.append(t)
    inner_a = {key: v for key, (_, _, v) in a.captured.items()}
    inner_b = {key: v for key, (_, _, v) in b.captured.items()}
    attrs = {
        "then_branch": _align(then, 0, inner_a, order),
        "else_branch": _align(other, 0, inner_b, order),
    }
    outs = tracer.apply(get_op("If"), [pred.reshape(()), *tensors], attrs)
    return unflatten(spec, list(outs))


def _fori_loop(tracer: Tracer, lower: Any, upper: Any, body_fun: Any, init_val: Any) -> Any:
    leaves, spec = flatten(init_val)
    init = _tensors(leaves)
    sub = _BodyTracer(tracer, "kiln.fori_loop")
    i = sub.add_input("i", _I64, None)
    flag = sub.add_input("cond", _BOOL, None)
    carried = [sub.add_input(f"carry_{k}", _plain(t.type), None) for k, t in enumerate(init)]
    offset = lower if isinstance(lower, Tensor) else int(lower)

    def step(val: Any) -> Any:
        index = i if isinstance(offset, int) and offset == 0 else i + offset
        return body_fun(index, unflatten(spec, val))

    new, got = sub.trace(step, [carried])
    _check_carried("kiln.fori_loop", init, new, spec, got)
    body = sub.graph("body", [flag, *new])
    if isinstance(lower, Tensor) or isinstance(upper, Tensor):
        count = (asarray(upper) - asarray(lower)).astype(np.int64).reshape(())
    else:
        count = asarray(np.int64(max(int(upper) - int(lower), 0)))
    captures = [t for t, _, _ in sub.captured.values()]
    attrs = {"body": body, "num_captures": len(captures)}
    outs = tracer.apply(get_op("Loop"), [count, None, *init, *captures], attrs)
    return unflatten(spec, list(outs))


def _scan(tracer: Tracer, f: Any, init: Any, xs: Any) -> Any:
    carry_leaves, carry_spec = flatten(init)
    carry = _tensors(carry_leaves)
    x_leaves, x_spec = flatten(xs)
    seqs = _tensors(x_leaves)
    if not seqs or any(x.ndim == 0 for x in seqs):
        raise ArgumentError("kiln.scan: xs must hold arrays of at least one axis to scan over")
    sub = _BodyTracer(tracer, "kiln.scan")
    states = [sub.add_input(f"carry_{k}", _plain(t.type), None) for k, t in enumerate(carry)]
    slices = [
        sub.add_input(f"x_{k}", TensorType(x.dtype, tuple(x.shape[1:])), None)
        for k, x in enumerate(seqs)
    ]

    def step(c: Any, x: Any) -> Any:
        return f(unflatten(carry_spec, c), unflatten(x_spec, x))

    outs, spec = sub.trace(step, [states, slices])
    pair = unflatten(spec, outs)
    if not isinstance(pair, tuple) or len(pair) != 2:
        raise ArgumentTypeError("kiln.scan: the function must return a pair (carry, y)")
    new_leaves, got = flatten(pair[0])
    y_leaves, y_spec = flatten(pair[1])
    new, ys = _tensors(new_leaves), _tensors(y_leaves)
    _check_carried("kiln.scan", carry, new, carry_spec, got)
    body = sub.graph("body", [*new, *ys])
    captures = [t for t, _, _ in sub.captured.values()]
    attrs = {"body": body, "num_scan_inputs": len(seqs), "num_captures": len(captures)}
    results = tracer.apply(get_op("Scan"), [*carry, *seqs, *captures], attrs)
    finals, stacked = results[: len(carry)], results[len(carry) :]
    return unflatten(carry_spec, list(finals)), unflatten(y_spec, list(stacked))


def record_control(kind: str, handler: Any, *args: Any) -> Any:
    """Record a ``kiln.cond`` / ``fori_loop`` / ``scan`` call with ``handler`` when it is a
    tracer; NotImplemented otherwise (the call then runs as plain Python)."""
    if not isinstance(handler, Tracer):
        return NotImplemented
    if kind == "cond":
        pred = args[0]
        if not isinstance(pred._trace, TraceRef):
            return NotImplemented  # a concrete predicate: the branch is known now
        return _cond(handler, *args)
    if kind == "fori_loop":
        return _fori_loop(handler, *args)
    return _scan(handler, *args)


install_control_capture(record_control)
