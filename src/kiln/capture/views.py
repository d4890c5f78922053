"""Functionalization: how a tracer records writes into arrays (``t[i] = v``, ``t += u``,
``out=``, ``np.copyto``, ``fill``) as pure operators.

The values a traced function sees are real NumPy arrays, written in place exactly as NumPy
writes them (views alias their base, overlapping operands are buffered, casts follow NumPy).
The graph side is functional. Every array the trace owns (an input, or a result of an
operator) is a *root*; a result of a view operator (``VIEW`` trait: slicing, transpose,
reshape where NumPy gives a view) whose values share its input's memory is a *view* of that
input's root, remembered with the operator that made it.

A write into a tensor becomes a new version of its root: the flat positions the write covers
(the view chain and the index applied to an iota of the root's shape) and a ``ScatterND`` of
the cast, broadcast value into the flattened root (a write covering the whole root is just the
cast value). The root's graph value moves to the new version; each view of it is *stale* and,
the next time an operator reads it, re-reads its positions from the newest root (a ``Gather``).
So a read after a write, through any view, sees the write, and the graph stays pure.

Only arrays the trace owns can be written: a write into a constant (a closure or global array
the function did not receive) cannot be replayed, so the tracer refuses it (a compile capture
then serves the call eagerly).
"""

from __future__ import annotations

import operator
import weakref
from typing import Any

import numpy as np

from ..functions.inplace import Flat
from ..functions.operands import cast, int_vector
from ..functions.shape import getitem, index_update_at, index_update_rows
from ..ops.dispatch import current_handler
from ..ops.registry import OpDef, TensorType
from ..ops.shape import INT64_MIN
from ..tensor import Tensor, call, dispatch, rebind

__all__ = ["Storage", "View", "positions_of", "reread", "written", "root_of", "stale_views"]


class Storage:
    """The versions of one root's contents during a trace.

    Attributes:
        root: The root tensor (its ``_trace`` holds the newest version's graph value).
        version: Bumped by every write into the root or one of its views.
        views: Weak references to the views made of it (their known contents are dropped on a
            write, so no shape rule reads stale values).
        iota: The root's flat positions, ``Range(0, size)`` in its shape, once needed.
    """

    __slots__ = ("root", "version", "views", "iota")

    def __init__(self, root: Tensor) -> None:
        self.root = root
        self.version = 0
        self.views: list[weakref.ref[Tensor]] = []
        self.iota: Tensor | None = None


class View:
    """How a view was made: the operator ``op`` on ``parent`` (with ``extras``, its other
    inputs, and ``attrs``), the root it shares memory with, the root version its graph value
    reads, and its flat positions in the root once computed."""

    __slots__ = ("storage", "parent", "op", "extras", "attrs", "seen", "positions")

    def __init__(
        self,
        storage: Storage,
        parent: Tensor,
        op: OpDef,
        extras: tuple[Tensor | None, ...],
        attrs: dict[str, Any],
    ) -> None:
        self.storage = storage
        self.parent = parent
        self.op = op
        self.extras = extras
        self.attrs = attrs
        self.seen = storage.version
        self.positions: Tensor | None = None


# The most elements a literal written into a box may have to be laid out as the box when
# recorded (a bigger one is broadcast by recorded operators).
_LITERAL_SIZE = 64


def _i64(values: list[int]) -> Tensor:
    return int_vector(tuple(values))  # shared per contents: an operator's input only


def _view_of(t: Tensor) -> View | None:
    ref = t._trace
    return getattr(ref, "view", None)


def root_of(t: Tensor) -> tuple[Tensor, View | None]:
    """The root ``t`` writes into, and ``t``'s view record (``None``: ``t`` is the root)."""
    view = _view_of(t)
    return (t, None) if view is None else (view.storage.root, view)


def positions_of(t: Tensor, view: View | None) -> Tensor:
    """The flat positions of ``t``'s elements in its root: an int64 tensor of ``t``'s shape
    (recorded: the view chain applied to an iota of the root)."""
    if view is None:
        return _iota(t)
    if view.positions is None:
        parent = view.parent
        base = positions_of(parent, _view_of(parent))
        (view.positions,) = dispatch(view.op, [base, *view.extras], view.attrs)
    return view.positions


def _iota(root: Tensor) -> Tensor:
    size = call("Size", root)
    iota = call("Range", Tensor._wrap(np.int64(0)), size, Tensor._wrap(np.int64(1)))
    return call("Reshape", iota, call("Shape", root), allowzero=1)


