"""The NumPy kernels corpus: each kernel run plain and through ``kiln.compile``.

Run: ``python benchmarks/numpy_kernels.py`` (``--quick`` for a smoke test, ``--only a,b`` for
some kernels, ``--inplace`` for the kernels that write into arrays, ``--repeats 3 --budget
0.05`` for benchmark sizes with short timings, ``--docs`` to rewrite the "NumPy kernels corpus"
section of docs/benchmarks.md). The kernels live in
``benchmarks/numpy_kernels/`` (one module per kind).

For every kernel, with a fresh ``kiln.compile(fn)``:

* **correct**: three calls with fresh inputs each (growing sizes for shape-dependent kernels,
  the legacy global stream seeded alike for both), then a fourth on the third call's argument
  objects again (state carried across calls); each side gets its own copy of the inputs, and
  every output and every argument afterwards (mutated inputs) is compared with plain NumPy's:
  container and array types, shape, dtype, values (exact for integers and booleans; rtol 1e-10
  for float64/complex128, 2e-5 for float32);
* **writes**: ``in`` for kernels that write into arrays they create or views of them, else the
  arguments NumPy mutates (which the compiled call must leave mutated alike);
* **mode**: ``compiled`` (a graph serves the calls, no capture warning), ``fallback`` (the
  function's state is Fallback, or a ``CaptureWarning`` said a structure serves eagerly),
  ``recaptures`` (more captures than one, two for drifting sizes: a value guard or a static
  value changes every call), or ``error`` (the compiled call raised); the reason is the first
  warning or ``explain`` line;
* **first call**: the compiled function's first call (capture, optimize, finalize on the
  NumPy plan; other engines are chosen in the background) in ms; for a trace of 10,000 nodes
  or more the optimize and finalize run in the background (``DefaultsOptions.background_nodes``)
  and ``(ready N ms)`` says when the graph was ready; the engines' libraries are imported
  before the first kernel;
* **speedup**: plain time / compiled time at steady state: the median of the ratios of 11
  interleaved pairs of batches (plain, compiled, plain, ...), so that load on a shared machine
  hits both sides of a pair alike; ``numpy`` and ``kiln`` are each side's median time.

The geometric mean of the speedups is over the correct kernels (a wrong answer is no speedup).
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
import time
import traceback
import warnings
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import numpy_kernels as corpus  # noqa: E402  (the package next to this file)
from timing import machine  # noqa: E402

import kiln  # noqa: E402

DOC = HERE.parent / "docs" / "benchmarks.md"
SECTION = "## NumPy kernels corpus"
CALLS = 3


def check(k: corpus.Kernel, compiled: Any, n: int) -> dict[str, Any]:
    """Three calls plain and compiled: the first mismatch, the mode and the first call time."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = corpus.check_calls(k, compiled, n, CALLS)
    row: dict[str, Any] = {"problem": result["problem"]}
    row["first_ms"] = None if result["first_s"] is None else result["first_s"] * 1e3
    row["ready_ms"] = None if result.get("ready_s") is None else result["ready_s"] * 1e3
    if result["error"] is not None:
        err = result["error"]
        row["traceback"] = "".join(traceback.format_exception(type(err), err, err.__traceback__))
    row["warnings"] = [f"{type(w.message).__name__}: {w.message}" for w in caught]
    row["mode"] = corpus.mode(k, compiled, caught, result["error"])
    row["explain"] = kiln.explain(compiled, file=False)
    info = compiled.cache_info()
    row["captures"] = f"{info.captures}/{info.recaptures}"
    return row


def reason(row: dict[str, Any]) -> str:
    """One line: why the kernel is wrong or falls back (the first warning, else explain)."""
    if row["mode"] == "error":
        text = row["problem"]
    elif row["warnings"]:
        text = row["warnings"][0]
    elif row["mode"] != "compiled":
        lines = row["explain"].splitlines()
        text = lines[-1].strip() if len(lines) > 1 else lines[0]
    else:
        text = row["problem"] or ""
    return _short(text)


def _short(text: str) -> str:
    """A warning or error shortened to its cause: no paths, no boilerplate advice."""
    text = text.replace(str(HERE.parent) + os.sep, "").replace("benchmarks/numpy_kernels/", "")
    text = re.sub(r"kiln\.compile\(\w+\): ", "", text)
    text = re.sub(r" cannot be recorded into a graph, so calls .*", "", text)
    text = re.sub(r"; expected one of [\w, ]+", "", text)
    text = re.sub(r"\s+", " ", text).strip()
    return text if len(text) <= 200 else text[:197] + "..."


