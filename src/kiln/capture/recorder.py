"""Recording one call of a compiled function into a :class:`~kiln.capture.replay.Capture`.

:func:`record_capture` runs the target once on recording tensors, which serves the call's
result and records the graph at the same time. Scalar host reads (``bool(t)``, ``t.item()``)
become value guards, extra graph outputs the replay checks; anything else the tracer cannot
record abandons the capture, so the structure serves eagerly (or, with ``fullgraph=True``,
raises :class:`~kiln.errors.CaptureError`). A failure of kiln's own after the target ran
(optimizing, finalizing, planning) serves the structure eagerly too: the call keeps its
result. A recorded graph is optimized, placed and finalized here, and everything the replay
can decide ahead of time (the runner, the static-shape shortcut, how to rebuild the result)
goes into its frozen :class:`~kiln.capture.replay.Replay`.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import optree

from ..device import Device, Stream
from ..errors import CaptureError, CaptureWarning, InputMismatchError
from ..ir.graph import Executable, ModelGraph, Value
from ..ops.dispatch import run_kernel
from ..ops.registry import OpDef
from ..optim.transform import DefaultsOptions
from ..runtime import selection_reference
from ..source import user_source, user_stacklevel
from ..spec import TensorSpec
from ..symbolic import SymDim
from ..tensor import Tensor, fresh_outputs
from ..tree import unflatten
from .background import PendingCapture
from .implicit import ImplicitReads, ImplicitSlot, discover
from .randomness import Draws, RecordingGenerator, is_generator, recording_draws
from .replay import Capture, Replay, Runner, ShapeDrift, ValueGuard, ViewChain
from .scalars import TracedFloat, standin
from .signature import CallSignature, CapturedInputs, DriftAxes
from .trace import InputSlot, Tracer, TraceRef, old_objects_frozen, plan_inputs, record
from .traced import _Outputs, output_leaves

__all__ = ["CaptureOptions", "record_capture", "MAX_SPECIALIZATIONS"]

MAX_SPECIALIZATIONS = 8  # concrete shapes a dynamic graph keeps specialized plans for

# Host conversions of one value, which a capture turns into value guards (fullgraph=False).
_SCALAR_READS = frozenset(
    {"bool(tensor)", "float(tensor)", "int(tensor)", "operator.index(tensor)", "Tensor.item()"}
)


@dataclass(frozen=True)
class CaptureOptions:
    """How a compiled function captures: :func:`kiln.compile`'s options, checked."""

    graph_name: str
    input_specs: tuple[TensorSpec, ...] | None = None  # the ``signature`` option
    dynamic: bool | None = None
    fullgraph: bool = False
    optimize: bool = True
    specialize: bool | None = None
    place: Device | Stream | None = None
    dynamic_axes: Mapping[Any, Any] | None = None
    output_names: tuple[str, ...] | None = None
    defaults: DefaultsOptions | None = None  # the optimizer's options and the node budget


