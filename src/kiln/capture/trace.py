"""Recording: a :class:`Tracer` receives every operator call and builds a ``ModelGraph``.

While a tracer is installed (``handler_scope``), :func:`kiln.tensor.dispatch` hands it
each call. The tracer looks up (or creates) the graph value of each input tensor, runs the
operator's ``infer`` rule on the *symbolic* types, records a node, and, when the inputs have
values, also runs the kernel, so the traced function sees real results. Its outputs are tensors
that carry both the values and a reference to their graph value.

A tensor the function reaches without receiving it (a closure weight, a global, a Python scalar
turned into a tensor) has no graph value yet and becomes a constant, sharing its memory, unless
the tracer was told it is an implicit input (:meth:`Tracer.lift_implicit`, which
``kiln.compile`` uses for the arrays of closures, globals and ``self``): then it becomes a graph
input the first time an operator uses it.
"""

from __future__ import annotations

import contextlib
import gc
import inspect
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import CaptureError, InputMismatchError, KilnError, UnsupportedOperationError
from ..functions.inplace import NoValues
from ..functions.operands import SHARED_CONSTANT_IDS
from ..ir.builder import GraphBuilder, infer_key
from ..ir.graph import ModelGraph, NameScope, Node, Value
from ..ir.rewrite import can_raise
from ..ops.dispatch import as_outputs, eager_kernel, handler_scope, run_kernel, run_quiet
from ..ops.registry import ELEMENTWISE, PURE, OpDef, TensorType, get_op
from ..source import user_source
from ..spec import TensorSpec, check_dynamic_axes_refer
from ..symbolic import Dim, ShapeGuard, SymDim, evaluate, format_shape, guard_scope, symbol
from ..tensor import Tensor, call, fresh_outputs, keyable, memory_root, rebind
from .numpy_creation import numpy_creation
from .scalars import TracedFloat
from .views import Storage, View, reread, root_of, stale_views, written

__all__ = ["Tracer", "TraceRef", "InputSlot", "plan_inputs", "record", "old_objects_frozen"]

# NumPy's own np.array: while a capture runs, the numpy module's is routed
# (kiln.capture.numpy_creation), and kiln's calls would each pay the routing's checks.
_np_array = getattr(np.array, "__kiln_original__", np.array)
# Copied constants of at most this many elements are shared by contents (Tracer.value_of):
# scalars, bounds, axes, and a literal laid out as the box it is written into (``out[i] =
# 1.0``, at most kiln.capture.views._LITERAL_SIZE elements).
_SHARED_CONSTANT_SIZE = 64


@dataclass(slots=True, unsafe_hash=True)
class TraceRef:
    """What a recording tensor carries: its tracer, its graph value, and, for a view of
    another recorded array, how it was made (:mod:`kiln.capture.views`).

    Never changed once made (a new version of an array gets a new one: ``rebind``); not a
    frozen dataclass only because one is made per recorded op, and a frozen dataclass's
    ``__init__`` sets each field through ``object.__setattr__``."""

    tracer: Tracer
    value: Value
    view: View | None = None


_KNOWN_LIMIT = 4096  # Tracer._known's entries (emptied when full)


class _Known:
    """A call :meth:`Tracer.apply` recorded before on static input types: the output types
    ``infer`` gave, the bound attributes, and, once the call comes again, the kernel to run
    on the inputs' arrays (``eager_kernel``'s, as the NumPy engine and the eager door run it,
    chosen from the full input types: the key holds every content they carry)."""

    __slots__ = ("op", "in_types", "types", "bound", "call_attrs", "kernel", "fresh", "quiet")

    def __init__(
        self,
        op: OpDef,
        in_types: tuple[TensorType | None, ...],
        types: tuple[TensorType, ...],
        bound: dict[str, Any],
        call_attrs: dict[str, Any],
    ) -> None:
        self.op = op
        self.in_types = in_types
        self.types = types
        self.bound = bound  # the node's attributes
        self.call_attrs = call_attrs  # as the kernel takes them
        self.kernel: Callable[..., Any] | None = None
        self.fresh = False
        self.quiet = True

    def run(self, arrays: Sequence[np.ndarray | None]) -> Sequence[np.ndarray] | None:
        """The kernel's results (aliasing as NumPy's do), or None when it raises (the
        registry kernel then runs, and raises the operator's own error)."""
        kernel = self.kernel
        op = self.op
        if kernel is _NO_KERNEL:
            return None
        try:
            if kernel is None:
                self.kernel = _NO_KERNEL  # (until eager_kernel gives one)
                kernel = self.kernel = eager_kernel(op, self.in_types, self.types, self.call_attrs)
                # A view's results alias as NumPy's views do, and a ufunc's are new arrays:
                # neither needs fresh_outputs' check. A view only moves data: no
                # floating-point state to set.
                self.fresh = op.is_view or isinstance(kernel, np.ufunc)
                self.quiet = not op.is_view
            if self.quiet:
                results: Sequence[np.ndarray] = run_quiet(kernel, arrays)
            else:
                results = as_outputs(kernel(*arrays))
        except Exception:
            return None
        return results if self.fresh else fresh_outputs(op, arrays, results)


def _no_kernel(*arrays: Any) -> Any:
    raise AssertionError("never called: _Known.run returns None first")


_NO_KERNEL: Callable[..., Any] = _no_kernel  # a _Known whose eager_kernel raised


def _pinned(guards: Sequence[ShapeGuard]) -> set[str]:
    """The symbols that ``guards`` fix to one value (``s0 == 4``)."""
    return {
        g.left.name
        for g in guards
        if g.op == "=="
        and isinstance(g.left, SymDim)
        and g.left.is_symbol()
        and isinstance(g.right, int)
    }