def steady(k: corpus.Kernel, compiled: Any, n: int, budget: float, repeats: int) -> tuple:
    """(plain s, compiled s, speedup): ``repeats`` interleaved pairs of batches (plain then
    compiled, ~budget in all); the times are each side's median, the speedup the median of the
    pairs' ratios, so that load from other processes hits both sides of a pair alike."""
    plain_args = corpus.make_args(k, n, CALLS - 1, {})
    kiln_args = corpus.make_args(k, n, CALLS - 1, {})
    compiled(*kiln_args)  # the graph for this shape is warm
    sides = ((k.fn, plain_args), (compiled, kiln_args))
    once = []
    for fn, args in sides:
        start = time.perf_counter()
        fn(*args)
        once.append(max(time.perf_counter() - start, 1e-7))
    number = [max(1, int(budget / 2 / repeats / t)) for t in once]
    samples: list[list[float]] = [[], []]
    for _ in range(repeats):
        for side, (fn, args) in enumerate(sides):
            start = time.perf_counter()
            for _ in range(number[side]):
                fn(*args)
            samples[side].append((time.perf_counter() - start) / number[side])
    ratios = [p / c for p, c in zip(*samples)]
    return float(np.median(samples[0])), float(np.median(samples[1])), float(np.median(ratios))


def _fmt_s(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} us"


def _warm_imports() -> None:
    """Import the engines' libraries up front, so that no kernel's first call pays for them."""
    import importlib

    for name in ("jax", "jax.numpy", "onnxruntime", "onnx"):
        try:
            importlib.import_module(name)
        except Exception:
            pass


def run(
    kernels: list[corpus.Kernel],
    quick: bool,
    budget: float | None = None,
    repeats: int | None = None,
) -> list[dict[str, Any]]:
    """Check and time each kernel (tiny sizes when ``quick``); ``budget`` seconds of steady
    timing in ``repeats`` pairs per kernel (defaults: 0.25 s and 11, quick: 0.02 s and 3)."""
    _warm_imports()
    rows = []
    budget = budget if budget is not None else (0.02 if quick else 0.25)
    repeats = repeats if repeats is not None else (3 if quick else 11)
    for k in kernels:
        n = k.tiny if quick else k.bench
        compiled = kiln.compile(k.fn)
        row = {"kernel": k, "n": n, **check(k, compiled, n)}
        compiled.wait_for_engines()  # steady state: the engine chosen in the background serves
        row["plain_s"] = row["kiln_s"] = row["speedup"] = None
        if row["mode"] != "error":
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    row["plain_s"], row["kiln_s"], row["speedup"] = steady(
                        k, compiled, n, budget, repeats
                    )
                except Exception as exc:
                    row["mode"] = "error"
                    row["problem"] = f"steady call raises {type(exc).__name__}: {exc}"
        row["reason"] = reason(row)
        rows.append(row)
        speed = row["speedup"]
        print(
            f"  {k.name:22s} {'ok' if row['problem'] is None else 'WRONG':5s} {row['mode']:9s}"
            f" {'' if speed is None else f'{speed:6.2f}x'}",
            file=sys.stderr,
            flush=True,
        )
    return rows


def _timed_correct(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if r["speedup"] and r["problem"] is None]


def geomean(rows: list[dict[str, Any]]) -> float | None:
    """Geometric mean speedup over the correct kernels (a wrong answer is no speedup)."""
    ratios = [r["speedup"] for r in _timed_correct(rows)]
    return math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else None