class _CaptureTracer(Tracer):
    """A tracer that turns scalar host reads into value guards and, unless ``fullgraph``,
    abandons the capture (instead of failing the call) on anything it cannot record.

    Past ``max_nodes`` recorded nodes (``DefaultsOptions.max_nodes``) it abandons the capture
    and runs the rest of the call as plain NumPy: kernels on the arrays, writes into them,
    nothing recorded, so the call costs what eager NumPy costs from there on."""

    def __init__(self, fullgraph: bool, max_nodes: int = DefaultsOptions.max_nodes) -> None:
        super().__init__(compute=True)
        self.fullgraph = fullgraph
        self.guards: list[tuple[Value, np.ndarray, str]] = []
        self.abandoned: str | None = None
        self.max_nodes = max_nodes
        self.eager = False  # over the node budget: nothing more is recorded
        self.wrote_eagerly = False  # a write after that (it may reach an input's array)

    def over_budget(self) -> bool:
        return self.eager or self.builder.node_count >= self.max_nodes

    def apply(
        self, op: OpDef, inputs: Sequence[Tensor | None], attrs: dict[str, Any]
    ) -> tuple[Tensor, ...]:
        if not self.eager and self.builder.node_count >= self.max_nodes:
            self.abandon(
                f"recording more than {self.max_nodes:,} nodes (the node budget: raise it "
                "with kiln.compile(..., defaults=kiln.optim.DefaultsOptions(max_nodes=...)), "
                "or write the loop as array operations)"
            )
            self.eager = True
        if not self.eager:
            return super().apply(op, inputs, attrs)
        op.check_arity(len(inputs))
        if attrs and any(type(v) is TracedFloat for v in attrs.values()):
            attrs = {k: float(v) if type(v) is TracedFloat else v for k, v in attrs.items()}
        arrays = [None if t is None else t._data for t in inputs]
        results = fresh_outputs(op, arrays, run_kernel(op, arrays, attrs))
        return tuple(Tensor._wrap(r) for r in results)

    def write(
        self,
        t: Tensor,
        index: Any,
        value: Tensor,
        perform: Callable[[], Any],
        reduction: str = "none",
    ) -> None:
        if not self.eager:
            super().write(t, index, value, perform, reduction)
            return
        perform()  # NumPy's write into the arrays the function sees (inputs' are the caller's)
        self.wrote_eagerly = True

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

    def abandon(self, what: str) -> None:
        """Something at the user's current line cannot be recorded faithfully: serve the
        structure eagerly (raise :class:`CaptureError` under ``fullgraph=True``)."""
        if self.fullgraph:
            raise CaptureError(
                f"{what} at {user_source()} cannot be recorded faithfully into a graph; "
                "rewrite it, or use fullgraph=False to serve this structure eagerly"
            )
        if self.abandoned is None:
            self.abandoned = f"{what} at {user_source()}"

    def unsupported(self, what: str) -> None:
        if self.fullgraph:
            raise CaptureError(
                f"{what} at {user_source()} is not implemented by kiln, so it cannot be "
                "recorded; rewrite it with kiln operators or use fullgraph=False"
            )
        if self.abandoned is None:
            self.abandoned = f"{what} (not implemented by kiln) at {user_source()}"


def record_capture(
    target: Callable[..., Any],
    signature: CallSignature,
    options: CaptureOptions,
    drift: DriftAxes,
) -> tuple[Any, Capture]:
    """Run ``target`` on the call of ``signature`` while recording it, with the ``drift`` axes
    dynamic; return the call's result (plain tensors) and the capture.

    Once the target has run, a failure of kiln's own (recording the graph, optimizing,
    finalizing, choosing an engine, planning) never loses the call: the result is returned with
    a capture that serves the structure eagerly, its ``failure`` naming the stage, the
    exception and the input structure. The target's own exceptions propagate unchanged.

    Raises:
        CaptureError: ``fullgraph=True`` and the target does something that cannot be recorded.
        InputMismatchError: The call does not fit the options' signature, or ``output_names``
            does not fit the result.
    """
    # Recording, optimizing and planning allocate a few objects per node: the garbage
    # collector's full passes skip the process's older objects meanwhile (see
    # kiln.capture.trace.old_objects_frozen).
    with old_objects_frozen():
        return _record_capture(target, signature, options, drift)


