"""``kiln.compile`` and :class:`CompiledFunction`: capture once, replay the graph after.

The first call with a new *structure key* runs the target eagerly on recording tensors, which
serves the call's result and records the graph at the same time. Later calls with that key run
the finalized graph; the graph's own input check is the shape guard. A call whose shapes drift
from a static capture is served eagerly while it records again with the drifted axes dynamic.
A small budget of re-captures protects the user: past it the function serves eagerly until
:meth:`CompiledFunction.reset`. A failure of kiln's own after the target ran never loses the
call: the eager result is returned and that structure serves eagerly, with one warning.

Results follow the call (SPEC 5, NumPy in, NumPy out): a call of NumPy arrays gets fresh,
writable NumPy arrays on every path, a call with a kiln tensor among its leaves gets kiln
tensors; serving eagerly runs the target on the caller's own leaves. As a class attribute a
compiled function binds like a method (:class:`BoundCompiledFunction`), the instance keyed by
identity.

Concurrent calls are safe: capture decisions are taken under a lock, reserving the key and the
budget, so the budget and one capture per key are exact; a call of a key that another thread is
capturing is served eagerly.

A new capture serves on the NumPy plan at once; the other engines are checked and timed in the
background (tiered selection, :mod:`kiln.runtime`), and a faster exact one is swapped into the
capture's replay when ready. :meth:`CompiledFunction.wait_for_engines` waits for that, and
:func:`explain` says which engine serves each capture and why.

The structure key is the input pytree structure, the static (non-tensor) leaves' values, and
each tensor leaf's dtype and rank (and its shape too with ``dynamic=False``). Everything that can
be decided at capture time is: the replay path flattens, builds the key, looks it up, checks the
guard, runs the plan and unflattens.

A :class:`CompiledFunction` is a cache of captures keyed by that key, and the parts it delegates
to each have one job:

- :mod:`~kiln.capture.signature`: a call flattened once into a ``CallSignature`` (leaves,
  structure, arrays, key), which the lookup, the capture and the change description share;
- :mod:`~kiln.capture.replay`: a ``Capture`` (one cache entry) and its frozen ``Replay``, which
  serves a call or says why it cannot (shape drift, a value guard);
- :mod:`~kiln.capture.policy`: what changed since a capture (a ``CaptureEvent``) and what to do
  (capture with which dynamic axes, or fall back once the budget is spent);
- :mod:`~kiln.capture.recorder`: recording a call into a ``Capture``.
"""

from __future__ import annotations

import enum
import functools
import itertools
import threading
import time
import warnings
from collections import deque
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import optree

from ..device import PlaceLike, as_place
from ..errors import CaptureWarning, RecaptureWarning, StateError
from ..ir.graph import ModelGraph
from ..ops.dispatch import current_handler, handler_now
from ..optim.transform import DefaultsOptions
from ..source import user_stacklevel
from ..spec import TensorSpec, check_dynamic_axes, check_signature
from ..tensor import Tensor
from .implicit import ImplicitMiss
from .policy import CaptureEvent, Decision, RecapturePolicy
from .recorder import CaptureOptions, record_capture
from .replay import (
    MISS,
    AliasedWrite,
    Capture,
    GuardMiss,
    ReplayMiss,
    ShapeDrift,
    follow_engine,
    held_bytes,
    quick_path,
)
from .signature import CallSignature, positional_arrays
from .trace import _parameter_names

__all__ = [
    "CompiledFunction",
    "BoundCompiledFunction",
    "Explanation",
    "State",
    "CaptureEvent",
    "CacheInfo",
    "compile",
    "explain",
]

MAX_ENTRIES = 8  # captures kept per function, least recently used dropped first
HISTORY_LIMIT = 256  # events kept in ``history``, oldest dropped first (reset() keeps them)


class State(enum.Enum):
    """Where the function is in its capture lifecycle: Pending (no graph yet), Compiled (a
    captured graph serves shape-matching calls), Fallback (the function serves eagerly and will
    not re-capture on its own)."""

    Pending = "pending"
    Compiled = "compiled"
    Fallback = "fallback"


