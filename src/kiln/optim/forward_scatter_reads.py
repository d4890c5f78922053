"""Reads of positions just written, forwarded to what was written (or to what was there).

Under capture, a read after a write is a ``Slice`` (or ``Gather``, ``GatherND``) of constant
positions from the newest version, a write with constant positions (``ScatterND``,
``kiln.SliceUpdate``; see :mod:`~kiln.optim.scatter_writes`). When the read positions are
known::

    Gather(ScatterND(x, i, u), j, axis=0)  -> Gather(u, rows)   j: all written by i
    Gather(ScatterND(x, i, u), j, axis=0)  -> Gather(x, j)      j: none written by i
    GatherND(ScatterND(x, i, u), j)        -> Gather(u, rows) / GatherND(x, j), the same way
    Slice(ScatterND(x, i, u), ...)         -> Gather(u, rows) / Slice(x, ...), the same way

``rows`` are, position by position, the rows of ``u`` that NumPy's "last write wins" leaves
there (a ``Reshape`` of ``u`` instead when the read takes all of them in order). When ``x`` is
itself a write over the same positions, a read none of whose positions ``i`` wrote goes on to
it, in the same pass: to the updates of the write that wrote them all, to the version before
the writes when none did, or to the first version that holds some of them. A read goes back
past a ``ScatterND`` only, never past a ``kiln.SliceUpdate``: a plan writes a box in its data's
own buffer when nothing reads that buffer later, which a read of an older version would
prevent (``u[0, :] = u[1, :]; u[:, 0] = u[:, 1]; inner += ...`` then copied the whole array at
every write). ``Gather`` needs
one-deep writes (``i`` addresses axis 0, as the flat writes of
:func:`kiln.functions.shape.index_update` do); ``GatherND`` needs ``j`` as deep as ``i``; a
``Slice`` must cut only the axes ``i`` addresses. A mixed read of the newest version is left
alone. A write goes once nothing else reads it.

Forwarding a recurrence's read (``out[i] = out[i - 1] * a``) from the previous write's
updates also leaves each version read only by the next write, so
:mod:`~kiln.optim.fold_scatters` can fold the chain, or a plan can run it in place.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from ..ir.builder import GraphBuilder
from ..ir.graph import ModelGraph, Node
from .scatter_writes import (
    SLICE_UPDATE,
    ConstantWrites,
    box_positions,
    positions_of,
    row_of_positions,
    scatter_writes,
    splice,
    update_rows,
)
from .transform import DefaultsOptions, transform

__all__ = ["forward_scatter_reads"]


@dataclass(frozen=True)
class _Source:
    """What a read reads: a scatter's result, or a ``Reshape`` view of it (``view``) whose
    shape the positions then count over."""

    writes: ConstantWrites
    view: Node | None = None


def _sources(graph: ModelGraph, writes: Mapping[int, ConstantWrites]) -> dict[int, _Source]:
    """The scatters' results, and static-shape reshapes of the ones that address every axis."""
    found = {key: _Source(w) for key, w in writes.items()}
    for node in graph.nodes:
        w = writes.get(id(node.inputs[0])) if node.op == "Reshape" else None
        shape = node.outputs[0].shape
        if w is not None and not w.tail and all(isinstance(d, int) for d in shape):
            dims = tuple(int(d) for d in shape)
            found[id(node.outputs[0])] = _Source(replace(w, depth=len(dims), dims=dims), node)
    return found


def _read_positions(
    node: Node, writes: ConstantWrites, constants: Mapping[int, np.ndarray], limit: int
) -> np.ndarray | None:
    """The positions (over ``writes.dims``) the read ``node`` takes, shaped as the leading
    axes of its output; None when they are not known or not whole written blocks."""
    given = [None if v is None else constants.get(id(v)) for v in node.inputs[1:]]
    if any(a is None and v is not None for a, v in zip(given, node.inputs[1:])):
        return None  # an index computed at run time
    if node.op == "Slice":
        return _slice_positions(writes, given, limit)
    index = given[0]
    if index is None or index.size > limit:
        return None
    attrs = node.opdef.bind_attrs(node.attrs)
    if node.op == "Gather":
        return _gather_positions(writes, index, attrs["axis"], limit)
    if attrs["batch_dims"] != 0 or index.shape[-1] != writes.depth:
        return None
    found = positions_of(index, writes.dims)
    return None if found is None else found.reshape(index.shape[:-1])


def _gather_positions(
    writes: ConstantWrites, index: np.ndarray, axis: int, limit: int
) -> np.ndarray | None:
    """The positions a ``Gather`` on axis 0 reads (whole blocks of the addressed axes)."""
    if axis not in (0, -(len(writes.dims) + len(writes.tail))):
        return None
    first = positions_of(index.reshape(-1, 1), writes.dims[:1])
    if first is None:
        return None  # out of range: the read raises at run time
    if writes.depth == 1:
        return first.reshape(index.shape)
    if writes.cells > limit:
        return None
    iota = np.arange(writes.cells, dtype=np.int64).reshape(writes.dims)
    return iota[first.reshape(index.shape)]