class Tracer:
    """Records operator calls into nodes; implements the dispatch ``Handler`` protocol."""

    def __init__(self, *, compute: bool = True) -> None:
        self.compute = compute
        self.builder = GraphBuilder()  # the recorded inputs, constants and nodes
        self._constant_of: dict[int, tuple[Tensor, Value]] = {}  # id(tensor) -> (tensor, value)
        # (dtype, shape, bytes) -> the constant holding them, for small copied constants
        self._small_constants: dict[tuple[Any, ...], Value] = {}
        self._known: dict[tuple[Any, ...], _Known] = {}  # Tracer.apply's calls by infer_key
        self._applied = 0  # operators recorded (every 8192, refreeze)
        self._basic_views: dict[int, tuple[Tensor, Tensor, Any]] = {}  # note_basic_view
        # Whether value_of is this class's (apply then finds known constants itself).
        self._plain_value_of = type(self).value_of is Tracer.value_of
        self._symbol_source: dict[str, tuple[Tensor, int]] = {}  # symbol -> (tensor, axis)
        self._size_tensors: dict[Dim, Tensor] = {}
        # Dynamic sizes an operation forced to one value: (symbol, size, message).
        self.pins: list[tuple[str, int, str]] = []
        # Shape guards: the comparisons of symbolic sizes the recorded branch depends on.
        self.shape_guards: list[ShapeGuard] = []
        self._guard_texts: set[str] = set()
        self._sizes: dict[str, int] = {}  # symbol -> its size in the call being recorded
        self._symbolic = False  # whether a recorded tensor has had a symbolic size
        self._input_symbols: set[str] = set()  # the symbols the graph's inputs bind
        # Implicit inputs: id(tensor) -> (tensor, key, name) until first used; then in order.
        self._implicit: dict[int, tuple[Tensor, Any, str]] = {}
        self.implicit_inputs: list[tuple[Any, Value]] = []  # (key, graph input), in input order
        # Functionalized writes (kiln.capture.views): the storage of each root that has views
        # or was written, by id (the storage holds the root, so the id stays its own).
        self._storage: dict[int, Storage] = {}
        self._prune_at: dict[int, int] = {}  # id(storage) -> views held when next pruned
        self.input_tensors: list[tuple[Tensor, Value]] = []  # each input and its first value
        self.write_backs: list[tuple[int, int]] = []  # (input position, graph output index)
        self.input_snapshots: dict[int, np.ndarray] = {}  # an input's contents before a write
        # Implicit inputs written by the function (Tracer._own_implicit): their contents before
        # the first write (by position in implicit_inputs), and (position, stand-in, first value).
        self.implicit_snapshots: dict[int, np.ndarray] = {}
        self._implicit_owned: list[tuple[int, Tensor, Value]] = []

    # -- inputs ---------------------------------------------------------------------------

    def add_input(self, name: str, ttype: TensorType, data: np.ndarray | None) -> Tensor:
        """A graph input and the recording tensor that stands for it."""
        value = self.builder.add_input(name, ttype)
        t = Tensor._abstract(ttype, TraceRef(self, value), data)
        self.input_tensors.append((t, value))
        self._input_symbols.update(
            d.name for d in ttype.shape if isinstance(d, SymDim) and d.is_symbol()
        )
        self._note_symbols(t)
        return t

    def _note_symbols(self, t: Tensor) -> None:
        """Remember the first recorded tensor each symbolic size appears in (for size_tensor),
        and, when the tensor has values, the size each symbol has in this call."""
        data = t._data
        for axis, d in enumerate(t.type.shape):
            if isinstance(d, SymDim) and d.is_symbol():
                self._symbolic = True
                if d.name not in self._symbol_source:
                    self._symbol_source[d.name] = (t, axis)
                if data is not None:
                    self._sizes.setdefault(d.name, data.shape[axis])

    def lift_implicit(self, t: Tensor, key: Any, name: str) -> None:
        """Make ``t`` (a concrete tensor the function reaches without receiving it) a graph
        input called ``name`` the first time an operator uses it, instead of a constant;
        :attr:`implicit_inputs` then lists it with ``key`` in graph-input order."""
        self._implicit[id(t)] = (t, key, name)

    def add_implicit(self, t: Tensor, key: Any, name: str) -> None:
        """Make ``t`` a graph input called ``name`` now (a random draw: the replay must draw
        even when nothing uses it), listed with ``key`` in :attr:`implicit_inputs`."""
        self.lift_implicit(t, key, name)
        self.value_of(t)

    # -- the Handler protocol --------------------------------------------------------------

    def value_of(self, t: Tensor) -> Value:
        ref = t._trace
        if isinstance(ref, TraceRef):
            if ref.tracer is self:
                view = ref.view
                if view is not None and view.seen != view.storage.version:
                    # Its root was written since: read it anew from the newest root (also
                    # when finishing, after the function returned: record with this tracer).
                    with handler_scope(self):
                        value = self.value_of(reread(t, view))
                    rebind(t, TraceRef(self, value, view), value.type)
                    return value
                return ref.value
            raise CaptureError(
                "a tensor recorded by another trace is used here; a traced function must not "
                f"keep tensors across traces (at {user_source()})"
            )
        known = self._constant_of.get(id(t))
        if known is not None:
            return known[1]
        assert t._data is not None
        implicit = self._implicit.pop(id(t), None)
        if implicit is not None and implicit[0] is t:
            _, key, name = implicit
            ttype = TensorType(t._data.dtype, tuple(t._data.shape))
            value = self.builder.add_input(self.builder.scope.fresh(name), ttype)
            self._constant_of[id(t)] = (t, value)
            self.implicit_inputs.append((key, value))
            return value
        data = t._data
        key = None
        writeable = data.flags.writeable
        if data.size <= _SHARED_CONSTANT_SIZE and (writeable or id(t) in SHARED_CONSTANT_IDS):
            # A small constant the function or kiln made (a scalar operand, a slice's bounds,
            # an axis; kiln's shared read-only int vectors, functions.operands.int_vector,
            # too): one graph constant per contents, as CSE would merge them, instead of one
            # per op of an unrolled loop. (Another read-only array keeps its own memory.)
            key = (data.dtype, data.shape, data.tobytes())
            shared = self._small_constants.get(key)
            if shared is not None:
                self._constant_of[id(t)] = (t, shared)
                return shared
        if writeable:  # a write after this must not change the graph's constant
            data = _np_array(data)
            data.flags.writeable = False
        value = self.builder.add_constant(data)
        self._constant_of[id(t)] = (t, value)  # holding t keeps id(t) from being reused
        if key is not None:
            self._small_constants[key] = value
        return value

    # -- writes (kiln.capture.views) -------------------------------------------------------

    def storage_of(self, root: Tensor, create: bool = True) -> Storage | None:
        """The storage record of the recorded array ``root`` (made when ``create``)."""
        storage = self._storage.get(id(root))
        if storage is None and create:
            storage = self._storage[id(root)] = Storage(root)
        return storage

    def write(
        self,
        t: Tensor,
        index: Any,
        value: Tensor,
        perform: Callable[[], Any],
        reduction: str = "none",
    ) -> None:
        """Record ``t[index] = value`` (``index`` ``None``: all of ``t``; ``value`` already
        cast to ``t``'s dtype) around ``perform``, NumPy's write on the values the function
        sees, which runs first (its errors are NumPy's, and nothing is recorded then). With a
        ``reduction`` (``"add"``, ``"mul"``, ``"max"``, ``"min"``) the value is combined with
        the contents, repeated positions accumulating (``ufunc.at``).

        Only arrays this trace owns are recorded: an input, an operator's result, or a view
        of one. A write into anything else (a closure or global array, a constant) cannot be
        replayed: :meth:`unsupported` decides (a compile capture serves the call eagerly)."""
        if reduction == "none" and self._is_own_view(t, index, value):
            perform()  # NumPy copies the box onto itself
            return
        root, _ = root_of(t)
        owner = root._trace
        owned = isinstance(owner, TraceRef) and owner.tracer is self
        if not owned and self._own_implicit(root):
            owned, owner = True, root._trace
        if not owned:
            self.unsupported(
                "a write into an array the function did not receive or create (a constant, "
                "or a kiln tensor it reaches without receiving it)"
            )
        elif self._uncertain_view(t):
            raise CaptureError(
                f"a write through the result of a reshape at {user_source()}: without the "
                "values kiln cannot tell whether NumPy would give a view or a copy there; trace "
                "with example inputs, or write into a .copy() or into the original array"
            )
        else:
            for position, (tensor, first) in enumerate(self.input_tensors):
                if tensor is root and position not in self.input_snapshots:
                    data = root._data  # the caller's array as it was, for engine selection
                    if data is not None and owner.value is first:
                        self.input_snapshots[position] = np.array(data)
        try:
            perform()
        except NoValues:
            pass  # a trace from a signature: there are no values to write
        if owned:
            new = self.value_of(written(t, index, value, reduction))
            rebind(root, TraceRef(self, new), TensorType(new.type.dtype, tuple(root.shape)))
            storage = self._storage.get(id(root))
            if storage is not None:
                stale_views(storage)

    def note_basic_view(self, t: Tensor, index: Any, view: Tensor) -> None:
        """``view`` is ``t[index]`` by basic indexing (ints and slices): it shares that box's
        memory for good. Kept for the last few such reads (see :meth:`_is_own_view`)."""
        key = _index_key(index)
        if key is None:
            return
        views = self._basic_views
        views[id(view)] = (view, t, key)
        if len(views) > _BASIC_VIEWS_KEPT:
            del views[next(iter(views))]

    def _is_own_view(self, t: Tensor, index: Any, value: Tensor) -> bool:
        """Whether ``t[index] = value`` writes a box with a view of that very box: the second
        half of ``t[i] += v`` (Python reads ``t[i]``, adds in place through the view, then
        assigns the view back), which changes nothing and records nothing."""
        noted = self._basic_views.get(id(value))
        if noted is None or noted[0] is not value or noted[1] is not t:
            return False
        return noted[2] == _index_key(index)

    def _own_implicit(self, root: Tensor) -> bool:
        """Make ``root`` a root this trace owns when it is the stand-in of an implicit input
        (a NumPy array the function reaches without receiving it: a closure, a global,
        ``self.<attr>``), so that writes into it are recorded and the replay writes its final
        contents back into that array (:meth:`written_implicit`); False for anything else (a
        constant; a kiln tensor the function reaches, which stands for itself and is not
        rebound)."""
        pending = self._implicit.get(id(root))
        known = self._constant_of.get(id(root))
        if (pending is None or pending[0] is not root) and (known is None or known[0] is not root):
            return False
        value = self.value_of(root)  # a graph input from now on, if not one already
        lifted = [v for _, v in self.implicit_inputs]
        if not any(v is value for v in lifted):
            return False  # a constant
        position = next(k for k, v in enumerate(lifted) if v is value)
        key = self.implicit_inputs[position][0]
        if getattr(key, "original", None) is root:
            return False  # the user's own kiln tensor
        if root._data is not None:  # its contents before the call's writes, for selection
            self.implicit_snapshots[position] = np.array(root._data)
        rebind(root, TraceRef(self, value), value.type)
        self._implicit_owned.append((position, root, value))
        return True

    def written_implicit(self) -> list[tuple[int, Tensor]]:
        """The implicit inputs a write changed: (position among :attr:`implicit_inputs`, the
        stand-in tensor)."""
        return [(k, t) for k, t, first in self._implicit_owned if self.value_of(t) is not first]

    def _uncertain_view(self, t: Tensor) -> bool:
        view = getattr(t._trace, "view", None)
        while view is not None:
            if view.op.name == "Reshape" and t._data is None:
                return True
            t = view.parent
            view = getattr(t._trace, "view", None)
        return False

    def masked_update(self, t: Tensor, mask: Tensor, value: Tensor) -> Tensor | None:
        """All of ``t`` after ``t[mask] = value`` when ``value`` is elementwise work on
        ``t[mask]`` with 0-d operands only (``t[t < 0] *= 0.01``: NumPy reads the masked
        elements, scales them, writes them back): the same work on all of ``t``, kept where
        ``mask`` holds (``Where``), with no positions of a data-dependent count. ``t`` is a
        root and ``mask`` a boolean of its shape. None when ``value`` is not that."""
        root, mask_v, v = self.value_of(t), self.value_of(mask), self.value_of(value)
        recent = {id(o): n for n in self.builder.last_nodes(64) for o in n.outputs}
        path: list[tuple[Node, int]] = []
        node = recent.get(id(v))
        while node is not None and node.op != "GatherND":
            along = [k for k, x in enumerate(node.inputs) if x is not None and x.shape != ()]
            elementwise = ELEMENTWISE in node.opdef.traits and PURE in node.opdef.traits
            if not elementwise or len(along) != 1 or len(node.outputs) != 1 or can_raise(node):
                return None
            path.append((node, along[0]))
            node = recent.get(id(node.inputs[along[0]]))
        if node is None or node.inputs[0] is not root or node.attrs.get("batch_dims", 0):
            return None
        transpose = recent.get(id(node.inputs[1]))
        nonzero = None if transpose is None else recent.get(id(transpose.inputs[0]))
        if transpose is None or transpose.op != "Transpose" or transpose.attrs.get("perm"):
            return None
        if nonzero is None or nonzero.op != "NonZero" or nonzero.inputs[0] is not mask_v:
            return None
        full = root
        for step, k in reversed(path):
            inputs = list(step.inputs)
            inputs[k] = full
            (full,) = self.builder.add(step.op, inputs, step.attrs, source=user_source())
        if full.dtype != root.dtype or tuple(full.shape) != tuple(root.shape):
            return None  # (the dead nodes are left to the optimizer)
        (new,) = self.builder.add("Where", [mask_v, full, root], source=user_source())
        return Tensor._abstract(new.type, TraceRef(self, new), None)

    def written_inputs(self) -> list[tuple[int, Tensor]]:
        """The inputs a write changed: (input position, the input's recording tensor)."""
        return [
            (i, t)
            for i, (t, first) in enumerate(self.input_tensors)
            if isinstance(t._trace, TraceRef) and self.value_of(t) is not first
        ]

    def apply(
        self, op: OpDef, inputs: Sequence[Tensor | None], attrs: dict[str, Any]
    ) -> tuple[Tensor, ...]:
        # The hot path of recording (issue 13: every op of an unrolled loop comes here):
        # an input this trace recorded, not a stale view, is its graph value as it is.
        self._applied += 1
        if not self._applied & _REFREEZE_MASK:
            refreeze()  # what this recording made so far leaves the collector's passes too
        in_list: list[Value | None] = []
        arrays: list[np.ndarray | None] | None = [] if self.compute else None
        constants = self._constant_of if self._plain_value_of else None
        for t in inputs:
            if t is None:
                in_list.append(None)
                if arrays is not None:
                    arrays.append(None)
                continue
            ref = t._trace
            if type(ref) is TraceRef and ref.tracer is self and ref.view is None:
                in_list.append(ref.value)
            elif ref is None and constants is not None:
                known_constant = constants.get(id(t))  # a constant this trace has already
                in_list.append(self.value_of(t) if known_constant is None else known_constant[1])
            else:
                in_list.append(self.value_of(t))
            if arrays is not None:
                data = t._data
                if data is None:
                    arrays = None  # symbolic only: nothing to compute
                else:
                    arrays.append(data)
        in_values = tuple(in_list)
        if attrs and any(type(v) is TracedFloat for v in attrs.values()):
            # A float argument made a graph input, given as an attribute: read on the host.
            attrs = {k: float(v) if type(v) is TracedFloat else v for k, v in attrs.items()}
        source = user_source()
        # A call on static types this trace recorded before (an unrolled loop's body): the
        # output types infer gave then, and the kernel chosen for them once.
        key = infer_key(op, [None if v is None else v.type for v in in_values], attrs)
        known: _Known | None = None
        if key is not None:
            try:
                known = self._known.get(key)
            except TypeError:  # an attribute that is not hashable (an array)
                key = None
        if known is not None and known.op is op:
            out_types = known.types
            outs = self.builder.add_typed(op, in_values, dict(known.bound), out_types, source)
            static = True
        elif key is not None:
            # Static input types not seen yet: infer here (the builder's own memo would only
            # hold what _known holds), then the node as the builder adds it.
            bound = op.bind_attrs(attrs)
            op.check_arity(len(in_values))
            out_types = tuple(op.infer([None if v is None else v.type for v in in_values], bound))
            static = True  # every output size an int (no symbolic size to note or compare)
            for ttype in out_types:
                for d in ttype.shape:
                    if type(d) is not int:
                        static = False
            outs = self.builder.add_typed(op, in_values, bound, out_types, source)
            if static:
                self._remember(key, op, in_values, out_types, bound, attrs)
        else:
            outs = self.builder.add(op, in_values, attrs, source=source)
            out_types = tuple([v.type for v in outs])
            static = True
            for ttype in out_types:
                for d in ttype.shape:
                    if type(d) is not int:
                        static = False
        results: Sequence[np.ndarray] | None = None
        if arrays is not None:
            results = None if known is None else known.run(arrays)
            if results is None:
                results = fresh_outputs(op, arrays, run_kernel(op, arrays, attrs))
            for ttype, array in zip(out_types, results):
                if not static or ttype.shape != array.shape or ttype.dtype != array.dtype:
                    _check_kernel(op, out_types, results, static)
                    break
        if self._symbolic:  # a static capture has no dynamic size to pin
            self._note_pins(op, attrs, in_values, out_types)
        record = None
        if op.is_view and inputs and inputs[0] is not None:
            record = self._view_record(op, inputs, attrs, None if results is None else results[0])
        tensors = []
        for i, value in enumerate(outs):
            data = None if results is None else results[i]
            t = Tensor._abstract(value.type, TraceRef(self, value, record), data)
            if not static:
                self._note_symbols(t)
            tensors.append(t)
            record = None  # (a view operator's first output is the view)
        if op.is_view and inputs and inputs[0] is not None:
            self._keep_view(tensors[0])
        return tuple(tensors)

    def box_write(self, root: Tensor, updates: Tensor, box: Sequence[Tensor]) -> Tensor | None:
        """``SliceUpdate(root, updates, *box)`` for a box of static bounds that
        :func:`kiln.capture.views._root_box` found in range in a root of static shape, with
        ``updates`` of the box's shape and the root's dtype: the node is added with the root's
        dtype and shape as its output type (what ``infer`` gives such a box), without ``infer`` or a
        kernel (NumPy's write already put the new contents in the root's array), so an
        unrolled ``D[i, j] = v`` skips the general path's work for each new box. None when
        the general path must record it (an operator budget reached: :meth:`apply` decides)."""
        if self.over_budget():
            return None
        self._applied += 1
        if not self._applied & _REFREEZE_MASK:
            refreeze()
        inputs = (self.value_of(root), self.value_of(updates), *map(self.value_of, box))
        data = inputs[0].type
        out_type = TensorType(data.dtype, data.shape)  # (not the root's contents, if known)
        op = get_op("kiln.SliceUpdate")
        (out,) = self.builder.add_typed(op, inputs, {}, (out_type,), user_source())
        return Tensor._abstract(out.type, TraceRef(self, out), None)

    def over_budget(self) -> bool:
        """Whether the next operator should go through :meth:`apply` to meet a node budget
        (none here; a compiled function's capture has one)."""
        return False

    def _remember(
        self,
        key: tuple[Any, ...],
        op: OpDef,
        in_values: Sequence[Value | None],
        out_types: tuple[TensorType, ...],
        bound: dict[str, Any],
        attrs: dict[str, Any],
    ) -> None:
        """Remember the call just recorded under ``key`` (its ``infer_key``): its output
        types and bound attributes (its kernel is chosen when the call comes again: most
        calls with contents in their key, a write's bounds, do not)."""
        for v in attrs.values():
            if not keyable(v):
                return  # 0.0 and -0.0 share a key but may compute differently
        in_types = tuple([None if v is None else v.type for v in in_values])
        known = _Known(op, in_types, out_types, bound, attrs)
        if len(self._known) >= _KNOWN_LIMIT:
            self._known.clear()
        self._known[key] = known

    def _view_record(
        self,
        op: OpDef,
        inputs: Sequence[Tensor | None],
        attrs: dict[str, Any],
        data: np.ndarray | None,
    ) -> View | None:
        """How the result of view operator ``op`` (its array ``data``, when computed) views
        ``inputs[0]``'s memory, or None when it does not (a write through either then reaches
        the other: kiln.capture.views)."""
        parent = inputs[0]
        assert parent is not None
        if data is not None and parent._data is not None:
            if memory_root(data) is not memory_root(parent._data):
                return None  # NumPy made a copy here (a reshape of a non-contiguous array)
        view = getattr(parent._trace, "view", None)
        storage = self.storage_of(parent) if view is None else view.storage
        assert storage is not None
        return View(storage, parent, op, tuple(inputs[1:]), attrs)

    def _keep_view(self, out: Tensor) -> None:
        """Add ``out`` to its storage's views when it is a view (see :meth:`_view_record`)."""
        record = out._trace.view
        if record is None:
            return
        storage = record.storage
        views = storage.views
        views.append(weakref.ref(out))
        # A loop over x[i]: forget the views that are gone, each time the list has doubled
        # since the last time (so views the function keeps cost linear time, not quadratic).
        if len(views) >= self._prune_at.get(id(storage), 256):
            storage.views = alive = [ref for ref in views if ref() is not None]
            self._prune_at[id(storage)] = max(256, 2 * len(alive))

    def _note_pins(
        self,
        op: OpDef,
        attrs: Mapping[str, Any],
        in_values: Sequence[Value | None],
        out_types: Sequence[TensorType],
    ) -> None:
        """Record dynamic sizes this operation forces to one value: a symbolic axis broadcast
        against a static size, or contracted (MatMul, Gemm) against one. The finished graph is
        specialized to that size, so its input guard checks it, and the capture says which op
        did it."""
        if op.has(ELEMENTWISE) and out_types:
            for d, target, v, axis in _broadcast_against_static(out_types[0].shape, in_values):
                self._pin(d, target, op, v, axis, f"broadcast against size {target}")
        elif op.name in ("MatMul", "Gemm") and len(in_values) >= 2:
            a, b = in_values[0], in_values[1]
            if a is None or b is None or not a.shape or not b.shape:
                return
            a_axis = -2 if attrs.get("transA") and len(a.shape) >= 2 else -1
            b_axis = -1 if attrs.get("transB") or len(b.shape) < 2 else -2
            ka, kb = a.shape[a_axis], b.shape[b_axis]
            for value, axis, d, other in ((a, a_axis, ka, kb), (b, b_axis, kb, ka)):
                if isinstance(d, SymDim) and d.is_symbol() and isinstance(other, int):
                    self._pin(
                        d,
                        other,
                        op,
                        value,
                        axis % len(value.shape),
                        f"contracted against size {other}",
                    )

    def _pin(
        self,
        d: SymDim,
        size: int,
        op: OpDef,
        value: Value,
        axis: int,
        how: str,
        where: str | None = None,
    ) -> None:
        if any(name == d.name for name, _, _ in self.pins):
            return
        actual = self._sizes.get(d.name)
        if actual is not None and actual != size:
            # This call's size broadcasts (a 1 against `size`): the graph holds for it, not
            # for `size` (its guards, `len(x) == 1`, were recorded at this size).
            how = f"{how}, broadcast from size {actual} in this call"
            size = actual
        message = (
            f"{op.name} at {where or user_source()} pins the dynamic size {d.name} (input "
            f"{value.name!r} axis {axis}) to {size}: it is {how}"
        )
        self.pins.append((d.name, size, message))

    # -- shape guards (the GuardHook protocol of kiln.symbolic) ----------------------------

    def compare(self, left: Dim, op: str, right: Dim, what: str, assume: bool | None) -> bool:
        """Answer ``left op right`` from the sizes of the call being recorded and record the
        answer as a shape guard; without sizes (a trace from a signature) take ``assume`` as
        the guard, or raise :class:`CaptureError` when there is nothing to assume."""
        where = user_source()
        names = _symbols_of(left, right)
        guard = ShapeGuard(left, op, right, where, what)
        if names <= self._sizes.keys():
            answer = guard.holds(self._sizes)
            self._guard(guard if answer else guard.negated())
            return answer
        if assume is not None and names <= self._input_symbols:
            self._guard(guard if assume else guard.negated())
            return assume
        unknown = ", ".join(sorted(names - self._sizes.keys()))
        raise CaptureError(
            f"{what} at {where}: the answer depends on the symbolic size(s) {unknown}, which "
            "have no value in a trace from a signature, so kiln cannot tell which branch to "
            "record. Trace with example inputs (the answer then becomes a shape guard that the "
            "graph checks at every run), mark the axis static, or keep the choice in tensor "
            "operations (kiln.where)."
        )

    def size(self, dim: SymDim, what: str) -> int | None:
        """The value of ``dim`` in the call being recorded, guarded (``dim == value``)."""
        if not dim.symbols <= self._sizes.keys():
            self.compare(dim, "==", 0, what, None)  # raises CaptureError naming the line
        value = evaluate(dim, self._sizes)
        self._guard(ShapeGuard(dim, "==", value, user_source(), what))
        return value

    def known(self, dim: SymDim) -> int | None:
        """The value of ``dim`` in the call being recorded, when known (no guard)."""
        return evaluate(dim, self._sizes) if dim.symbols <= self._sizes.keys() else None

    def array_ufunc(self, ufunc: Any, method: str, inputs: tuple, kwargs: dict) -> Any:
        """A NumPy ufunc over symbolic sizes (``np.sqrt(n)``, ``array * n``), recorded as a
        kiln call: each size becomes the computation of it from the inputs' shapes."""
        from ..functions.numpy_protocol import array_ufunc

        return array_ufunc(ufunc, method, inputs, kwargs)

    def _guard(self, guard: ShapeGuard) -> None:
        """Keep ``guard`` (once). A guard on sizes that only the graph computes (a NonZero
        count) cannot be checked before a run: it becomes a host read of the comparison's
        value (a value guard in kiln.compile)."""
        text = str(guard)
        if text in self._guard_texts:
            return
        self._guard_texts.add(text)
        if guard.symbols <= self._input_symbols:
            # A size pinned to its value (``s0 == 4``: int(n), len(x), range(n)) implies every
            # other guard on the pinned sizes, which then add nothing.
            pinned = _pinned(self.shape_guards)
            if guard.symbols <= pinned:
                return
            self.shape_guards.append(guard)
            pinned = _pinned([guard]) | pinned
            if _pinned([guard]):
                self.shape_guards = [
                    g for g in self.shape_guards if _pinned([g]) or not g.symbols <= pinned
                ]
            return
        if type(self).host_read is Tracer.host_read:
            raise CaptureError(
                f"{guard.what} at {guard.where} compares a size that depends on the data (it is "
                "only known when the graph runs), so a traced graph cannot check it before "
                "it runs; keep the choice in tensor operations (kiln.where), or use "
                "kiln.compile, which checks it as a value guard"
            )
        from ..functions.operands import constant

        def size_tensor(d: Dim) -> Tensor:
            if isinstance(d, SymDim):
                return self.size_tensor(d)
            return constant(np.asarray([d], dtype=np.int64))

        left, right = size_tensor(guard.left), size_tensor(guard.right)
        if guard.op == "!=":
            predicate = call("Not", call("Equal", left, right))
        else:
            predicate = call(_PREDICATE_OPS[guard.op], left, right)
        self.host_read(predicate, "bool(tensor)")

    def host_read(self, tensor: Tensor, what: str) -> Any:
        raise CaptureError(
            f"{what} needs the tensor's values on the host, which a graph only computes when "
            f"it runs, so it cannot be recorded (at {user_source()}). Keep the computation in "
            "kiln/NumPy operations (e.g. kiln.where instead of an if on a tensor), or move it "
            "outside the traced function."
        )

    def unsupported(self, what: str) -> None:
        raise UnsupportedOperationError(
            f"{what} is not implemented by kiln, so it cannot be recorded into a graph (at "
            f"{user_source()}). Rewrite it with kiln operators (kiln.*, kiln.nn.*), or keep it "
            "outside the traced function."
        )

    def size_tensor(self, size: Any) -> Tensor:
        """A recorded int64 ``(1,)`` tensor computing the symbolic ``size`` from the inputs."""
        cached = self._size_tensors.get(size)
        if cached is not None:
            return cached
        from ..functions.operands import constant

        def const(n: int) -> Tensor:
            return constant(np.asarray([n], dtype=np.int64))

        def atom_tensor(atom: Any) -> Tensor:
            if isinstance(atom, str):
                source = self._symbol_source.get(atom)
                if source is None:
                    raise CaptureError(f"the symbolic size {atom} does not come from any input")
                holder, axis = source
                return call("Shape", holder, start=axis, end=axis + 1)
            kind, a, b = atom
            ta, tb = self._size_or_const(a), self._size_or_const(b)
            if kind == "//":
                return call("Div", ta, tb)
            if kind == "%":
                return call("Mod", ta, tb, fmod=0)
            if kind == "max":
                return call("Max", ta, tb)
            if kind == "min":
                return call("Min", ta, tb)
            return call("Where", call("Equal", ta, const(1)), tb, ta)  # bcast

        total: Tensor | None = None
        for mono, coef in size._terms:
            term: Tensor | None = None if coef == 1 and mono else const(coef)
            for atom, power in mono:
                for _ in range(power):
                    factor = atom_tensor(atom)
                    term = factor if term is None else call("Mul", term, factor)
            assert term is not None
            total = term if total is None else call("Add", total, term)
        assert total is not None
        self._size_tensors[size] = total
        return total

    def _size_or_const(self, d: Dim) -> Tensor:
        from ..functions.operands import constant

        if isinstance(d, SymDim):
            return self.size_tensor(d)
        return constant(np.asarray([d], dtype=np.int64))

    # -- finishing ------------------------------------------------------------------------

    def finish(
        self, name: str, outputs: Sequence[Tensor], output_names: Sequence[str]
    ) -> ModelGraph:
        """The graph whose outputs are ``outputs`` under ``output_names``, then one output
        ``mutated.<input>`` per input the function wrote into, holding its final contents
        (:attr:`write_backs` lists them: the replay copies them back into the caller's arrays).

        An output that is an input, a constant, or already another output is copied through an
        ``Identity`` node, so every graph output is a distinct node output with its own name.
        """
        from ..ops.registry import get_op

        written = self.written_inputs()
        implicit = self.written_implicit()
        graph_inputs = {id(v): i for i, v in enumerate(self.builder.inputs)}
        targets = [
            *(i for i, _ in written),
            *(graph_inputs[id(self.implicit_inputs[k][1])] for k, _ in implicit),
        ]
        self.write_backs = [(p, len(outputs) + k) for k, p in enumerate(targets)]
        outputs = [*outputs, *(t for _, t in written), *(t for _, t in implicit)]
        output_names = [
            *output_names,
            *(f"mutated.{self.input_tensors[i][1].name}" for i, _ in written),
            *(f"mutated.{self.implicit_inputs[k][1].name}" for k, _ in implicit),
        ]
        inputs, constants = self.builder.inputs, self.builder.constants
        passthrough = {id(v) for v in inputs} | {id(c.value) for c in constants}
        scope = NameScope([v.name for v in inputs] + [c.value.name for c in constants])
        renames: dict[int, str] = {}
        out_values: list[Value] = []
        for t, out_name in zip(outputs, output_names):
            value = self.value_of(t)
            if id(value) in renames or id(value) in passthrough:
                holder = Tensor._abstract(value.type, TraceRef(self, value))
                (copy,) = self.apply(get_op("Identity"), [holder], {})
                value = copy._trace.value
            renames[id(value)] = scope.fresh(out_name)
            out_values.append(value)
        graph = _rename(self.builder.graph(name, out_values), renames)
        if self.shape_guards:
            graph = graph.with_shape_guards(self.shape_guards)
        if self.pins:
            from ..optim.specialize import specialize_graph

            recorded = graph
            # Each round pins at least one more input size, so this settles in at most one
            # round per input size (the bound makes a regression an error, not a hang).
            for _ in range(len(self._input_symbols) + 2):
                graph = specialize_graph(recorded, {name: size for name, size, _ in self.pins})
                if not self._implied_pins(graph):
                    break
            else:
                raise KilnError("the sizes pinned by broadcasting did not settle")
        return graph

    def _implied_pins(self, graph: ModelGraph) -> bool:
        """Pin the dynamic sizes a specialized ``graph`` broadcasts against a static size now
        (``t0 - a`` broadcast ``s1`` against ``s0``, one of them checked at run time; pinning
        ``s1`` to 2 made it ``2`` against ``s0``, which infer takes as 2 without a check), as
        :meth:`_note_pins` does at record time; True when it pinned one (specialize again)."""
        before = len(self.pins)
        for node in graph.nodes:
            if ELEMENTWISE not in node.opdef.traits or not node.outputs:
                continue
            shape = node.outputs[0].shape
            for d, target, v, axis in _broadcast_against_static(shape, node.inputs):
                if d.name not in self._input_symbols:
                    # A fresh size (a reshape's computed length) is named anew by each
                    # specialization, so pinning it never settles (fuzz 49:1736: the loop
                    # ran forever); the run's broadcast checks it, as NumPy's does.
                    continue
                how = f"broadcast against size {target} once other sizes were pinned"
                self._pin(d, target, node.opdef, v, axis, how, node.source)
        return len(self.pins) > before