class CacheInfo(NamedTuple):
    """What a compiled function holds: captures kept, their bytes, and its counters."""

    entries: int
    max_entries: int
    bytes: int
    captures: int
    recaptures: int
    state: State


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
        defaults: DefaultsOptions | None = None,
    ) -> None:
        # A staticmethod or classmethod under @kiln.compile: compile its function, and bind
        # as it would (nothing, or the class) when reached through a class (see __get__).
        self._binds = "instance"
        if isinstance(target, (staticmethod, classmethod)):
            self._binds = "static" if isinstance(target, staticmethod) else "class"
            target = target.__func__
        if not callable(target):
            raise TypeError(f"kiln.compile needs a callable, got {type(target).__name__}")
        if dynamic not in (None, True, False):
            raise TypeError(f"dynamic must be None, True or False, got {dynamic!r}")
        signature = check_signature(signature, "kiln.compile") or ()  # None: no signature
        dynamic_axes = check_dynamic_axes(dynamic_axes, "kiln.compile")
        name = graph_name or str(getattr(target, "__name__", "compiled"))
        if name == "<lambda>":
            name = "lambda"
        self._target = target
        self._options = CaptureOptions(
            graph_name=name,
            input_specs=tuple(signature) or None,
            dynamic=dynamic,
            fullgraph=fullgraph,
            optimize=optimize is not False,
            specialize=specialize,
            place=None if place is None else as_place(place),
            dynamic_axes=dynamic_axes,
            output_names=None if output_names is None else tuple(output_names),
            defaults=defaults,
        )
        self._with_shapes = dynamic is False  # the key holds each tensor's shape, not its rank
        self._policy = RecapturePolicy(
            name, _parameter_names(target), len(signature) if signature else None
        )
        functools.update_wrapper(self, target, updated=())
        self._lock = threading.RLock()
        self._calls = itertools.count(1)
        self._history: deque[CaptureEvent] = deque(maxlen=HISTORY_LIMIT)
        self._generation = 0  # counts resets: a capture begun before one is not kept
        self._reset_state()

    def _reset_state(self) -> None:
        self._generation += 1
        self._entries: dict[Hashable, Capture] = {}
        # For calls with positional arrays only: their (dtype, rank) tuple -> the entry (the
        # replay path then hashes no tree structure).
        self._flat: dict[Hashable, Capture] = {}
        # Keys being captured now: one capture per key at a time (see _reserve).
        self._capturing: set[Hashable] = set()
        self._current: Capture | None = None
        # The current capture's quick path (see _make_current), None while none serves.
        self._quick: Callable[[tuple[Any, ...]], Any] | None = None
        self._capture_count = 0
        self._recapture_count = 0
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
        serves = current.graph is not None or current.pending is not None
        return State.Compiled if serves else State.Fallback

    @property
    def recapture_count(self) -> int:
        """How many times a changed input structure, a changed static value, or drifted
        shapes forced a new capture."""
        return self._recapture_count

    @property
    def input_names(self) -> list[str]:
        """The graph input names of the current capture, in flattening order (empty before
        the first capture)."""
        current = self._current
        return [] if current is None else list(current.inputs.names)

    @property
    def current_graph(self) -> ModelGraph | None:
        """The graph serving the current capture (State.Compiled), else None: for tooling that
        inspects it. The function keeps running it, so read it without changing it; to own
        the graph, use :meth:`take_graph`."""
        current = self._current
        if self._fallback is not None or current is None:
            return None
        return self._settled(current).graph

    @property
    def history(self) -> list[CaptureEvent]:
        """The captures and fall backs, oldest first: the last ``HISTORY_LIMIT`` (256) events,
        across :meth:`reset` (which is an event too)."""
        with self._lock:
            return list(self._history)

    @property
    def captures(self) -> list[CaptureEvent]:
        """The events that made a capture (first and re-captures), within :attr:`history`."""
        kinds = {"budget", "abandoned", "failed", "take_graph", "reset", "pinned"}
        return [e for e in self.history if e.kind not in kinds]

    def cache_info(self) -> CacheInfo:
        """Entries and bytes held (each buffer once, however many captures share it: a closure
        array several graphs read), and the capture counters."""
        with self._lock:
            entries = list(self._entries.values())
        return CacheInfo(
            entries=len(entries),
            max_entries=MAX_ENTRIES,
            bytes=held_bytes(b for e in entries for b in e.buffers),
            captures=self._capture_count,
            recaptures=self._recapture_count,
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
        current = self._current
        if current is not None and current.pending is not None:
            self._settled(current)  # a graph still being planned in the background
        with self._lock:
            state = self.state
            if state is State.Pending:
                raise StateError(
                    "take_graph(): nothing has been captured yet; call the function once first"
                )
            if state is State.Fallback:
                why = self._fallback or (self._current.eager_why if self._current else None)
                raise StateError(
                    f"take_graph(): the function is serving eagerly ({why}), so there is no "
                    "graph to take; call reset() and call the function again"
                )
            assert self._current is not None and self._current.graph is not None
            graph = self._current.graph
            # A selection still pending goes on while the graph lives (its program swaps the
            # faster engine in; nothing else follows it now).
            subscribe = getattr(graph.program, "subscribe", None)
            if subscribe is not None:
                subscribe(graph, _keeps_running)
            self._entries.clear()
            self._flat = {}
            self._current = None
            self._quick = None
            self._fallback = "its graph was taken with take_graph()"
            self._history.append(
                CaptureEvent(0, "take_graph", message="take_graph(): serving eagerly until reset()")
            )
            return graph

    def wait_for_engines(self, timeout: float | None = None) -> bool:
        """Wait until the engine selection of every capture kept is done: kiln serves a new
        capture on its NumPy plan at once and chooses among the other engines in the
        background, swapping a faster exact one in when it is ready (see
        :mod:`kiln.runtime`). Calls never need to wait; tests and benchmarks that want the
        final engine do. True when nothing is pending, False when ``timeout`` seconds passed
        first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            entries = list(self._entries.values())
        for capture in entries:
            if capture.pending is not None:  # planned in the background: finish it first
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                if not capture.pending.wait(left):
                    return False
                capture = self._settled(capture)
            program = None if capture.graph is None else capture.graph.program
            wait = getattr(program, "wait_selected", None)
            if wait is None:
                continue
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not wait(left):
                return False
        return True

    # -- calls ----------------------------------------------------------------------------

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        quick = self._quick
        if quick is not None and not kwargs and handler_now() is None:
            result = quick(args)  # the current capture's replay, for a call that fits it
            if result is not MISS:
                return result
        call = next(self._calls)
        if self._fallback is not None:
            return self._eager(args, kwargs, _has_tensor(args, kwargs))
        if current_handler() is not None:
            # Called inside another trace: run the target, whose operators the outer trace
            # then records inline.
            return self._target(*args, **kwargs)
        if not kwargs and self._flat:
            # The common case, positional arrays only: the key needs no pytree flattening.
            flat = positional_arrays(args, self._with_shapes)
            if flat is not None:
                capture = self._flat.get(flat[1])
                if capture is not None:
                    tensors_in = Tensor in map(type, args)
                    replay = capture.replay  # read once: a faster engine may be swapped in
                    if replay is None and capture.pending is not None:
                        capture = self._settled(capture, call)  # planned in the background
                        replay = capture.replay
                    if replay is None:  # a structure served eagerly
                        capture.last_used = call
                        return self._eager(args, kwargs, tensors_in)
                    try:
                        result = replay.serve(flat[0], tensors_in, args)
                    except AliasedWrite:
                        return self._eager(args, kwargs, tensors_in)
                    except ReplayMiss as exc:
                        miss = exc.with_traceback(None)  # it outlives this block: hold no frame
                    else:
                        if self._current is not capture:
                            self._make_current(capture)
                        capture.last_used = call
                        return result
                    signature = CallSignature(args, kwargs, self._with_shapes, self._policy.scalars)
                    return self._replay_missed(call, capture, miss, signature)
        signature = CallSignature(args, kwargs, self._with_shapes, self._policy.scalars)
        return self._call(call, signature)

    def __get__(self, obj: Any, objtype: type | None = None) -> Any:
        """As a class attribute, bind like a function (``@kiln.compile`` on a method): the
        bound function shares this function's cache, keyed by the instance's identity."""
        if self._binds == "static" or (obj is None and self._binds != "class"):
            return self
        owner = (objtype if objtype is not None else type(obj)) if self._binds == "class" else obj
        return BoundCompiledFunction(self, owner)

    def _call_bound(self, owner: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """A call through :meth:`__get__`: the target gets ``owner`` (the instance, or the
        class of a classmethod) first, and the key holds it by identity (two instances never
        share a capture; an instance with ``__eq__`` and no ``__hash__`` is fine)."""
        call = next(self._calls)
        full = (owner, *args)
        if self._fallback is not None:
            return self._eager(full, kwargs, _has_tensor(args, kwargs))
        if current_handler() is not None:
            return self._target(*full, **kwargs)
        signature = CallSignature(full, kwargs, self._with_shapes, self._policy.scalars)
        key = signature.key
        if (
            signature.leaves
            and signature.leaves[0] is owner
            and type(key) is tuple
            and len(key) > 1
            and type(key[1]) is tuple
            and key[1][:1] == (owner,)
        ):
            # The owner is a static leaf (its key part is (value, type)): by identity instead.
            signature.key = (key[0], (_Identity(owner), key[1][1]), *key[2:])
        return self._call(call, signature)

    def _call(self, call: int, signature: CallSignature) -> Any:
        """A call that the positional shortcut did not serve: look its key up and serve it."""
        capture = self._lookup(signature)
        if capture is None:
            return self._miss(call, signature)
        return self._serve(call, capture, signature)

    def _serve(self, call: int, capture: Capture, signature: CallSignature) -> Any:
        """Serve the call from ``capture``: its replay, or eagerly for a structure served
        eagerly."""
        tensors_in = Tensor in map(type, signature.leaves)
        replay = capture.replay  # read once: a faster engine may be swapped in
        if replay is None and capture.pending is not None:
            capture = self._settled(capture, call)  # planned in the background
            replay = capture.replay
        if replay is None:
            capture.last_used = call
            return self._eager(signature.args, signature.kwargs, tensors_in)
        try:
            result = replay.serve(signature.arrays, tensors_in, signature.leaves)
        except AliasedWrite:
            return self._eager(signature.args, signature.kwargs, tensors_in)
        except ReplayMiss as exc:
            miss = exc.with_traceback(None)
        else:
            if signature.converted and replay.write_backs:
                for original, copy in signature.converted:  # big-endian inputs written back
                    np.copyto(original, copy)
            if self._current is not capture:
                self._make_current(capture)
            capture.last_used = call
            return result
        return self._replay_missed(call, capture, miss, signature)

    def _lookup(self, signature: CallSignature) -> Capture | None:
        """The capture for the call's key; the dict lookup is the key's only hash."""
        try:
            return self._entries.get(signature.key)
        except TypeError:
            try:
                hash(signature.key)
            except TypeError:
                error = signature.unhashable_error(
                    self._options.graph_name, self._policy.parameter_names
                )
                raise error from None
            raise

    def _eager(self, args: tuple[Any, ...], kwargs: dict[str, Any], tensors_in: bool) -> Any:
        """Serve the call eagerly: the target on the caller's own leaves, untouched (NumPy
        arrays stay NumPy arrays, so it costs what NumPy costs); the result's arrays are
        then of the call's kind (see :func:`_of_kind`)."""
        result = self._target(*args, **kwargs)
        if type(result) is _NDARRAY and not tensors_in:  # plain NumPy: nothing to do
            return result
        return _of_kind(result, tensors_in)

    # -- capture decisions ----------------------------------------------------------------
    #
    # Every decision is taken under the lock, from the state as it is then: a call that missed
    # first looks again (another thread may have captured its key meanwhile), and a decision to
    # capture reserves its key and its share of the budget before the lock is released. The
    # capture itself (running the target) runs outside the lock; a concurrent call of a key
    # being captured is served eagerly, without capturing and without waiting.

    def _miss(self, call: int, signature: CallSignature) -> Any:
        """A call with a key not in the cache: the first capture, or a re-capture."""
        with self._lock:
            entry = self._entries.get(signature.key)
            if entry is None:
                previous = self._current
                if previous is None and not self._capture_count:
                    decision = self._policy.first(call)
                else:
                    cached = [c.inputs for c in self._entries.values()]
                    decision = self._policy.changed(
                        call, signature, None if previous is None else previous.inputs, cached
                    )
                    if decision.promote:  # [issue 11, H5] a changed float: now a 0-d input
                        signature.promote(decision.promote)
                reserved = self._reserve(signature, decision)
        if entry is not None:  # another thread captured this key since the call looked
            return self._serve(call, entry, signature)
        return self._capture(signature, reserved)

    def _replay_missed(
        self, call: int, capture: Capture, miss: ReplayMiss, signature: CallSignature
    ) -> Any:
        """A replay that could not serve the call: its shapes drifted or a value guard failed."""
        with self._lock:
            entry = self._entries.get(signature.key)
            if entry is capture:
                if isinstance(miss, ShapeDrift):
                    decision = self._policy.drifted(
                        call, capture.inputs, signature.arrays, miss.mismatch
                    )
                elif isinstance(miss, ImplicitMiss):  # [issue 11, implicit inputs: H5]
                    decision = self._policy.implicit_changed(
                        call, capture.inputs, miss.name, miss.old, miss.new
                    )
                else:
                    assert isinstance(miss, GuardMiss)
                    guard = miss.guard
                    decision = self._policy.guard_missed(
                        call, capture.inputs, guard.where, guard.expected, miss.got
                    )
                reserved = self._reserve(signature, decision)
        if entry is None:  # dropped since the call looked
            return self._miss(call, signature)
        if entry is not capture:  # captured again by another thread: try the new capture
            return self._serve(call, entry, signature)
        return self._capture(signature, reserved)

    def _reserve(self, signature: CallSignature, decision: Decision) -> _Reservation | None:
        """Under the lock: take ``decision`` if the call may capture (its key is not being
        captured, the function is not falling back, the budget allows it), counting the
        capture now so that concurrent calls see it; None to serve the call eagerly. Past the
        budget, fall back with one warning."""
        key = signature.key
        if key in self._capturing or self._fallback is not None:
            return None
        recapture = decision.event.kind != "first"
        if recapture:
            decision = self._policy.within_budget(decision, self._recapture_count, self._history)
            if not decision.captures:
                self._fallback = decision.fall_back
                self._quick = None
                self._history.append(decision.event)
                warnings.warn(
                    decision.event.message, RecaptureWarning, stacklevel=user_stacklevel()
                )
                return None
            self._recapture_count += 1
        self._capture_count += 1
        self._capturing.add(key)
        return _Reservation(decision, recapture, self._generation)

    # -- capturing ------------------------------------------------------------------------

    def _capture(self, signature: CallSignature, reserved: _Reservation | None) -> Any:
        """Serve the call while recording it as ``reserved`` says, and keep the capture; serve
        it eagerly without capturing when nothing was reserved."""
        tensors_in = Tensor in map(type, signature.leaves)
        if reserved is None:
            return self._eager(signature.args, signature.kwargs, tensors_in)
        key = signature.key
        try:
            result, capture = record_capture(
                self._target, signature, self._options, reserved.decision.drift
            )
        except BaseException:
            # The target's own exception (or a user error the capture found): give back what
            # was reserved, so the state is as it was.
            with self._lock:
                if reserved.generation == self._generation:
                    self._capturing.discard(key)
                    self._capture_count -= 1
                    self._recapture_count -= reserved.recapture
            raise
        with self._lock:
            if reserved.generation == self._generation:  # no reset() meanwhile
                self._capturing.discard(key)
                capture.last_used = reserved.decision.event.call
                self._keep(signature, capture)
                self._note(reserved.decision.event, capture)
        # The capture serves fresh kiln tensors: NumPy arrays for a call of NumPy arrays (a
        # copy on the capture call only: a tensor's own array is read-only); one tensor
        # returned twice stays one array.
        if tensors_in:
            return result
        arrays: dict[int, Any] = {}
        return optree.tree_map(lambda leaf: _fresh_array_once(leaf, arrays), result)

    def _keep(self, signature: CallSignature, capture: Capture) -> None:
        """Put ``capture`` in the cache (dropping the least recently used entry past
        ``MAX_ENTRIES``) and make it the current one."""
        key = signature.key
        self._entries[key] = capture
        flat = (
            None
            if signature.kwargs
            else positional_arrays(signature.native_args, self._with_shapes)
        )
        if flat is not None:
            self._flat[flat[1]] = capture
        follow_engine(capture)  # a faster engine, chosen in the background, is swapped in
        if flat is not None:
            capture.quick = quick_path(capture, flat[1][0::2], self._calls)
        while len(self._entries) > MAX_ENTRIES:
            entries = self._entries
            oldest = min(entries, key=lambda k: entries[k].last_used)
            dropped = entries.pop(oldest)
            # Rebuilt, not changed in place: the replay path reads it without the lock.
            self._flat = {f: c for f, c in self._flat.items() if c is not dropped}
        self._make_current(capture)

    def _settled(self, capture: Capture, call: int | None = None) -> Capture:
        """``capture`` finished. A capture whose graph is optimized and planned in the
        background (:mod:`kiln.capture.background`) is waited for, and replaced in the cache
        by the finished capture (followed by its engine, with its quick path); any other is
        returned as it is. ``call``: the call that needed it (for the history)."""
        pending = capture.pending
        if pending is None:
            return capture
        done = pending.result()  # outside the lock: other keys' calls go on meanwhile
        with self._lock:
            keys = [key for key, c in self._entries.items() if c is capture]
            if not keys:  # settled by another thread, or dropped (or reset) meanwhile
                return done
            done.last_used = capture.last_used
            for key in keys:
                self._entries[key] = done
            follow_engine(done)
            flat = dict(self._flat)
            for key, c in self._flat.items():
                if c is capture:
                    flat[key] = done
                    done.quick = quick_path(done, key[0::2], self._calls)
            self._flat = flat  # rebuilt, not changed in place: the replay path reads it
            if self._current is capture:
                self._make_current(done)
            self._note_failure(capture.last_used if call is None else call, done)
        return done

    def _make_current(self, capture: Capture) -> None:
        """Make ``capture`` the current one: its quick path (:func:`quick_path`) then serves
        the calls that fit it before anything else runs (not while the function falls back)."""
        self._current = capture
        self._quick = capture.quick if self._fallback is None else None

    def _note(self, event: CaptureEvent, capture: Capture) -> None:
        """Record the capture in the history, and warn (once per message) when its structure
        serves eagerly."""
        self._history.append(event)
        for message in capture.pins:
            self._history.append(CaptureEvent(event.call, "pinned", message=message))
        if capture.eager_reason is not None:
            message = (
                f"kiln.compile({self._options.graph_name}): {capture.eager_reason} cannot be "
                "recorded into a graph, so calls with this input structure are served "
                "eagerly (use fullgraph=True to make this an error)"
            )
            self._history.append(CaptureEvent(event.call, "abandoned", message=message))
            self._warn_once(message)
        self._note_failure(event.call, capture)

    def _note_failure(self, call: int, capture: Capture) -> None:
        """Record and warn (once per message) when kiln failed after the target ran."""
        if capture.failure is not None:
            message = (
                f"kiln.compile({self._options.graph_name}): kiln failed after the target ran: "
                f"{capture.failure}. The call returned the eager result, and calls with this "
                "input structure are served eagerly (as a fall back) until reset(). This is "
                "a kiln bug: please report it with this message"
            )
            self._history.append(CaptureEvent(call, "failed", message=message))
            self._warn_once(message)

    def _warn_once(self, message: str) -> None:
        if message not in self._warned:
            self._warned.add(message)
            warnings.warn(message, CaptureWarning, stacklevel=user_stacklevel())


