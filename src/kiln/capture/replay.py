"""One capture of a compiled function, and its replay.

A :class:`Capture` is one cache entry: the inputs it was recorded against, its finalized graph,
and the :class:`Replay` that serves calls from that graph (or, for a structure the tracer could
not record or kiln failed to finalize, the reason it serves eagerly). A capture is made once, by
:func:`kiln.capture.recorder.record_capture`, and replaced as a whole when the function captures
again; the replay is frozen.

:meth:`Replay.serve` is the whole replay path: the shape guard, the plan's run, the value guards
and the rebuilt result. When it cannot serve a call it raises a :class:`ReplayMiss` saying why
(:class:`ShapeDrift` or :class:`GuardMiss`), which the compiled function turns into a
re-capture decision.

A capture whose engine is chosen in the background (tiered selection, :mod:`kiln.runtime`)
starts on the NumPy plan; :func:`follow_engine` has its replay swapped for one on the faster
engine once that is chosen: one assignment of a new frozen ``Replay``, which a call reads once.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from ..errors import InputMismatchError
from ..ir.graph import ModelGraph
from ..ops.dispatch import run_kernel
from ..ops.registry import OpDef
from ..tensor import Tensor
from .signature import CapturedInputs
from .traced import _Outputs

if TYPE_CHECKING:
    from .background import PendingCapture
    from .implicit import ImplicitReads

try:
    from numpy.lib.array_utils import byte_bounds
except ImportError:  # NumPy 1
    from numpy import byte_bounds  # type: ignore[attr-defined,no-redef]

__all__ = [
    "Capture",
    "held_bytes",
    "Replay",
    "ValueGuard",
    "ReplayMiss",
    "AliasedWrite",
    "ShapeDrift",
    "GuardMiss",
    "Runner",
    "follow_engine",
    "quick_path",
    "MISS",
]

Runner = Callable[[list[np.ndarray]], list[np.ndarray]]
# A Capture is held weakly by its program (follow_engine): slots with a weakref slot where
# dataclasses offer one (Python 3.11), a plain instance dict before.
_SLOTS_WITH_WEAKREF: dict[str, bool] = (
    {"slots": True, "weakref_slot": True} if sys.version_info >= (3, 11) else {}
)


# The view operators from an input to a result that views it (``x.T``, ``x[1:]``): each
# operator with its other inputs (constants) and attributes, applied in order.
ViewChain = tuple[tuple[OpDef, tuple[np.ndarray | None, ...], dict[str, Any]], ...]


class ValueGuard(NamedTuple):
    """A value the capture read on the host (``bool(t)``, ``t.item()``): the graph computes it
    as an extra output, and a replay is valid only while it equals what the capture saw."""

    output: int  # the graph output holding the value
    expected: np.ndarray
    where: str  # the host read and the user's line


class ReplayMiss(Exception):
    """Why a replay could not serve a call (internal: the compiled function handles it)."""


class ShapeDrift(ReplayMiss):
    """The inputs do not fit the graph's input shapes."""

    def __init__(self, mismatch: InputMismatchError) -> None:
        super().__init__(str(mismatch))
        self.mismatch = mismatch


class GuardMiss(ReplayMiss):
    """A value guard saw another value than the capture did."""

    def __init__(self, guard: ValueGuard, got: np.ndarray | str) -> None:
        super().__init__(guard.where)
        self.guard = guard
        self.got = got