# How many basic views the tracer remembers (an augmented assignment writes its view back
# right after reading it).
_BASIC_VIEWS_KEPT = 16


def _index_key(index: Any) -> Any:
    """``index`` (ints, int slices, tuples of them) as a comparable key, or None."""
    if isinstance(index, tuple):
        keys = tuple(_index_key(e) for e in index)
        return None if any(k is None for k in keys) else keys
    if isinstance(index, (int, np.integer)) and not isinstance(index, (bool, np.bool_)):
        return int(index)
    if isinstance(index, slice):
        bounds = (index.start, index.stop, index.step)
        if all(b is None or (isinstance(b, int) and not isinstance(b, bool)) for b in bounds):
            return ("slice", *bounds)
    return None


def _broadcast_against_static(
    out_shape: Sequence[Dim], inputs: Sequence[Value | None]
) -> Iterator[tuple[SymDim, int, Value, int]]:
    """The named dynamic sizes of an elementwise node's ``inputs`` that its output has as a
    static size (broadcast against it): (size, the static size, input, axis)."""
    for v in inputs:
        if v is None:
            continue
        offset = len(out_shape) - len(v.shape)
        for axis, d in enumerate(v.shape):
            target = out_shape[offset + axis]
            if isinstance(d, SymDim) and d.is_symbol() and isinstance(target, int):
                yield d, target, v, axis