def _record_capture(
    target: Callable[..., Any],
    signature: CallSignature,
    options: CaptureOptions,
    drift: DriftAxes,
) -> tuple[Any, Capture]:
    slots = _plan_slots(target, signature, options, drift)
    tracer = _CaptureTracer(options.fullgraph, (options.defaults or DefaultsOptions()).max_nodes)
    leaves = signature.leaves
    treespec = signature.treespec

    def rebuild(new_leaves: list[Any]) -> Any:
        return unflatten(treespec, new_leaves)

    # Arrays the target reads without receiving them (closures, globals, self): stand-ins the
    # tracer lifts to graph inputs when an operator uses them; the replay reads them afresh.
    # Random draws (np.random, generators passed or reached) become graph inputs that the
    # replay fills by drawing again from the same stream (kiln.capture.randomness).
    implicit = discover(target, signature.static_leaves)
    draws = Draws(tracer, functools.partial(_add_draw, tracer), tracer.abandon)
    call_leaves = [
        RecordingGenerator(leaf, f"argument {i}") if is_generator(leaf) else leaf
        for i, leaf in enumerate(leaves)
    ]
    # Float arguments that changed once are 0-d inputs the function sees as floats.
    scalars = {i: functools.partial(standin, x) for i, (x, _) in (signature.scalars or {}).items()}
    with (
        implicit.substituted(lambda t, slot: tracer.lift_implicit(t, slot, slot.name)),
        recording_draws(draws),
    ):
        result = record(
            target, signature.args, signature.kwargs, slots, call_leaves, rebuild, tracer, scalars
        )
    if scalars and any(isinstance(x, TracedFloat) for x in optree.tree_leaves(result)):
        tracer.abandon("returning a float computed from a float argument")
        result = optree.tree_map(
            lambda x: float(x.__kiln_plain__()) if isinstance(x, TracedFloat) else x, result
        )
    if implicit.rebound and tracer.abandoned is None:
        names_rebound = ", ".join(repr(n) for n in implicit.rebound)
        tracer.abandoned = f"rebinding {names_rebound} (state outside the arguments)"
    tensors, names, outputs = output_leaves(result)
    _check_written_inputs(tracer, slots, leaves, signature.converted)
    # Fresh copies: an eager result may view a closure array or another result (returning a
    # weight, (y, y)); like the replay's outputs (see kiln.exec.plan.output_copies) the
    # capture call's results never alias those. One copy of the outputs on the capture call,
    # which already costs a recording. A result that is an input, or a view of one, is what
    # NumPy gave: the caller's array, or the view of it the function made.
    returned = _returned_inputs(tracer, tensors, slots, signature)
    tensors_in = Tensor in map(type, leaves)
    served_leaves = [
        _as_returned(leaves[returned[i][1]] if not returned[i][2] else t._data, tensors_in)
        if i in returned
        else Tensor._wrap(np.array(t._data))
        for i, t in enumerate(tensors)
    ]
    # One array returned twice (``return y, y``) is one object twice, as in NumPy.
    repeats = _repeated_results(tensors, returned)
    for later, first in repeats:
        served_leaves[later] = served_leaves[first]
    served = outputs.rebuild(served_leaves)
    inputs = _captured_inputs(signature, slots, drift)
    if tracer.abandoned is not None:
        return served, Capture(inputs, eager_reason=tracer.abandoned)
    if options.output_names is not None:
        if len(options.output_names) != len(tensors):
            raise InputMismatchError(
                f"output_names has {len(options.output_names)} name(s) but "
                f"{options.graph_name} returns {len(tensors)} tensor(s)"
            )
        names = list(options.output_names)
    # The target has run: from here on a failure is kiln's, and it must not lose the call.
    try:
        with _stage("recording the graph"):
            graph = _finish_graph(tracer, tensors, names, options.graph_name)
            guards = _value_guards(tracer, len(tensors))
            # [issue 10, engine choice] call 1's inputs and eager outputs: the automatic engine
            # selection keeps only engines that reproduce them (kiln.runtime.selection_reference).
            reads = ImplicitReads(
                [
                    (slot.name, slot.read, value.type.dtype, tuple(value.type.shape))
                    for slot, value in tracer.implicit_inputs
                ],
                draws=any(slot.write is _read_only for slot, _ in tracer.implicit_inputs),
            )
            # Written inputs (explicit, then implicit) as they were before the call, and each
            # written array's contents after it (the write-backs' expected values).
            snapshots, implicit_snapshots = tracer.input_snapshots, tracer.implicit_snapshots
            before = [np.asarray(snapshots.get(i, leaves[s.index])) for i, s in enumerate(slots)]
            before += [
                np.asarray(implicit_snapshots.get(k, _array_of(slot.original)))
                for k, (slot, _) in enumerate(tracer.implicit_inputs)
            ]
            after = [np.asarray(_array_of(leaves[s.index])) for s in slots] + [
                np.asarray(_array_of(slot.original)) for slot, _ in tracer.implicit_inputs
            ]
            reference = (
                before,
                [np.asarray(t._data) for t in tensors]
                + [np.asarray(g.expected) for g in guards]
                + [after[i] for i, _ in tracer.write_backs],
            )
        results = _Results(
            outputs,
            len(tensors),
            guards,
            reads,
            tuple(tracer.write_backs),
            tuple((i, k, leaf, chain) for i, (k, leaf, chain) in returned.items()),
            repeats,
        )
    except _StageFailed as failed:
        return served, Capture(inputs, failure=failed.describe(slots))
    pins = tuple(message for _, _, message in tracer.pins)
    defaults = options.defaults or DefaultsOptions()
    if len(graph.nodes) < defaults.background_nodes:
        return served, _finished(graph, options, results, reference, inputs, slots, pins)
    # A big trace (an unrolled loop): the caller has its result; the graph is optimized and
    # planned in a background thread, which the next call that needs it waits for.
    reference = ([np.array(a) for a in reference[0]], [np.array(a) for a in reference[1]])
    work = functools.partial(_finished, graph, options, results, reference, inputs, slots, pins)

    def failed(why: str) -> Capture:
        return Capture(inputs, failure=f"{why} (inputs {_structure(slots)})")

    buffers = (*(c.data for c in graph.constants), *(g.expected for g in results.guards))
    pending = PendingCapture(functools.partial(_frozen, work), failed)
    return served, Capture(inputs, pins=pins, buffers=buffers, pending=pending)


