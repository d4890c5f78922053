"""Run the ONNX backend test suite that ships with the installed ``onnx`` package through kiln.

Every case is loaded with :func:`kiln.io.load`, finalized, run on each of its data sets and
compared with the expected outputs, in two feeding modes:

* **as the suite feeds them** (mode a): every graph input is fed when the graph runs, as the
  ONNX backend runner does; this is the figure the report leads with;
* **with ``constant_inputs=``** (mode b): a case that fails in mode a and feeds shape-deciding
  inputs (0-d/1-d integer tensors, small float vectors such as Resize scales) is loaded again
  with those inputs bound as constants of the graph (a specialisation of the model).

Cases whose tensors have an element type kiln does not implement (float8, float4, int4/uint4,
int2/uint2, float8e8m0, and string unless Cast/CastLike is the operator under test) are left out
of the measured set; every other case of an operator kiln supports counts. The report gives the
pass rate per set and per operator in both modes, and groups failures by cause:

* ``unsupported op``: the model uses an operator (or domain) kiln does not implement;
* ``unsupported type``: a value of a type kiln lacks (strings, sequences, optionals, float8...);
* ``import error``: kiln implements the operators but rejected the model;
* ``kernel error``: the model imported but raised while running;
* ``numeric mismatch``: it ran, and an output differs (shape, dtype or values);
* ``timeout``: a case ran longer than ``--timeout`` seconds.

Usage::

    python tools/onnx_conformance.py                  # everything; writes docs/conformance.md
    python tools/onnx_conformance.py -k conv -v       # cases whose name contains "conv"
    python tools/onnx_conformance.py --no-write       # print the summary only
    python tools/onnx_conformance.py --progress       # a progress line even when not on a tty
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import glob
import os
import signal
import sys
import time
import traceback
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))

import onnx  # noqa: E402
from onnx import numpy_helper  # noqa: E402

import kiln  # noqa: E402
from kiln.errors import UnsupportedOperationError  # noqa: E402
from kiln.io.onnx_import import supported_operators  # noqa: E402

DEFAULT_RTOL = 1e-3
DEFAULT_ATOL = 1e-5
# The NumPy engine runs every graph kiln imports, at once. kiln's automatic selection (``--engine
# auto``) would compile and time jax and onnxruntime for the larger models (minutes in all) and
# keeps one only where it reproduces the NumPy plan's answer.
DEFAULT_ENGINE = "numpy"

CAUSES = (
    "unsupported op",
    "unsupported type",
    "import error",
    "kernel error",
    "numeric mismatch",
    "timeout",
)


@dataclass
class Case:
    """One backend test case: a model and its data sets (inputs, expected outputs)."""

    name: str
    suite: str  # node, pytorch-converted, pytorch-operator, simple, light
    model: onnx.ModelProto | None
    data_sets: list[tuple[list[Any], list[Any]]]
    rtol: float = DEFAULT_RTOL
    atol: float = DEFAULT_ATOL
    op: str = ""  # the operator the case tests
    missing: str = ""  # why the case cannot run at all (weights not shipped, ...)


@dataclass
class Result:
    """One case's outcome in both feeding modes. ``cause`` is mode a (every input fed at run
    time, as the suite feeds it); ``bound_cause`` is mode b (shape-deciding inputs bound with
    ``constant_inputs=`` where mode a failed; equal to ``cause`` where nothing was bound)."""

    case: Case
    cause: str | None  # None: passed as the suite feeds it
    detail: str = ""
    seconds: float = 0.0
    kiln_supports_ops: bool = True
    lacking_type: str = ""  # an element type kiln does not implement, if the case uses one
    bound_cause: str | None = None  # mode b: None passed
    bound_detail: str = ""
    bound_inputs: tuple[str, ...] = ()  # shape-deciding inputs mode b fixed as constants

    @property
    def measured(self) -> bool:
        """A node case of operators kiln supports, with no element type kiln lacks."""
        return self.case.suite == "node" and self.kiln_supports_ops and not self.lacking_type


@dataclass
class Report:
    results: list[Result] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


# -- collecting cases ----------------------------------------------------------------------


def _data_root() -> str:
    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")


def _read_pb(path: str) -> Any:
    tensor = onnx.TensorProto()
    with open(path, "rb") as f:
        tensor.ParseFromString(f.read())
    return numpy_helper.to_array(tensor)


def _dir_cases(suite: str) -> Iterator[Case]:
    """Cases stored as ``<suite>/<name>/model.onnx`` + ``test_data_set_*/{input,output}_*.pb``."""
    for model_path in sorted(glob.glob(os.path.join(_data_root(), suite, "*", "model.onnx"))):
        case_dir = os.path.dirname(model_path)
        model = onnx.load(model_path)
        data_sets = []
        for ds in sorted(glob.glob(os.path.join(case_dir, "test_data_set_*"))):
            inputs = [_read_pb(p) for p in _sorted_pbs(ds, "input")]
            outputs = [_read_pb(p) for p in _sorted_pbs(ds, "output")]
            data_sets.append((inputs, outputs))
        yield Case(os.path.basename(case_dir), suite, model, data_sets)


def _sorted_pbs(folder: str, kind: str) -> list[str]:
    paths = glob.glob(os.path.join(folder, f"{kind}_*.pb"))
    return sorted(paths, key=lambda p: int(os.path.basename(p)[len(kind) + 1 : -3]))


def _node_cases() -> tuple[list[Case], str]:
    """The node test cases: from the data directories when the package ships them, otherwise
    generated in memory by ``onnx.backend.test.case.node.collect_testcases``."""
    if glob.glob(os.path.join(_data_root(), "node", "*", "model.onnx")):
        return list(_dir_cases("node")), "data directories onnx/backend/test/data/node"
    from onnx.backend.test.case.node import collect_testcases

    with open(os.devnull, "w") as devnull, contextlib.redirect_stdout(devnull):
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with np.errstate(all="ignore"):
                collected = collect_testcases()
    cases = []
    for tc in collected:
        cases.append(
            Case(
                tc.name,
                "node",
                tc.model,
                [([_plain(x) for x in i], [_plain(x) for x in o]) for i, o in tc.data_sets],
                rtol=max(float(tc.rtol), DEFAULT_RTOL),
                atol=max(float(tc.atol), DEFAULT_ATOL),
            )
        )
    source = (
        "onnx.backend.test.case.node.collect_testcases() (this onnx wheel ships no node data "
        "directories)"
    )
    return cases, source


def _plain(x: Any) -> Any:
    """A test datum as NumPy (some generated cases hold TensorProto objects)."""
    if isinstance(x, onnx.TensorProto):
        return numpy_helper.to_array(x)
    return x


def _light_cases(notes: list[str]) -> Iterator[Case]:
    """``light/light_<model>.onnx`` with ``light_<model>_output_0.pb``: real architectures whose
    weights are replaced by ``ConstantOfShape`` nodes, fed (as onnx's own runner does) the
    deterministic input ``arange(n).reshape(shape) / n`` with unknown sizes taken as 1."""
    for path in sorted(glob.glob(os.path.join(_data_root(), "light", "light_*.onnx"))):
        name = os.path.basename(path)[: -len(".onnx")]
        model = onnx.load(path, load_external_data=False)
        initializers = {t.name for t in model.graph.initializer}
        inputs = []
        for info in model.graph.input:
            if info.name in initializers:
                continue
            dims = info.type.tensor_type.shape.dim
            shape = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in dims)
            n = int(np.prod(shape))
            inputs.append((np.arange(n).reshape(shape) / n).astype(np.float32))
        outputs = []
        for i in range(len(model.graph.output)):
            output_path = f"{path[: -len('.onnx')]}_output_{i}.pb"
            if os.path.exists(output_path):
                outputs.append(_read_pb(output_path))
        missing = "" if len(outputs) == len(model.graph.output) else "expected outputs not shipped"
        yield Case(name, "light", model, [(inputs, outputs)], missing=missing)
    real = os.path.join(_data_root(), "real")
    if os.path.isdir(real):
        names = sorted(os.path.basename(p) for p in glob.glob(os.path.join(real, "test_*")))
        if names:
            notes.append(
                f"`real/` lists {len(names)} models ({', '.join(names)}) by download URL only; "
                "nothing can be downloaded here, so they are not run."
            )


def collect(filter_text: str | None, suites: Sequence[str], notes: list[str]) -> list[Case]:
    cases: list[Case] = []
    if "node" in suites:
        node, source = _node_cases()
        notes.append(f"node cases from {source}: {len(node)} cases.")
        cases.extend(node)
    for suite in ("pytorch-converted", "pytorch-operator", "simple"):
        if suite in suites:
            cases.extend(_dir_cases(suite))
    if "light" in suites:
        cases.extend(_light_cases(notes))
    if filter_text:
        cases = [c for c in cases if filter_text.lower() in c.name.lower()]
    _assign_ops(cases)
    return cases


def _assign_ops(cases: list[Case]) -> None:
    """The operator each case tests: the op of a one-op model; for a function's expanded form
    (``..._expanded``), the op of the case it expands; else the model's last node."""
    by_name = {c.name: c for c in cases}
    for c in cases:
        if c.model is None or not c.model.graph.node:
            c.op = "(model)"
            continue
        ops = [n.op_type for n in c.model.graph.node]
        if c.suite != "node":
            c.op = f"({c.suite})"
        elif len(set(ops)) == 1:
            c.op = ops[0]
        else:
            c.op = ops[-1]
    for c in cases:
        if "_expanded" in c.name:
            base = by_name.get(c.name.split("_expanded")[0])
            if base is not None:
                c.op = base.op


# -- running one case ----------------------------------------------------------------------


class _Timeout(Exception):
    pass


@contextlib.contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    if seconds <= 0 or not hasattr(signal, "SIGALRM"):
        yield
        return

    def on_alarm(signum: int, frame: Any) -> None:
        raise _Timeout

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


_TYPE_WORDS = (
    "element type",
    "ONNX data type",
    "kiln supports tensor values only",
    "has type",
    "no shape",
)


def _import_cause(exc: BaseException) -> str:
    text = str(exc)
    if isinstance(exc, UnsupportedOperationError):
        if "is not supported by kiln; supported operators" in text or "domain" in text:
            return "unsupported op"
        if any(w in text for w in _TYPE_WORDS):
            return "unsupported type"
    return "import error"


def _model_ops_supported(model: onnx.ModelProto, supported: set[str]) -> bool:
    def ops_of(graph: onnx.GraphProto) -> Iterator[tuple[str, str]]:
        for n in graph.node:
            yield n.domain, n.op_type
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    yield from ops_of(a.g)
                elif a.type == onnx.AttributeProto.GRAPHS:
                    for g in a.graphs:
                        yield from ops_of(g)

    return all(d in ("", "ai.onnx") and op in supported for d, op in ops_of(model.graph))


def _input_feed(model: onnx.ModelProto, arrays: Sequence[Any]) -> dict[str, Any]:
    initializers = {t.name for t in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in initializers]
    if len(arrays) > len(names):  # an old model lists initializers as inputs and feeds them
        names = [i.name for i in model.graph.input]
    return {name: array for name, array in zip(names, arrays) if name not in initializers}


def _shape_like(feed: dict[str, Any]) -> dict[str, Any]:
    """The fed inputs that can decide a shape: 0-d/1-d integer tensors, small float vectors
    (Resize scales)."""
    out = {}
    for name, array in feed.items():
        if array.ndim <= 1 and array.dtype.kind in "iu":
            out[name] = array
        elif array.ndim == 1 and array.size <= 8 and array.dtype.kind == "f":
            out[name] = array
    return out


def _compare(got: Sequence[Any], want: Sequence[Any], rtol: float, atol: float) -> str | None:
    if len(got) < len(want):
        return f"{len(got)} outputs, expected {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        if isinstance(w, np.generic):  # a 0-d expected output stored as a NumPy scalar
            w = np.asarray(w)
        if not isinstance(w, np.ndarray):
            return f"output {i}: expected a {type(w).__name__}, kiln makes tensors only"
        g = np.asarray(g)
        if g.shape != w.shape:
            return f"output {i}: shape {g.shape}, expected {w.shape}"
        if w.dtype.kind in "OSU":  # ONNX strings: NumPy object/str arrays
            if g.dtype.kind not in "OSU":
                return f"output {i}: dtype {g.dtype}, expected strings"
            differ = [a != b for a, b in zip(_texts(g), _texts(w))]
            if any(differ):
                return f"output {i}: {sum(differ)}/{w.size} strings differ"
            continue
        if g.dtype != w.dtype:
            return f"output {i}: dtype {g.dtype}, expected {w.dtype}"
        if w.dtype.kind in "fc" or w.dtype.name == "bfloat16":
            a, b = g.astype(np.float64), w.astype(np.float64)
            bad = ~np.isclose(a, b, rtol=rtol, atol=atol, equal_nan=True)
            if bad.any():
                diff = np.abs(a - b)[bad]
                worst = float(diff[np.isfinite(diff)].max()) if np.isfinite(diff).any() else np.nan
                return (
                    f"output {i}: {int(bad.sum())}/{w.size} elements differ (max abs diff "
                    f"{worst:.3g}, rtol {rtol:g}, atol {atol:g})"
                )
        elif w.dtype.kind in "biu":
            if not np.array_equal(g, w):
                return f"output {i}: {int((g != w).sum())}/{w.size} elements differ"
        else:
            return f"output {i}: element type {w.dtype} is not supported"
    return None


# Element types kiln does not implement: cases using them are left out of the measured set.
# STRING counts only where Cast/CastLike is not the operator under test.
_LACKING_TYPES = {
    "FLOAT8E4M3FN",
    "FLOAT8E4M3FNUZ",
    "FLOAT8E5M2",
    "FLOAT8E5M2FNUZ",
    "FLOAT8E8M0",
    "FLOAT4E2M1",
    "INT4",
    "UINT4",
    "INT2",
    "UINT2",
    "STRING",
}


def lacking_type(model: onnx.ModelProto | None, op: str) -> str:
    """The first element type kiln does not implement that ``model`` uses (in a graph input,
    output, value_info, initializer, a Cast's ``to`` or a tensor attribute), or ""."""
    if model is None:
        return ""
    lacking = {
        code
        for name, code in onnx.TensorProto.DataType.items()
        if name in _LACKING_TYPES and not (name == "STRING" and op in ("Cast", "CastLike"))
    }

    def codes(graph: onnx.GraphProto) -> Iterator[int]:
        for info in list(graph.input) + list(graph.output) + list(graph.value_info):
            if info.type.WhichOneof("value") == "tensor_type":
                yield info.type.tensor_type.elem_type
        for t in graph.initializer:
            yield t.data_type
        for node in graph.node:
            for a in node.attribute:
                if node.op_type == "Cast" and a.name == "to":
                    yield a.i
                elif a.type == onnx.AttributeProto.TENSOR:
                    yield a.t.data_type
                elif a.type == onnx.AttributeProto.GRAPH:
                    yield from codes(a.g)

    for code in codes(model.graph):
        if code in lacking:
            return onnx.TensorProto.DataType.Name(code)
    return ""


def _texts(a: np.ndarray) -> list[str]:
    return [x.decode() if isinstance(x, bytes) else str(x) for x in a.reshape(-1).tolist()]


def run_case(
    case: Case,
    supported: set[str],
    timeout: float,
    bind: bool = True,
    engine: str | None = DEFAULT_ENGINE,
) -> Result:
    """Run ``case`` as the suite feeds it (mode a); where that fails and ``bind`` is set, run
    it again with its shape-deciding inputs bound by ``constant_inputs=`` (mode b). Graphs
    are finalized on ``engine`` (None: kiln's automatic selection)."""
    start = time.perf_counter()
    model = case.model
    ops_ok = model is not None and _model_ops_supported(model, supported)
    result = Result(case, None, kiln_supports_ops=ops_ok, lacking_type=lacking_type(model, case.op))
    result.cause, result.detail, _ = _run_mode(case, timeout, False, engine)
    result.bound_cause, result.bound_detail = result.cause, result.detail
    if result.cause is not None and bind:
        cause, detail, bound = _run_mode(case, timeout, True, engine)
        if bound:
            result.bound_cause, result.bound_detail, result.bound_inputs = cause, detail, bound
    result.seconds = time.perf_counter() - start
    return result


def _run_mode(
    case: Case, timeout: float, bind: bool, engine: str | None
) -> tuple[str | None, str, tuple[str, ...]]:
    """(cause or None, detail, names bound as constants) of one run of every data set of
    ``case``; with ``bind``, the shape-deciding inputs of each data set are bound as constants
    (nothing is run, and nothing bound, when the case has none)."""
    model = case.model
    if model is None:
        return "import error", "no model", ()
    if case.missing:
        return "import error", case.missing, ()
    bound: tuple[str, ...] = ()
    try:
        with _time_limit(timeout):
            for inputs, expected in case.data_sets:
                inputs = [np.asarray(x) if isinstance(x, np.generic) else x for x in inputs]
                if any(not isinstance(x, np.ndarray) for x in inputs):
                    return "unsupported type", "an input is a sequence/optional/map", bound
                feed = _input_feed(model, inputs)
                constants = _shape_like(feed) if bind else {}
                if bind and not constants:
                    return None, "", ()
                try:
                    if constants:
                        # a specialisation of the model: inputs that decide a shape become
                        # constants with this data set's values
                        graph = kiln.io.load(model, constant_inputs=constants)
                        bound = tuple(sorted(constants))
                        feed = {k: v for k, v in feed.items() if k not in constants}
                    else:
                        graph = kiln.io.load(model)
                except _Timeout:
                    raise
                except Exception as exc:  # every import failure is reported, by cause
                    return _import_cause(exc), f"{type(exc).__name__}: {_first_line(exc)}", bound
                try:
                    # ONNX's tests hold outputs to a tolerance: a forced engine's rounding is
                    # accepted (without it, it refuses any node it rounds otherwise)
                    graph.reassociation_allowed = engine not in (None, "numpy", "reference")
                    graph.finalize(engine)
                    with np.errstate(all="ignore"):
                        outputs = graph.run(feed)
                except _Timeout:
                    raise
                except Exception as exc:
                    return "kernel error", f"{type(exc).__name__}: {_first_line(exc)}", bound
                problem = _compare([np.asarray(t) for t in outputs], expected, case.rtol, case.atol)
                if problem is not None:
                    return "numeric mismatch", problem, bound
    except _Timeout:
        return "timeout", f"over {timeout:g} s", bound
    return None, "", bound


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else repr(exc))[:300]