def _slice_positions(
    writes: ConstantWrites, given: Sequence[np.ndarray | None], limit: int
) -> np.ndarray | None:
    """The positions a ``Slice`` of constant bounds reads, when it slices only the axes
    the writes address (whole blocks)."""
    if writes.cells > limit:
        return None
    starts, ends, axes, steps = (*given, None, None)[:4]
    assert starts is not None and ends is not None  # required inputs
    rank = len(writes.dims) + len(writes.tail)
    sliced = list(range(len(starts))) if axes is None else [int(a) % rank for a in axes]
    if any(a >= writes.depth for a in sliced):
        return None
    return box_positions(writes.dims, starts, ends, np.array(sliced, np.int64), steps)


def _forward(
    node: Node,
    source: _Source,
    read: np.ndarray,
    rows_of: Callable[[_Source], np.ndarray],
    older: Callable[[_Source], _Source | None],
    builder: GraphBuilder,
) -> bool:
    """Add the nodes reading ``node``'s positions from the updates of the newest write that
    wrote them all, or from the oldest version before the writes that wrote none of them, or
    from the first version some but not all of them were written into (``rows_of``: the row
    each position holds, -1 where unwritten; ``older``: the version a write wrote into, when
    it too is a write over the same positions)."""
    out = node.outputs[0]
    start = source
    while True:
        rows_read = rows_of(source)[read]
        if read.size and (rows_read >= 0).all():
            writes = source.writes
            rows = update_rows(builder, writes)
            if np.array_equal(rows_read.reshape(-1), np.arange(len(writes.positions))):
                # every row, in order: the updates themselves, in the read's shape
                shape = builder.add_constant(np.array(out.shape, np.int64), hint="shape")
                builder.add("Reshape", [rows, shape], {"allowzero": 1}, outputs=[out])
            else:
                select = builder.add_constant(rows_read, hint="rows")
                builder.add("Gather", [rows, select], {"axis": 0}, outputs=[out])
            return True
        if (rows_read >= 0).any() or source.writes.node.op == SLICE_UPDATE:
            # partly written here, or a box none of whose cells are read (a plan writes boxes
            # in the data's own buffer, which a read of an older version would keep alive):
            # read this version, if not the first
            if source is start:
                return False
            data = source.writes.node.outputs[0]
            break
        previous = older(source)
        if previous is None:  # nothing read was written: read the version before the writes
            data = source.writes.data
            if source.view is not None:  # seen through the same reshape
                view = source.view
                (data,) = builder.add("Reshape", [data, *view.inputs[1:]], view.attrs)
            break
        source = previous
    builder.add(node.op, [data, *node.inputs[1:]], node.attrs, outputs=[out])
    return True


@transform("forward_scatter_reads")
def forward_scatter_reads(graph: ModelGraph, options: DefaultsOptions) -> tuple[ModelGraph, int]:
    """Read constant positions of a constant-index scatter from its updates or its old data
    (see the module docstring)."""
    writes = scatter_writes(graph)
    if not writes:
        return graph, 0
    sources = _sources(graph, writes)
    constants = {id(c.value): c.data for c in graph.constants}
    builder = GraphBuilder(graph.name_scope())
    replacements: dict[str, tuple[Node, ...]] = {}
    row_maps: dict[int, np.ndarray] = {}

    def rows_of(source: _Source) -> np.ndarray:
        key = id(source.writes.node)
        if key not in row_maps:
            row_maps[key] = row_of_positions(source.writes)
        return row_maps[key]

    def older(source: _Source) -> _Source | None:
        w = source.writes
        previous = sources.get(id(w.data)) if source.view is None else None
        if previous is None or previous.view is not None:
            return None
        same = previous.writes.dims == w.dims and previous.writes.depth == w.depth
        return previous if same else None

    for node in graph.nodes:
        source = sources.get(id(node.inputs[0])) if node.inputs else None
        if source is None or node.op not in ("Gather", "GatherND", "Slice"):
            continue
        read = _read_positions(node, source.writes, constants, options.constant_folding_limit)
        if read is None:
            continue
        before = len(builder.nodes)
        builder.source = node.source
        if _forward(node, source, read, rows_of, older, builder):
            replacements[node.name] = builder.nodes[before:]
    if not replacements:
        return graph, 0
    count = len(replacements)
    readers: dict[int, list[Node]] = {}
    for node in graph.nodes:
        for v in node.inputs:
            if v is not None and id(v) in sources:
                readers.setdefault(id(v), []).append(node)
    outputs = {id(v) for v in graph.output_values}

    def unread(key: int) -> bool:
        """Read only by replaced reads (directly or through views), and not an output."""
        if key in outputs:
            return False
        for node in readers.get(key, ()):
            if node.name in replacements:
                continue
            view = sources.get(id(node.outputs[0]))
            if view is None or view.view is not node or not unread(id(node.outputs[0])):
                return False
        return True

    for key, w in writes.items():
        if unread(key):
            replacements[w.node.name] = ()  # constant indices in bounds: it cannot raise
    return splice(graph, replacements, builder), count