def _finished(
    graph: ModelGraph,
    options: CaptureOptions,
    results: _Results,
    reference: tuple[list[np.ndarray], list[np.ndarray]],
    inputs: CapturedInputs,
    slots: Sequence[InputSlot],
    pins: tuple[str, ...],
) -> Capture:
    """The capture of the recorded ``graph``: optimized, placed and finalized, with its replay;
    or, when kiln fails at one of those stages, one that serves the structure eagerly."""
    try:
        replay = _finalize(graph, options, results, reference)
        with _stage("preparing the replay"):
            explicit = graph.input_values[: len(slots)]
            inputs = replace(inputs, shapes=tuple(v.shape for v in explicit))
            buffers = (*(c.data for c in graph.constants), *(g.expected for g in replay.guards))
    except _StageFailed as failed:
        return Capture(inputs, failure=failed.describe(slots))
    return Capture(inputs, graph, replay, pins=pins, buffers=buffers)


def _frozen(work: Callable[[], Capture]) -> Capture:
    """``work()`` with the process's older objects out of the collector's passes (as while
    recording: :func:`kiln.capture.trace.old_objects_frozen`)."""
    with old_objects_frozen():
        return work()


def _returned_inputs(
    tracer: _CaptureTracer,
    tensors: Sequence[Tensor],
    slots: Sequence[InputSlot],
    signature: CallSignature,
) -> dict[int, tuple[int, int, ViewChain]]:
    """The results that are the call's own input arrays (``return out`` after
    ``np.add(a, b, out=out)``, ``return x``), or views of them (``return x.T``, ``x[1:]``):
    NumPy returns the caller's array object itself, or a view of it, so the compiled call
    does too. Result index -> (graph input position, leaf index, the view operators from the
    input to the result, empty for the input itself). A result is an input when it is the
    input's recording tensor itself (kiln's functions never hand back their argument where
    NumPy makes a new array or view: see ``functions.operands.new_array``), or the input's own
    NumPy array, which a host conversion gave back (``np.ascontiguousarray(x)``: the capture
    is abandoned, and its call returns what NumPy would); a view of one when its chain of
    views (:mod:`kiln.capture.views`) starts at an input, every operator's other inputs
    constants. Not for a big-endian input (the graph ran on a native copy)."""
    found: dict[int, tuple[int, int, ViewChain]] = {}
    converted = {id(copy) for _, copy in signature.converted or ()}
    inputs = tracer.input_tensors[: len(slots)]
    positions = {id(t): k for k, (t, _) in enumerate(inputs)}
    arrays = {id(t._data): k for k, (t, _) in enumerate(inputs) if t._data is not None}
    for i, t in enumerate(tensors):
        chain: ViewChain = ()
        k = positions.get(id(t))
        if k is None and t._trace is None:
            k = arrays.get(id(t._data))  # an array the function got back from NumPy
        if k is None and getattr(t._trace, "view", None) is not None:
            walked = _view_chain(t)
            if walked is not None:
                k = positions.get(id(walked[0]))
                chain = walked[1]
        if k is None:
            continue
        leaf = signature.leaves[slots[k].index]
        if type(leaf) in (np.ndarray, Tensor) and id(leaf) not in converted:
            found[i] = (k, slots[k].index, chain)
    return found