# -- the report ----------------------------------------------------------------------------


def _rate(passed: int, total: int) -> str:
    return f"{100.0 * passed / total:.1f}%" if total else "n/a"


def _count(results: Sequence[Result]) -> tuple[int, int, int]:
    """(passed as the suite feeds them, passed with constant_inputs=, cases)."""
    a = sum(r.cause is None for r in results)
    b = sum(r.bound_cause is None for r in results)
    return a, b, len(results)


def summarize(report: Report) -> dict[str, tuple[int, int, int]]:
    """Per set: (passed in mode a, passed in mode b, cases)."""
    results = report.results
    node = [r for r in results if r.case.suite == "node"]
    out = {
        "measured": _count([r for r in node if r.measured]),
        "node_supported": _count([r for r in node if r.kiln_supports_ops]),
        "node": _count(node),
    }
    for suite in ("pytorch-converted", "pytorch-operator", "simple", "light"):
        rs = [r for r in results if r.case.suite == suite]
        if rs:
            out[suite] = _count(rs)
    out["everything"] = _count(results)
    return out


_SET_LABELS = {
    "measured": "**node cases of operators kiln supports, element types kiln has** (the measure)",
    "node_supported": "node cases of operators kiln supports (any element type)",
    "node": "all node cases",
    "everything": "everything",
}


