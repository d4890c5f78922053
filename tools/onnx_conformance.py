"""Run the ONNX backend test suite that ships with the installed ``onnx`` package through kiln.

Every case is loaded with :func:`kiln.io.load`, finalized, run on each of its data sets and
compared with the expected outputs. The report gives the pass rate per operator and overall, and
groups failures by cause:

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
    case: Case
    cause: str | None  # None: passed
    detail: str = ""
    seconds: float = 0.0
    kiln_supports_ops: bool = True
    bound_inputs: tuple[str, ...] = ()  # shape-deciding inputs fixed as constants to run it


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
                    yield "", "(subgraph)"

    return all(d in ("", "ai.onnx") and op in supported for d, op in ops_of(model.graph))


def _input_feed(model: onnx.ModelProto, arrays: Sequence[Any]) -> dict[str, Any]:
    initializers = {t.name for t in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in initializers]
    if len(arrays) > len(names):  # an old model lists initializers as inputs and feeds them
        names = [i.name for i in model.graph.input]
    return {name: array for name, array in zip(names, arrays) if name not in initializers}


def _needs_known_value(exc: BaseException) -> bool:
    text = str(exc)
    return "must be a constant" in text or "must be known" in text


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


def run_case(case: Case, supported: set[str], timeout: float) -> Result:
    start = time.perf_counter()
    model = case.model
    if model is None:
        return Result(case, "import error", "no model")
    ops_ok = _model_ops_supported(model, supported)

    def result(cause: str | None, detail: str = "") -> Result:
        return Result(case, cause, detail, time.perf_counter() - start, ops_ok, bound)

    bound: tuple[str, ...] = ()
    if case.missing:
        return result("import error", case.missing)
    try:
        with _time_limit(timeout):
            for inputs, expected in case.data_sets:
                inputs = [np.asarray(x) if isinstance(x, np.generic) else x for x in inputs]
                if any(not isinstance(x, np.ndarray) for x in inputs):
                    return result("unsupported type", "an input is a sequence/optional/map")
                feed = _input_feed(model, inputs)
                try:
                    try:
                        graph = kiln.io.load(model)
                    except UnsupportedOperationError as exc:
                        if not _needs_known_value(exc):
                            raise
                        # kiln computes shapes when the graph is built, so inputs that decide
                        # a shape are bound to this data set's values (a specialisation)
                        constants = _shape_like(feed)
                        if not constants:
                            raise
                        graph = kiln.io.load(model, constant_inputs=constants)
                        bound = tuple(sorted(constants))
                        feed = {k: v for k, v in feed.items() if k not in constants}
                except _Timeout:
                    raise
                except Exception as exc:  # every import failure is reported, by cause
                    return result(_import_cause(exc), f"{type(exc).__name__}: {_first_line(exc)}")
                try:
                    graph.finalize()
                    with np.errstate(all="ignore"):
                        outputs = graph.run(feed)
                except _Timeout:
                    raise
                except Exception as exc:
                    return result("kernel error", f"{type(exc).__name__}: {_first_line(exc)}")
                problem = _compare([np.asarray(t) for t in outputs], expected, case.rtol, case.atol)
                if problem is not None:
                    return result("numeric mismatch", problem)
    except _Timeout:
        return result("timeout", f"over {timeout:g} s")
    return result(None)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else repr(exc))[:300]


# -- the report ----------------------------------------------------------------------------


def _rate(passed: int, total: int) -> str:
    return f"{100.0 * passed / total:.1f}%" if total else "n/a"


def summarize(report: Report) -> dict[str, Any]:
    results = report.results
    node = [r for r in results if r.case.suite == "node"]
    node_supported = [r for r in node if r.kiln_supports_ops]
    typed = [r for r in node_supported if r.cause != "unsupported type"]
    return {
        "all": (sum(r.cause is None for r in results), len(results)),
        "node": (sum(r.cause is None for r in node), len(node)),
        "node_supported": (
            sum(r.cause is None for r in node_supported),
            len(node_supported),
        ),
        "node_supported_types": (
            sum(r.cause is None for r in typed),
            len(typed),
        ),
    }


def render(report: Report, seconds: float) -> str:
    results = report.results
    s = summarize(report)
    lines = [
        "# ONNX backend conformance",
        "",
        "Generated by `python tools/onnx_conformance.py` (not part of the unit suite) with "
        f"onnx {onnx.__version__}, numpy {np.__version__}, in {seconds:.0f} s. Each case is "
        "loaded with `kiln.io.load`, finalized, run on every data set of the case and "
        f"compared with the expected outputs (rtol {DEFAULT_RTOL:g}, atol {DEFAULT_ATOL:g}, or "
        "the case's own where it is looser; integers and bools exactly; dtypes and shapes "
        "must match).",
        "",
        "## Summary",
        "",
        "| set | passed | cases | pass rate |",
        "|---|---:|---:|---:|",
        f"| node cases whose operators kiln supports | {s['node_supported'][0]} | "
        f"{s['node_supported'][1]} | {_rate(*s['node_supported'])} |",
        f"| ... of which every tensor has a kiln dtype (no float8/int4/string/sequence) | "
        f"{s['node_supported_types'][0]} | {s['node_supported_types'][1]} | "
        f"{_rate(*s['node_supported_types'])} |",
        f"| all node cases | {s['node'][0]} | {s['node'][1]} | {_rate(*s['node'])} |",
    ]
    for suite in ("pytorch-converted", "pytorch-operator", "simple", "light"):
        rs = [r for r in results if r.case.suite == suite]
        if rs:
            p = sum(r.cause is None for r in rs)
            lines.append(f"| {suite} | {p} | {len(rs)} | {_rate(p, len(rs))} |")
    lines.append(f"| everything | {s['all'][0]} | {s['all'][1]} | {_rate(*s['all'])} |")
    bound = [r for r in results if r.cause is None and r.bound_inputs]
    report.notes.append(
        f"{len(bound)} passing cases feed a shape-deciding value (Reshape shape, Reduce axes, "
        "Slice starts, ...) as a graph input. kiln computes every shape when the graph is "
        "built, so the harness loads those with `kiln.io.load(model, constant_inputs=...)`, "
        "binding the integer inputs of the data set as constants (a specialisation of the "
        "model); without it they fail to import with a 'must be a constant' error."
    )
    report.notes.append(
        "Expected failures: kiln is an inference runtime, so Dropout and BatchNormalization "
        "with training_mode=1 are refused by design. A Cast/CastLike to or from a type kiln "
        "lacks (float8, float4, int2/int4, e8m0, string) counts as *unsupported type*, like a "
        "graph input of such a type. The bfloat16 Attention cases differ by one bfloat16 ulp "
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
        "## Failures by cause",
        "",
        "| cause | node cases | other suites |",
        "|---|---:|---:|",
    ]
    causes = collections.Counter((r.cause, r.case.suite == "node") for r in results if r.cause)
    for cause in CAUSES:
        lines.append(f"| {cause} | {causes[(cause, True)]} | {causes[(cause, False)]} |")
    lines += ["", "## Pass rate per operator (node cases)", ""]
    lines += ["| operator | kiln | passed | cases | failures |", "|---|---|---:|---:|---|"]
    by_op: dict[str, list[Result]] = collections.defaultdict(list)
    for r in results:
        if r.case.suite == "node":
            by_op[r.case.op].append(r)
    supported = set(supported_operators())
    for op in sorted(by_op):
        rs = by_op[op]
        passed = sum(r.cause is None for r in rs)
        failing = collections.Counter(r.cause for r in rs if r.cause)
        text = ", ".join(f"{c}: {n}" for c, n in sorted(failing.items()))
        mark = "yes" if op in supported else "no"
        lines.append(f"| {op} | {mark} | {passed} | {len(rs)} | {text} |")
    lines += ["", "## Failing cases whose operators kiln supports", ""]
    bad = [r for r in results if r.cause and r.kiln_supports_ops]
    for cause in CAUSES:
        rs = [r for r in bad if r.cause == cause]
        if not rs:
            continue
        lines += [f"### {cause} ({len(rs)})", ""]
        for r in sorted(rs, key=lambda r: (r.case.suite, r.case.name)):
            lines.append(f"- `{r.case.name}` ({r.case.suite}): {_md(r.detail)}")
        lines.append("")
    lines += ["## Operators the node suite uses that kiln does not implement", ""]
    missing = collections.Counter()
    for r in results:
        if r.case.suite == "node" and r.cause == "unsupported op":
            missing[r.case.op] += 1
    lines.append(", ".join(f"{op} ({n})" for op, n in sorted(missing.items())) or "none")
    lines += ["", "## Other suites: every case", ""]
    for r in results:
        if r.case.suite != "node":
            status = "pass" if r.cause is None else f"{r.cause}: {_md(r.detail)}"
            lines.append(f"- `{r.case.name}` ({r.case.suite}): {status}")
    return "\n".join(lines) + "\n"


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")[:240]


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
    args = parser.parse_args(argv)

    start = time.perf_counter()
    report = Report()
    cases = collect(args.filter, args.suites.split(","), report.notes)
    supported = set(supported_operators())
    for case in cases:
        try:
            result = run_case(case, supported, args.timeout)
        except Exception:  # the harness itself must not stop on one broken case
            result = Result(case, "kernel error", traceback.format_exc(limit=1))
        report.results.append(result)
        if args.verbose and result.cause:
            print(f"{case.name}: {result.cause}: {result.detail}")
    seconds = time.perf_counter() - start
    s = summarize(report)
    print(
        f"node cases, supported operators: {s['node_supported'][0]}/{s['node_supported'][1]} "
        f"({_rate(*s['node_supported'])}); with kiln dtypes: "
        f"{s['node_supported_types'][0]}/{s['node_supported_types'][1]} "
        f"({_rate(*s['node_supported_types'])}); all node cases: {s['node'][0]}/{s['node'][1]} "
        f"({_rate(*s['node'])}); everything: {s['all'][0]}/{s['all'][1]} "
        f"({_rate(*s['all'])}) in {seconds:.0f} s"
    )
    counts = collections.Counter(r.cause for r in report.results if r.cause)
    for cause in CAUSES:
        if counts[cause]:
            print(f"  {cause}: {counts[cause]}")
    if not args.no_write and not args.filter:
        os.makedirs(os.path.dirname(args.output), exist_ok=True)
        with open(args.output, "w") as f:
            f.write(render(report, seconds))
        print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