@dataclass(frozen=True, slots=True)
class Replay:
    """Everything a replay needs, decided at capture time.

    Attributes:
        run: The plan's run with its input check (the shape guard).
        outputs: How the result's structure is rebuilt from the graph outputs.
        n_outputs: The number of graph outputs that are result tensors (value guards follow).
        guards: The value guards.
        static_shapes: For a static graph, its input shapes: the key already matched dtypes and
            ranks, so comparing shapes is the whole guard, and ``run_unchecked`` runs the plan.
        run_unchecked: The plan's run without its input check (None for a graph specialized
            per shape set).
        check: The plan's input check (raises :class:`InputMismatchError`), run before
            ``run_unchecked`` by a dynamic graph's quick path; None when that is None.
        one_tensor: The result is exactly one tensor and there are no value guards.
        container: ``list`` or ``tuple`` when the result is a flat one of tensors.
        write_backs: (input position, graph output) for each input the function writes
            into: after the guards pass, the output's contents are copied into the caller's
            array, which leaves it as eager NumPy would. An implicit input (a closure's,
            global's or attribute's array) is written back into the array read at the call.
        returned: (output, input position, leaf index, view operators) of each result that
            is the caller's own input array (``return out`` after writing into it) or a view
            of it (``return x.T``): NumPy hands back the same object, or a view of it, and so
            does the replay (the run leaves that output None when it can).
        repeats: (later, first) of each result that is an earlier one again (``return y,
            y``): one object twice, as in NumPy (the run leaves the later None).
        reads: The implicit inputs, read at each call (the arrays the function reaches
            without receiving them: :class:`kiln.capture.implicit.ImplicitReads`, whose
            getters a quick path inlines), which the graph takes after the call's own; None
            when it takes none.
        precheck: Checks the call's own arrays before ``reads`` are read, raising
            :class:`ShapeDrift`, when reading them draws random numbers (a call that misses
            must not have advanced the stream); None otherwise.
        remake: Builds this replay again from the graph's program as it is now (after a
            faster engine was swapped in); None when the replay does not follow its program.
    """

    run: Runner
    outputs: _Outputs
    n_outputs: int
    guards: tuple[ValueGuard, ...] = ()
    static_shapes: tuple[tuple[int, ...], ...] | None = None
    run_unchecked: Runner | None = None
    check: Runner | None = None
    one_tensor: bool = False
    container: type | None = None
    write_backs: tuple[tuple[int, int], ...] = ()
    returned: tuple[tuple[int, int, int, ViewChain], ...] = ()
    repeats: tuple[tuple[int, int], ...] = ()
    reads: ImplicitReads | None = None
    precheck: Callable[[list[np.ndarray]], None] | None = None
    remake: Callable[[], Replay] | None = field(default=None, compare=False, repr=False)

    def serve(self, arrays: list[np.ndarray], tensors_out: bool, leaves: Sequence[Any] = ()) -> Any:
        """The result of the capture's graph on the call's input ``arrays``: fresh, writable
        NumPy arrays (the plan's outputs, which never alias), or kiln tensors over them when
        ``tensors_out`` (the call passed a kiln tensor: SPEC section 5, NumPy in, NumPy out).
        A result that is one of the caller's inputs is that input itself, from the call's
        flat ``leaves`` (a kiln tensor stays the caller's tensor), else from ``arrays``.

        Raises:
            ShapeDrift: The arrays do not fit the graph's input shapes.
            GuardMiss: A value guard failed.
        """
        if self.reads is not None:
            if self.precheck is not None:
                self.precheck(arrays)  # (ShapeDrift before any random draw)
            arrays = [*arrays, *self.reads.fetch()]  # (ImplicitMiss: a changed dtype/shape)
        if self.write_backs:
            _check_unaliased(arrays, self.write_backs)
        static_shapes = self.static_shapes
        if static_shapes is not None:
            # A static graph: the full input check runs only to explain a miss.
            for array, shape in zip(arrays, static_shapes):
                if array.shape != shape:
                    break
            else:
                try:
                    outs = self.run_unchecked(arrays)  # type: ignore[misc]
                except Exception as exc:
                    raise self._unchecked(exc) from exc
                if self.one_tensor:
                    return Tensor._wrap(outs[0]) if tensors_out else outs[0]
                return self._result(outs, tensors_out, arrays, leaves)
        try:
            outs = self.run(arrays)
        except InputMismatchError as mismatch:
            raise ShapeDrift(mismatch) from None
        except Exception as exc:
            raise self._unchecked(exc) from exc
        if self.one_tensor:
            return Tensor._wrap(outs[0]) if tensors_out else outs[0]
        return self._result(outs, tensors_out, arrays, leaves)

    def _unchecked(self, error: Exception) -> Exception:
        """What a run that raised ``error`` raises: a :class:`GuardMiss` when the graph has
        value guards, which it checks only after running, so the error may come from an
        assumption they would have refused (a data-dependent count taken as an int, then
        different); the call is then served eagerly, where NumPy raises if it raises. Else
        ``error`` itself."""
        if not self.guards:
            return error
        guard = self.guards[0]
        return GuardMiss(guard, f"unchecked: the graph raised {type(error).__name__} first")

    def _result(
        self,
        outs: list[np.ndarray],
        tensors_out: bool,
        arrays: list[np.ndarray],
        leaves: Sequence[Any] = (),
    ) -> Any:
        for guard in self.guards:
            if not np.array_equal(outs[guard.output], guard.expected):
                raise GuardMiss(guard, outs[guard.output])
        for position, output in self.write_backs:
            target, contents = arrays[position], outs[output]
            if contents is not target:  # (a donating run wrote the caller's array itself)
                np.copyto(target, contents)
        results: list[Any] = outs[: self.n_outputs]
        if tensors_out:
            results = [Tensor._wrap(a) for a in results]
        for output, position, leaf, chain in self.returned:  # the caller's array, or a view
            given = leaves[leaf] if leaf < len(leaves) else arrays[position]
            if chain:
                view = given._data if type(given) is Tensor else given
                for op, extras, attrs in chain:
                    (view,) = run_kernel(op, [view, *extras], attrs)
                given = view
            if tensors_out and type(given) is not Tensor:
                given = Tensor._wrap(given)
            results[output] = given
        for later, first in self.repeats:
            results[later] = results[first]
        container = self.container
        if container is not None:  # a flat list or tuple of results: no unflattening
            return results if container is list else tuple(results)
        return self.outputs.rebuild(results)