_PREDICATE_OPS = {
    "==": "Equal",
    "<": "Less",
    "<=": "LessOrEqual",
    ">": "Greater",
    ">=": "GreaterOrEqual",
}


def _symbols_of(*dims: Dim) -> frozenset[str]:
    names: set[str] = set()
    for d in dims:
        if isinstance(d, SymDim):
            names.update(d.symbols)
    return frozenset(names)


def _rename(graph: ModelGraph, renames: dict[int, str]) -> ModelGraph:
    """Rebuild the recorded nodes so the output values carry the output names."""
    taken = {v.name for v in graph.values()}
    # An output name may collide with an auto-generated name: move the other value aside.
    scope = NameScope(taken | set(renames.values()))
    mapping: dict[int, Value] = {}
    wanted = set(renames.values())
    for node in graph.nodes:
        for v in node.outputs:
            if id(v) in renames:
                mapping[id(v)] = Value(renames[id(v)], v.type)
            elif v.name in wanted:
                mapping[id(v)] = Value(scope.fresh(v.name), v.type)

    def sub(v: Value | None) -> Value | None:
        return None if v is None else mapping.get(id(v), v)

    nodes = []
    for node in graph.nodes:
        for w in (*node.inputs, *node.outputs):
            if w is not None and id(w) in mapping:
                break
        else:
            if node.name == node.outputs[0].name:
                nodes.append(node)  # nothing renamed here (most nodes): the node as it is
                continue
        outs = tuple(sub(v) for v in node.outputs)
        nodes.append(
            Node(
                node.op,
                tuple(sub(v) for v in node.inputs),
                outs,  # type: ignore[arg-type]
                node.attrs,
                outs[0].name,  # type: ignore[union-attr]
                node.source,
            )
        )
    outputs = [v for v in (sub(v) for v in graph.output_values) if v is not None]
    return graph.with_body(nodes, outputs)


