"""Choosing an engine for a graph: exact candidates first, then measured cost, stably.

:func:`choose` builds the NumPy plan (always possible), and, when the graph's static work is
large enough for a compiler to matter (:func:`work_estimate`), the plans of the optional
engines that are installed and can run every node with NumPy's semantics (each engine refuses
a graph with a node its records say it computes differently: SPEC 5b). Every candidate must
then reproduce NumPy's answer (:func:`same_answer`) on the synthetic inputs (against the
NumPy plan) and, when the caller gives one (``reference``: ``kiln.compile`` passes call 1's
inputs and eager outputs), on the reference inputs against the expected outputs; a candidate
that differs, or raises, is dropped.

NumPy's answer means NumPy's bits (SPEC 5b: the automatic choice never changes a result).
Another engine is a candidate only for a graph whose every node it computes bit for bit
(:func:`rounding_differs`: correctly rounded arithmetic, comparisons and data movement, by
the operators' records, ``OpDef.bit_exact``; no math-library function such as ``exp``, no
sum or product in an order of the engine's choosing, and for XLA no multiply feeding an add,
which it contracts), and its outputs must then equal NumPy's bit for bit. A graph optimized
with ``DefaultsOptions(allow_reassociation=True)`` (``ModelGraph.reassociation_allowed``)
has opted into rounding differences: there every engine that runs the graph with NumPy's
semantics is a candidate and agrees when within :data:`ULPS`.

The survivors are timed on synthetic inputs of the graph's static shapes, and the rule that
turns timings into a choice is stable (:func:`pick`): an optional engine replaces NumPy only
when it is clearly faster (:data:`WIN_MARGIN`), timings near that line are measured again
before deciding, and engines within :data:`TIE_MARGIN` of each other are ranked by a fixed
order, not by noise. Tiny graphs never pay for the measurement: below :data:`AUTO_MIN_WORK` the
NumPy plan is returned at once. No engine is compiled when its expected compile time is out of
proportion to the graph's run time (:func:`compile_is_worth_it`: at most
:data:`COMPILE_BUDGET_RUNS` NumPy runs, with the compile time estimated per node,
:data:`COMPILE_SECONDS_PER_NODE`). What was decided and why is kept on the chosen plan
(``plan.selection``), and :func:`describe` says it in a line.

``kiln.compile`` runs :func:`choose` off the critical path (tiered: NumPy serves at once, see
:mod:`kiln.runtime`); an explicit ``finalize()`` runs it at once.

Example:
    >>> import kiln, numpy as np
    >>> g = kiln.trace(lambda x: x + 1, kiln.ones((8,), "float32")).graph
    >>> choose(g).engine
    'numpy'
"""

from __future__ import annotations

import importlib.util
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..ops.registry import get_op
from .plan import node_rounding

if TYPE_CHECKING:
    from ..ir.graph import ModelGraph, Node

__all__ = [
    "AUTO_MIN_WORK",
    "WIN_MARGIN",
    "TIE_MARGIN",
    "work_estimate",
    "synthetic_inputs",
    "same_answer",
    "rounding_differs",
    "pick",
    "choose",
    "candidates",
    "describe",
    "measurable",
    "compile_is_worth_it",
    "installed",
    "OPTIONAL_ENGINES",
    "COMPILE_BUDGET_RUNS",
    "COMPILE_SECONDS_PER_NODE",
]