def reread(t: Tensor, view: View) -> Tensor:
    """The stale view ``t`` read from the newest version of its root: its view chain applied
    anew (a slice of the new root stays a slice), or, when the chain starts from a view the
    root no longer has the same layout for, a ``Gather`` of its positions."""
    parent = view.parent
    (fresh,) = dispatch(view.op, [parent, *view.extras], view.attrs)
    view.seen = view.storage.version
    return fresh


def written(t: Tensor, index: Any, value: Tensor, reduction: str = "none") -> Tensor:
    """The new contents of ``t``'s root after ``t[index] = value`` (``index`` ``None``: all
    of ``t``; ``value`` already has ``t``'s dtype): recorded operators. A write into a strided
    box of the root (basic indexing: ints and slices) is a ``SliceUpdate``; any other a
    ``ScatterND`` over the flat positions written. A ``reduction`` (``"add"``, ``"mul"``,
    ``"max"``, ``"min"``: ``ufunc.at``) is always that ``ScatterND``, combining each value with
    the contents at its position, repeated positions accumulating in index order."""
    view = _view_of(t)
    while view is not None and _same_layout(view):  # x[...] *= 2: a write into x itself
        t = view.parent
        view = _view_of(t)
    root, view = root_of(t)
    if isinstance(index, Flat):  # a.flat[i] (np.put, np.fill_diagonal); before the tuple forms
        positions = call("Reshape", positions_of(t, view), Tensor._wrap(np.array([-1], np.int64)))
        return index_update_at(root, getitem(positions, index.index), value, reduction)
    if view is None and reduction == "none" and _all_ints(index):
        # t[i, j] = v into a root (a loop filling an array): _box_write's box of a root, found
        # without the checks for the other index kinds.
        direct = _root_box(t, index)
        if direct is not None:
            extras, shape, box_shape = direct
            return _slice_update(t, value, extras, shape, box_shape, checked=True)
    if index is not None and _takes_all(index, t.ndim):
        index = None  # t[:] = v, t[...] = v: a write of all of t (also for dynamic sizes)
    rows = _index_rows(t, view, index)
    if rows is not None:
        return index_update_rows(root, rows[0], value, reduction, depth=rows[1])
    if reduction != "none":
        positions = positions_of(t, view)
        if index is not None:
            positions = getitem(positions, index)
        return index_update_at(root, positions, value, reduction)
    if view is None and index is None:
        same = tuple(value.shape) == tuple(root.shape)
        return value if same else call("Expand", value, call("Shape", root))
    box = _box_write(t, index, value)
    if box is not None:
        return box
    masked = _mask_write(t, index, value)
    if masked is not None:
        return written(t, None, masked)
    updated = _masked_update(t, view, index, value)
    if updated is not None:
        return updated
    positions = positions_of(t, view)
    if index is not None:
        positions = getitem(positions, index)
    return index_update_at(root, positions, value)


def _same_layout(view: View) -> bool:
    """Whether ``view`` is all of its parent in the same layout (``x[...]``, ``x[:]``: NumPy
    makes a new view object, kiln an identity ``Transpose``): writing into it is writing into
    the parent."""
    perm = view.attrs.get("perm") if view.op.name == "Transpose" else None
    return perm is not None and list(perm) == list(range(len(perm)))


def _index_rows(t: Tensor, view: View | None, index: Any) -> tuple[Tensor, int] | None:
    """``index`` itself as the index rows of the root it writes, and how many leading axes
    they address, when ``t`` is a root and ``index`` is one integer array per leading axis,
    all of one shape (then whole slices or ``...``): one array as it is, ``k`` of them stacked
    on a last axis of ``k``, for a
    ``ScatterND`` of whole blocks (no ``Gather`` of an iota; ``ScatterND`` takes negative
    indices, and raises on ones out of range, as NumPy's indexing does). One array on axis 0
    (``w[idx] -= g``) is the common case; ``occ[iy, ix] = True`` is two."""
    if view is not None or t.ndim < 1:
        return None
    entries = index if isinstance(index, tuple) else (index,)
    arrays = []
    for entry in entries:
        array = _int_array(entry)
        if array is None:
            break
        arrays.append(array)
    rest = entries[len(arrays) :]
    if not arrays or len(arrays) > t.ndim or not all(_whole(r) for r in rest):
        return None
    if sum(r is Ellipsis for r in rest) > 1 or len(arrays) + len(rest) > t.ndim + 1:
        return None
    if len(arrays) == 1:
        return arrays[0], 1
    shape = tuple(arrays[0].shape)
    if any(tuple(a.shape) != shape for a in arrays):
        return None  # (broadcast index arrays: the general path)
    minus_one = Tensor._wrap(np.array([-1], np.int64))
    columns = [call("Unsqueeze", a, minus_one) for a in arrays]
    return call("Concat", *columns, axis=-1), len(arrays)