def _check_kernel(
    op: OpDef, types: Sequence[TensorType], arrays: Sequence[np.ndarray], static: bool = False
) -> None:
    """Raise when a kernel's result does not have the type ``infer`` gave it (``static``: no
    output size is symbolic, so the shapes compare as tuples of ints)."""
    for i, (t, a) in enumerate(zip(types, arrays)):
        if static and t.shape == a.shape and t.dtype == a.dtype:
            continue  # the common case, in one comparison
        if (
            t.dtype != a.dtype
            or len(t.shape) != a.ndim
            or any(isinstance(d, int) and d != n for d, n in zip(t.shape, a.shape))
        ):
            raise KilnError(
                f"internal error: {op.name} output {i} was inferred as {t} but its kernel "
                f"produced {a.dtype}{format_shape(a.shape)}; please report this"
            )


# -- planning the inputs of a trace ----------------------------------------------------------


@dataclass(frozen=True)
class InputSlot:
    """One tensor leaf of a traced call: its flat index, name and symbolic type."""

    index: int
    name: str
    type: TensorType


def plan_inputs(
    paths: Sequence[tuple[Any, ...]],
    leaves: Sequence[Any],
    signature: Sequence[TensorSpec] | None,
    dynamic_axes: Mapping[Any, Any] | None,
    fn: Callable[..., Any] | None,
    *,
    all_dynamic: bool = False,
    extra_dynamic: Mapping[int, Mapping[int, str | None]] | None = None,
) -> list[InputSlot]:
    """Names and symbolic types for the tensor leaves among ``leaves``.

    ``paths`` are the optree key paths of ``(args, kwargs)``; names derive from the function's
    parameter names (``x``, ``params.w``, ``batch.0``) unless a ``TensorSpec`` names them.
    ``all_dynamic`` makes every axis dynamic; ``extra_dynamic`` (by tensor index, then axis)
    adds dynamic axes after ``dynamic_axes``, naming a size where a name is given (equal names
    are one size).
    """
    param_names = _parameter_names(fn)
    tensor_positions = [i for i, leaf in enumerate(leaves) if _is_tensor_leaf(leaf)]
    if signature is not None and len(signature) != len(tensor_positions):
        raise InputMismatchError(
            f"signature has {len(signature)} TensorSpec(s) but the call has "
            f"{len(tensor_positions)} tensor input(s)"
        )
    scope = NameScope()
    slots: list[InputSlot] = []
    anonymous = _anonymous_symbols(signature, dynamic_axes)
    for axes in (extra_dynamic or {}).values():
        anonymous.taken.update(n for n in axes.values() if n)
    for k, i in enumerate(tensor_positions):
        leaf = leaves[i]
        spec = signature[k] if signature is not None else None
        derived = _derive_name(paths[i], param_names)
        name = scope.fresh(spec.name if spec is not None and spec.name else derived)
        if leaf is None:  # signature-only trace
            assert spec is not None
            dtype, given_shape = spec.dtype, None
        else:
            dtype = leaf.dtype
            given_shape = tuple(leaf.shape)
        shape = _symbolic_shape(name, k, spec, given_shape, dynamic_axes, anonymous, all_dynamic)
        for axis, size_name in (extra_dynamic or {}).get(k, {}).items():
            shape = (
                shape[:axis]
                + (symbol(size_name) if size_name else anonymous.next(),)
                + shape[axis + 1 :]
            )
        if spec is not None and leaf is not None:
            _check_fits(name, spec, dtype, given_shape)
        slots.append(InputSlot(i, name, TensorType(np.dtype(dtype), shape)))
    statics = [
        _derive_name(p, param_names) for p, x in zip(paths, leaves) if not _is_tensor_leaf(x)
    ]
    check_dynamic_axes_refer(dynamic_axes, [(s.name, s.type.ndim) for s in slots], statics)
    _check_symbol_consistency(slots, [leaves[s.index] for s in slots])
    return slots