def markdown(rows: list[dict[str, Any]], quick: bool) -> str:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    lines = [
        "| kernel | kind | size | writes | correct | mode | captures | first call | numpy | kiln "
        "| speedup |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        k = r["kernel"]
        speed = f"{r['speedup']:.2f}x" if r["speedup"] else "-"
        if r["speedup"] and r["problem"] is not None:
            speed = f"({speed})"  # not counted: a wrong answer is no speedup
        first = f"{r['first_ms']:.1f} ms" if r["first_ms"] is not None else "-"
        ready = r.get("ready_ms")
        if ready is not None and r["first_ms"] is not None and ready > r["first_ms"] * 1.05 + 1:
            first += f" (ready {ready:.0f} ms)"  # optimized and planned in the background
        lines.append(
            f"| {k.name} | {k.kind} | {k.bench if not quick else k.tiny} | {_writes(k)} "
            f"| {'yes' if r['problem'] is None else 'NO'} | {r['mode']} "
            f"| {r.get('captures', '-')} | {first} "
            f"| {_fmt_s(r['plain_s'])} | {_fmt_s(r['kiln_s'])} | {speed} |"
        )
    g = geomean(rows)
    correct = sum(r["problem"] is None for r in rows)
    compiled = sum(r["mode"] == "compiled" for r in rows)
    below = sum(1 for r in _timed_correct(rows) if r["speedup"] < 0.95)
    writing = [r for r in rows if r["kernel"].inplace]
    lines += [
        "",
        f"Geometric mean speedup over the {len(_timed_correct(rows))} correct kernels: "
        f"**{g:.2f}x** (speedups in parentheses are of wrong answers and not counted)."
        if g
        else "Geometric mean speedup: -",
        f"Correct: {correct}/{len(rows)}; compiled without fallback: {compiled}/{len(rows)}; "
        f"correct but below 0.95x NumPy: {below}. Load average (1 min) at the end: {load:.2f}.",
        f"Kernels that write into arrays: {len(writing)}; correct: "
        f"{sum(r['problem'] is None for r in writing)}; compiled and correct: "
        f"{sum(r['problem'] is None and r['mode'] == 'compiled' for r in writing)}.",
    ]
    notes = [r for r in rows if r["problem"] is not None or r["mode"] != "compiled"]
    if notes:
        lines += ["", "Incorrect or not compiled (first problem, else first warning):", ""]
        for r in notes:
            what = _short(r["problem"]) if r["problem"] else r["reason"]
            if r["problem"] and r["mode"] == "fallback":
                what += f"; falls back: {r['reason']}"
            lines.append(f"- `{r['kernel'].name}` ({r['mode']}): {what}")
    return "\n".join(lines)


def _writes(k: corpus.Kernel) -> str:
    """The table's *writes* cell: the mutated arguments, ``in`` for writes into arrays the
    kernel creates only, ``-`` for none."""
    if k.mutates:
        return ", ".join(k.mutates)
    return "in" if k.inplace else "-"


def kernel_list(kernels: list[corpus.Kernel]) -> str:
    """The kernels, one line each: name, kind, benchmark size, description."""
    return "\n".join(f"- `{k.name}` ({k.kind}, n={k.bench}): {k.description}" for k in kernels)


def _machine_note() -> str:
    m = machine()
    return (
        f"{m['processor']}, {m['cores']} cores (shared, noisy), {m['platform']}; "
        f"Python {m['python']}, NumPy {m['numpy']}"
    )


def write_docs(table: str) -> None:
    """Replace (or append) the corpus section of docs/benchmarks.md; other sections stay."""
    intro = (
        f"{SECTION}\n\n"
        "Produced by `python benchmarks/numpy_kernels.py --docs` (kernels in "
        "`benchmarks/numpy_kernels/`): plain NumPy kernels of the kinds scientists write, each "
        "run plain and through `kiln.compile`. *writes*: the arguments a kernel mutates, `in` "
        "when it writes only into arrays it creates; *correct*: three calls with fresh inputs "
        "(growing sizes for the shape-dependent ones) and a fourth on the same arguments again "
        "match NumPy in types, shape, dtype, values and mutated inputs; *mode*: compiled, "
        "fallback (state Fallback or a CaptureWarning), or recaptures (more captures than one, "
        "two for drifting sizes); "
        "*captures*: captures / re-captures; "
        "*first call*: the first call's time: capture + optimize + finalize on the NumPy plan, "
        "or, for a trace of 10,000 nodes or more, the capture alone, with (ready N ms) when its "
        "graph was optimized and planned in the background, which the second call waits for "
        "(other engines are chosen in the background, and the steady timing waits for that "
        "choice); *speedup*: "
        "NumPy time / "
        "kiln time, the median ratio of 11 interleaved pairs of batches; in parentheses when "
        "the answer is wrong (not counted in the geometric mean). The machine is shared (2 "
        "cores, other processes running): timings are noisy, ratios within ~20% of 1.0 are not "
        "significant.\n\n"
        f"Machine: {_machine_note()}.\n\n"
    )
    text = DOC.read_text() if DOC.exists() else "# Benchmarks\n"
    start = text.find(SECTION)
    if start >= 0:
        end = text.find("\n## ", start + len(SECTION))
        rest = text[end + 1 :] if end >= 0 else ""
        text = text[:start] + intro + table + "\n" + ("\n" + rest if rest else "")
    else:
        text = text.rstrip("\n") + "\n\n" + intro + table + "\n"
    DOC.write_text(text)


def _section_body(table: str) -> str:
    return f"{table}\n\nThe kernels (n is the main size at benchmark scale):\n\n" + kernel_list(
        corpus.KERNELS
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, short timings")
    parser.add_argument("--only", default="", help="comma-separated kernel names")
    parser.add_argument("--inplace", action="store_true", help="only kernels that write arrays")
    parser.add_argument("--repeats", type=int, help="timing pairs per kernel (default 11)")
    parser.add_argument("--budget", type=float, help="seconds of timing per kernel (0.25)")
    parser.add_argument("--docs", action="store_true", help="rewrite the docs section")
    parser.add_argument("--verbose", action="store_true", help="print tracebacks and warnings")
    opts = parser.parse_args()
    kernels = corpus.KERNELS
    if opts.only:
        names = set(opts.only.split(","))
        kernels = [k for k in kernels if k.name in names]
    if opts.inplace:
        kernels = [k for k in kernels if k.inplace]
    start = time.perf_counter()
    rows = run(kernels, opts.quick, opts.budget, opts.repeats)
    table = markdown(rows, opts.quick)
    print(table)
    print(f"\n({time.perf_counter() - start:.0f} s)")
    if opts.verbose:
        for r in rows:
            if r.get("traceback") or r["warnings"]:
                print(f"\n### {r['kernel'].name}\n{r.get('traceback', '')}")
                print("\n".join(r["warnings"]))
    partial = opts.quick or opts.only or opts.inplace or opts.repeats or opts.budget
    if opts.docs and not partial:
        write_docs(_section_body(table))


if __name__ == "__main__":
    main()
