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

import bisect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from ..ir.builder import GraphBuilder
from ..ir.graph import ModelGraph, Node
from .scatter_writes import (
    SLICE_UPDATE,
    ConstantWrites,
    added_since,
    box_positions,
    last_writes,
    positions_of,
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
    sliced = list(range(len(starts))) if axes is None else [a % rank for a in axes.tolist()]
    if any(a >= writes.depth for a in sliced):
        return None
    return box_positions(writes.dims, starts, ends, np.array(sliced, np.int64), steps)


class _Versions:
    """The chains of writes over the same positions (each a write into the result of the one
    before, oldest first), with, per chain, the newest writer of every position so far: a
    read of a chain's newest version finds the write it reads from without walking every
    earlier write (a loop of ``acc[[i]] += ...`` would make that quadratic in its length). A
    read of an older version walks back from it, one vectorized step per write."""

    def __init__(self, older: Callable[[_Source], _Source | None]) -> None:
        self.older = older
        self.place: dict[int, tuple[list[_Source], int]] = {}  # id(write) -> (chain, index)
        self.latest: dict[int, np.ndarray] = {}  # id(chain) -> newest writer per position
        self.boxes: dict[int, list[int]] = {}  # id(chain) -> indices of its SliceUpdates
        self.kept: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # id(write) -> see rows
        self.found: dict[int, dict[int, int]] = {}  # id(write) -> {position: row}, the same

    def locate(self, source: _Source) -> tuple[list[_Source], int]:
        """``source``'s chain and its index there (registering the writes it follows)."""
        pending = []
        found = self.place.get(id(source.writes.node))
        while found is None:
            pending.append(source)
            previous = self.older(source)
            if previous is None:
                break
            source = previous
            found = self.place.get(id(source.writes.node))
        for s in reversed(pending):
            if found is None:
                chain = self._chain(s)
            else:
                chain, at = found
                if at != len(chain) - 1:  # a second write into the same version: a branch
                    fork = self._chain(chain[0])
                    for earlier in chain[1 : at + 1]:
                        self._append(fork, earlier)
                    chain = fork
            self._append(chain, s)
            found = (chain, len(chain) - 1)
            self.place[id(s.writes.node)] = found
        assert found is not None
        return found

    def _chain(self, first: _Source) -> list[_Source]:
        chain: list[_Source] = []
        self.latest[id(chain)] = np.full(first.writes.cells, -1, np.int64)
        self.boxes[id(chain)] = []
        return chain

    def _append(self, chain: list[_Source], source: _Source) -> None:
        index = len(chain)
        chain.append(source)
        self.latest[id(chain)][source.writes.positions] = index
        if source.writes.node.op == SLICE_UPDATE:
            self.boxes[id(chain)].append(index)

    def rows(self, source: _Source, read: np.ndarray) -> np.ndarray:
        """For each position of ``read`` (flat), the row of ``source``'s updates NumPy leaves
        there, or -1 where it writes none."""
        key = id(source.writes.node)
        if key not in self.kept:
            kept = last_writes(source.writes.positions)
            where = source.writes.positions[kept]
            order = np.argsort(where, kind="stable")
            self.kept[key] = (where[order], kept[order])
        where, rows = self.kept[key]
        flat = read.reshape(-1)
        if flat.size <= _FEW:  # a row or two: looked up one by one
            found = self.found.get(key)
            if found is None:
                found = self.found[key] = dict(zip(where.tolist(), rows.tolist()))
            return np.array([found.get(p, -1) for p in flat.tolist()], np.int64)
        at = np.minimum(np.searchsorted(where, flat), max(len(where) - 1, 0))
        hit = (where[at] == flat) if len(where) else np.zeros(flat.shape, bool)
        return np.where(hit, rows[at] if len(where) else -1, -1)

    def newest(self, chain: list[_Source], at: int, read: np.ndarray) -> np.ndarray:
        """For each position of ``read`` (flat), the index of the newest write up to ``at``
        in ``chain`` that wrote it (-1: none)."""
        flat = read.reshape(-1)
        if at == len(chain) - 1:
            return self.latest[id(chain)][flat]
        found = np.full(flat.shape, -1, np.int64)
        missing = np.ones(flat.shape, bool)
        for i in range(at, -1, -1):  # an older version: walk back
            hit = missing & (self.rows(chain[i], flat) >= 0)
            found[hit] = i
            missing &= ~hit
            if not missing.any() or i in self.boxes[id(chain)]:
                break  # (nothing is read from before a box none of whose cells are read)
        return found

    def newest_box(self, chain: list[_Source], at: int) -> int:
        boxes = self.boxes[id(chain)]
        k = bisect.bisect_right(boxes, at) - 1
        return boxes[k] if k >= 0 else -1


def _row_loops(writes: Mapping[int, ConstantWrites]) -> set[int]:
    """The ``kiln.SliceUpdate`` writes (ids of their nodes) of chains whose boxes are
    disjoint and together cover their array: a loop writing each row once
    (``for p in ...: v[p] = f(v[p])``). A read of such a chain's version may go back past its
    boxes: once its versions are read by the next write only, the chain folds into one
    ``Concat`` (:mod:`fold_scatters`, :mod:`fold_full_overwrites`) and no box is left for the
    plan to write in place."""
    following: dict[int, list[ConstantWrites]] = {}
    for w in writes.values():
        p = writes.get(id(w.data))
        if p is not None:
            following.setdefault(id(p.node), []).append(w)
    found: set[int] = set()
    for w in writes.values():
        p = writes.get(id(w.data))
        if w.node.op != SLICE_UPDATE or (p is not None and p.node.op == SLICE_UPDATE):
            continue  # not the first box of a chain
        chain = [w]
        while len(nxt := following.get(id(chain[-1].node), [])) == 1:
            chain.append(nxt[0])
        if nxt or any(c.node.op != SLICE_UPDATE or c.dims != w.dims for c in chain):
            continue  # a branch, or other writes in the chain
        written = np.concatenate([c.positions for c in chain])
        if len(written) == w.cells and _distinct(written):
            found.update(id(c.node) for c in chain)
    return found


def _distinct(positions: np.ndarray) -> bool:
    """Whether the integers of ``positions`` are all different. (Not ``np.unique``: its
    first call imports ``numpy.ma``, tens of milliseconds of a process's first call.)"""
    ordered = np.sort(positions, axis=None)
    return bool((ordered[1:] != ordered[:-1]).all())


# Up to this many positions, a read's positions are looked at as Python ints.
_FEW = 16


def _all_rows_in_order(rows: np.ndarray, count: int) -> bool:
    """Whether ``rows`` (1-D) is ``0, 1, ..., count - 1``."""
    if len(rows) != count:
        return False
    if count <= _FEW:
        return bool(rows.tolist() == list(range(count)))
    return bool(np.array_equal(rows, np.arange(count)))


def _forward(
    node: Node,
    source: _Source,
    read: np.ndarray,
    versions: _Versions,
    builder: GraphBuilder,
    row_loops: set[int],
) -> bool:
    """Add the nodes reading ``node``'s positions from the updates of the newest write that
    wrote them all, or from the oldest version before the writes that wrote none of them, or
    from the newest version some but not all of them were written into; never from before a
    ``SliceUpdate`` none of them were written by (the plan writes boxes in place)."""
    out = node.outputs[0]
    if source.view is not None:  # seen through a reshape: this write only
        chain, at = [source], 0
        newest = np.where(versions.rows(source, read) >= 0, 0, -1)
        box = 0 if source.writes.node.op == SLICE_UPDATE else -1
    else:
        chain, at = versions.locate(source)
        newest = versions.newest(chain, at, read)
        box = -1 if id(source.writes.node) in row_loops else versions.newest_box(chain, at)
    if newest.size <= _FEW:  # (a read of a row or two: Python's max beats NumPy's calls)
        few = newest.reshape(-1).tolist()
        last = max(few, default=-1)
        mixed = any(k != last for k in few)
    else:
        last = int(newest.max())
        mixed = bool((newest != last).any())
    if box > last or (last >= 0 and mixed):
        # a box none of whose cells are read (read its result: the plan writes boxes in
        # place), or read partly written by the newest write of some: read that version
        stop = max(box, last)
        if stop == at:
            return False
        data = chain[stop].writes.node.outputs[0]
    elif last >= 0:  # every position read was written last by this write: its updates
        writes = chain[last].writes
        rows_read = versions.rows(chain[last], read)
        rows = update_rows(builder, writes)
        if _all_rows_in_order(rows_read, len(writes.positions)):
            # every row, in order: the updates themselves, in the read's shape
            shape = builder.add_constant(np.array(out.shape, np.int64), hint="shape")
            builder.add("Reshape", [rows, shape], {"allowzero": 1}, outputs=[out])
        else:
            select = builder.add_constant(rows_read.reshape(read.shape), hint="rows")
            builder.add("Gather", [rows, select], {"axis": 0}, outputs=[out])
        return True
    else:  # nothing read was written: read the version before the writes
        data = chain[0].writes.data
        if source.view is not None:  # seen through the same reshape
            view = source.view
            (data,) = builder.add("Reshape", [data, *view.inputs[1:]], view.attrs)
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

    def older(source: _Source) -> _Source | None:
        w = source.writes
        previous = sources.get(id(w.data)) if source.view is None else None
        if previous is None or previous.view is not None:
            return None
        same = previous.writes.dims == w.dims and previous.writes.depth == w.depth
        return previous if same else None

    versions = _Versions(older)
    row_loops = _row_loops(writes)
    for node in graph.nodes:
        source = sources.get(id(node.inputs[0])) if node.inputs else None
        if source is None or node.op not in ("Gather", "GatherND", "Slice"):
            continue
        read = _read_positions(node, source.writes, constants, options.constant_folding_limit)
        if read is None:
            continue
        before = builder.node_count
        builder.source = node.source
        if _forward(node, source, read, versions, builder, row_loops):
            replacements[node.name] = added_since(builder, before)
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