# Below this many estimated element operations (about 1 ms of NumPy), the NumPy plan wins or
# loses by microseconds and measuring costs more than it could save.
AUTO_MIN_WORK = 1_000_000
# How long one block of runs of a candidate may take (after its warm-up call), the runs in a
# block, and the passes over all candidates. Up to ~0.2 s for three engines on a big graph.
MEASURE_SECONDS = 0.03
MEASURE_MAX_RUNS = 30
MEASURE_PASSES = 2
# An optional engine is chosen over NumPy only when its best time is at most this fraction of
# NumPy's: a clear win, not a coin toss decided by the machine's load.
WIN_MARGIN = 0.8
# Timings whose ratio to NumPy's falls within this band around WIN_MARGIN are measured again
# (MEASURE_PASSES more passes) before the choice is made.
RECHECK_BAND = (0.6, 1.0)
# Optional engines whose times are within this factor of the fastest count as tied; ties go to
# the first in OPTIONAL_ENGINES.
TIE_MARGIN = 1.15
# An engine's result agrees with NumPy's when, element by element, NaN is NaN, infinities
# and exact zeros (with their sign) are equal, and finite values differ by at most
# ULPS * eps * (|expected| + the largest finite |expected| of that output): a few rounding
# steps of a reordered sum, never a dropped NaN, an overflow or a 1% drift.
ULPS = {2: 8.0, 4: 64.0, 8: 64.0}  # by itemsize: float16/bfloat16, float32, float64

OPTIONAL_ENGINES = ("onnxruntime", "jax")

# An engine is compiled only when its expected compile time is at most the time of this many
# NumPy runs of the graph (one run measured on the synthetic inputs): at the smallest win
# selection accepts (1 - WIN_MARGIN, a fifth of a NumPy run per call) the compile then pays
# for itself within 1,000 calls. A compile out of that proportion (XLA on a 35,000-node
# unrolled loop: minutes, for a graph NumPy runs in milliseconds) is not started at all.
COMPILE_BUDGET_RUNS = 200
# Expected compile (prepare + first run) seconds per graph node, by engine: measured on
# elementwise chains of 300-3,000 nodes (XLA ~2.7 ms per node, onnxruntime session creation
# ~0.2-0.5 ms per node, on a 2-core machine); a deliberately rough, machine-independent rule.
COMPILE_SECONDS_PER_NODE = {"jax": 2.5e-3, "onnxruntime": 2.5e-4}
# Modules an engine needs, looked up (not imported) to tell whether it is installed.
_ENGINE_MODULES = {"jax": ("jax",), "onnxruntime": ("onnxruntime", "onnx")}


def work_estimate(graph: ModelGraph) -> float | None:
    """Estimated element operations of one run: each node's output elements times its
    operator's ``cost`` per element (:class:`~kiln.ops.registry.OpDef`; multiply-adds for
    matrix products and convolutions). None when a shape is symbolic."""
    total = 0.0
    for node in graph.nodes:
        sizes = []
        for v in node.outputs:
            if not all(isinstance(d, int) for d in v.shape):
                return None
            sizes.append(math.prod(v.shape))
        total += float(sum(sizes)) * _cost_per_element(node)
    return total


def _cost_per_element(node: Node) -> float:
    """The element operations ``node`` spends per output element, from its operator's record."""
    opdef = get_op(node.op)
    if callable(opdef.cost):
        return opdef.cost(node.inputs, node.outputs, opdef.bind_attrs(node.attrs))
    return opdef.cost


def measurable(graph: ModelGraph) -> tuple[float | None, str | None]:
    """The graph's :func:`work_estimate` and why measuring engines for it is not worth it
    (None when it is): a symbolic shape, or less work than :data:`AUTO_MIN_WORK`. Cheap: it
    builds and runs nothing, so a caller can decide at once whether to start a selection."""
    work = work_estimate(graph)
    if work is None:
        return None, "symbolic shapes: not measured"
    if work < AUTO_MIN_WORK:
        return work, f"too little work to measure: {work:.3g} element operations"
    if any(not all(isinstance(d, int) for d in v.shape) for v in graph.input_values):
        return work, "symbolic input shapes: not measured"
    return work, None


def installed(engine: str) -> bool:
    """Whether optional ``engine``'s packages are installed (looked up, not imported)."""
    return all(importlib.util.find_spec(m) is not None for m in _ENGINE_MODULES.get(engine, ()))


