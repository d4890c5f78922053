"""The re-capture policy: what changed since a capture, and what to do about it.

A compiled function asks :class:`RecapturePolicy` when the cache cannot serve a call: a call with
a new structure key (a new structure, static value, dtype, rank, or with ``dynamic=False`` a new
shape), a replay whose shapes drifted from a static capture, or a replay whose value guard
failed. The policy answers with a :class:`Decision`: the :class:`CaptureEvent` that says what
changed, and either the dynamic axes the new capture takes, or, once the re-capture budget is
spent, that the function falls back to serving every call eagerly. It sees the call's
:class:`~kiln.capture.signature.CallSignature` and the previous capture's
:class:`~kiln.capture.signature.CapturedInputs`, never the compiled function itself.

Example:
    >>> policy = RecapturePolicy("f", ["x"], budget=0)
    >>> decision = policy.first(1)
    >>> decision.event.kind, decision.captures
    ('first', True)
    >>> policy.within_budget(decision, spent=0, history=[]).fall_back
    'the re-capture budget of 0 is spent'
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import InputMismatchError
from ..exec.inputs import ShapeGuardError
from ..tree import path_name
from .scalars import is_promotable
from .signature import CallSignature, CapturedInputs, DriftAxes, input_name
from .traced import same_static

__all__ = ["CaptureEvent", "Decision", "RecapturePolicy", "RECAPTURE_BUDGET"]

RECAPTURE_BUDGET = 8  # captures after the first before the function falls back to eager


@dataclass(frozen=True)
class CaptureEvent:
    """One capture or fall back, machine-readable.

    Attributes:
        call: The call number (1 is the first call) that caused it.
        kind: ``first``, ``structure``, ``static value``, ``dtype``, ``rank``, ``new shape``,
            ``shape drift``, ``shape guard`` (the sizes give another branch), ``value guard``,
            ``implicit input`` (an array read from a closure, global or attribute changed
            dtype or shape), ``scalar input`` (a float argument changed: it becomes a 0-d
            graph input),
            ``abandoned`` (served eagerly), ``failed`` (kiln failed after the target ran: served
            eagerly), ``pinned`` (an operation fixed a dynamic size), ``budget``, ``take_graph``
            or ``reset``.
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


@dataclass(frozen=True)
class Decision:
    """What to do about a call the cache cannot serve.

    Attributes:
        event: What changed (the event the history records).
        drift: The axes the new capture makes dynamic, by (tensor index, axis).
        fall_back: Why every call now serves eagerly; None to capture.
        promote: The flat positions of float arguments whose value changed: the call's
            signature makes them 0-d tensor inputs before it captures.
    """

    event: CaptureEvent
    drift: DriftAxes = field(default_factory=dict)
    fall_back: str | None = None
    promote: frozenset[int] = frozenset()  # flat positions of floats made 0-d inputs

    @property
    def captures(self) -> bool:
        """Whether the call captures anew (rather than falling back)."""
        return self.fall_back is None