def _is_tensor_leaf(leaf: Any) -> bool:
    return leaf is None or isinstance(leaf, (Tensor, np.ndarray))


def _parameter_names(fn: Callable[..., Any] | None) -> list[str]:
    if fn is None:
        return []
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return []
    return [
        p.name
        for p in params
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]


def _derive_name(path: tuple[Any, ...], param_names: Sequence[str]) -> str:
    if not path:
        return "input"
    head, rest = path[0], path[1:]
    if head == 0 and rest:  # positional argument
        position, rest = rest[0], rest[1:]
        first = param_names[position] if position < len(param_names) else f"args.{position}"
    elif head == 1 and rest:  # keyword argument
        first, rest = str(rest[0]), rest[1:]
    else:
        first = str(head)
    return ".".join([first, *(str(k) for k in rest)])


class _Anonymous:
    """Hands out s0, s1, ... avoiding the user's own size names."""

    def __init__(self, taken: set[str]) -> None:
        self.taken = taken
        self.n = 0

    def next(self) -> SymDim:
        while f"s{self.n}" in self.taken:
            self.n += 1
        name = f"s{self.n}"
        self.n += 1
        return symbol(name)


def _anonymous_symbols(
    signature: Sequence[TensorSpec] | None, dynamic_axes: Mapping[Any, Any] | None
) -> _Anonymous:
    taken: set[str] = set()
    for spec in signature or ():
        taken.update(d for d in spec.shape if isinstance(d, str))
    for axes in (dynamic_axes or {}).values():  # names given for dynamic axes
        if isinstance(axes, Mapping):
            taken.update(str(n) for n in axes.values())
    return _Anonymous(taken)