def compile_is_worth_it(engine: str, nodes: int, numpy_seconds: float) -> str | None:
    """None when compiling ``engine`` for a graph of ``nodes`` nodes that NumPy runs in
    ``numpy_seconds`` is in proportion (expected compile time, ``nodes`` times
    :data:`COMPILE_SECONDS_PER_NODE`, at most :data:`COMPILE_BUDGET_RUNS` NumPy runs); else
    why it is skipped.

    Example:
        >>> compile_is_worth_it("jax", 50, 0.005) is None  # 0.13 s against 1 s
        True
        >>> compile_is_worth_it("jax", 35_000, 0.004)
        'expected compile 88 s for 35000 nodes is more than 200 NumPy runs (0.8 s)'
    """
    expected = nodes * COMPILE_SECONDS_PER_NODE.get(engine, 0.0)
    budget = COMPILE_BUDGET_RUNS * numpy_seconds
    if expected <= budget:
        return None
    return (
        f"expected compile {expected:.2g} s for {nodes} nodes is more than "
        f"{COMPILE_BUDGET_RUNS} NumPy runs ({budget:.2g} s)"
    )


def synthetic_inputs(graph: ModelGraph, seed: int = 0) -> list[np.ndarray] | None:
    """Inputs of the graph's static shapes (None when a shape is symbolic): floats in
    [-1, 1), integers 0 (a valid index everywhere), booleans False."""
    rng = np.random.default_rng(seed)
    arrays = []
    for v in graph.input_values:
        if not all(isinstance(d, int) for d in v.shape):
            return None
        shape = tuple(v.shape)
        if v.dtype.kind == "f" or v.dtype.name == "bfloat16":
            arrays.append(rng.uniform(-1, 1, shape).astype(v.dtype))
        else:
            arrays.append(np.zeros(shape, v.dtype))
    return arrays


def rounding_differs(graph: ModelGraph, engine: str) -> str | None:
    """Why ``engine`` may round a result of ``graph`` differently from NumPy (None when it
    computes NumPy's bits): the first node whose operator's record does not say it is
    bit-exact (``OpDef.is_bit_exact``: a math-library function, a reduction or a product
    whose summation order is the engine's), or an engine's own rewrite (XLA's fused
    multiply-add, :func:`kiln.exec.jax_engine.contracts`).

    Example:
        >>> import kiln, numpy as np
        >>> g = kiln.trace(lambda x: np.tanh(x) + x, kiln.ones((4,), "float32")).graph
        >>> rounding_differs(g, "onnxruntime")
        "node 'tanh' (Tanh) rounds as the engine's library or order does"
    """
    why = node_rounding(graph)
    if why is not None:
        return why
    if engine == "jax":
        from .jax_engine import ROUNDING_CHECKS

        return next((w for w in (check(graph) for check in ROUNDING_CHECKS) if w), None)
    return None


def _best_seconds(runs: Mapping[str, Callable[[], Any]]) -> dict[str, float]:
    """The best time of each candidate, measured in blocks of consecutive runs (a replay runs
    one engine over and over, with its thread pool warm; interleaving engines would measure
    their thread pools fighting instead), in two passes so that a burst of load on the machine
    does not decide alone."""
    best = dict.fromkeys(runs, math.inf)
    for _ in range(MEASURE_PASSES):
        for name, run in runs.items():
            run()  # warm-up: compiles, allocates, wakes the engine's threads
            spent = 0.0
            for _ in range(MEASURE_MAX_RUNS):
                start = time.perf_counter()
                run()
                took = time.perf_counter() - start
                best[name] = min(best[name], took)
                spent += took
                if spent > MEASURE_SECONDS:
                    break
    return best