class RecapturePolicy:
    """Decides, for a call the cache cannot serve, what changed and whether to capture again.

    Args:
        graph_name: The compiled function's name, for messages.
        parameter_names: The target's positional parameter names, to name inputs by.
        signature_size: The number of TensorSpecs the function was compiled with, if any: then
            a call with another number of tensors, or drifted shapes, is an error.
        budget: Re-captures allowed before the function falls back to eager.
    """

    def __init__(
        self,
        graph_name: str,
        parameter_names: Sequence[str],
        signature_size: int | None = None,
        budget: int = RECAPTURE_BUDGET,
    ) -> None:
        self.graph_name = graph_name
        self.parameter_names = tuple(parameter_names)
        self.signature_size = signature_size
        self.budget = budget
        # Names for drifted sizes; never reused, so sizes of different captures never clash.
        self._size_names = itertools.count()
        # Flat positions of float arguments that changed once: 0-d graph inputs from then on.
        self.scalars: frozenset[int] = frozenset()

    # -- the decisions --------------------------------------------------------------------

    def first(self, call: int) -> Decision:
        """The first capture (also the first after a reset)."""
        return Decision(CaptureEvent(call, "first", message="first call"))

    def changed(
        self,
        call: int,
        signature: CallSignature,
        previous: CapturedInputs | None,
        cached: Sequence[CapturedInputs],
    ) -> Decision:
        """A call with a new structure key: what differs from the closest capture.

        ``previous`` is the current capture, ``cached`` every capture kept, oldest first; the
        change is described against the most recent capture of the same structure (preferring
        equal dtypes), so the reported change is the smallest one.

        Raises:
            InputMismatchError: The function has a signature and the call has another number
                of tensor inputs.
        """
        if self.signature_size is not None:
            tensors = len(signature.tensor_positions)
            if tensors != self.signature_size:
                raise InputMismatchError(
                    f"{self.graph_name}: the signature has {self.signature_size} "
                    f"TensorSpec(s), the call has {tensors} tensor input(s)"
                )
        closest = _closest(signature, cached) or previous
        event = self._describe_change(call, signature, closest)
        promote = _changed_floats(signature, closest) if event.kind == "static value" else None
        if promote and closest is not None:
            self.scalars = self.scalars | promote
            message = (
                f"{event.message}: a float that changes becomes a 0-d graph input, so later "
                "values replay this capture"
            )
            event = CaptureEvent(
                call, "scalar input", event.path, event.old, event.new, (), message
            )
            return Decision(event, dict(closest.drift), promote=promote)
        return Decision(event)

    def drifted(
        self,
        call: int,
        previous: CapturedInputs,
        arrays: Sequence[np.ndarray],
        mismatch: InputMismatchError,
    ) -> Decision:
        """A replay whose input ``arrays`` do not fit the capture's shapes: capture again with
        every drifted axis dynamic (sizes that drifted together share a name; dynamic sizes that
        were equal and now differ get a name each).

        Raises:
            InputMismatchError: ``mismatch`` itself, when the function has a signature (its
                sizes are the user's contract) or when no axis drifted (a size the user named
                was broken).
        """
        if isinstance(mismatch, ShapeGuardError):  # the sizes give another branch
            guard, sizes = mismatch.guard, mismatch.sizes
            message = f"the sizes {sizes} break the shape guard {guard} ({guard.where})"
            event = CaptureEvent(call, "shape guard", guard.where, str(guard), sizes, (), message)
            return Decision(event, dict(previous.drift))
        if self.signature_size is not None:
            raise mismatch
        drift, made, first = self._drift_static_axes(previous, arrays)
        split = self._split_unequal(drift, arrays)
        if not made and not split:
            raise mismatch
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
        return Decision(event, drift)

    def guard_missed(
        self, call: int, previous: CapturedInputs, where: str, expected: np.ndarray, got: Any
    ) -> Decision:
        """A replay whose value guard (a host read at ``where``) saw another value: capture
        again, keeping the previous capture's dynamic axes."""
        old, new = expected.tolist(), np.asarray(got).tolist()
        event = CaptureEvent(
            call,
            "value guard",
            where,
            old,
            new,
            message=f"the value read by {where} changed from {old} to {new}",
        )
        return Decision(event, dict(previous.drift))

    def implicit_changed(
        self, call: int, previous: CapturedInputs, name: str, old: str, new: str
    ) -> Decision:
        """A replay whose implicit input ``name`` (a closure, global or attribute array the
        function reads) changed dtype or shape, or is no longer an array: capture again,
        keeping the previous capture's dynamic axes."""
        message = f"the array {name!r} the function reads changed from {old} to {new}"
        event = CaptureEvent(call, "implicit input", name, old, new, message=message)
        return Decision(event, dict(previous.drift))

    def within_budget(
        self, decision: Decision, spent: int, history: Sequence[CaptureEvent]
    ) -> Decision:
        """``decision`` while fewer than ``budget`` re-captures are ``spent``; past it, the
        decision to fall back, with a message that lists the recent causes in ``history``."""
        if spent < self.budget:
            return decision
        last = decision.event
        recent = [e.message or e.kind for e in list(history)[-self.budget :] if e.kind != "first"]
        message = (
            f"kiln.compile({self.graph_name}) re-captured {spent} times, its budget, "
            f"and now serves every call eagerly until reset(). Last change: {last.message}. "
            "To avoid this, mark changing sizes dynamic (dynamic=True, dynamic_axes={...}, or a "
            "signature of kiln.TensorSpec with None/str sizes), and pass changing Python values "
            "as tensors. Recent causes: " + "; ".join(recent)
        )
        event = CaptureEvent(last.call, "budget", last.path, last.old, last.new, (), message)
        return Decision(event, fall_back=f"the re-capture budget of {self.budget} is spent")

    # -- describing a change --------------------------------------------------------------

    def _describe_change(
        self, call: int, signature: CallSignature, previous: CapturedInputs | None
    ) -> CaptureEvent:
        if previous is None:
            return CaptureEvent(call, "structure", message="a new input structure")
        spec = signature.treespec
        positions = signature.tensor_positions
        if spec != previous.treespec:
            return CaptureEvent(call, "structure", message=f"the input structure changed to {spec}")
        paths = signature.paths
        if positions != previous.tensor_positions:
            return self._kind_change(call, signature, previous, paths)
        event = self._static_change(call, signature, previous, paths)
        if event is None:
            event = self._tensor_change(call, signature, previous, paths)
        if event is None:
            event = CaptureEvent(call, "structure", message=f"the input structure is now {spec}")
        return event

    def _kind_change(
        self,
        call: int,
        signature: CallSignature,
        previous: CapturedInputs,
        paths: Sequence[tuple[Any, ...]],
    ) -> CaptureEvent:
        """The first input that was an array and is now a static value (``f(3)`` after
        ``f(np.ones(3))``), or the other way round."""
        before, now = set(previous.tensor_positions), set(signature.tensor_positions)
        i = min(before ^ now)
        name = input_name(paths[i], self.parameter_names)
        leaf = signature.leaves[i]
        if i in now:
            was = previous.static_leaves[sum(1 for p in range(i) if p not in before)]
            old = f"a static {type(was).__name__} ({was!r})"
            new = f"an array ({leaf.dtype}, rank {leaf.ndim})"
        else:
            k = previous.tensor_positions.index(i)
            old = f"an array ({previous.dtypes[k]}, rank {len(previous.shapes[k])})"
            new = f"a static {type(leaf).__name__} ({leaf!r})"
        message = f"input {name!r} was {old} and is now {new}: a new input structure"
        return CaptureEvent(call, "structure", name, old, new, message=message)

    def _static_change(
        self,
        call: int,
        signature: CallSignature,
        previous: CapturedInputs,
        paths: Sequence[tuple[Any, ...]],
    ) -> CaptureEvent | None:
        tensors = set(signature.tensor_positions)
        static_paths = [path for i, path in enumerate(paths) if i not in tensors]
        for path, old, new in zip(static_paths, previous.static_leaves, signature.static_leaves):
            if not same_static(old, new):
                name = input_name(path, self.parameter_names)
                return CaptureEvent(
                    call,
                    "static value",
                    name,
                    old,
                    new,
                    message=f"static input {name!r} changed from {old!r} to {new!r}",
                )
        return None

    def _tensor_change(
        self,
        call: int,
        signature: CallSignature,
        previous: CapturedInputs,
        paths: Sequence[tuple[Any, ...]],
    ) -> CaptureEvent | None:
        for k, i in enumerate(signature.tensor_positions):
            leaf = signature.leaves[i]
            name = previous.names[k] if k < len(previous.names) else path_name(paths[i])
            dtype, shape = previous.dtypes[k], tuple(previous.shapes[k])
            if leaf.dtype != dtype:
                message = f"input {name!r} dtype changed from {dtype} to {leaf.dtype}"
                return CaptureEvent(call, "dtype", name, dtype, leaf.dtype, message=message)
            if leaf.ndim != len(shape):
                message = f"input {name!r} rank changed from {len(shape)} to {leaf.ndim}"
                return CaptureEvent(call, "rank", name, len(shape), leaf.ndim, message=message)
            if tuple(leaf.shape) != shape:
                message = (
                    f"input {name!r} shape changed from {previous.shapes[k]} to "
                    f"{tuple(leaf.shape)} (dynamic=False: every shape is its own capture)"
                )
                return CaptureEvent(
                    call, "new shape", name, previous.shapes[k], tuple(leaf.shape), message=message
                )
        return None

    # -- shape drift ----------------------------------------------------------------------

    def _drift_static_axes(
        self, previous: CapturedInputs, arrays: Sequence[np.ndarray]
    ) -> tuple[dict[tuple[int, int], str], list[tuple[str, int]], tuple[str, int, int, int] | None]:
        """The capture's drift axes plus every static axis whose size changed (axes that
        changed from the same size to the same size share a name), the ``(name, axis)`` of
        those, and the first one's ``(name, axis, old size, new size)``."""
        drift = dict(previous.drift)
        made: list[tuple[str, int]] = []
        groups: dict[tuple[int, int], str] = {}
        first: tuple[str, int, int, int] | None = None
        for k, (array, shape) in enumerate(zip(arrays, previous.shapes)):
            for axis, d in enumerate(shape):
                size = array.shape[axis]
                if isinstance(d, int) and d != size:
                    group = groups.get((d, size))
                    if group is None:
                        group = groups[(d, size)] = self._fresh_size_name()
                    drift[(k, axis)] = group
                    made.append((previous.names[k], axis))
                    if first is None:
                        first = (previous.names[k], axis, d, size)
        return drift, made, first

    def _split_unequal(
        self, drift: dict[tuple[int, int], str], arrays: Sequence[np.ndarray]
    ) -> bool:
        """Give drifted axes that shared a size name but now differ a name each (in place);
        whether any did."""
        by_name: dict[str, dict[int, list[tuple[int, int]]]] = {}
        for (k, axis), name in drift.items():
            by_name.setdefault(name, {}).setdefault(arrays[k].shape[axis], []).append((k, axis))
        split = False
        for sizes in by_name.values():
            if len(sizes) > 1:
                split = True
                for members in list(sizes.values())[1:]:
                    fresh = self._fresh_size_name()
                    for member in members:
                        drift[member] = fresh
        return split

    def _fresh_size_name(self) -> str:
        return f"d{next(self._size_names)}"