def _symbolic_shape(
    name: str,
    flat_index: int,
    spec: TensorSpec | None,
    given: tuple[int, ...] | None,
    dynamic_axes: Mapping[Any, Any] | None,
    anonymous: _Anonymous,
    all_dynamic: bool,
) -> tuple[Dim, ...]:
    if spec is not None:
        shape: list[Dim] = []
        for d in spec.shape:
            if d is None:
                shape.append(anonymous.next())
            elif isinstance(d, str):
                shape.append(symbol(d))
            else:
                shape.append(d)  # type: ignore[arg-type]
    else:
        assert given is not None
        shape = [anonymous.next() if all_dynamic else d for d in given]
    axes = None
    if dynamic_axes:
        axes = dynamic_axes.get(name, dynamic_axes.get(flat_index))
    if axes is not None:
        named = axes if isinstance(axes, Mapping) else {a: None for a in axes}
        for axis, size_name in named.items():
            if not isinstance(axis, int) or not -len(shape) <= axis < len(shape):
                raise InputMismatchError(
                    f"dynamic_axes: input {name!r} has rank {len(shape)}, so axis {axis!r} "
                    "does not exist"
                )
            shape[axis] = symbol(str(size_name)) if size_name is not None else anonymous.next()
    return tuple(shape)


def _check_fits(name: str, spec: TensorSpec, dtype: Any, given: tuple[int, ...] | None) -> None:
    if np.dtype(dtype) != spec.dtype:
        raise InputMismatchError(
            f"input {name!r}: the signature says dtype {spec.dtype}, "
            f"the call gives {np.dtype(dtype)}"
        )
    assert given is not None
    if len(given) != len(spec.shape):
        raise InputMismatchError(
            f"input {name!r}: the signature says rank {len(spec.shape)} "
            f"{format_shape(spec.shape)}, the call gives rank {len(given)} {format_shape(given)}"
        )
    for axis, (want, got) in enumerate(zip(spec.shape, given)):
        if isinstance(want, int) and want != got:
            raise InputMismatchError(
                f"input {name!r} axis {axis}: the signature says size {want}, the call gives {got}"
            )