def same_answer(got: np.ndarray, expected: np.ndarray, bitwise: bool = True) -> str | None:
    """None when an engine's output ``got`` is NumPy's ``expected``, else what differs: bit
    for bit (NaN where NaN, zeros with their sign), or with ``bitwise=False`` within
    :data:`ULPS` (a graph whose rounding may differ, see ``allow_reassociation``).

    Example:
        >>> same_answer(np.float32([1, np.nan]), np.float32([1, np.nan])) is None
        True
        >>> same_answer(np.float32([1, 0.5]), np.float32([1, np.nan]))
        'NaN at 1 element(s), e.g. index (1,): nan expected, 0.5 found'
        >>> same_answer(np.float32([1.0000001]), np.float32([1]))
        'value at 1 element(s), e.g. index (0,): 1.0 expected, 1.0000001192092896 found'
        >>> same_answer(np.float32([1.0000001]), np.float32([1]), bitwise=False) is None
        True
    """
    got, expected = np.asarray(got), np.asarray(expected)
    if got.shape != expected.shape or got.dtype != expected.dtype:
        return (
            f"{got.dtype}{list(got.shape)} found, {expected.dtype}{list(expected.shape)} expected"
        )
    if expected.dtype.kind not in "fc" and expected.dtype.name != "bfloat16":
        bad = got != expected
        what = "value"
    else:
        g = got.astype(np.float64) if expected.itemsize < 4 else got
        e = expected.astype(np.float64) if expected.itemsize < 4 else expected
        nan_e, nan_g = np.isnan(e), np.isnan(g)
        bad = nan_e != nan_g
        what = "NaN"
        if not bad.any():
            finite = np.isfinite(e)
            with np.errstate(all="ignore"):
                exact = (e == g) & (np.signbit(e) == np.signbit(g))
                scale = float(np.max(np.abs(e[finite]), initial=0.0))
                eps = float(np.finfo(np.float16 if expected.itemsize == 2 else expected.dtype).eps)
                ulps = 0.0 if bitwise else ULPS.get(expected.itemsize, 64.0)
                tol = ulps * eps * (np.abs(e) + scale)
                close = finite & np.isfinite(g) & (np.abs(g - e) <= tol) & ((e != 0) | (g != 0))
            bad = ~(exact | nan_e | close)
            what = "value"
    if not bad.any():
        return None
    index = tuple(int(i) for i in np.argwhere(bad)[0])
    return (
        f"{what} at {int(bad.sum())} element(s), e.g. index {index}: "
        f"{expected[index]} expected, {got[index]} found"
    )


def _differs(
    outputs: Sequence[np.ndarray], expected: Sequence[np.ndarray], bitwise: bool
) -> str | None:
    if len(outputs) != len(expected):
        return f"{len(outputs)} outputs found, {len(expected)} expected"
    for i, (got, want) in enumerate(zip(outputs, expected)):
        why = same_answer(got, want, bitwise)
        if why is not None:
            return f"output {i}: {why}"
    return None


def pick(seconds: Mapping[str, float]) -> str:
    """The engine to choose from best times per engine (``"numpy"`` among them): the fastest
    optional engine, or the first of several tied within :data:`TIE_MARGIN` in
    :data:`OPTIONAL_ENGINES` order, when it takes at most :data:`WIN_MARGIN` of NumPy's time;
    else NumPy.

    Example:
        >>> pick({"numpy": 1.0, "jax": 0.85})  # 15% faster is not a clear win
        'numpy'
        >>> pick({"numpy": 1.0, "jax": 0.30, "onnxruntime": 0.33})  # a tie: the fixed order
        'onnxruntime'
    """
    others = {k: v for k, v in seconds.items() if k != "numpy" and math.isfinite(v)}
    if not others:
        return "numpy"
    fastest = min(others.values())
    if fastest > WIN_MARGIN * seconds.get("numpy", math.inf):
        return "numpy"
    order = [*OPTIONAL_ENGINES, *sorted(set(others) - set(OPTIONAL_ENGINES))]
    return next(k for k in order if k in others and others[k] <= fastest * TIE_MARGIN)


def _near_the_line(seconds: Mapping[str, float]) -> bool:
    others = [v for k, v in seconds.items() if k != "numpy"]
    numpy_time = seconds.get("numpy", math.inf)
    if not others or not math.isfinite(numpy_time) or numpy_time <= 0:
        return False
    low, high = RECHECK_BAND
    return low <= min(others) / numpy_time <= high