def _keeps_running(graph: ModelGraph, plan: object) -> None:
    """A taken graph's subscription: it runs whatever its program serves."""


class BoundCompiledFunction:
    """A :class:`CompiledFunction` bound to an instance (or, for a classmethod, a class), as
    ``obj.method`` binds a function: calling it calls the compiled function with the owner
    first. It shares the compiled function's cache, budget and history; any other attribute
    (``state``, ``reset``, ``cache_info``, ``take_graph``) is the compiled function's.

    Example:
        >>> import kiln, numpy as np
        >>> class Scale:
        ...     def __init__(self, k):
        ...         self.k = k
        ...     @kiln.compile
        ...     def __call__(self, x):
        ...         return x * self.k
        >>> Scale(np.float32(3))(np.ones(2, np.float32)).tolist()
        [3.0, 3.0]
    """

    __slots__ = ("__func__", "__self__")

    def __init__(self, function: CompiledFunction, owner: Any) -> None:
        self.__func__ = function
        self.__self__ = owner

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.__func__._call_bound(self.__self__, args, kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__func__, name)

    def __eq__(self, other: object) -> bool:
        return (
            type(other) is BoundCompiledFunction
            and other.__func__ is self.__func__
            and other.__self__ is self.__self__
        )

    def __hash__(self) -> int:
        return hash((id(self.__func__), id(self.__self__)))

    def __repr__(self) -> str:
        name = self.__func__._options.graph_name
        return f"<bound compiled function {name} of {self.__self__!r}>"


