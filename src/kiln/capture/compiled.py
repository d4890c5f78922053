"""``kiln.compile`` and :class:`CompiledFunction`: capture once, replay the graph after.

The first call with a new *structure key* runs the target eagerly on recording tensors, which
serves the call's result and records the graph at the same time. Later calls with that key run
the finalized graph; the graph's own input check is the shape guard. A call whose shapes drift
from a static capture is served eagerly while it records again with the drifted axes dynamic.
A small budget of re-captures protects the user: past it the function serves eagerly until
:meth:`CompiledFunction.reset`.

The structure key is the input pytree structure, the static (non-tensor) leaves' values, and
each tensor leaf's dtype and rank (and its shape too with ``dynamic=False``). Everything that can
be decided at capture time is: the replay path flattens, builds the key, looks it up, checks the
guard, runs the plan and unflattens.
"""

from __future__ import annotations

import enum
import functools
import itertools
import threading
import warnings
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import optree

from ..device import PlaceLike, as_place
from ..errors import CaptureError, CaptureWarning, InputMismatchError, RecaptureWarning, StateError
from ..ir.graph import ModelGraph, Value
from ..ops.dispatch import current_handler
from ..source import user_source, user_stacklevel
from ..spec import TensorSpec
from ..symbolic import SymDim
from ..tensor import Tensor
from ..tree import flatten_with_paths, path_name, unflatten
from .trace import Tracer, TraceRef, plan_inputs, record
from .traced import _Outputs, output_leaves, same_static

__all__ = ["CompiledFunction", "State", "CaptureEvent", "CacheInfo", "compile", "explain"]

MAX_ENTRIES = 8  # captures kept per function, least recently used dropped first
RECAPTURE_BUDGET = 8  # captures after the first before the function falls back to eager

# Host conversions of one value, which a capture turns into value guards (fullgraph=False).
_SCALAR_READS = frozenset(
    {"bool(tensor)", "float(tensor)", "int(tensor)", "operator.index(tensor)", "Tensor.item()"}
)


class State(enum.Enum):
    """Where the function is in its capture lifecycle: Pending (no graph yet), Compiled (a
    captured graph serves shape-matching calls), Fallback (the function serves eagerly and will
    not re-capture on its own)."""

    Pending = "pending"
    Compiled = "compiled"
    Fallback = "fallback"


@dataclass(frozen=True)
class CaptureEvent:
    """One capture or fall back, machine-readable.

    Attributes:
        call: The call number (1 is the first call) that caused it.
        kind: ``first``, ``structure``, ``static value``, ``dtype``, ``rank``, ``new shape``,
            ``shape drift``, ``value guard``, ``abandoned`` (served eagerly), ``pinned`` (an
            operation fixed a dynamic size), ``budget``, ``take_graph`` or ``reset``.
        path: The input path or name concerned, when there is one.
        old: The value before (a size, a dtype, a static value), when there is one.
        new: The value now.
        axes: The ``(input name, axis)`` pairs made dynamic by this capture.
        message: The same, for people.
    """

    call: int
    kind: str
    path: str | None = None
    old: Any = None
    new: Any = None
    axes: tuple[tuple[str, int], ...] = ()
    message: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "call": self.call,
            "kind": self.kind,
            "path": self.path,
            "old": _plain(self.old),
            "new": _plain(self.new),
            "axes": [list(a) for a in self.axes],
            "message": self.message,
        }


def _plain(x: Any) -> Any:
    if isinstance(x, np.dtype):
        return x.name
    if isinstance(x, (int, float, str, bool)) or x is None:
        return x
    return repr(x)


class CacheInfo(NamedTuple):
    """What a compiled function holds: captures kept, their bytes, and its counters."""

    entries: int
    max_entries: int
    bytes: int
    captures: int
    recaptures: int
    state: State


@dataclass
class _Entry:
    """One capture: the finalized graph for a structure key, or the reason it serves eagerly."""

    graph: ModelGraph | None
    treespec: Any
    outputs: _Outputs
    input_names: tuple[str, ...]
    input_shapes: tuple[tuple[int | SymDim, ...], ...]
    tensor_positions: tuple[int, ...]
    static_leaves: tuple[Any, ...]
    dtypes: tuple[np.dtype, ...]
    drift_axes: dict[tuple[int, int], str] = field(default_factory=dict)
    guards: tuple[tuple[int, np.ndarray, str], ...] = ()  # (output index, expected, where)
    n_outputs: int = 0
    eager_reason: str | None = None
    run: Callable[[list[np.ndarray]], list[np.ndarray]] | None = None
    # For static graphs: the input shapes, and the plan's run without its input check.
    static_shapes: tuple[tuple[int, ...], ...] | None = None
    run_unchecked: Callable[[list[np.ndarray]], list[np.ndarray]] | None = None
    single_output: bool = False  # the result is exactly one tensor
    container: type | None = None  # list or tuple when the result is a flat one of tensors
    pins: tuple[str, ...] = ()  # why a dynamic size was fixed to one value
    nbytes: int = 0