def _candidate(graph: ModelGraph, engine: str, numpy_plan: Any) -> Any:
    """The plan of optional ``engine`` for ``graph``, or None when it is not installed; raises
    :class:`~kiln.errors.UnsupportedOperationError` when it cannot run the graph exactly."""
    if engine == "jax":
        from . import jax_engine

        if not jax_engine.available():
            return None
        return jax_engine.JaxPlan(graph, fallback=numpy_plan)
    from . import ort_engine

    if not ort_engine.available():
        return None
    return ort_engine.OrtPlan(graph, fallback=numpy_plan)


Reference = tuple[Sequence[np.ndarray], Sequence[np.ndarray]]


def candidates(
    graph: ModelGraph, engines: Sequence[str] = OPTIONAL_ENGINES
) -> tuple[tuple[str, ...], dict[str, str]]:
    """The installed ``engines`` that may compute ``graph``'s answer as NumPy does, and why
    each other installed one may not: its rounding differs (:func:`rounding_differs`), unless
    the graph was optimized allowing reassociation (``ModelGraph.reassociation_allowed``).
    Cheap (it reads the graph, builds nothing)."""
    allowed = graph.reassociation_allowed
    kept: list[str] = []
    refused: dict[str, str] = {}
    for engine in engines:
        if not installed(engine):
            continue
        why = None if allowed else rounding_differs(graph, engine)
        if why is None:
            kept.append(engine)
        else:
            refused[engine] = f"not NumPy's bits: {why} (allow_reassociation accepts that)"
    return tuple(kept), refused


def choose(
    graph: ModelGraph,
    engines: tuple[str, ...] = OPTIONAL_ENGINES,
    reference: Reference | None = None,
    numpy_plan: Any = None,
    cancelled: Callable[[], bool] | None = None,
) -> Any:
    """The plan for ``graph`` among NumPy and the installed optional ``engines``: exact
    candidates that agree with NumPy (and with ``reference``: checked inputs and the outputs
    they must give, e.g. a compiled function's first call), whose compile is in proportion
    (:func:`compile_is_worth_it`), timed, chosen by :func:`pick`. ``numpy_plan`` is the NumPy
    plan already built for ``graph`` (the one serving a compiled function meanwhile), if any;
    it may run concurrently (a plan's run is reentrant). ``cancelled`` is asked before each
    candidate and before timing; when it says so, the NumPy plan is returned as it is."""
    from .cpu import CpuPlan

    if numpy_plan is None:
        numpy_plan = CpuPlan(graph)
    work, not_measured = measurable(graph)
    selection: dict[str, Any] = {"work": work, "chosen": "numpy"}
    engines, refused = candidates(graph, engines)
    bitwise = not graph.reassociation_allowed
    if not engines and not not_measured:
        not_measured = "no other engine qualified" if refused else "no other engine installed"
        if refused:
            selection["refused"] = refused
    arrays = None if not_measured else synthetic_inputs(graph)
    if arrays is None:
        numpy_plan.selection = {**selection, "not_measured": not_measured or "symbolic shapes"}
        return numpy_plan
    try:
        with np.errstate(all="ignore"):
            start = time.perf_counter()
            expected = numpy_plan.run_arrays(arrays)
            numpy_once = time.perf_counter() - start
    except Exception:  # the synthetic inputs do not suit this graph: stay on NumPy
        numpy_plan.selection = {**selection, "not_measured": "the synthetic inputs do not fit"}
        return numpy_plan
    plans: dict[str, Any] = {"numpy": numpy_plan}
    skipped: dict[str, str] = {}
    for engine in engines:
        if cancelled is not None and cancelled():
            return numpy_plan
        too_slow = compile_is_worth_it(engine, len(graph.nodes), numpy_once)
        if too_slow is not None:
            skipped[engine] = too_slow
            continue
        try:
            plan = _candidate(graph, engine, None)
            if plan is None:
                continue
            with np.errstate(all="ignore"):
                why = _differs(plan.run_arrays(arrays), expected, bitwise)
                if why is None and reference is not None:
                    outputs = plan.run_arrays(list(reference[0]))
                    why = _differs(outputs, list(reference[1]), bitwise)
                    why = None if why is None else f"on the capture inputs, {why}"
        except Exception as exc:  # cannot run it exactly (UnsupportedOperationError) or failed
            why = f"{type(exc).__name__}: {exc}"
        if why is None:
            plan.fallback = numpy_plan  # a later failure runs the call on NumPy
            plans[engine] = plan
        else:
            refused[engine] = why
    selection.update(
        refused=refused,
        skipped=skipped,
        numpy_run=numpy_once,
        exact_on=_exact_on(reference, bitwise),
    )
    if len(plans) == 1:
        numpy_plan.selection = selection
        return numpy_plan
    if cancelled is not None and cancelled():
        return numpy_plan
    runs = {name: (lambda p=plan: p.run_arrays(arrays)) for name, plan in plans.items()}
    try:
        with np.errstate(all="ignore"):
            timings = _best_seconds(runs)
            if _near_the_line(timings):
                again = _best_seconds(runs)
                timings = {k: min(v, again[k]) for k, v in timings.items()}
    except Exception as exc:
        numpy_plan.selection = {**selection, "error": f"timing: {type(exc).__name__}: {exc}"}
        return numpy_plan
    best = pick(timings)
    best_plan = plans[best]
    best_plan.selection = {**selection, "seconds": timings, "chosen": best}
    return best_plan


