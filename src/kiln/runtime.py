"""The runtime layer: what a :class:`~kiln.io.ModelGraph`'s lifecycle methods delegate to.

The IR (:mod:`kiln.ir`) is data. Finalizing a graph needs the executors (:mod:`kiln.exec`),
optimizing it the optimizer (:mod:`kiln.optim`), saving it the exporter (:mod:`kiln.io`); all
of them import the IR, so the IR cannot import them. This module, the one layer above all
three, implements the IR's :class:`~kiln.ir.graph.GraphRuntime` and installs itself when kiln
is imported. It owns what a finalized graph is: a :class:`Program`, the plan of one engine at
one place.

**Tiered engine selection.** Choosing an engine automatically (:func:`kiln.exec.select.choose`)
builds, checks and times candidate engines, and an XLA compile of a big graph takes seconds.
``kiln.compile`` finalizes inside :func:`selection_reference` with ``background=True``: the
:class:`Program` then serves on the NumPy plan at once, and the selection runs in one daemon
worker thread for the whole process (a queue, one job at a time), with the same checks on the
same saved inputs and eager outputs. When it picks a faster exact engine, the program swaps it
in (:meth:`Program.subscribe` tells its owners, e.g. a compiled function's replay, which swaps
its own frozen replay in one attribute assignment). :meth:`Program.wait_selected` waits for
it. ``KILN_ENGINE_SELECTION=sync`` in the environment makes that selection run at once, as an
explicit ``graph.finalize()`` (automatic or with a named engine) always does.
"""

from __future__ import annotations

import atexit
import os
import queue
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, NamedTuple

import numpy as np

from .exec import build_plan, select
from .exec.plan import Plan
from .io.onnx_export import save, to_onnx
from .ir.graph import ModelGraph, install_runtime
from .optim.pipeline import run_pipeline
from .optim.transform import DefaultsOptions, OptimizeReport, Transform

__all__ = ["Program", "GraphRuntime", "selection_reference", "SELECTION_ENV"]

Reference = tuple[Sequence[np.ndarray], Sequence[np.ndarray]]
# The environment variable that makes the tiered (background) selection synchronous: "sync".
SELECTION_ENV = "KILN_ENGINE_SELECTION"
# How long the interpreter's exit waits for a selection in progress (an XLA compile) before
# leaving the daemon worker to die with the process.
EXIT_WAIT_SECONDS = 5.0


class _Selecting(NamedTuple):
    """What the automatic engine selection does while a graph is finalized inside
    selection_reference(...): the reference (checked inputs and the outputs they must give),
    and whether it runs in the background."""

    reference: Reference | None
    background: bool


_SELECTING: ContextVar[_Selecting | None] = ContextVar("kiln_selection", default=None)


@contextmanager
def selection_reference(
    inputs: Sequence[np.ndarray] | None = None,
    outputs: Sequence[np.ndarray] | None = None,
    *,
    background: bool = False,
) -> Iterator[None]:
    """Within the block, finalizing a graph with the automatic engine choice checks each
    candidate engine's outputs on ``inputs`` (the graph's inputs, in order) against
    ``outputs`` (what NumPy gave: a compiled function passes its first call's eager result),
    and keeps an engine only if they agree (:func:`kiln.exec.select.same_answer`). Without
    ``inputs``, candidates are checked on synthetic inputs only.

    With ``background=True`` the selection is tiered: the program serves on the NumPy plan at
    once and the candidates are checked, timed and swapped in by the selection worker (see
    the module docstring), unless ``KILN_ENGINE_SELECTION=sync``. The reference arrays are
    copied, so the caller may change them afterwards.

    Example:
        >>> import kiln, numpy as np
        >>> g = kiln.trace(lambda x: x * 2, kiln.ones((3,), "float32")).graph
        >>> x = np.ones(3, np.float32)
        >>> with selection_reference([x], [x * 2]):
        ...     g.finalize()
        >>> g.program.engine
        'numpy'
    """
    reference = None if inputs is None else (list(inputs), list(outputs or ()))
    token = _SELECTING.set(_Selecting(reference, background))
    try:
        yield
    finally:
        _SELECTING.reset(token)