def _view_chain(t: Tensor) -> tuple[Tensor, ViewChain] | None:
    """The tensor ``t`` views (the first of its chain of views) and the view operators from
    it to ``t`` (each with its constant other inputs and attributes), or None when an
    operator's other input is computed (a reshape to a size read off a dynamic shape)."""
    steps: list[tuple[OpDef, tuple[np.ndarray | None, ...], dict[str, Any]]] = []
    while True:
        view = getattr(t._trace, "view", None)
        if view is None:
            return t, tuple(reversed(steps))
        extras = []
        for e in view.extras:
            if e is not None and (e._trace is not None or e._data is None):
                return None
            extras.append(None if e is None else e._data)
        steps.append((view.op, tuple(extras), dict(view.attrs)))
        t = view.parent


def _repeated_results(
    tensors: Sequence[Tensor], returned: Mapping[int, Any]
) -> tuple[tuple[int, int], ...]:
    """(later, first) for each result that is the same tensor as an earlier one (``return y,
    y``, ``r = np.exp(a, out=b); return r, b``), unless it is an input (the caller's own
    array, handed back by ``returned``)."""
    first: dict[int, int] = {}
    found = []
    for j, t in enumerate(tensors):
        i = first.setdefault(id(t), j)
        if i != j and j not in returned:
            found.append((j, i))
    return tuple(found)


def _as_returned(leaf: Any, tensors_out: bool) -> Any:
    """The caller's input ``leaf`` as a result of the call's kind: itself, or a kiln tensor over
    a NumPy array when the call passed kiln tensors."""
    return Tensor._wrap(leaf) if tensors_out and type(leaf) is np.ndarray else leaf


def _check_written_inputs(
    tracer: _CaptureTracer,
    slots: Sequence[InputSlot],
    leaves: Sequence[Any],
    converted: Sequence[tuple[np.ndarray, np.ndarray]] | None,
) -> None:
    """Inputs the call wrote into: the caller's arrays hold NumPy's final contents (a
    big-endian input, computed on a native copy, gets the copy's), and the replay can write
    them back. Abandon the capture (serve the structure eagerly) when it cannot: an input that
    shares memory with another input (the graph would read the other as it was)."""
    written = tracer.written_inputs()
    if not written and not tracer.wrote_eagerly:
        return
    arrays = [_array_of(leaves[s.index]) for s in slots]
    for position, t in written:
        target = arrays[position]
        if isinstance(target, np.ndarray) and t._data is not None and t._data is not target:
            np.copyto(target, t._data)
    for original, copy in converted or ():
        np.copyto(original, copy)
    for position, _ in written:
        name = slots[position].name
        target = arrays[position]
        for other, array in enumerate(arrays):
            if other != position and np.may_share_memory(target, array):
                tracer.abandon(
                    f"a write into input {name!r}, which shares memory with input "
                    f"{slots[other].name!r}"
                )
                return


