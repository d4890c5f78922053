"""Sizes a graph's shape guards fix, and a graph with such sizes bound to ints.

A capture that turned a symbolic size into a Python int (``range(x.shape[0])``, ``int(n)``)
records a guard that pins it (``d0 == 7``, or ``d0 - 1 == 6`` after shape arithmetic): the
graph holds for that size only. :func:`pinned_sizes` finds those sizes, also through other
guards (``d0 == d1`` with ``d1 == 7``), and :func:`bind_sizes` makes them static in every type
of the graph, so a reader of the graph (the ONNX exporter) sees the sizes it really holds for.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ..ops.registry import TensorType
from ..symbolic import Dim, ShapeGuard, SymDim, evaluate, is_fresh, symbol
from .builder import GraphBuilder
from .graph import ModelGraph, Value

__all__ = ["bind_sizes", "pinned_sizes"]


def pinned_sizes(guards: Iterable[ShapeGuard]) -> dict[str, int]:
    """The symbols that ``guards`` fix to one value, with their values.

    An equality guard that is linear in one symbol (``a*s + b == c``, after the values already
    found are substituted) pins that symbol; guards are read again until nothing new is found.

    Example:
        >>> from kiln.symbolic import symbol
        >>> s, t = symbol("s"), symbol("t")
        >>> pinned_sizes([ShapeGuard(s - 1, "==", 6), ShapeGuard(t, "==", s * 2)])
        {'s': 7, 't': 14}
        >>> pinned_sizes([ShapeGuard(s // 2, "==", 3), ShapeGuard(t, ">", 1)])
        {}
    """
    equalities = [g for g in guards if g.op == "=="]
    pins: dict[str, int] = {}
    found = True
    while found:
        found = False
        for guard in equalities:
            bound = guard.bind(pins)
            solved = _solve_linear(bound.left - bound.right)
            if solved is not None and is_fresh(symbol(solved[0])):
                continue  # a size the run decides (NonZero's, a run-time Reshape's) is per run
            if solved is not None and solved[0] not in pins:
                pins[solved[0]] = solved[1]
                found = True
    return pins


def _solve_linear(diff: Dim) -> tuple[str, int] | None:
    """``(s, v)`` when ``diff == 0`` is ``a*s + b == 0`` with one size ``s >= 0`` solving it."""
    if not isinstance(diff, SymDim) or len(diff.symbols) != 1:
        return None
    (name,) = diff.symbols
    try:
        at0, at1 = evaluate(diff, {name: 0}), evaluate(diff, {name: 1})
    except (ArithmeticError, ValueError):  # an opaque term (a // s) has no value at 0
        return None
    slope = at1 - at0
    rest = diff - slope * symbol(name)
    if slope == 0 or not isinstance(rest, int) or rest % slope:
        return None  # not linear in the size (s // 2 == 3 holds for 6 and 7), or no solution
    value = -rest // slope
    return (name, value) if value >= 0 else None


def bind_sizes(graph: ModelGraph, sizes: Mapping[str, int]) -> ModelGraph:
    """A copy of ``graph`` with the symbolic sizes in ``sizes`` bound to ints: its inputs'
    types, every node's output types (inferred again) and its shape guards (a guard that
    becomes true is dropped; one that becomes false stays, so the graph refuses every input).

    Example:
        >>> import kiln, numpy as np
        >>> x = np.ones((2, 3), np.float32)
        >>> g = kiln.trace(lambda x: x * 2, x, dynamic_axes={"x": [0]}).graph
        >>> bind_sizes(g, {"s0": 5}).outputs[0].shape
        (5, 3)
    """
    builder = GraphBuilder()
    mapping: dict[int, Value] = {id(c.value): c.value for c in graph.constants}  # all static
    for v in graph.input_values:
        mapping[id(v)] = builder.add_input(v.name, _bind(v.type, sizes))
    for node in graph.nodes:
        inputs = [None if v is None else mapping[id(v)] for v in node.inputs]
        for old, new in zip(node.outputs, builder.rebuild(node, inputs)):
            mapping[id(old)] = new
    outputs = [mapping[id(v)] for v in graph.output_values]
    bound = graph.with_body(builder.nodes, outputs, graph.constants, builder.inputs)
    guards = [g.bind(sizes) for g in graph.shape_guards]
    return bound.with_shape_guards([g for g in guards if not (g.is_static() and g.holds({}))])


def _bind(ttype: TensorType, sizes: Mapping[str, int]) -> TensorType:
    shape = tuple(
        evaluate(d, sizes) if isinstance(d, SymDim) and d.symbols <= sizes.keys() else d
        for d in ttype.shape
    )
    return TensorType(ttype.dtype, shape, ttype.value)