def _changed_floats(
    signature: CallSignature, previous: CapturedInputs | None
) -> frozenset[int] | None:
    """The flat positions of the float arguments (Python or NumPy floats) whose value changed
    since ``previous``, when only such values changed (same structure and tensor leaves)."""
    if previous is None or signature.treespec != previous.treespec:
        return None
    positions = signature.tensor_positions
    if positions != previous.tensor_positions:
        return None
    tensors = set(positions)
    statics = [i for i in range(len(signature.leaves)) if i not in tensors]
    changed = set()
    for i, old in zip(statics, previous.static_leaves):
        new = signature.leaves[i]
        if same_static(old, new):
            continue
        if type(old) is not type(new) or not is_promotable(new):
            return None
        changed.add(i)
    return frozenset(changed) or None


def _closest(signature: CallSignature, cached: Sequence[CapturedInputs]) -> CapturedInputs | None:
    """The most recent of ``cached`` with the call's structure, preferring one whose dtypes
    equal the call's."""
    positions = signature.tensor_positions
    same = [
        c
        for c in reversed(cached)
        if c.treespec == signature.treespec and c.tensor_positions == positions
    ]
    for captured in same:
        given = [getattr(signature.leaves[i], "dtype", None) for i in captured.tensor_positions]
        if given == list(captured.dtypes):
            return captured
    return same[0] if same else None