def _add_draw(tracer: Tracer, t: Tensor, read: Callable[[], Any], name: str) -> None:
    """A random draw ``t``: a graph input now, which a replay fills with ``read()``."""
    slot = ImplicitSlot(name, read, _read_only, t._data, (id(t), name))
    tracer.add_implicit(t, slot, name)


def _read_only(value: Any) -> None:
    raise TypeError("a random draw is not a place to write")


def _array_of(x: Any) -> Any:
    return x._data if isinstance(x, Tensor) else x


class _StageFailed(Exception):
    """Kiln failed at ``stage`` of a capture, after the target ran (internal: the capture then
    serves its structure eagerly)."""

    def __init__(self, stage: str, cause: Exception) -> None:
        super().__init__(f"{stage}: {type(cause).__name__}: {cause}")
        self.stage = stage
        self.cause = cause

    def describe(self, slots: Sequence[InputSlot]) -> str:
        """The stage, the exception and the input structure, for the warning and history."""
        cause = self.cause
        return (
            f"{self.stage} failed with {type(cause).__name__}: {cause} (inputs {_structure(slots)})"
        )


def _structure(slots: Sequence[InputSlot]) -> str:
    return ", ".join(f"{s.name}: {s.type}" for s in slots) or "no tensor inputs"


@contextmanager
def _stage(stage: str) -> Iterator[None]:
    """Name the capture stage an exception of the block comes from (:class:`_StageFailed`)."""
    try:
        yield
    except _StageFailed:
        raise
    except Exception as exc:
        raise _StageFailed(stage, exc) from exc


def _plan_slots(
    target: Callable[..., Any],
    signature: CallSignature,
    options: CaptureOptions,
    drift: DriftAxes,
) -> list[InputSlot]:
    """Names and symbolic types of the graph inputs, with the ``drift`` axes dynamic."""
    extra: dict[int, dict[int, str | None]] = {}
    for (k, axis), name in drift.items():
        extra.setdefault(k, {})[axis] = name
    return plan_inputs(
        signature.paths,
        signature.leaves,
        options.input_specs,
        options.dynamic_axes,
        target,
        all_dynamic=options.dynamic is True,
        extra_dynamic=extra,
    )


def _captured_inputs(
    signature: CallSignature, slots: Sequence[InputSlot], drift: DriftAxes
) -> CapturedInputs:
    positions = tuple(s.index for s in slots)
    tensors = set(positions)
    return CapturedInputs(
        treespec=signature.treespec,
        tensor_positions=positions,
        static_leaves=tuple(x for i, x in enumerate(signature.leaves) if i not in tensors),
        names=tuple(s.name for s in slots),
        dtypes=tuple(s.type.dtype for s in slots),
        shapes=tuple(s.type.shape for s in slots),
        drift=dict(drift),
    )


def _finish_graph(
    tracer: _CaptureTracer, tensors: Sequence[Tensor], names: Sequence[str], graph_name: str
) -> ModelGraph:
    """The recorded graph: the result tensors, then one output per value guard."""
    guard_tensors = [
        Tensor._abstract(value.type, TraceRef(tracer, value)) for value, _, _ in tracer.guards
    ]
    guard_names = [f"guard.{i}" for i in range(len(guard_tensors))]
    return tracer.finish(graph_name, [*tensors, *guard_tensors], [*names, *guard_names])