class _CaptureTracer(Tracer):
    """A tracer that turns scalar host reads into value guards and, unless ``fullgraph``,
    abandons the capture (instead of failing the call) on anything it cannot record."""

    def __init__(self, fullgraph: bool) -> None:
        super().__init__(compute=True)
        self.fullgraph = fullgraph
        self.guards: list[tuple[Value, np.ndarray, str]] = []
        self.abandoned: str | None = None

    def host_read(self, tensor: Tensor, what: str) -> Any:
        data = tensor._data
        assert data is not None  # a compile capture always has values
        if self.fullgraph:
            raise CaptureError(
                f"{what} at {user_source()} needs the tensor's value on the host, which "
                "fullgraph=True does not allow: keep the computation in tensor operations "
                "(kiln.where for a branch), or use fullgraph=False to guard on the value"
            )
        if what in _SCALAR_READS and self.abandoned is None:
            self.guards.append(
                (self.value_of(tensor), np.array(data), f"{what} at {user_source()}")
            )
        elif self.abandoned is None:
            self.abandoned = f"{what} at {user_source()}"
        return data

    def unsupported(self, what: str) -> None:
        if self.fullgraph:
            raise CaptureError(
                f"{what} at {user_source()} is not implemented by kiln, so it cannot be "
                "recorded; rewrite it with kiln operators or use fullgraph=False"
            )
        if self.abandoned is None:
            self.abandoned = f"{what} (not implemented by kiln) at {user_source()}"