def _int_array(entry: Any) -> Tensor | None:
    """An index entry that is an integer array (of at least one dimension), as int64."""
    if isinstance(entry, list) and any(isinstance(e, Tensor) for e in entry):
        return None
    if isinstance(entry, (list, np.ndarray)):
        array = np.asarray(entry)
        if array.dtype.kind in "iu" and array.ndim:
            return Tensor._wrap(array.astype(np.int64))
        return None
    if isinstance(entry, Tensor) and entry.dtype.kind in "iu" and entry.ndim:
        return cast(entry, np.dtype(np.int64))
    return None


def _all_ints(index: Any) -> bool:
    """Whether ``index`` is a Python int or a non-empty tuple of them."""
    if type(index) is int:
        return True
    if type(index) is not tuple or not index:
        return False
    for e in index:
        if type(e) is not int:
            return False
    return True


def _takes_all(index: Any, ndim: int) -> bool:
    """Whether ``index`` selects every element of a tensor of ``ndim`` dimensions, in place
    (whole slices and at most one ``...``, no more entries than dimensions)."""
    entries = index if isinstance(index, tuple) else (index,)
    if sum(e is Ellipsis for e in entries) > 1:
        return False
    return len([e for e in entries if e is not Ellipsis]) <= ndim and all(map(_whole, entries))


def _whole(index: Any) -> bool:
    """An index entry that takes a whole axis (``:``) or the remaining ones (``...``)."""
    if isinstance(index, slice):
        return index.start is None and index.stop is None and index.step is None
    return index is Ellipsis


def stale_views(storage: Storage) -> None:
    """A write moved ``storage``'s root on: its views are stale, and the contents their types
    may carry are dropped (so no shape rule reads old values)."""
    storage.version += 1
    alive = []
    for ref in storage.views:
        v = ref()
        if v is not None:
            meta = v._meta
            if meta is not None and meta.value is not None:
                rebind(v, v._trace, TensorType(meta.dtype, meta.shape))
            alive.append(ref)
    storage.views = alive


def _basic(index: Any) -> bool:
    entries = index if isinstance(index, tuple) else (index,)
    for e in entries:
        if e is Ellipsis or (isinstance(e, (int, np.integer)) and not isinstance(e, bool)):
            continue
        if isinstance(e, slice) and all(
            p is None or (isinstance(p, (int, np.integer)) and not isinstance(p, bool))
            for p in (e.start, e.stop, e.step)
        ):
            continue
        return False
    return True


def _box_write(t: Tensor, index: Any, value: Tensor) -> Tensor | None:
    """``t[index] = value`` as one ``SliceUpdate`` of the root, when the written elements are
    a strided box of it (a ``Slice`` of the root, maybe squeezed) of static shape."""
    if index is not None and not _basic(index):
        return None
    direct = _root_box(t, index)
    if direct is not None:  # a root indexed by ints and slices: no read recorded to find it
        extras, shape, box_shape = direct
        return _slice_update(t, value, extras, shape, box_shape)
    target = t if index is None else getitem(t, index)
    view = _view_of(target)
    if view is None:
        return None
    box = target
    if view.op.name == "Squeeze":
        box = view.parent
        view = _view_of(box)
        if view is None:
            return None
    if view.op.name != "Slice" or _view_of(view.parent) is not None:
        return None
    if not all(isinstance(d, int) for d in (*target.shape, *box.shape)):
        return None
    shape = tuple(int(d) for d in target.shape)
    box_shape = tuple(int(d) for d in box.shape)
    return _slice_update(view.parent, value, view.extras, shape, box_shape)