class Program:
    """A finalized graph: the plan that runs it on one engine at one place.

    ``check_inputs`` and ``run_arrays`` are the plan's own callables (no indirection on the
    replay path); ``run`` checks, runs and wraps the results as tensors.

    With ``background=True`` (and no engine named) the program is tiered: it serves on the
    NumPy plan at once while the selection worker chooses among the engines; a faster exact
    engine is then swapped in (``plan``, ``check_inputs`` and ``run_arrays`` change) and the
    program's subscribers are told (:meth:`subscribe`). :attr:`pending` says which engines
    are still being considered, :meth:`wait_selected` waits for the choice, and
    :meth:`describe_engine` says which engine serves and why.

    Example:
        >>> import kiln
        >>> g = kiln.trace(lambda x: x * 2, kiln.ones((3,), "float32")).graph
        >>> g.finalize("numpy")
        >>> g.program.engine
        'numpy'
    """

    __slots__ = (
        "plan",
        "place",
        "requested_engine",
        "check_inputs",
        "run_arrays",
        "pending",
        "_settled",
        "_lock",
        "_subscribers",
        "_promoted",
    )
    plan: Plan
    check_inputs: Callable[[Any], list[np.ndarray]]
    run_arrays: Callable[[Sequence[np.ndarray]], list[np.ndarray]]

    def __init__(
        self,
        graph: ModelGraph,
        place: object,
        engine: str | None,
        reference: Reference | None = None,
        background: bool = False,
    ) -> None:
        self.place = place
        self.requested_engine = engine  # None: chosen by measurement (see kiln.exec.select)
        # The engines whose selection is in progress (a tiered program only; empty when done).
        self.pending: tuple[str, ...] = ()
        self._settled: threading.Event | None = None
        self._lock = threading.Lock()
        self._subscribers: list[tuple[weakref.ref[Any], Callable[[Any, Plan], None]]] = []
        self._promoted = False
        if engine is not None or not background:
            self._serve(build_plan(graph, place, engine, reference))
            return
        plan = build_plan(graph, place, "numpy")
        work, not_measured = select.measurable(graph)
        plan.selection = {"work": work, "chosen": "numpy"}
        self._serve(plan)
        engines, refused = select.candidates(graph)
        if not_measured is not None or not engines:
            if not not_measured:
                not_measured = "no other engine " + ("qualified" if refused else "installed")
                plan.selection["refused"] = refused
            plan.selection["not_measured"] = not_measured
        else:
            self.pending = engines
            self._settled = threading.Event()
            if reference is not None:  # the caller's arrays may change meanwhile: copies
                reference = (
                    [np.array(a) for a in reference[0]],
                    [np.array(a) for a in reference[1]],
                )
            _WORKER.submit(_Job(self, graph, reference))

    def _serve(self, plan: Plan) -> None:
        self.plan = plan
        self.check_inputs = plan.check_inputs
        self.run_arrays = plan.run_arrays

    def subscribe(self, owner: object, callback: Callable[[Any, Plan], None]) -> None:
        """Call ``callback(owner, plan)`` when a faster engine's ``plan`` is swapped in (at once,
        in this thread, when it already was), while ``owner`` lives (it is held weakly: a
        tiered program whose owners are all gone skips its selection)."""
        with self._lock:
            self._subscribers.append((weakref.ref(owner), callback))
            promoted = self._promoted
        if promoted:
            callback(owner, self.plan)

    def wanted(self) -> bool:
        """Whether anyone still runs this program: it has no subscribers (a graph finalized by
        hand), or one of them lives."""
        with self._lock:
            subscribers = list(self._subscribers)
        return not subscribers or any(ref() is not None for ref, _ in subscribers)

    def wait_selected(self, timeout: float | None = None) -> bool:
        """Wait until the engine selection is done (the faster engine swapped in and the
        subscribers told, or NumPy kept); True when it is, False when ``timeout`` seconds
        passed first. A program that is not tiered is always done."""
        settled = self._settled
        if settled is None or settled.is_set():
            return True
        _WORKER.ensure_running()
        return settled.wait(timeout)

    def describe_engine(self) -> str:
        """One line: which engine serves and why (see :func:`kiln.exec.select.describe`)."""
        if self.requested_engine is not None:
            return f"{self.engine} (requested)"
        return select.describe(getattr(self.plan, "selection", None), self.pending)

    def _promote(self, plan: Plan) -> None:
        """Swap ``plan`` in and tell the subscribers (the selection worker's thread)."""
        with self._lock:
            self._serve(plan)
            self._promoted = True
            subscribers = list(self._subscribers)
        for ref, callback in subscribers:
            owner = ref()
            if owner is not None:
                try:
                    callback(owner, plan)
                except Exception:  # noqa: S110 - that owner keeps what it had (the NumPy plan)
                    pass

    def _settle(self, **note: str) -> None:
        """The selection is over; ``note`` (``error=...`` or ``not_measured=...``) says why
        it ended without a choice, on the serving plan's ``selection``."""
        if note:
            selection = dict(getattr(self.plan, "selection", None) or {})
            selection.update(chosen=self.engine, **note)
            self.plan.selection = selection  # type: ignore[attr-defined]
        self.pending = ()
        if self._settled is not None:
            self._settled.set()

    @property
    def engine(self) -> str:
        """The engine that runs the graph (``"numpy"``, ``"jax"``, ``"onnxruntime"``, ...)."""
        return self.plan.engine

    def run(self, inputs: Sequence[Any] | Mapping[str, Any]) -> list:
        """Run on flat inputs (signature order, or by name); returns the output tensors."""
        return self.plan.run(inputs)

    def bindings(self, arrays: Sequence[np.ndarray]) -> dict[str, int]:
        """The size each named symbolic dimension takes for checked input ``arrays``."""
        return self.plan.bindings(arrays)

    def __repr__(self) -> str:
        return f"<Program on {self.engine}: {self.plan!r}>"