class AliasedWrite(ReplayMiss):
    """The call passes arrays that share memory where the graph writes one of them: the
    graph would read the other as it was, so the call is served eagerly."""


def _check_unaliased(arrays: list[np.ndarray], write_backs: tuple[tuple[int, int], ...]) -> None:
    for position, _ in write_backs:
        target = arrays[position]
        for other, array in enumerate(arrays):
            if other != position and np.may_share_memory(target, array):
                raise AliasedWrite()


@dataclass(eq=False, **_SLOTS_WITH_WEAKREF)
class Capture:
    """One cache entry of a compiled function. Made once and replaced as a whole; only its
    ``last_used`` stamp changes, which the replay writes (the cache drops the least recently
    used entry first), and its ``replay``, swapped once for a faster engine's (see
    :func:`follow_engine`).

    Attributes:
        inputs: What the capture was recorded against (what explains the next change).
        graph: The finalized graph; None when the structure serves eagerly.
        replay: What serves calls from the graph; None when the structure serves eagerly.
        eager_reason: Why the structure serves eagerly: what the tracer could not record.
        failure: Why the structure serves eagerly: kiln itself failed after the target ran
            (optimizing, finalizing, planning), with the stage and the exception.
        pins: Why an operation fixed a dynamic size to one value, one message each.
        buffers: The arrays held: the graph's constants and the guards' expected values.
        last_used: The number of the last call this entry served (or captured).
        quick: Its replay path for calls of positional NumPy arrays (:func:`quick_path`),
            set when the compiled function keeps it; None where there is none.
        pending: For a big trace whose graph is being optimized and planned in the
            background (:mod:`kiln.capture.background`): the work, whose result replaces
            this entry; None otherwise.
    """

    inputs: CapturedInputs
    graph: ModelGraph | None = None
    replay: Replay | None = None
    eager_reason: str | None = None
    failure: str | None = None
    pins: tuple[str, ...] = ()
    buffers: tuple[np.ndarray, ...] = ()
    last_used: int = 0
    quick: Callable[[tuple[Any, ...]], Any] | None = None
    pending: PendingCapture | None = None

    @property
    def eager_why(self) -> str | None:
        """Why the structure serves eagerly (None when a graph serves it)."""
        return self.eager_reason or self.failure

    @property
    def nbytes(self) -> int:
        """The bytes this entry holds, each buffer counted once (see :func:`held_bytes`)."""
        return held_bytes(self.buffers)