def _root_box(
    t: Tensor, index: Any
) -> tuple[tuple[Tensor, ...], tuple[int, ...], tuple[int, ...]] | None:
    """For ``t[index]`` with ``t`` a root of static shape and ``index`` ints and slices (no
    ``...``, no new axis; NumPy already checked it), the ``Slice`` inputs ``getitem`` would
    give the box (starts, ends, axes, steps, as its own constants), the written shape and the
    box's shape; None for anything else (``getitem`` finds the box, or raises)."""
    if index is None or _view_of(t) is not None:
        return None
    entries = index if isinstance(index, tuple) else (index,)
    if len(entries) > t.ndim or not all(type(d) is int for d in t.shape):
        return None
    dims = tuple(int(d) for d in t.shape)
    starts: list[int] = []
    ends: list[int] = []
    axes: list[int] = []
    steps: list[int] = []
    shape: list[int] = []
    box_shape = list(dims)
    for axis, e in enumerate(entries):
        d = dims[axis]
        if isinstance(e, slice):  # getitem's bounds (functions.shape._slice_bounds)
            step = 1 if e.step is None else operator.index(e.step)
            if step == 0:
                return None
            start = None if e.start is None else operator.index(e.start)
            stop = None if e.stop is None else operator.index(e.stop)
            lo, hi, st = slice(start, stop, step).indices(d)
            length = len(range(lo, hi, st))
            shape.append(length)
            box_shape[axis] = length
            if (start is None and stop is None and step == 1) or (length == d and st == 1):
                continue  # the whole axis
            if length == 0:
                lo, hi, st = 0, 0, 1
            elif hi < 0:
                hi = INT64_MIN
            starts.append(lo)
            ends.append(hi)
            steps.append(st)
            axes.append(axis)
        elif isinstance(e, (int, np.integer)) and not isinstance(e, (bool, np.bool_)):
            i = operator.index(e)
            if not -d <= i < d:
                return None  # getitem raises NumPy's IndexError
            i %= d
            starts.append(i)
            ends.append(i + 1)
            steps.append(1)
            axes.append(axis)
            box_shape[axis] = 1
        else:
            return None
    if not axes:
        return None  # all of t: not a box write
    shape.extend(dims[len(entries) :])
    extras = (_i64(starts), _i64(ends), _i64(axes), _i64(steps))
    return extras, tuple(shape), tuple(box_shape)


def _slice_update(
    root: Tensor,
    value: Tensor,
    extras: tuple[Tensor | None, ...],
    shape: tuple[int, ...],
    box_shape: tuple[int, ...],
    checked: bool = False,
) -> Tensor:
    """``SliceUpdate`` of ``root`` at the box of the ``Slice`` inputs ``extras`` (of
    ``box_shape``) with ``value`` broadcast to the written ``shape``. ``checked``: the box is
    :func:`_root_box`'s (static, in range), which the tracer records without inferring it."""
    updates = value
    data = value._data
    if value._trace is None and data is not None and data.size <= _LITERAL_SIZE:
        # A literal (``D[i, j] = 1.0``): laid out as the box here, one small constant shared
        # by every write of it, instead of an Expand and a Reshape recorded at each write.
        if tuple(value.shape) != box_shape:
            laid = np.array(np.broadcast_to(data, shape)).reshape(box_shape)
            updates = Tensor._wrap(laid)
    else:
        if tuple(value.shape) != shape:
            updates = call("Expand", value, _i64(list(shape)))
        if shape != box_shape:
            updates = call("Reshape", updates, _i64(list(box_shape)), allowzero=1)  # sizes known
    # Recorded without running its kernel: NumPy's write (``perform``) already put the new
    # contents into the root's array, which the root keeps, and the kernel's copy of the
    # whole root at every write made a loop filling an array row by row quadratic.
    handler = current_handler()
    if checked and updates.dtype == root.dtype and tuple(updates.shape) == box_shape:
        box_write = getattr(handler, "box_write", None)
        written = None if box_write is None else box_write(root, updates, extras)
        if written is not None:
            return written
    compute = getattr(handler, "compute", False)
    if compute:
        handler.compute = False  # type: ignore[union-attr]
    try:
        return call("kiln.SliceUpdate", root, updates, *extras)
    finally:
        if compute:
            handler.compute = True  # type: ignore[union-attr]


def _masked_update(t: Tensor, view: View | None, index: Any, value: Tensor) -> Tensor | None:
    """``t[mask] op= scalar`` on a root (``t[t < 0] *= 0.01``): the tracer's
    ``masked_update`` (a ``Where`` over all of ``t``), or None."""
    mask = index[0] if isinstance(index, tuple) and len(index) == 1 else index
    if view is not None or not isinstance(mask, Tensor) or mask.dtype != np.bool_:
        return None
    if tuple(mask.shape) != tuple(t.shape):
        return None
    update = getattr(current_handler(), "masked_update", None)
    return None if update is None else update(t, mask, value)


def _mask_write(t: Tensor, index: Any, value: Tensor) -> Tensor | None:
    """``t[mask] = scalar`` with a boolean mask of ``t``'s shape: all of ``t`` becomes
    ``Where(mask, value, t)`` (no positions, no data-dependent sizes)."""
    mask = index[0] if isinstance(index, tuple) and len(index) == 1 else index
    if isinstance(mask, np.ndarray):
        mask = Tensor._wrap(mask)
    if not isinstance(mask, Tensor) or mask.dtype != np.bool_:
        return None
    if tuple(mask.shape) != tuple(t.shape) or value.ndim > 0 and value.size != 1:
        return None
    scalar = value if value.ndim == 0 else call("Reshape", value, _i64([]))
    return call("Where", mask, scalar, t)