def _check_symbol_consistency(slots: Sequence[InputSlot], leaves: Sequence[Any]) -> None:
    seen: dict[str, tuple[int, str, int]] = {}
    for slot, leaf in zip(slots, leaves):
        if leaf is None:
            continue
        for axis, d in enumerate(slot.type.shape):
            if isinstance(d, SymDim) and d.is_symbol():
                size = leaf.shape[axis]
                prior = seen.setdefault(d.name, (size, slot.name, axis))
                if prior[0] != size:
                    raise InputMismatchError(
                        f"input {slot.name!r} axis {axis} has size {size}, but the symbolic "
                        f"size {d.name} is {prior[0]} at input {prior[1]!r} axis {prior[2]}"
                    )


def record(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    slots: Sequence[InputSlot],
    leaves: Sequence[Any],
    rebuild: Callable[[list[Any]], tuple[tuple[Any, ...], dict[str, Any]]],
    tracer: Tracer,
    standins: Mapping[int, Callable[[Tensor], Any]] | None = None,
) -> Any:
    """Call ``fn`` with recording tensors in place of the tensor leaves; return its result.
    ``standins`` maps a leaf's flat index to what the function receives instead of its
    recording tensor (a float argument made an input: :mod:`kiln.capture.scalars`)."""
    new_leaves = list(leaves)
    for slot in slots:
        leaf = leaves[slot.index]
        data = None if leaf is None else (leaf._data if isinstance(leaf, Tensor) else leaf)
        t = tracer.add_input(slot.name, slot.type, data)
        make = None if standins is None else standins.get(slot.index)
        if make is None and type(leaf) is np.ndarray and leaf.ndim == 0:
            # a 0-d array argument, not the NumPy scalar a 0-d value usually is (a scalar
            # argument made an input has a stand-in)
            t._array = True
        new_leaves[slot.index] = t if make is None else make(t)
    call_args, call_kwargs = rebuild(new_leaves)
    # np.zeros, np.arange, np.array, ... called by the function create recording tensors
    with handler_scope(tracer), guard_scope(tracer), numpy_creation(), old_objects_frozen():
        return fn(*call_args, **call_kwargs)


# Every this many recorded operators, the objects made since are frozen too (refreeze).
_REFREEZE_MASK = (1 << 13) - 1
_freeze_lock = threading.Lock()
_freeze_depth = 0  # recordings under way (any thread)
_froze = False  # whether the outermost one froze the objects (and unfreezes them)


def refreeze() -> None:
    """Freeze the objects made since the recording under way froze the older ones (its
    nodes, values and tensors, all alive until it ends): without it the collector's full
    passes walk them again and again, and a 100k-node recording cost a third more per node
    than a 10k one. A no-op unless :func:`old_objects_frozen` froze (and will unfreeze)."""
    with _freeze_lock:
        if _froze:
            gc.freeze()


@contextlib.contextmanager
def old_objects_frozen() -> Iterator[None]:
    """Keep the objects that exist when the block starts out of the garbage collector's
    passes until it ends (``gc.freeze``; ``gc.unfreeze`` after). A recording allocates a few
    objects per op, so the collector runs a full pass now and then, and a full pass walks
    every object of the process: with jax or onnxruntime loaded one took 0.1-0.15 s, a
    fifth of a 10k-node recording. The objects the block makes are collected as usual. Not
    done (a no-op) when the collector is disabled or something else froze objects already
    (an application that freezes before forking keeps its frozen set)."""
    global _freeze_depth, _froze
    with _freeze_lock:
        if _freeze_depth == 0:
            _froze = gc.isenabled() and gc.get_freeze_count() == 0
            if _froze:
                gc.freeze()
        _freeze_depth += 1
    try:
        yield
    finally:
        with _freeze_lock:
            _freeze_depth -= 1
            if _freeze_depth == 0 and _froze:
                _froze = False
                gc.unfreeze()