class GraphRuntime:
    """:class:`~kiln.ir.graph.GraphRuntime`: finalize, optimize and save graphs."""

    def finalize(self, graph: ModelGraph, place: object, engine: str | None) -> Program:
        selecting = _SELECTING.get() if engine is None else None
        if selecting is None:
            return Program(graph, place, engine)
        reference = selecting.reference
        if reference is not None and not _fits(graph, reference):
            reference = None  # not this graph's inputs and outputs
        background = selecting.background and os.environ.get(SELECTION_ENV, "") != "sync"
        return Program(graph, place, engine, reference, background)

    def optimize(
        self,
        graph: ModelGraph,
        transforms: Sequence[Transform] | None,
        max_num_iterations: int,
        defaults: DefaultsOptions | None,
    ) -> tuple[ModelGraph, OptimizeReport]:
        return run_pipeline(graph, transforms, max_num_iterations, defaults)

    def save(self, graph: ModelGraph, path: str | os.PathLike[str]) -> None:
        save(graph, path)

    def to_onnx(self, graph: ModelGraph) -> object:
        return to_onnx(graph)


def _fits(graph: ModelGraph, reference: Reference) -> bool:
    """Whether ``reference`` holds an array of the right dtype and rank for each input and
    output of ``graph``."""
    inputs, outputs = reference
    pairs = [*zip(graph.input_values, inputs), *zip(graph.output_values, outputs)]
    return (
        len(inputs) == len(graph.input_values)
        and len(outputs) == len(graph.output_values)
        and all(
            isinstance(a, np.ndarray) and a.dtype == v.dtype and a.ndim == len(v.shape)
            for v, a in pairs
        )
    )


class _Job(NamedTuple):
    """One tiered selection: the program to promote, its graph, the saved reference."""

    program: Program
    graph: ModelGraph
    reference: Reference | None

    def run(self) -> None:
        program = self.program
        if not program.wanted():
            program._settle(not_measured="not measured: its capture was dropped first")
            return
        serving = program.plan

        def cancelled() -> bool:
            return _WORKER.stopping or not program.wanted()

        try:
            chosen = select.choose(
                self.graph, reference=self.reference, numpy_plan=serving, cancelled=cancelled
            )
        except Exception as exc:  # kiln's failure: NumPy keeps serving, and explain says why
            program._settle(error=f"{type(exc).__name__}: {exc}")
            return
        if cancelled():
            program._settle(not_measured="not measured: cancelled (capture dropped, or exit)")
            return
        if chosen is not serving:
            program._promote(chosen)
        program._settle()


class _SelectionWorker:
    """The one daemon thread that runs tiered selections, one job at a time, in order.

    Started with the first job (and again in a child process after a fork, with the jobs the
    parent had not finished); at the interpreter's exit it takes no new job and the exit waits
    up to :data:`EXIT_WAIT_SECONDS` for the job in progress.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._current: _Job | None = None
        self._stopping = False
        self._idle = threading.Event()
        self._idle.set()

    @property
    def stopping(self) -> bool:
        """Whether the interpreter is exiting (the job in progress should end soon)."""
        return self._stopping

    def submit(self, job: _Job) -> None:
        self._queue.put(job)
        self.ensure_running()

    def ensure_running(self) -> None:
        with self._lock:
            if self._stopping or (self._thread is not None and self._thread.is_alive()):
                return
            self._thread = threading.Thread(
                target=self._loop, name="kiln-engine-selection", daemon=True
            )
            self._thread.start()

    def _loop(self) -> None:
        while not self._stopping:
            job = self._queue.get()
            self._current = job
            self._idle.clear()
            # Registered again per job, so that it runs before the engines' own exit hooks
            # (atexit runs the most recent first): no XLA compile is cut off mid-teardown.
            atexit.unregister(self._exit)
            atexit.register(self._exit)
            try:
                if self._stopping:
                    job.program._settle(not_measured="not measured: the interpreter is exiting")
                else:
                    job.run()
            except BaseException as exc:  # never let the worker die with a job unsettled
                try:
                    job.program._settle(error=f"{type(exc).__name__}: {exc}")
                except BaseException:  # noqa: S110 - at least wake its waiters
                    job.program._settle()
            finally:
                self._current = None
                self._idle.set()

    def _exit(self) -> None:
        self._stopping = True
        self._idle.wait(EXIT_WAIT_SECONDS)

    def _after_fork(self) -> None:
        """In a child process: the worker thread is gone; its unfinished jobs run again."""
        jobs = [] if self._current is None else [self._current]
        while True:
            try:
                jobs.append(self._queue.get_nowait())
            except queue.Empty:
                break
        self.__init__()  # type: ignore[misc]
        for job in jobs:
            self._queue.put(job)
        if jobs:
            self.ensure_running()


_WORKER = _SelectionWorker()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_WORKER._after_fork)


install_runtime(GraphRuntime())