def follow_engine(capture: Capture) -> None:
    """Have ``capture`` follow its program's engine: when the tiered selection swaps a faster
    engine in, the capture's replay is rebuilt on it and swapped in one assignment (a call
    reads ``capture.replay`` once, so it runs wholly on one engine or the other). The program
    holds the capture weakly: a dropped capture is not kept alive, and its pending selection
    is skipped."""
    graph, replay = capture.graph, capture.replay
    program = None if graph is None else graph.program
    subscribe = getattr(program, "subscribe", None)
    if replay is None or replay.remake is None or subscribe is None:
        return
    subscribe(capture, _swap_replay)


def _swap_replay(capture: Capture, plan: object) -> None:
    replay = capture.replay
    if replay is not None and replay.remake is not None:
        capture.replay = replay.remake()


MISS = object()  # what a quick path returns for a call it does not serve


def quick_path(
    capture: Capture, dtypes: Sequence[np.dtype], calls: Iterator[int]
) -> Callable[[tuple[Any, ...]], Any] | None:
    """The replay path of ``capture`` for a call of positional NumPy arrays of ``dtypes`` (the
    capture's key), as one generated function: ``quick(args)`` returns the result, or
    :data:`MISS` for any call it does not serve (other kinds or numbers of arguments, other
    dtypes or shapes, an implicit input that changed, arrays that alias a written one), which
    the compiled function then serves on its full path, where a miss is explained. It stamps
    ``capture.last_used`` from ``calls`` and reads ``capture.replay`` at each call (a faster
    engine may be swapped in).

    A static graph is checked inline (each array's exact type, shape and dtype) and its plan
    runs unchecked; any other graph goes through :meth:`Replay.serve`, whose misses all come
    before the plan runs. None for a capture with value guards (they miss after the run,
    which must then not run twice: it may draw random numbers) or without a replay.
    """
    replay = capture.replay
    if replay is None or replay.guards:
        return None
    n = len(dtypes)
    names = [f"a{i}" for i in range(n)]
    env: dict[str, Any] = {"_nd": np.ndarray, "_capture": capture, "_calls": calls}
    env.update({"_MISS": MISS, "_ReplayMiss": ReplayMiss})
    checks = [f"type({a}) is _nd" for a in names]
    checks += [f"{a}.dtype == _d{i}" for i, a in enumerate(names)]
    env.update({f"_d{i}": dtype for i, dtype in enumerate(dtypes)})
    listed = "[" + ", ".join(names) + "]"
    lines = [f"    if len(args) != {n}:", "        return _MISS"]
    if n:
        lines.append("    " + ", ".join(names) + ("," if n == 1 else "") + " = args")
    static = replay.static_shapes
    if static is not None and len(static) == n:
        env.update({f"_s{i}": shape for i, shape in enumerate(static)})
        checks += [f"{a}.shape == _s{i}" for i, a in enumerate(names)]
    lines += [f"    if not ({' and '.join(checks) or 'True'}):", "        return _MISS"]
    draws = replay.reads is not None and replay.reads.draws  # (a draw checks shapes first)
    runs = True  # whether the lines end running the plan on ``arrays``
    if static is not None and len(static) == n and not replay.write_backs and not draws:
        if replay.reads is not None:  # implicit inputs (closure, global, self arrays): inline
            got = []
            env["_GONE"] = replay.reads.gone
            lines.append("    try:")
            for k, (read, dtype, shape) in enumerate(replay.reads.getters):
                env.update({f"_get{k}": read, f"_gd{k}": dtype, f"_gs{k}": shape})
                lines.append(f"        i{k} = _get{k}()")
                got.append(f"type(i{k}) is _nd and i{k}.dtype == _gd{k} and i{k}.shape == _gs{k}")
            lines += ["    except _GONE:", "        return _MISS"]
            lines += [f"    if not ({' and '.join(got)}):", "        return _MISS"]
            names += [f"i{k}" for k in range(len(got))]
            listed = "[" + ", ".join(names) + "]"
        lines += ["    replay = _capture.replay", "    _capture.last_used = next(_calls)"]
        itself = _returns_an_input(replay)
        if itself is not None and itself < n:  # return x: nothing else to compute
            lines.append(f"    return a{itself}")
            runs = False
        else:
            lines.append(f"    arrays = {listed}")
    elif replay.check is not None and replay.reads is None and not replay.write_backs:
        # A dynamic graph: its input check, then its plan (Replay.serve explains a miss).
        env["_Mismatch"] = InputMismatchError
        lines += ["    replay = _capture.replay", "    try:"]
        lines += [f"        arrays = replay.check({listed})", "    except _Mismatch:"]
        lines += ["        return _MISS", "    _capture.last_used = next(_calls)"]
    else:  # serve: random draws, write-backs, a graph specialized per shape set
        lines += ["    try:", f"        result = _capture.replay.serve({listed}, False)"]
        lines += ["    except _ReplayMiss:", "        return _MISS"]
        lines += ["    _capture.last_used = next(_calls)", "    return result"]
        runs = False
    if runs and replay.one_tensor:
        lines.append("    return replay.run_unchecked(arrays)[0]")
    elif runs:
        lines.append("    return replay._result(replay.run_unchecked(arrays), False, arrays)")
    head = f"def quick(args, *, {', '.join(f'{k}={k}' for k in env)}):"
    namespace: dict[str, Any] = {}
    exec(compile("\n".join([head, *lines]) + "\n", "<kiln quick path>", "exec"), env, namespace)  # noqa: S102
    return namespace["quick"]  # type: ignore[no-any-return]