def render(report: Report, seconds: float, engine: str = DEFAULT_ENGINE) -> str:
    results = report.results
    s = summarize(report)
    a, b, n = s["measured"]
    lines = [
        "# ONNX backend conformance",
        "",
        "Generated by `python tools/onnx_conformance.py` (not part of the unit suite) with "
        f"onnx {onnx.__version__}, numpy {np.__version__}, in {seconds:.0f} s. Each case is "
        f"loaded with `kiln.io.load`, finalized on the {engine} engine (`--engine`), run on "
        "every data set of the case and "
        f"compared with the expected outputs (rtol {DEFAULT_RTOL:g}, atol {DEFAULT_ATOL:g}, or "
        "the case's own where it is looser; integers, bools and strings exactly; dtypes and "
        "shapes must match).",
        "",
        f"**As the suite feeds them** (every graph input fed when the graph runs, no "
        f"`constant_inputs=`), kiln passes **{a} of {n} ({_rate(a, n)})** node cases of the "
        "operators it supports, leaving out only the cases whose tensors have an element type "
        "kiln does not implement (float8, float4, int4/uint4, int2/uint2, float8e8m0, and string "
        "where Cast/CastLike is not the operator under test). With `constant_inputs=` binding "
        "the shape-deciding inputs of a case that fails without it (a specialisation of the "
        f"model, as earlier reports measured), {b} of {n} ({_rate(b, n)}).",
        "",
        "## Summary",
        "",
        "| set | passed, as the suite feeds them | pass rate | passed, with constant_inputs= "
        "| pass rate | cases |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for key, (pa, pb, total) in s.items():
        label = _SET_LABELS.get(key, key)
        lines.append(
            f"| {label} | {pa} | {_rate(pa, total)} | {pb} | {_rate(pb, total)} | {total} |"
        )
    bound = [r for r in results if r.cause is not None and r.bound_cause is None]
    report.notes.append(
        f"{len(bound)} cases pass only with `constant_inputs=`: each feeds a shape-deciding "
        "value (a Reshape shape, Reduce axes, Slice starts, ...) as a graph input, and mode b "
        "loads it with `kiln.io.load(model, constant_inputs=...)`, binding the data set's "
        "integer inputs (and small float vectors such as Resize scales) as constants."
    )
    report.notes.append(
        "Expected failures: kiln is an inference runtime, so Dropout and BatchNormalization "
        "in training mode (training_mode=1, or True fed at run time) are refused by design. "
        "The bfloat16 Attention cases differ by one bfloat16 ulp "
        "(2^-8, 0.0039 near 1) on a share of the elements: their expected values carry the "
        "rounding of the reference's own step order, and the default rtol 1e-3 is tighter than "
        "one bfloat16 ulp (kiln computes half precision in float32 and rounds once)."
    )
    lines += ["", "Notes:", ""] + [f"- {n}" for n in report.notes]
    lines += [
        "",
        "A node case counts as *supported* when every operator in its model is one kiln "
        "implements (the registry, plus older forms the importer rewrites, such as Upsample); "
        "an `_expanded` case (a function operator written out in primitive operators) is "
        "attributed to the operator it expands.",
        "",
        "## Pass rate per operator family (measured node cases)",
        "",
        "The family is the operator under test. *(a)*: as the suite feeds them; *(b)*: with "
        "`constant_inputs=`. Failures are those of mode a.",
        "",
        "| operator | passed (a) | passed (b) | cases | failures (a) |",
        "|---|---:|---:|---:|---|",
    ]
    by_op: dict[str, list[Result]] = collections.defaultdict(list)
    for r in results:
        if r.measured:
            by_op[r.case.op].append(r)
    for op in sorted(by_op):
        rs = by_op[op]
        pa, pb, total = _count(rs)
        failing = collections.Counter(r.cause for r in rs if r.cause)
        text = ", ".join(f"{c}: {k}" for c, k in sorted(failing.items()))
        lines.append(f"| {op} | {pa} | {pb} | {total} | {text} |")
    lines += [
        "",
        "## Failures by cause (as the suite feeds them)",
        "",
        "| cause | measured node cases | other node cases | other suites |",
        "|---|---:|---:|---:|",
    ]

    def where(r: Result) -> str:
        return "measured" if r.measured else "node" if r.case.suite == "node" else "other"

    causes = collections.Counter((r.cause, where(r)) for r in results if r.cause)
    for cause in CAUSES:
        counts = [causes[(cause, w)] for w in ("measured", "node", "other")]
        lines.append(f"| {cause} | {' | '.join(str(c) for c in counts)} |")
    lines += ["", "## Failing measured cases (as the suite feeds them)", ""]
    bad = [r for r in results if r.cause and (r.measured or r.case.suite != "node")]
    bad = [r for r in bad if r.kiln_supports_ops]
    for cause in CAUSES:
        rs = [r for r in bad if r.cause == cause]
        if not rs:
            continue
        lines += [f"### {cause} ({len(rs)})", ""]
        for r in sorted(rs, key=lambda r: (r.case.suite, r.case.name)):
            tail = " (passes with `constant_inputs=`)" if r.bound_cause is None else ""
            lines.append(f"- `{r.case.name}` ({r.case.suite}): {_md(r.detail)}{tail}")
        lines.append("")
    lacking = collections.Counter(
        r.lacking_type for r in results if r.case.suite == "node" and r.kiln_supports_ops
    )
    lacking.pop("", None)
    lines += ["## Node cases left out for an element type kiln lacks", ""]
    lines.append(", ".join(f"{t} ({k})" for t, k in sorted(lacking.items())) or "none")
    lines += ["", "## Operators the node suite uses that kiln does not implement", ""]
    missing: collections.Counter[str] = collections.Counter()
    for r in results:
        if r.case.suite == "node" and not r.kiln_supports_ops:
            missing[r.case.op] += 1
    lines.append(", ".join(f"{op} ({k})" for op, k in sorted(missing.items())) or "none")
    lines += ["", "## Other suites: every case", ""]
    for r in results:
        if r.case.suite != "node":
            status = "pass" if r.cause is None else f"{r.cause}: {_md(r.detail)}"
            lines.append(f"- `{r.case.name}` ({r.case.suite}): {status}")
    return "\n".join(lines) + "\n"


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")[:240]


class _Progress:
    """``[ 512/2033] test_name`` on one line of stderr, rewritten in place."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.total, self.enabled, self.width = total, enabled, 0

    def show(self, index: int, name: str) -> None:
        if not self.enabled:
            return
        n = len(str(self.total))
        text = f"[{index:>{n}}/{self.total}] {name}"[:100]
        sys.stderr.write("\r" + text.ljust(self.width))
        sys.stderr.flush()
        self.width = len(text)

    def done(self) -> None:
        if self.enabled and self.width:
            sys.stderr.write("\r" + " " * self.width + "\r")
            sys.stderr.flush()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-k", dest="filter", help="run cases whose name contains this text")
    parser.add_argument(
        "--suites",
        default="node,pytorch-converted,pytorch-operator,simple,light",
        help="comma-separated suites to run",
    )
    parser.add_argument("--timeout", type=float, default=20.0, help="seconds per case")
    parser.add_argument("--output", default=os.path.join(ROOT, "docs", "conformance.md"))
    parser.add_argument("--no-write", action="store_true", help="do not write the report")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every failure")
    parser.add_argument(
        "--engine",
        default=DEFAULT_ENGINE,
        help="engine to finalize graphs on (numpy, jax, onnxruntime, reference, or auto: "
        "kiln's selection)",
    )
    parser.add_argument(
        "--progress",
        action="store_true",
        help="show a progress line on stderr (the default when stderr is a terminal)",
    )
    args = parser.parse_args(argv)

    engine = None if args.engine == "auto" else args.engine
    start = time.perf_counter()
    report = Report()
    cases = collect(args.filter, args.suites.split(","), report.notes)
    supported = set(supported_operators())
    progress = _Progress(len(cases), args.progress or sys.stderr.isatty())
    for index, case in enumerate(cases, 1):
        progress.show(index, case.name)
        try:
            result = run_case(case, supported, args.timeout, engine=engine)
        except Exception:  # the harness itself must not stop on one broken case
            detail = traceback.format_exc(limit=1)
            result = Result(case, "kernel error", detail, bound_cause="kernel error")
        report.results.append(result)
        if args.verbose and result.cause:
            progress.done()
            both = "" if result.bound_cause is not None else " (passes with constant_inputs=)"
            print(f"{case.name}: {result.cause}: {result.detail}{both}")
    progress.done()
    seconds = time.perf_counter() - start
    s = summarize(report)
    for key, (pa, pb, total) in s.items():
        print(
            f"{key}: {pa}/{total} ({_rate(pa, total)}) as the suite feeds them, "
            f"{pb}/{total} ({_rate(pb, total)}) with constant_inputs="
        )
    print(f"in {seconds:.0f} s")
    counts = collections.Counter(r.cause for r in report.results if r.cause)
    for cause in CAUSES:
        if counts[cause]:
            print(f"  {cause}: {counts[cause]}")
    if not args.no_write and not args.filter:
        os.makedirs(os.path.dirname(args.output), exist_ok=True)
        with open(args.output, "w") as f:
            f.write(render(report, seconds, args.engine))
        print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