def _value_guards(tracer: _CaptureTracer, n_outputs: int) -> tuple[ValueGuard, ...]:
    return tuple(
        ValueGuard(n_outputs + i, expected, where)
        for i, (_, expected, where) in enumerate(tracer.guards)
    )


@dataclass(frozen=True)
class _Results:
    """How a graph's outputs become a call's results, besides the graph (see
    :class:`~kiln.capture.replay.Replay`, whose fields these become): the result structure,
    the number of result outputs, the value guards, the implicit inputs read at each call, the
    write-backs, the results that are inputs or views of them, and the repeated results."""

    outputs: _Outputs
    n_outputs: int
    guards: tuple[ValueGuard, ...]
    reads: ImplicitReads | None = None
    write_backs: tuple[tuple[int, int], ...] = ()
    returned: tuple[tuple[int, int, int, ViewChain], ...] = ()
    repeats: tuple[tuple[int, int], ...] = ()


def _finalize(
    graph: ModelGraph,
    options: CaptureOptions,
    results: _Results,
    reference: tuple[list[np.ndarray], list[np.ndarray]] | None = None,
) -> Replay:
    """Optimize, place and finalize ``graph``; the replay of the finalized graph. The engine
    is chosen among those that give ``reference`` (inputs, the outputs they gave) when set."""
    dynamic = any(isinstance(d, SymDim) for v in graph.input_values for d in v.shape)
    if options.optimize:
        with _stage("optimizing the graph"):
            graph.optimize(
                None if options.specialize is not False else _generic_pipeline(),
                defaults=options.defaults,
            )
    if options.place is not None:
        with _stage("placing the graph"):
            graph.to(options.place)
    with _stage("finalizing the graph (engine selection and planning)"):
        if reference is None:
            graph.finalize()
        else:
            # Tiered: NumPy serves at once, other engines are chosen in the background.
            with selection_reference(*reference, background=True):
                graph.finalize()
    with _stage("preparing the replay"):
        return _replay(graph, options, results, dynamic)


def _replay(graph: ModelGraph, options: CaptureOptions, results: _Results, dynamic: bool) -> Replay:
    """The replay of the finalized ``graph``: everything decided ahead of the calls. With
    implicit ``reads``, the replay appends the implicit inputs, read at the call, to the call's
    arrays (the graph takes them after the explicit ones; a write-back may go into them).
    ``returned``: (output, input position, leaf index, view operators) of each result that is
    the caller's own input array or a view of it, handed back as NumPy would (the run need not
    copy it out). ``repeats``: (later, first) of each result that is an earlier one again."""
    outputs, n_outputs, guards = results.outputs, results.n_outputs, results.guards
    reads, write_backs = results.reads, results.write_backs
    returned, repeats = results.returned, results.repeats
    program = graph.program
    assert program is not None
    static_shapes: tuple[tuple[int, ...], ...] | None = None
    run_unchecked: Runner | None = None
    check: Runner | None = None
    if options.specialize is True and dynamic:
        run = _specializing_runner(graph, options.optimize, options.defaults)
    else:
        run_arrays = program.run_arrays
        donating = getattr(getattr(program, "plan", None), "donating", None)
        if (write_backs or returned or repeats) and not guards and donating is not None:
            # The written inputs' buffers are lent to the run (the NumPy plan's donation):
            # their new contents are computed in place, and the write-back has nothing to copy.
            # Not with value guards: a guard that fails must find the inputs as they were.
            # The results that are the caller's own inputs are not copied out.
            donate = {output: position for position, output in write_backs}
            unread = [output for output, _, _, _ in returned] + [j for j, _ in repeats]
            run_arrays = donating(donate, unread)
            run_arrays = run_arrays or program.run_arrays
        run = _checked_runner(program.check_inputs, run_arrays)
        run_unchecked, check = run_arrays, program.check_inputs
        if not dynamic and options.specialize is not True and not graph.shape_guards:
            explicit = graph.input_values[: len(graph.input_values) - len(reads or ())]
            static_shapes = tuple(tuple(int(d) for d in v.shape) for v in explicit)
    single = outputs.spec.is_leaf() and outputs.tensor_positions == (0,)
    precheck = None
    if reads is not None and reads.draws:
        precheck = _prechecker(program.check_inputs, reads.prototypes())
    return Replay(
        run=run,
        outputs=outputs,
        n_outputs=n_outputs,
        guards=guards,
        static_shapes=static_shapes,
        run_unchecked=run_unchecked,
        check=check,
        one_tensor=single and not guards and not write_backs and not returned,
        container=_flat_container(outputs, n_outputs),
        write_backs=write_backs,
        returned=returned,
        repeats=repeats,
        reads=reads if reads else None,
        precheck=precheck,
        remake=None
        if options.specialize is True and dynamic
        else functools.partial(_replay, graph, options, results, dynamic),
    )


