"""A write that overwrites every element folded into its updates: the old version is unread.

``out = np.empty((n, m)); for i in range(n): out[i] = f(i)`` becomes, after
:mod:`~kiln.optim.fold_scatters`, one ``ScatterND`` whose constant indices address every
position of ``out``. Nothing of the old contents survives it, so::

    ScatterND(x, i, u)  -> Reshape(u, x.shape)                 i: every position once, in order
    ScatterND(x, i, u)  -> Reshape(Gather(u, order), x.shape)  i: every position, in any order

``order`` lists, position by position, the row that NumPy's "last write wins" leaves there, so
repeated indices keep their exact meaning. Then ``x`` (the ``zeros`` it was made from, or the
computation of the previous version) is no longer read.
"""

from __future__ import annotations

import numpy as np

from ..ir.builder import GraphBuilder
from ..ir.graph import ModelGraph, Node, Value
from .scatter_writes import (
    ConstantWrites,
    added_since,
    last_writes,
    scatter_writes,
    splice,
    update_rows,
)
from .transform import DefaultsOptions, transform

__all__ = ["fold_full_overwrites"]


def _reordered_parts(concat: Node | None, order: np.ndarray) -> list[Value] | None:
    """The parts of ``concat`` (along axis 0) in the order that lists its rows as ``order``
    does, when ``order`` takes each part whole and in its own order (``d[1:-1] = ...;
    d[0] = ...; d[-1] = ...`` made the rows ``[middle, first, last]``); else None."""
    if concat is None or concat.op != "Concat" or concat.attrs.get("axis") != 0:
        return None
    starts: dict[int, tuple[int, Value]] = {}
    offset = 0
    for part in concat.inputs:
        if part is None or not part.shape or not isinstance(part.shape[0], int):
            return None
        starts[offset] = (part.shape[0], part)
        offset += part.shape[0]
    if offset != len(order):
        return None
    parts, i = [], 0
    while i < len(order):
        found = starts.pop(int(order[i]), None)
        if found is None:
            return None
        count, part = found
        if count == 0 or not np.array_equal(
            order[i : i + count], np.arange(order[i], order[i] + count)
        ):
            return None
        parts.append(part)
        i += count
    return parts if not starts else None


def _fold(
    writes: ConstantWrites, builder: GraphBuilder, output: bool, producer: dict[int, Node]
) -> Value | None:
    """Add the nodes computing ``writes.node``'s output from its updates alone; returns the
    value standing for it when no node defines it (the rows are already its shape)."""
    kept = last_writes(writes.positions)
    order = kept[np.argsort(writes.positions[kept], kind="stable")]
    rows = update_rows(builder, writes)
    if not np.array_equal(order, np.arange(len(writes.positions))):
        parts = _reordered_parts(producer.get(id(rows)), order)
        if parts is not None:  # whole parts of a Concat, in another order: concatenated so
            (rows,) = builder.add("Concat", parts, {"axis": 0})
        else:
            select = builder.add_constant(order, hint="rows")
            (rows,) = builder.add("Gather", [rows, select], {"axis": 0})
    result = writes.node.outputs[0]
    if rows.shape == result.shape and not output:
        return rows
    shape = builder.add_constant(np.array(writes.data.shape, np.int64), hint="shape")
    builder.add("Reshape", [rows, shape], {"allowzero": 1}, outputs=[result])
    return None


@transform("fold_full_overwrites")
def fold_full_overwrites(graph: ModelGraph, options: DefaultsOptions) -> tuple[ModelGraph, int]:
    """Replace each scatter whose constant indices write every element of its data by its
    updates (reordered where needed); see the module docstring."""
    full = [
        w
        for w in scatter_writes(graph).values()
        if w.cells <= len(w.positions) <= options.constant_folding_limit
        and np.count_nonzero(np.bincount(w.positions, minlength=w.cells)) == w.cells
    ]
    if not full:
        return graph, 0
    outputs = {id(v) for v in graph.output_values}
    producer = {id(v): node for node in graph.nodes for v in node.outputs}
    builder = GraphBuilder(graph.name_scope())
    replacements: dict[str, tuple[Node, ...]] = {}
    forwards: dict[int, Value] = {}
    for writes in full:
        before = builder.node_count
        builder.source = writes.node.source
        result = writes.node.outputs[0]
        same = _fold(writes, builder, id(result) in outputs, producer)
        if same is not None:
            forwards[id(result)] = same
        replacements[writes.node.name] = added_since(builder, before)
    return splice(graph, replacements, builder, forwards), len(full)