def _exact_on(reference: Reference | None, bitwise: bool = True) -> str:
    inputs = "synthetic inputs" + (" and the capture inputs" if reference is not None else "")
    return inputs if bitwise else f"{inputs} within {ULPS[4]:g} ulps (allow_reassociation)"


def describe(selection: Mapping[str, Any] | None, pending: Sequence[str] = ()) -> str:
    """One line saying which engine serves and why, from a plan's ``selection`` (what
    :func:`choose` decided) and the engines whose selection is still ``pending``.

    Example:
        >>> describe({"chosen": "jax", "seconds": {"numpy": 2.1, "jax": 1.0},
        ...           "exact_on": "synthetic inputs", "refused": {"onnxruntime": "ReduceMax"}})
        'jax: 2.1x faster than numpy, exact on synthetic inputs; onnxruntime refused: ReduceMax'
        >>> describe({"chosen": "numpy", "work": 10.0}, pending=("jax",))
        'numpy (jax pending)'
    """
    if pending:
        return f"numpy ({', '.join(pending)} pending)"
    if not selection:
        return "numpy"
    chosen = str(selection.get("chosen", "numpy"))
    seconds: Mapping[str, float] = selection.get("seconds") or {}
    parts: list[str] = []
    if "not_measured" in selection:
        head = f"{chosen} ({selection['not_measured']})"
    elif "error" in selection:
        head = f"{chosen} (selection failed: {_short(str(selection['error']))})"
    elif chosen != "numpy" and seconds.get(chosen):
        ratio = seconds.get("numpy", math.inf) / seconds[chosen]
        head = f"{chosen}: {ratio:.1f}x faster than numpy, exact on {selection.get('exact_on')}"
    elif seconds:
        others = [k for k in seconds if k != "numpy" and seconds[k] > 0]
        speeds = ", ".join(f"{k} {seconds['numpy'] / seconds[k]:.2f}x" for k in others)
        head = f"numpy: no engine clearly faster ({speeds}; {1 / WIN_MARGIN:.2f}x needed)"
    elif selection.get("refused") or selection.get("skipped"):
        head = "numpy: no other engine qualified"
    else:
        head = "numpy: no other engine installed"
    parts.append(head)
    if chosen != "numpy":
        for k in seconds:
            if k not in ("numpy", chosen) and seconds[k] > 0:
                parts.append(f"{k} {seconds['numpy'] / seconds[k]:.2f}x")
    for k, why in (selection.get("skipped") or {}).items():
        parts.append(f"{k} skipped: {why}")
    for k, why in (selection.get("refused") or {}).items():
        parts.append(f"{k} refused: {_short(why)}")
    return "; ".join(parts)


def _short(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
