"""A write of one contiguous run of positions lowered to slices and a ``Concat``.

``y[1:-1] = f(x)`` on a 1-D array, or ``out[3:7] = rows`` on a 2-D one, writes positions
``a .. b-1`` of the flattened array, one run in C order. Then::

    ScatterND(x, i, u)  -> Reshape(Concat(x[:a], u, x[b:]), x.shape)

(``u`` one row per position, put in position order by a ``Gather`` where needed, the last
write per position winning). NumPy copies slices with ``memcpy`` where the scatter's kernel
assigns through an index array: measured 5 µs against 100 µs for 63 of 64 rows of 256
float32, and no engine runs a ``Concat`` with another answer, where onnxruntime races on
repeated scatter indices. A short run into a large array is left a scatter (see
:data:`~kiln.optim.scatter_writes.RUN_SHARE`), and a ``kiln.SliceUpdate`` (a strided box,
assigned at memory speed) is left as it is. Writes covering everything are
:mod:`fold_full_overwrites`'s; writes still linked in a chain (see
:func:`~kiln.optim.scatter_writes.previous_writes`) are left to :mod:`fold_scatters`, which
folds them into one first.
"""

from __future__ import annotations

import numpy as np

from ..ir.builder import GraphBuilder
from ..ir.graph import ModelGraph, Node, Value
from .scatter_writes import (
    SLICE_UPDATE,
    ConstantWrites,
    added_since,
    one_run,
    previous_writes,
    scatter_writes,
    splice,
    update_rows,
)
from .transform import DefaultsOptions, transform

__all__ = ["lower_contiguous_writes"]


def _lower(writes: ConstantWrites, run: tuple[int, int, np.ndarray], b: GraphBuilder) -> Value:
    """Add ``Concat(x[:a], u, x[b:])`` over rows; returns it (not yet in ``x``'s shape)."""
    start, stop, order = run
    updates = update_rows(b, writes)
    if not np.array_equal(order, np.arange(len(writes.positions))):
        (updates,) = b.add("Gather", [updates, b.add_constant(order, hint="rows")], {"axis": 0})
    old = writes.data
    shape = (writes.cells, *writes.tail)
    if tuple(old.shape) != shape:
        target = b.add_constant(np.array(shape, np.int64), hint="shape")
        (old,) = b.add("Reshape", [old, target], {"allowzero": 1})
    axis = b.add_constant(np.array([0], np.int64), hint="axes")
    parts = [updates]
    if start > 0:
        bounds = [b.add_constant(np.array([v], np.int64)) for v in (0, start)]
        parts.insert(0, b.add("Slice", [old, *bounds, axis])[0])
    if stop < writes.cells:
        bounds = [b.add_constant(np.array([v], np.int64)) for v in (stop, writes.cells)]
        parts.append(b.add("Slice", [old, *bounds, axis])[0])
    return b.add("Concat", parts, {"axis": 0})[0]


@transform("lower_contiguous_writes")
def lower_contiguous_writes(graph: ModelGraph, options: DefaultsOptions) -> tuple[ModelGraph, int]:
    """Replace each scatter of one contiguous run of constant positions by slices of the old
    data around its updates (see the module docstring)."""
    writes = scatter_writes(graph)
    linked = previous_writes(graph, writes)
    in_chain = {id(w.node) for w in linked.values()} | linked.keys()
    outputs = {id(v) for v in graph.output_values}
    builder = GraphBuilder(graph.name_scope())
    replacements: dict[str, tuple[Node, ...]] = {}
    forwards: dict[int, Value] = {}
    for w in writes.values():
        if w.node.op == SLICE_UPDATE or id(w.node) in in_chain:
            continue  # a box is written in place at memory speed; chains fold first
        if len(w.positions) > options.constant_folding_limit:
            continue
        run = one_run(w.positions, w.cells)
        if run is None or run[1] - run[0] == w.cells:
            continue  # not one run, a short one, or all of them (fold_full_overwrites')
        before = builder.node_count
        builder.source = w.node.source
        joined = _lower(w, run, builder)
        result = w.node.outputs[0]
        if joined.shape == result.shape and id(result) not in outputs:
            forwards[id(result)] = joined
        else:
            target = builder.add_constant(np.array(w.data.shape, np.int64), hint="shape")
            builder.add("Reshape", [joined, target], {"allowzero": 1}, outputs=[result])
        replacements[w.node.name] = added_since(builder, before)
    if not replacements:
        return graph, 0
    return splice(graph, replacements, builder, forwards), len(replacements)
