"""What the passes over functionalized writes share: the positions a write with constant
indices writes, which of its rows NumPy keeps, and its updates one row per write.

A write ``t[index] = v`` is recorded as ``kiln.SliceUpdate(data, updates, starts, ends, axes,
steps)`` when ``index`` picks a strided box, else as ``ScatterND(data, indices, updates)``
(:mod:`kiln.capture.views`, :func:`kiln.functions.shape.index_update`); on 1-D data
``ScatterElements(data, indices, updates, axis=0)`` writes the same. When ``indices`` (or the
box) is a constant and ``data`` has a static shape, every row of ``indices`` addresses one
*position*: a cell of ``data.shape[:depth]`` (``depth`` is the last axis of ``indices``; a box
addresses cells of the axes up to the last one it cuts), counted in C order. Each position
holds a block of ``data.shape[depth:]`` (the *tail*). NumPy's rule for a position written
twice is "the last write wins": :func:`last_writes` says which rows survive it.

Used by :mod:`~kiln.optim.fold_scatters`, :mod:`~kiln.optim.fold_full_overwrites`,
:mod:`~kiln.optim.forward_scatter_reads` and :mod:`~kiln.optim.lower_contiguous_writes`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import chain
from math import prod
from typing import Any

import numpy as np

from ..ir.builder import GraphBuilder
from ..ir.graph import ModelGraph, Node, Value
from ..ir.rewrite import substitute, topological_order
from .pattern import prune

__all__ = [
    "SCATTERS",
    "SLICE_UPDATE",
    "RUN_SHARE",
    "one_run",
    "ConstantWrites",
    "scatter",
    "constant_writes",
    "forget_writes",
    "last_writes",
    "positions_of",
    "box_positions",
    "row_of_positions",
    "previous_writes",
    "update_rows",
    "added_since",
    "scatter_writes",
    "splice",
]

# The operators a write is recorded as (ScatterElements only over 1-D data, axis 0), and
# kiln's own write of a strided box (its positions are known when the box is constant).
SCATTERS = ("ScatterND", "ScatterElements")
SLICE_UPDATE = "kiln.SliceUpdate"

# Runs of writes worth copying around (see :func:`one_run`): at least 1 / RUN_SHARE of the
# positions. A plan writes in the data's own buffer when nothing else reads the data: for
# 2**20 float32 a scatter assigned 2**16 elements in 0.1 ms and 2**18 in 0.9 ms, where a
# Concat copied all of them in 0.45-0.65 ms.
RUN_SHARE = 4


@dataclass(frozen=True)
class ConstantWrites:
    """A ``ScatterND`` (``reduction="none"``) whose indices are a constant in bounds of a
    ``data`` of static shape.

    Attributes:
        node: The ``ScatterND`` node.
        data, updates: Its first and third inputs.
        depth: How many leading axes of ``data`` an index row addresses.
        positions: ``(rows,)`` int64: the position each index row writes (C order over
            ``dims``, negative indices resolved).
        tail: ``data.shape[depth:]``, the block each row writes.
        dims: The axes positions count over: ``data.shape[:depth]``, or the shape of a
            reshaped view of the result when every axis is addressed (the C order of the
            positions is the same in any shape).
    """

    node: Node
    data: Value
    updates: Value
    depth: int
    positions: np.ndarray
    tail: tuple[int, ...]
    dims: tuple[int, ...]

    @property
    def cells(self) -> int:
        """How many positions there are (``prod(dims)``)."""
        return prod(self.dims)


def positions_of(index: np.ndarray, dims: tuple[int, ...]) -> np.ndarray | None:
    """The C-order positions over ``dims`` of the index rows ``index`` (shape
    ``(..., len(dims))``), flattened; None when one is out of bounds (the node then raises
    at run time, as NumPy would, and must stay).

    Example:
        >>> positions_of(np.array([[0, 1], [-1, 0]]), (2, 3)).tolist()
        [1, 3]
        >>> positions_of(np.array([[2]]), (2,)) is None
        True
    """
    rows = np.asarray(index, dtype=np.int64).reshape(-1, len(dims))
    bounds = np.array(dims, dtype=np.int64)
    if rows.size and (np.any(rows < -bounds) or np.any(rows >= bounds)):
        return None
    rows = np.where(rows < 0, rows + bounds, rows)
    if not dims:
        return np.zeros(len(rows), np.int64)
    return np.ravel_multi_index(tuple(rows.T), dims).astype(np.int64)


# What constant_writes found per node, by the node's id: (the node, the constant data of its
# inputs, the writes). Four passes read every write of the graph in every iteration, and most
# writes are the same node (nodes are immutable) with the same constants each time: the
# entry holds the node and the arrays it was computed from, and is used only while both are
# the very same objects (so an id reused by another node never matches). The pipeline
# clears it after each run (:func:`forget_writes`); it is bounded besides.
_WRITES: dict[int, tuple[Node, tuple[np.ndarray | None, ...], ConstantWrites | None]] = {}
_WRITES_LIMIT = 1 << 17


def forget_writes() -> None:
    """Drop what :func:`constant_writes` remembers (the pipeline calls it after each run)."""
    _WRITES.clear()


def constant_writes(node: Node, constants: Mapping[int, np.ndarray]) -> ConstantWrites | None:
    """What ``node`` writes, when it is a ``ScatterND`` of constant indices and no reduction
    into a ``data`` of static shape, the same write as a ``ScatterElements`` on 1-D data, or
    a ``kiln.SliceUpdate`` of a constant box (None otherwise: the passes leave it alone)."""
    op = node.op
    if op != SLICE_UPDATE and op not in SCATTERS:
        return None
    get = constants.get
    datas = tuple([None if v is None else get(id(v)) for v in node.inputs])
    known = _WRITES.get(id(node))
    if known is not None and known[0] is node and _same_objects(known[1], datas):
        return known[2]
    found = _constant_writes(node, constants)
    if found is not None:
        found.positions.setflags(write=False)  # shared by every pass that reads the write
    if len(_WRITES) >= _WRITES_LIMIT:
        _WRITES.clear()
    _WRITES[id(node)] = (node, datas, found)
    return found


def _same_objects(a: tuple[object, ...], b: tuple[object, ...]) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x is not y:
            return False
    return True


def _constant_writes(node: Node, constants: Mapping[int, np.ndarray]) -> ConstantWrites | None:
    if node.op == SLICE_UPDATE:
        return _box_writes(node, constants)
    if node.op not in SCATTERS or node.attrs.get("reduction", "none") != "none":
        return None
    data, indices, updates = node.inputs
    if data is None or indices is None or updates is None:
        return None
    index = constants.get(id(indices))
    if index is None or not all(isinstance(d, int) for d in data.shape):
        return None
    if node.op == "ScatterElements":
        if len(data.shape) != 1:
            return None
        index = index.reshape(-1, 1)  # 1-D: each index is a row of depth 1
    depth = int(index.shape[-1])
    if depth < 1:
        return None
    dims = tuple(int(d) for d in data.shape[:depth])  # type: ignore[arg-type]  # static
    positions = positions_of(index, dims)
    if positions is None:
        return None
    tail = tuple(int(d) for d in data.shape[depth:])  # type: ignore[arg-type]  # static
    return ConstantWrites(node, data, updates, depth, positions, tail, dims)


def _box_writes(node: Node, constants: Mapping[int, np.ndarray]) -> ConstantWrites | None:
    """A ``kiln.SliceUpdate`` of a constant box: its positions are the box's cells over the
    leading axes up to the last one the box cuts (in the box's C order, the order of
    ``updates``' elements); the axes after it, which the box takes whole, are the tail. So
    ``out[i] = row`` writes one position of ``out.shape[:1]``, whatever the row's length."""
    data, updates, *box = node.inputs
    if data is None or updates is None or not all(isinstance(d, int) for d in data.shape):
        return None
    bounds = [None if v is None else constants.get(id(v)) for v in box]
    if any(b is None and v is not None for b, v in zip(bounds, box)):
        return None
    starts, ends, axes, steps = (*bounds, None, None)[:4]
    if starts is None or ends is None:
        return None
    dims = tuple(int(d) for d in data.shape)  # type: ignore[arg-type]  # static
    rank = len(dims)
    cut = [a % rank for a in (range(len(starts)) if axes is None else axes.tolist())]
    steps_ = [1] * len(cut) if steps is None else steps.tolist()
    depth = 1
    for a, start, end, step in zip(cut, starts.tolist(), ends.tolist(), steps_):
        if range(dims[a])[slice(start, end, step)] != range(dims[a]):
            depth = max(depth, a + 1)  # this axis is cut (or reversed): it is addressed
    picked = [range(d) for d in dims[:depth]]
    for a, start, end, step in zip(cut, starts.tolist(), ends.tolist(), steps_):
        if a < depth:
            picked[a] = picked[a][slice(start, end, step)]
    if all(len(r) == 1 for r in picked):  # one cell (out[i] = row): no arrays to make
        position = 0
        for r, d in zip(picked, dims):
            position = position * d + r[0]
        positions = np.array([position], np.int64)
    else:
        keep = [k for k, a in enumerate(cut) if a < depth]
        positions = box_positions(
            dims[:depth],
            starts[keep],
            ends[keep],
            np.array([cut[k] for k in keep], np.int64),
            None if steps is None else steps[keep],
        ).reshape(-1)
    return ConstantWrites(node, data, updates, depth, positions, dims[depth:], dims[:depth])


def box_positions(
    dims: tuple[int, ...],
    starts: np.ndarray,
    ends: np.ndarray,
    axes: np.ndarray | None = None,
    steps: np.ndarray | None = None,
) -> np.ndarray:
    """The C-order positions over ``dims`` of the box a ``Slice`` with these (constant)
    inputs takes, shaped as the box (the work is the box's size, not the array's).

    Example:
        >>> box_positions((3, 4), np.array([1]), np.array([3]), np.array([1])).tolist()
        [[1, 2], [5, 6], [9, 10]]
    """
    starts_, ends_ = np.asarray(starts).tolist(), np.asarray(ends).tolist()  # Python ints
    axes_ = (
        range(len(starts_))
        if axes is None
        else [int(a) % len(dims) for a in np.asarray(axes).tolist()]
    )
    steps_ = [1] * len(starts_) if steps is None else [int(v) for v in np.asarray(steps).tolist()]
    ranges = [range(d) for d in dims]  # sliced as an arange is, without making arrays
    for a, start, end, step in zip(axes_, starts_, ends_, steps_):
        ranges[a] = ranges[a][slice(int(start), int(end), step)]
    if all(len(r) == 1 for r in ranges):  # one cell (out[i] = row, D[i, j] = v): its position
        position = 0
        for r, d in zip(ranges, dims):
            position = position * d + r[0]
        return np.array(position, np.int64).reshape((1,) * len(dims))
    picks = [np.arange(r.start, r.stop, r.step, dtype=np.int64) for r in ranges]
    strides = [prod(dims[a + 1 :]) for a in range(len(dims))]
    grids = np.ix_(*[p * stride for p, stride in zip(picks, strides)])
    total = np.zeros([len(p) for p in picks], np.int64)
    for grid in grids:
        total += grid
    return total


def scatter(
    builder: GraphBuilder,
    like: ConstantWrites,
    data: Value,
    positions: np.ndarray,
    updates: Value,
    **kw: Any,
) -> tuple[Value, ...]:
    """Add a scatter of the operator and depth of ``like`` writing ``updates`` (one row per
    position) at ``positions`` of ``data`` (``kw``: :meth:`GraphBuilder.add`'s options)."""
    if like.node.op == "ScatterElements":
        index = builder.add_constant(positions.astype(np.int64), hint="indices")
        attrs = {"axis": 0, "reduction": "none"}
        return builder.add("ScatterElements", [data, index, updates], attrs, **kw)
    rows = np.stack(np.unravel_index(positions, like.dims), axis=-1).astype(np.int64)
    index = builder.add_constant(rows.reshape(len(positions), like.depth), hint="indices")
    return builder.add("ScatterND", [data, index, updates], {"reduction": "none"}, **kw)


def one_run(positions: np.ndarray, cells: int) -> tuple[int, int, np.ndarray] | None:
    """``(a, b, rows)`` when the writes surviving "last write wins" cover positions
    ``a .. b-1`` exactly, and at least ``1 / RUN_SHARE`` of the ``cells`` (all of them
    included): ``rows`` are the surviving rows in position order. None otherwise.

    Example:
        >>> a, b, rows = one_run(np.array([3, 1, 2, 1]), 4)
        >>> a, b, rows.tolist()
        (1, 4, [3, 2, 0])
    """
    kept = last_writes(positions)
    if not len(kept) or RUN_SHARE * len(kept) < cells:
        return None  # a short run: a write in the data's own buffer costs less than copying
    rows = kept[np.argsort(positions[kept], kind="stable")]
    a, b = int(positions[rows[0]]), int(positions[rows[-1]]) + 1
    return (a, b, rows) if b - a == len(rows) else None


def row_of_positions(writes: ConstantWrites) -> np.ndarray:
    """For every position, the row of ``writes.updates`` NumPy's "last write wins" leaves
    there, or -1 where nothing is written (int64, ``writes.cells`` long).

    Example:
        >>> import numpy as np
        >>> w = ConstantWrites(None, None, None, 1, np.array([2, 0, 2]), (), (4,))
        >>> row_of_positions(w).tolist()
        [1, -1, 2, -1]
    """
    rows = np.full(writes.cells, -1, np.int64)
    kept = last_writes(writes.positions)
    rows[writes.positions[kept]] = kept
    return rows


def last_writes(positions: np.ndarray) -> np.ndarray:
    """The rows that survive NumPy's "last write wins": for each position written, the last
    row writing it, in row order.

    Example:
        >>> last_writes(np.array([4, 2, 4, 7, 2])).tolist()
        [2, 3, 4]
    """
    if positions.size == 0:
        return np.zeros(0, np.int64)
    if np.bincount(positions).max() == 1:  # no position written twice: every row survives
        return np.arange(len(positions), dtype=np.int64)
    last = np.full(int(positions.max()) + 1, -1, np.int64)
    np.maximum.at(last, positions, np.arange(len(positions), dtype=np.int64))
    survives = np.zeros(len(positions), np.bool_)
    survives[last[last >= 0]] = True
    return np.flatnonzero(survives).astype(np.int64)


def update_rows(builder: GraphBuilder, writes: ConstantWrites) -> Value:
    """``writes.updates`` with one row per write: shape ``(rows, *tail)`` (a ``Reshape`` when
    the indices had more than one leading axis)."""
    want = (len(writes.positions), *writes.tail)
    if tuple(writes.updates.shape) == want:
        return writes.updates
    target = builder.add_constant(np.array(want, np.int64), hint="shape")
    (rows,) = builder.add("Reshape", [writes.updates, target], {"allowzero": 1})
    return rows


def scatter_writes(graph: ModelGraph) -> dict[int, ConstantWrites]:
    """Every write of ``graph`` with constant positions, by the id of its output."""
    constants = {id(c.value): c.data for c in graph.constants}
    found = {}
    for node in graph.nodes:
        writes = constant_writes(node, constants)
        if writes is not None:
            found[id(node.outputs[0])] = writes
    return found


def previous_writes(
    graph: ModelGraph, writes: Mapping[int, ConstantWrites]
) -> dict[int, ConstantWrites]:
    """For each constant write (by the id of its node) that writes into the result of
    another one of the same operator and depth that nothing else reads, that other write:
    the links of the chains :mod:`~kiln.optim.fold_scatters` folds."""
    # how many times each write's result is read (counted in C, only for writes' results)
    inputs = chain.from_iterable(node.inputs for node in graph.nodes)
    counts = Counter(filter(writes.__contains__, map(id, inputs)))
    outputs = {id(v) for v in graph.output_values}
    links = {}
    for w in writes.values():
        p = writes.get(id(w.data))
        if p is None or p.node.op != w.node.op or p.depth != w.depth:
            continue
        if id(w.data) not in outputs and counts[id(w.data)] == 1:
            links[id(w.node)] = p
    return links


def added_since(builder: GraphBuilder, before: int) -> tuple[Node, ...]:
    """The nodes ``builder`` added after its first ``before`` (``builder.node_count`` then),
    without copying all of them as ``builder.nodes`` does: a pass that takes each
    replacement's nodes this way stays linear in the number of replacements."""
    count = builder.node_count - before
    return tuple(builder.last_nodes(count)) if count else ()


def splice(
    graph: ModelGraph,
    replacements: Mapping[str, tuple[Node, ...]],
    builder: GraphBuilder,
    forwards: Mapping[int, Value] | None = None,
) -> ModelGraph:
    """``graph`` with each node named in ``replacements`` replaced by the nodes given (the last
    of them defines the replaced node's outputs; none: the node goes, its output unread), the
    builder's constants added, every read of a value in ``forwards`` (by id; never a graph
    output) reading its replacement instead, and what no output needs any more removed.

    A scatter is kept by :func:`~kiln.ir.rewrite.remove_unused` even unread (an index out of
    range raises at run time); one whose constant indices are in bounds cannot raise, so the
    passes name such scatters here to drop them."""
    body: list[Node] = []
    for node in graph.nodes:
        body.extend(replacements.get(node.name, (node,)))
    if forwards:
        body = substitute(body, forwards)
    constants = [*graph.constants, *builder.constants]
    defined = [*graph.input_values, *(c.value for c in constants)]
    spliced = graph.with_body(topological_order(body, defined), constants=constants)
    return prune(spliced)[0]