class CompiledFunction:
    """A callable whose first call serves the eager result and records the graph; later calls
    with the same input structure and matching shapes run the graph without calling Python.

    Made by :func:`compile`. See the module docstring for the structure key, the shape guard,
    re-capture and the budget.

    Example:
        >>> import kiln, numpy as np
        >>> f = kiln.compile(lambda x: np.tanh(x) * 2)
        >>> f.state
        <State.Pending: 'pending'>
        >>> _ = f(np.ones(3, np.float32))
        >>> f.state, f.recapture_count
        (<State.Compiled: 'compiled'>, 0)
    """

    def __init__(
        self,
        target: Callable[..., Any],
        *,
        signature: Sequence[TensorSpec] = (),
        dynamic: bool | None = None,
        fullgraph: bool = False,
        optimize: bool | None = None,
        specialize: bool | None = None,
        place: PlaceLike = None,
        dynamic_axes: Mapping[Any, Any] | None = None,
        output_names: Sequence[str] | None = None,
        graph_name: str | None = None,
    ) -> None:
        if not callable(target):
            raise TypeError(f"kiln.compile needs a callable, got {type(target).__name__}")
        if dynamic not in (None, True, False):
            raise TypeError(f"dynamic must be None, True or False, got {dynamic!r}")
        for spec in signature:
            if not isinstance(spec, TensorSpec):
                raise TypeError(f"signature entries must be kiln.TensorSpec, got {spec!r}")
        self._target = target
        self._signature = tuple(signature) or None
        self._dynamic = dynamic
        self._fullgraph = fullgraph
        self._optimize = optimize is not False
        self._specialize = specialize
        self._place = None if place is None else as_place(place)
        self._dynamic_axes = dynamic_axes
        self._output_names = None if output_names is None else tuple(output_names)
        self._graph_name: str = graph_name or str(getattr(target, "__name__", "compiled"))
        if self._graph_name == "<lambda>":
            self._graph_name = "lambda"
        functools.update_wrapper(self, target, updated=())
        self._lock = threading.RLock()
        self._calls = itertools.count(1)
        self._history: list[CaptureEvent] = []
        self._drift_names = itertools.count()
        self._reset_state()

    def _reset_state(self) -> None:
        self._entries: OrderedDict[Hashable, _Entry] = OrderedDict()
        # For calls with positional arrays only: their (dtype, rank) tuple -> the entry's key.
        self._flat: dict[Hashable, Hashable] = {}
        self._capturing: set[Hashable] = set()
        self._current: _Entry | None = None
        self._captures = 0
        self._recaptures = 0
        self._fallback: str | None = None  # why every call serves eagerly, when it does
        self._warned: set[str] = set()

    # -- the public surface ---------------------------------------------------------------

    @property
    def state(self) -> State:
        """Where the current capture is in its lifecycle: Pending (nothing captured yet),
        Compiled (the graph serves matching calls) or Fallback (serving eagerly until
        :meth:`reset`)."""
        if self._fallback is not None:
            return State.Fallback
        current = self._current
        if current is None:
            return State.Pending
        return State.Compiled if current.graph is not None else State.Fallback

    @property
    def recapture_count(self) -> int:
        """How many times a changed input structure, a changed static value, or drifted
        shapes forced a new capture."""
        return self._recaptures

    @property
    def input_names(self) -> list[str]:
        """The graph input names of the current capture, in flattening order (empty before
        the first capture)."""
        current = self._current
        return [] if current is None else list(current.input_names)

    @property
    def history(self) -> list[CaptureEvent]:
        """Every capture and fall back so far, oldest first."""
        return list(self._history)

    @property
    def captures(self) -> list[CaptureEvent]:
        """The events that made a capture (first and re-captures)."""
        kinds = {"budget", "abandoned", "take_graph", "reset", "pinned"}
        return [e for e in self._history if e.kind not in kinds]

    def cache_info(self) -> CacheInfo:
        """Entries and bytes held, and the capture counters."""
        with self._lock:
            entries = list(self._entries.values())
        return CacheInfo(
            entries=len(entries),
            max_entries=MAX_ENTRIES,
            bytes=sum(e.nbytes for e in entries),
            captures=self._captures,
            recaptures=self._recaptures,
            state=self.state,
        )

    def reset(self) -> None:
        """Drop every capture and the re-capture count; the next call captures again."""
        with self._lock:
            self._reset_state()
            self._history.append(CaptureEvent(0, "reset", message="reset(): captures dropped"))

    def take_graph(self) -> ModelGraph:
        """Take the captured graph out of the current capture (State.Compiled only); the
        function then serves eagerly until :meth:`reset`."""
        with self._lock:
            state = self.state
            if state is State.Pending:
                raise StateError(
                    "take_graph(): nothing has been captured yet; call the function once first"
                )
            if state is State.Fallback:
                why = self._fallback or (self._current.eager_reason if self._current else None)
                raise StateError(
                    f"take_graph(): the function is serving eagerly ({why}), so there is no "
                    "graph to take; call reset() and call the function again"
                )
            assert self._current is not None and self._current.graph is not None
            graph = self._current.graph
            self._entries.clear()
            self._current = None
            self._fallback = "its graph was taken with take_graph()"
            self._history.append(
                CaptureEvent(0, "take_graph", message="take_graph(): serving eagerly until reset()")
            )
            return graph

    # -- calls ----------------------------------------------------------------------------

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        call = next(self._calls)
        if self._fallback is not None or current_handler() is not None:
            # Falling back, or called inside another trace: run the target (the outer trace
            # then records its operators inline).
            return self._eager(args, kwargs)
        if not kwargs and self._flat:
            # The common case, positional arrays only: the key needs no pytree flattening.
            flat = _flat_call(args, self._dynamic is False)
            if flat is not None:
                arrays, flat_key = flat
                key = self._flat.get(flat_key)
                entry = self._entries.get(key) if key is not None else None
                if entry is not None and entry.run is not None:
                    return self._replay(call, key, entry, arrays, args, kwargs)
        tree: Any = (args, kwargs)
        leaves, treespec = optree.tree_flatten(tree)
        key = self._key(treespec, leaves, args, kwargs)
        entry = self._entries.get(key)
        if entry is None:
            return self._miss(call, key, leaves, treespec, args, kwargs)
        if entry.run is None:
            return self._eager(args, kwargs)
        arrays = [
            leaves[i]._data if type(leaves[i]) is Tensor else leaves[i]
            for i in entry.tensor_positions
        ]
        return self._replay(call, key, entry, arrays, args, kwargs)

    def _replay(
        self,
        call: int,
        key: Hashable,
        entry: _Entry,
        arrays: list[np.ndarray],
        args: Any,
        kwargs: Any,
    ) -> Any:
        static_shapes = entry.static_shapes
        if static_shapes is not None:
            # A static graph: the key already matched dtypes and ranks, so the guard is the
            # shapes alone; the full check runs only to explain a miss.
            for array, shape in zip(arrays, static_shapes):
                if array.shape != shape:
                    break
            else:
                outs = entry.run_unchecked(arrays)  # type: ignore[misc]
                if not entry.guards and entry.single_output:
                    self._current = entry
                    return Tensor._wrap(outs[0])
                return self._finish_replay(call, key, entry, outs, args, kwargs)
        try:
            outs = entry.run(arrays)  # type: ignore[misc]
        except InputMismatchError as mismatch:
            tree: Any = (args, kwargs)
            leaves, treespec = optree.tree_flatten(tree)
            return self._drift(call, key, entry, mismatch, leaves, treespec, args, kwargs)
        return self._finish_replay(call, key, entry, outs, args, kwargs)

    def _finish_replay(
        self,
        call: int,
        key: Hashable,
        entry: _Entry,
        outs: list[np.ndarray],
        args: Any,
        kwargs: Any,
    ) -> Any:
        for index, expected, where in entry.guards:
            if not np.array_equal(outs[index], expected):
                tree: Any = (args, kwargs)
                leaves, treespec = optree.tree_flatten(tree)
                return self._guard_miss(
                    call, key, entry, where, expected, outs[index], leaves, treespec, args, kwargs
                )
        self._current = entry
        container = entry.container
        if container is not None:  # a flat list or tuple of tensors: no unflattening
            return container([Tensor._wrap(a) for a in outs[: entry.n_outputs]])
        return entry.outputs.rebuild([Tensor._wrap(a) for a in outs[: entry.n_outputs]])

    def _key(self, treespec: Any, leaves: list[Any], args: Any, kwargs: Any) -> Hashable:
        with_shapes = self._dynamic is False
        parts: list[Any] = [treespec]
        for leaf in leaves:
            cls = type(leaf)
            if cls is Tensor or cls is np.ndarray:
                data = leaf._data if cls is Tensor else leaf
                parts.append((data.dtype, data.shape if with_shapes else data.ndim))
            else:
                parts.append((cls, leaf))
        key = tuple(parts)
        try:
            hash(key)  # tuples cache nothing: the lookup hashes again, but this names the leaf
        except TypeError:
            self._unhashable(args, kwargs)
        return key

    def _unhashable(self, args: Any, kwargs: Any) -> None:
        paths, leaves, _ = flatten_with_paths((args, kwargs))
        for path, leaf in zip(paths, leaves):
            if isinstance(leaf, (Tensor, np.ndarray)):
                continue
            try:
                hash(leaf)
            except TypeError:
                raise TypeError(
                    f"{self._graph_name}: the static input {_input_path(path, self._target)!r} "
                    f"is a {type(leaf).__name__}, which is not hashable, so it cannot be part of "
                    "the capture key; pass it as a tensor, or as a tuple / hashable value"
                ) from None
        raise TypeError(f"{self._graph_name}: the input structure is not hashable")

    def _eager(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        def lift(leaf: Any) -> Any:
            return Tensor._wrap(leaf) if isinstance(leaf, np.ndarray) else leaf

        tree: Any = (args, kwargs)
        lifted_args, lifted_kwargs = optree.tree_map(lift, tree)
        return self._target(*lifted_args, **lifted_kwargs)

    # -- capture decisions ----------------------------------------------------------------

    def _miss(
        self, call: int, key: Hashable, leaves: list[Any], treespec: Any, args: Any, kwargs: Any
    ) -> Any:
        previous = self._current
        if previous is None and not self._captures:
            return self._capture(call, key, leaves, args, kwargs, CaptureEvent(call, "first"))
        if self._signature is not None:
            tensors = sum(1 for x in leaves if isinstance(x, (Tensor, np.ndarray)))
            if tensors != len(self._signature):
                raise InputMismatchError(
                    f"{self._graph_name}: the signature has {len(self._signature)} "
                    f"TensorSpec(s), the call has {tensors} tensor input(s)"
                )
        previous = self._closest_entry(treespec, leaves) or previous
        event = self._describe_change(call, previous, leaves, treespec, args, kwargs)
        return self._recapture(call, key, leaves, args, kwargs, event)

    def _closest_entry(self, treespec: Any, leaves: list[Any]) -> _Entry | None:
        """The most recent capture of the same structure, preferring one with equal dtypes,
        so the change reported is the smallest one."""
        same = [e for e in reversed(self._entries.values()) if e.treespec == treespec]
        for entry in same:
            given = [leaves[i].dtype for i in entry.tensor_positions]
            if given == list(entry.dtypes):
                return entry
        return same[0] if same else None

    def _describe_change(
        self,
        call: int,
        previous: _Entry | None,
        leaves: list[Any],
        treespec: Any,
        args: Any,
        kwargs: Any,
    ) -> CaptureEvent:
        if previous is None:
            return CaptureEvent(call, "structure", message="a new input structure")
        paths, _, spec = flatten_with_paths((args, kwargs))
        positions = [i for i, x in enumerate(leaves) if isinstance(x, (Tensor, np.ndarray))]
        statics = tuple(x for i, x in enumerate(leaves) if i not in set(positions))
        if treespec != previous.treespec or tuple(positions) != previous.tensor_positions:
            return CaptureEvent(call, "structure", message=f"the input structure changed to {spec}")
        static_paths = [paths[i] for i in range(len(leaves)) if i not in set(positions)]
        for path, old, new in zip(static_paths, previous.static_leaves, statics):
            if not same_static(old, new):
                name = _input_path(path, self._target)
                return CaptureEvent(
                    call,
                    "static value",
                    name,
                    old,
                    new,
                    message=f"static input {name!r} changed from {old!r} to {new!r}",
                )
        for k, i in enumerate(positions):
            leaf = leaves[i]
            name = previous.input_names[k] if k < len(previous.input_names) else path_name(paths[i])
            if leaf.dtype != previous.dtypes[k]:
                return CaptureEvent(
                    call,
                    "dtype",
                    name,
                    previous.dtypes[k],
                    leaf.dtype,
                    message=f"input {name!r} dtype changed from {previous.dtypes[k]} to "
                    f"{leaf.dtype}",
                )
            if leaf.ndim != len(previous.input_shapes[k]):
                return CaptureEvent(
                    call,
                    "rank",
                    name,
                    len(previous.input_shapes[k]),
                    leaf.ndim,
                    message=f"input {name!r} rank changed from {len(previous.input_shapes[k])} "
                    f"to {leaf.ndim}",
                )
            if tuple(leaf.shape) != tuple(previous.input_shapes[k]):
                return CaptureEvent(
                    call,
                    "new shape",
                    name,
                    previous.input_shapes[k],
                    tuple(leaf.shape),
                    message=f"input {name!r} shape changed from {previous.input_shapes[k]} to "
                    f"{tuple(leaf.shape)} (dynamic=False: every shape is its own capture)",
                )
        return CaptureEvent(call, "structure", message=f"the input structure is now {spec}")

    def _drift(
        self,
        call: int,
        key: Hashable,
        entry: _Entry,
        mismatch: InputMismatchError,
        leaves: list[Any],
        treespec: Any,
        args: Any,
        kwargs: Any,
    ) -> Any:
        if self._signature is not None:
            raise mismatch
        arrays = [
            np.asarray(leaves[i]._data if isinstance(leaves[i], Tensor) else leaves[i])
            for i in entry.tensor_positions
        ]
        drift = dict(entry.drift_axes)
        made: list[tuple[str, int]] = []
        groups: dict[tuple[int, int], str] = {}
        first: tuple[str, int, int, int] | None = None
        for k, (array, shape) in enumerate(zip(arrays, entry.input_shapes)):
            for axis, d in enumerate(shape):
                size = array.shape[axis]
                if isinstance(d, int) and d != size:
                    group = groups.get((d, size))
                    if group is None:
                        group = groups[(d, size)] = f"d{next(self._drift_names)}"
                    drift[(k, axis)] = group
                    made.append((entry.input_names[k], axis))
                    if first is None:
                        first = (entry.input_names[k], axis, d, size)
        # Drifted axes that shared a size name but now differ get a name each.
        by_name: dict[str, dict[int, list[tuple[int, int]]]] = {}
        for (k, axis), name in drift.items():
            by_name.setdefault(name, {}).setdefault(arrays[k].shape[axis], []).append((k, axis))
        split = False
        for sizes in by_name.values():
            if len(sizes) > 1:
                split = True
                for members in list(sizes.values())[1:]:
                    fresh = f"d{next(self._drift_names)}"
                    for member in members:
                        drift[member] = fresh
        if not made and not split:
            raise mismatch  # a size the user declared (dynamic_axes names) was broken
        if first is not None:
            name, axis, old, new = first
            message = (
                f"input {name!r} axis {axis} changed size from {old} to {new}; axes made "
                f"dynamic: {made}"
            )
            event = CaptureEvent(call, "shape drift", name, old, new, tuple(made), message)
        else:
            event = CaptureEvent(
                call,
                "shape drift",
                message="dynamic sizes that were equal now differ; they get a size each",
            )
        return self._recapture(call, key, leaves, args, kwargs, event, drift)

    def _guard_miss(
        self,
        call: int,
        key: Hashable,
        entry: _Entry,
        where: str,
        expected: np.ndarray,
        got: np.ndarray,
        leaves: list[Any],
        treespec: Any,
        args: Any,
        kwargs: Any,
    ) -> Any:
        event = CaptureEvent(
            call,
            "value guard",
            where,
            expected.tolist(),
            np.asarray(got).tolist(),
            message=f"the value read by {where} changed from {expected.tolist()} to "
            f"{np.asarray(got).tolist()}",
        )
        return self._recapture(call, key, leaves, args, kwargs, event, dict(entry.drift_axes))

    def _recapture(
        self,
        call: int,
        key: Hashable,
        leaves: list[Any],
        args: Any,
        kwargs: Any,
        event: CaptureEvent,
        drift: dict[tuple[int, int], str] | None = None,
    ) -> Any:
        with self._lock:
            if self._recaptures >= RECAPTURE_BUDGET:
                self._fall_back(call, event)
                return self._eager(args, kwargs)
        return self._capture(call, key, leaves, args, kwargs, event, drift or {})

    def _fall_back(self, call: int, last: CaptureEvent) -> None:
        recent = [
            e.message or e.kind for e in self._history[-RECAPTURE_BUDGET:] if e.kind != "first"
        ]
        message = (
            f"kiln.compile({self._graph_name}) re-captured {self._recaptures} times, its budget, "
            f"and now serves every call eagerly until reset(). Last change: {last.message}. "
            "To avoid this, mark changing sizes dynamic (dynamic=True, dynamic_axes={...}, or a "
            "signature of kiln.TensorSpec with None/str sizes), and pass changing Python values "
            "as tensors. Recent causes: " + "; ".join(recent)
        )
        self._fallback = f"the re-capture budget of {RECAPTURE_BUDGET} is spent"
        self._history.append(
            CaptureEvent(call, "budget", last.path, last.old, last.new, (), message)
        )
        warnings.warn(message, RecaptureWarning, stacklevel=user_stacklevel())

    # -- capturing ------------------------------------------------------------------------

    def _capture(
        self,
        call: int,
        key: Hashable,
        leaves: list[Any],
        args: Any,
        kwargs: Any,
        event: CaptureEvent,
        drift: dict[tuple[int, int], str] | None = None,
    ) -> Any:
        with self._lock:
            if key in self._capturing:  # another thread is capturing this key: serve eagerly
                return self._eager(args, kwargs)
            self._capturing.add(key)
        try:
            result, entry = self._record(key, leaves, args, kwargs, drift or {})
        finally:
            with self._lock:
                self._capturing.discard(key)
        with self._lock:
            if event.kind != "first":
                self._recaptures += 1
            self._captures += 1
            self._entries[key] = entry
            self._entries.move_to_end(key)
            flat = None if kwargs else _flat_call(args, self._dynamic is False)
            if flat is not None:
                self._flat[flat[1]] = key
            while len(self._entries) > MAX_ENTRIES:
                self._entries.popitem(last=False)
            self._current = entry
            axes = tuple((entry.input_names[k], a) for (k, a) in sorted(entry.drift_axes))
            if event.kind == "first":
                event = CaptureEvent(call, "first", axes=axes, message="first call")
            self._history.append(event)
            for message in entry.pins:
                self._history.append(CaptureEvent(call, "pinned", message=message))
            if entry.eager_reason is not None:
                message = (
                    f"kiln.compile({self._graph_name}): {entry.eager_reason} cannot be "
                    "recorded into a graph, so calls with this input structure are served "
                    "eagerly (use fullgraph=True to make this an error)"
                )
                self._history.append(CaptureEvent(call, "abandoned", message=message))
                if message not in self._warned:
                    self._warned.add(message)
                    warnings.warn(message, CaptureWarning, stacklevel=user_stacklevel())
        return result

    def _record(
        self,
        key: Hashable,
        leaves: list[Any],
        args: Any,
        kwargs: Any,
        drift: dict[tuple[int, int], str],
    ) -> tuple[Any, _Entry]:
        tree: Any = (args, kwargs)
        paths, _, in_spec = flatten_with_paths(tree)
        extra: dict[int, dict[int, str | None]] = {}
        for (k, axis), name in drift.items():
            extra.setdefault(k, {})[axis] = name
        slots = plan_inputs(
            paths,
            leaves,
            self._signature,
            self._dynamic_axes,
            self._target,
            all_dynamic=self._dynamic is True,
            extra_dynamic=extra,
        )
        tracer = _CaptureTracer(self._fullgraph)

        def rebuild(new_leaves: list[Any]) -> Any:
            return unflatten(in_spec, new_leaves)

        result = record(self._target, args, kwargs, slots, leaves, rebuild, tracer)
        tensors, names, outputs = output_leaves(result)
        served = outputs.rebuild([Tensor._wrap(t._data) for t in tensors])  # plain tensors
        positions = tuple(s.index for s in slots)
        statics = tuple(x for i, x in enumerate(leaves) if i not in set(positions))
        entry = _Entry(
            graph=None,
            treespec=optree.tree_structure(tree),
            outputs=outputs,
            input_names=tuple(s.name for s in slots),
            input_shapes=tuple(s.type.shape for s in slots),
            tensor_positions=positions,
            static_leaves=statics,
            dtypes=tuple(s.type.dtype for s in slots),
            drift_axes=dict(drift),
            n_outputs=len(tensors),
        )
        if tracer.abandoned is not None:
            entry.eager_reason = tracer.abandoned
            return served, entry
        if self._output_names is not None:
            if len(self._output_names) != len(tensors):
                raise InputMismatchError(
                    f"output_names has {len(self._output_names)} name(s) but "
                    f"{self._graph_name} returns {len(tensors)} tensor(s)"
                )
            names = list(self._output_names)
        guard_tensors = [
            Tensor._abstract(value.type, TraceRef(tracer, value)) for value, _, _ in tracer.guards
        ]
        guard_names = [f"guard.{i}" for i in range(len(guard_tensors))]
        graph = tracer.finish(self._graph_name, [*tensors, *guard_tensors], [*names, *guard_names])
        entry.pins = tuple(message for _, _, message in tracer.pins)
        dynamic = any(isinstance(d, SymDim) for v in graph.input_values for d in v.shape)
        if self._optimize:
            graph.optimize(None if self._specialize is not False else _generic_pipeline())
        if self._place is not None:
            graph.to(self._place)
        graph.finalize()
        if self._specialize is True and dynamic:
            run = _specializing_runner(graph, self._optimize)
        else:
            program = graph.program
            assert program is not None
            check, run_arrays = program.check_inputs, program.run_arrays

            def run(arrays: list[np.ndarray]) -> list[np.ndarray]:
                return run_arrays(check(arrays))

        entry.graph = graph
        entry.run = run
        if not dynamic and self._specialize is not True:
            entry.static_shapes = tuple(
                tuple(int(d) for d in v.shape)
                for v in graph.input_values  # all static here
            )
            entry.run_unchecked = run_arrays
        entry.single_output = outputs.spec.is_leaf() and outputs.tensor_positions == (0,)
        if not outputs.static_leaves:
            for container in (list, tuple):
                flat_result: Any = container([0] * len(tensors))
                if outputs.spec == optree.tree_structure(flat_result):
                    entry.container = container
        entry.guards = tuple(
            (len(tensors) + i, expected, where)
            for i, (_, expected, where) in enumerate(tracer.guards)
        )
        entry.input_shapes = tuple(v.shape for v in graph.input_values)
        entry.nbytes = sum(c.data.nbytes for c in graph.constants) + sum(
            e.nbytes for _, e, _ in entry.guards
        )
        return served, entry


MAX_SPECIALIZATIONS = 8  # concrete shapes a dynamic graph keeps specialized plans for


def _generic_pipeline() -> list[Any]:
    """The default pipeline without shape folding: the graph stays generic (specialize=False)."""
    from ..optim import default_pipeline, fold_shapes

    return [t for t in default_pipeline() if t is not fold_shapes]


def _specializing_runner(
    graph: ModelGraph, optimize: bool
) -> Callable[[list[np.ndarray]], list[np.ndarray]]:
    """A runner that specializes ``graph`` to each new set of input shapes (specialize=True):
    sizes bound, shape arithmetic folded, a plan per shape set (the first few kept)."""
    from ..optim import specialize_graph

    generic = graph.program
    assert generic is not None
    check = generic.check_inputs
    programs: dict[tuple[tuple[int, ...], ...], Any] = {}

    def run(arrays: list[np.ndarray]) -> list[np.ndarray]:
        arrays = check(arrays)
        shapes = tuple(a.shape for a in arrays)
        program = programs.get(shapes)
        if program is None:
            special = specialize_graph(graph, generic.bindings(arrays))
            if optimize:
                special.optimize()
            special.finalize()
            program = special.program
            if len(programs) < MAX_SPECIALIZATIONS:
                programs[shapes] = program
        return program.run_arrays(arrays)  # type: ignore[no-any-return]

    return run


def _flat_call(
    args: tuple[Any, ...], with_shapes: bool
) -> tuple[list[np.ndarray], Hashable] | None:
    """For a call whose arguments are all arrays or tensors: their arrays, and a key of each
    one's dtype and rank (shape when ``with_shapes``). None for any other call."""
    arrays = []
    key: list[Any] = []
    for a in args:
        cls = type(a)
        if cls is Tensor:
            a = a._data
        elif cls is not np.ndarray:
            return None
        arrays.append(a)
        key.append(a.dtype)
        key.append(a.shape if with_shapes else a.ndim)
    return arrays, tuple(key)


def _input_path(path: tuple[Any, ...], fn: Callable[..., Any]) -> str:
    from .trace import _derive_name, _parameter_names

    return _derive_name(path, _parameter_names(fn))


def compile(  # noqa: A001 - the public name, as torch.compile
    target: Callable[..., Any] | None = None,
    *,
    signature: Sequence[TensorSpec] = (),
    dynamic: bool | None = None,
    fullgraph: bool = False,
    optimize: bool | None = None,
    specialize: bool | None = None,
    place: PlaceLike = None,
    dynamic_axes: Mapping[Any, Any] | None = None,
    output_names: Sequence[str] | None = None,
    graph_name: str | None = None,
) -> Any:
    """Compile ``target``: the first call serves the eager result while recording a graph;
    later calls with the same input structure and matching shapes run the graph.

    Works as a function and as a decorator, bare (``@kiln.compile``) or with options
    (``@kiln.compile(dynamic=True)``).

    Args:
        target: The function to compile (a pytree of tensors and static values in and out).
        signature: TensorSpecs for the tensor inputs in flattening order; the first capture
            takes their names and dynamic sizes, and a call that does not fit raises
            ``InputMismatchError``.
        dynamic: None: static first, drifted axes dynamic on re-capture; True: every axis
            dynamic from the first capture; False: never dynamic, each shape its own capture.
        fullgraph: Raise ``CaptureError`` for anything that cannot be recorded, instead of
            guarding on a value or serving that structure eagerly.
        optimize: False runs graphs as recorded; None/True runs the default optimizer.
        specialize: Let finalization specialize a graph to its captured shapes (True), keep it
            generic (False), or specialize static captures only (None).
        place: Where graphs run; None is the inputs' place (the CPU today).
        dynamic_axes: Axes of inputs to make dynamic, by input name or flat index.
        output_names: Names of the graph outputs.
        graph_name: The graphs' name (default: the target's ``__name__``).

    Example:
        >>> import kiln, numpy as np
        >>> @kiln.compile
        ... def gelu(x):
        ...     return 0.5 * x * (1 + np.tanh(0.79788456 * (x + 0.044715 * x**3)))
        >>> y = gelu(np.ones((2, 3), np.float32))
        >>> gelu.state
        <State.Compiled: 'compiled'>
    """
    options: dict[str, Any] = dict(
        signature=signature,
        dynamic=dynamic,
        fullgraph=fullgraph,
        optimize=optimize,
        specialize=specialize,
        place=place,
        dynamic_axes=dynamic_axes,
        output_names=output_names,
        graph_name=graph_name,
    )
    if target is None:
        return functools.partial(CompiledFunction, **options)
    return CompiledFunction(target, **options)


def explain(fn: CompiledFunction, *, file: Any = None) -> str:
    """Print (and return) why ``fn`` captured and fell back, one line per event.

    Example:
        >>> import kiln, numpy as np
        >>> f = kiln.compile(lambda x: x + 1)
        >>> _ = f(np.ones(2))
        >>> print(kiln.explain(f, file=False))
        lambda: state compiled, 1 capture(s), 0 re-capture(s)
          call 1: first: first call
    """
    if not isinstance(fn, CompiledFunction):
        raise TypeError(f"kiln.explain takes a CompiledFunction, got {type(fn).__name__}")
    info = fn.cache_info()
    lines = [
        f"{fn._graph_name}: state {fn.state.value}, {info.captures} capture(s), "
        f"{info.recaptures} re-capture(s)"
    ]
    for e in fn.history:
        where = f"call {e.call}" if e.call else "-"
        detail = e.message or e.kind
        if e.axes and e.kind == "first":
            detail += f"; dynamic axes {list(e.axes)}"
        lines.append(f"  {where}: {e.kind}: {detail}")
    text = "\n".join(lines)
    if file is not False:
        print(text, file=file)
    return text