def _returns_an_input(replay: Replay) -> int | None:
    """The position of the input a replay's whole result is (``return x``, ``return out``
    after writing it with nothing to write back), or None: its graph then computes nothing the
    call returns, and the quick path hands the argument back without running it."""
    if replay.guards or replay.write_backs or replay.n_outputs != 1 or len(replay.returned) != 1:
        return None
    output, position, _, chain = replay.returned[0]
    spec = replay.outputs
    if chain or output != 0 or not spec.spec.is_leaf() or spec.tensor_positions != (0,):
        return None
    return position


def held_bytes(arrays: Iterable[np.ndarray]) -> int:
    """The bytes of memory ``arrays`` keep alive, each byte counted once: an array held by
    several captures, or several views of one buffer (a closure array and its slices), count
    as the one buffer they share.

    Each array stands for the whole buffer it views (its base, which it keeps alive); the
    buffers' address ranges are merged, so overlapping ones count once.

    Example:
        >>> w = np.zeros(1000)
        >>> held_bytes([w, w[10:], w.reshape(10, 100), np.zeros(10)])
        8080
    """
    spans = []
    for array in arrays:
        root = array
        while isinstance(root.base, np.ndarray):
            root = root.base
        if root.nbytes:
            spans.append(byte_bounds(root))
    total, end = 0, 0
    for low, high in sorted(spans):
        if high > max(low, end):
            total += high - max(low, end)
            end = high
    return total