def _flat_container(outputs: _Outputs, n_outputs: int) -> type | None:
    """``list`` or ``tuple`` when the result is a flat one of tensors, which the replay builds
    without unflattening."""
    found: type | None = None
    if not outputs.static_leaves:
        for container in (list, tuple):
            flat_result: Any = container([0] * n_outputs)
            if outputs.spec == optree.tree_structure(flat_result):
                found = container
    return found


def _prechecker(check: Runner, prototypes: list[np.ndarray]) -> Callable[[list[np.ndarray]], None]:
    """The input check of a call's own arrays, the implicit inputs stood for by
    ``prototypes``: a replay that draws random numbers misses before it draws any (a drifted
    call is then served by a re-capture that draws as eager NumPy does, once)."""

    def precheck(arrays: list[np.ndarray]) -> None:
        try:
            check([*arrays, *prototypes])
        except InputMismatchError as mismatch:
            raise ShapeDrift(mismatch) from None

    return precheck


def _checked_runner(check: Runner, run_arrays: Runner) -> Runner:
    """The plan's run behind its input check (the shape guard)."""

    def run(arrays: list[np.ndarray]) -> list[np.ndarray]:
        return run_arrays(check(arrays))

    return run


def _generic_pipeline() -> list[Any]:
    """The default pipeline without shape folding: the graph stays generic (specialize=False)."""
    from ..optim import default_pipeline, fold_shapes

    return [t for t in default_pipeline() if t is not fold_shapes]


def _specializing_runner(
    graph: ModelGraph, optimize: bool, defaults: DefaultsOptions | None = None
) -> Runner:
    """A runner that specializes ``graph`` to each new set of input shapes (specialize=True):
    sizes bound, shape arithmetic folded, a plan per shape set (the first few kept)."""
    from ..optim import specialize_graph

    generic = graph.program
    assert generic is not None
    check = generic.check_inputs
    programs: dict[tuple[tuple[int, ...], ...], Executable] = {}

    def run(arrays: list[np.ndarray]) -> list[np.ndarray]:
        arrays = check(arrays)
        shapes = tuple(a.shape for a in arrays)
        program = programs.get(shapes)
        if program is None:
            try:
                special = specialize_graph(graph, generic.bindings(arrays))
                if optimize:
                    special.optimize(defaults=defaults)
                with selection_reference(background=True):  # tiered, as the capture's
                    special.finalize()
                program = special.program
                assert program is not None
            except Exception as exc:  # kiln's failure: the generic plan serves these shapes
                program = generic
                warnings.warn(
                    f"kiln.compile({graph.name}): specializing the graph to the input shapes "
                    f"{list(shapes)} failed with {type(exc).__name__}: {exc}; calls with these "
                    "shapes run the generic graph",
                    CaptureWarning,
                    stacklevel=user_stacklevel(),
                )
            if len(programs) < MAX_SPECIALIZATIONS:
                programs[shapes] = program
        return program.run_arrays(arrays)

    return run