class _Identity:
    """A key part that compares an object by identity (a method's instance)."""

    __slots__ = ("obj",)

    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def __hash__(self) -> int:
        return id(self.obj)

    def __eq__(self, other: object) -> bool:
        return type(other) is _Identity and other.obj is self.obj

    def __repr__(self) -> str:
        return f"<{type(self.obj).__name__} at {id(self.obj):#x}>"


_NDARRAY = np.ndarray  # read at every eagerly served call: one global, no attribute lookup
# Leaf types a call is checked against without flattening it (see _has_tensor).
_FLAT_TYPES = frozenset(
    {np.ndarray, int, float, bool, complex, str, bytes, type(None)}
    | {np.dtype(c).type for c in "?bhilqBHILQefdgFDG"}
)


def _has_tensor(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether a kiln tensor is among the call's leaves, without flattening the call when its
    arguments are arrays and scalars (the eager path's check: it must cost next to nothing)."""
    if not kwargs:
        for arg in args:
            cls = type(arg)
            if cls is _NDARRAY:
                continue
            if cls is Tensor:
                return True
            if cls not in _FLAT_TYPES:
                break  # a container or another object: flatten the call
        else:
            return False
    return Tensor in map(type, optree.tree_leaves((args, kwargs)))


def _fresh_array(leaf: Any) -> Any:
    """A kiln tensor as a fresh, writable NumPy array; any other leaf as it is."""
    return np.array(leaf._data) if type(leaf) is Tensor else leaf


def _fresh_array_once(leaf: Any, made: dict[int, Any]) -> Any:
    """:func:`_fresh_array`, the same array for the same tensor (by ``made``, per call)."""
    if type(leaf) is not Tensor:
        return leaf
    array = made.get(id(leaf))
    if array is None:
        array = made[id(leaf)] = _fresh_array(leaf)
    return array


def _as_tensor(leaf: Any) -> Any:
    """A NumPy array as a kiln tensor over it (no copy); any other leaf as it is."""
    return Tensor._wrap(leaf) if type(leaf) is np.ndarray else leaf


def _of_kind(result: Any, tensors_out: bool) -> Any:
    """An eagerly computed ``result`` with its arrays of the call's kind: kiln tensors when the
    call passed one, else NumPy arrays (a target that calls kiln's own functions on NumPy
    arrays returns tensors). Plain NumPy results, the common case, pass without flattening."""
    cls = type(result)
    if tensors_out:
        return result if cls is Tensor else optree.tree_map(_as_tensor, result)
    if cls is np.ndarray:
        return result
    if (cls is tuple or cls is list) and set(map(type, result)) <= _FLAT_TYPES:
        return result
    return optree.tree_map(_fresh_array, result)


class _Reservation(NamedTuple):
    """A capture the lock granted: the decision, whether it spends the re-capture budget, and
    the reset generation it belongs to."""

    decision: Decision
    recapture: bool
    generation: int


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
    defaults: DefaultsOptions | None = None,
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
        defaults: The optimizer's :class:`~kiln.optim.DefaultsOptions` for each capture,
            including ``max_nodes``, the node budget past which a call is not captured (its
            structure serves eagerly, with one ``CaptureWarning``), and ``background_nodes``,
            the trace size from which the graph is optimized and planned in a background
            thread (the first call returns once the function ran; the next call that needs
            the graph waits for it).

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
        defaults=defaults,
    )
    if target is None:
        return functools.partial(CompiledFunction, **options)
    return CompiledFunction(target, **options)


class Explanation(str):
    """The text :func:`explain` returns: a ``str`` whose ``repr`` is the text itself, so that
    ``kiln.explain(f)`` at a REPL shows it once, as it reads."""

    __slots__ = ()

    def __repr__(self) -> str:
        return str(self)


def explain(fn: CompiledFunction | BoundCompiledFunction, *, file: Any = None) -> Explanation:
    """Why ``fn`` captured and fell back, one line per event, then which engine serves each
    capture kept and why (``numpy (jax pending)`` while the background selection runs), as
    text (an :class:`Explanation`, a ``str`` a REPL shows as the text). It is printed only
    when ``file`` is given (a file object); ``print(kiln.explain(f))`` prints it.

    Example:
        >>> import kiln, numpy as np
        >>> f = kiln.compile(lambda x: x + 1)
        >>> _ = f(np.ones(2))
        >>> kiln.explain(f)
        lambda: state compiled, 1 capture(s), 0 re-capture(s)
          call 1: first: first call
          engine: numpy (too little work to measure: 2 element operations)
    """
    if isinstance(fn, BoundCompiledFunction):
        fn = fn.__func__
    if not isinstance(fn, CompiledFunction):
        raise TypeError(f"kiln.explain takes a CompiledFunction, got {type(fn).__name__}")
    info = fn.cache_info()
    lines = [
        f"{fn._options.graph_name}: state {fn.state.value}, {info.captures} capture(s), "
        f"{info.recaptures} re-capture(s)"
    ]
    for e in fn.history:
        where = f"call {e.call}" if e.call else "-"
        detail = e.message or e.kind
        if e.axes and e.kind == "first":
            detail += f"; dynamic axes {list(e.axes)}"
        lines.append(f"  {where}: {e.kind}: {detail}")
    lines += _engine_lines(fn)
    text = Explanation("\n".join(lines))
    if file is not None and file is not False:  # file=False: no printing (as before)
        print(text, file=file)
    return text


def _engine_lines(fn: CompiledFunction) -> list[str]:
    """``engine: ...`` for each capture kept with a graph: which engine serves it and why
    (the input types name the capture when there are several)."""
    if fn._fallback is not None:
        return []
    with fn._lock:
        entries = [c for c in fn._entries.values() if c.graph is not None]
    lines = []
    for capture in entries:
        program = capture.graph.program if capture.graph is not None else None
        if program is None:
            continue
        describe = getattr(program, "describe_engine", None)
        text = describe() if describe is not None else program.engine
        which = ""
        if len(entries) > 1:
            inputs = capture.inputs
            types = (
                f"{n}: {d}{list(s)}" for n, d, s in zip(inputs.names, inputs.dtypes, inputs.shapes)
            )
            which = f" ({', '.join(types)})"
        lines.append(f"  engine{which}: {text}")
    return lines
