"""The benchmark runner: every workload, side by side in one process, one table.

Run: ``python benchmarks/run.py`` (``--quick`` for shorter timings, ``--only W2,W4``). Prints
the table, writes ``benchmarks/results/run.json`` and ``docs/benchmarks.md``.

Columns, per workload (median seconds per call, ``timing.median_seconds``):

* ``numpy``: the workload's plain NumPy code, eager;
* ``kiln``: ``kiln.compile(fn)`` replayed (the user's path: guard, flatten, plan, unflatten;
  the engine chosen automatically per graph);
* ``kiln[numpy]``, ``kiln[jax]``, ``kiln[ort]``: ``kiln.trace(fn)`` optimized and finalized
  with that engine, called as a TracedGraph;
* ``jax.jit``: the same model in jax.numpy, jitted, inputs already on the device;
* ``ort``: onnxruntime on the kiln-exported ONNX model of the recorded (unoptimized) graph,
  with onnxruntime's own graph optimizations;
* ``torch.compile``: the same model in torch, compiled (skipped when it fails to build).
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
import tracemalloc
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from timing import machine, median_seconds, write_json  # noqa: E402
from workloads import Workload, workloads  # noqa: E402

import kiln  # noqa: E402
from kiln.optim import DefaultsOptions  # noqa: E402

COLUMNS = [
    "numpy",
    "kiln",
    "kiln[reassoc]",
    "kiln[numpy]",
    "kiln[jax]",
    "kiln[ort]",
    "jax.jit",
    "ort",
    "torch.compile",
]


def _jax() -> tuple[Any, Any] | None:
    try:
        import jax
        import jax.numpy as jnp

        jax.config.update("jax_platforms", "cpu")
        return jax, jnp
    except Exception:
        return None


def _torch() -> Any:
    try:
        import torch

        torch.set_num_threads(os.cpu_count() or 1)
        return torch
    except Exception:
        return None


def _peak_bytes(fn: Callable[[], Any]) -> int:
    fn()
    gc.collect()
    tracemalloc.start()
    tracemalloc.reset_peak()
    result = fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    del result
    return peak


def _time(fn: Callable[[], Any], quick: bool) -> float:
    return median_seconds(fn, min_time=0.05 if quick else 0.3, repeats=5 if quick else 7)


def bench(w: Workload, quick: bool, jaxmods: Any, torch: Any) -> dict[str, Any]:
    row: dict[str, Any] = {"name": w.name, "title": w.title, "seconds": {}, "notes": {}}
    sec = row["seconds"]
    xs = w.inputs
    sec["numpy"] = _time(lambda: w.numpy_fn(*xs), quick)

    # kiln.compile: the user's path; the first call captures, optimizes and finalizes.
    compiled = kiln.compile(w.kiln_fn)
    start = time.perf_counter()
    compiled(*xs)
    row["first_call_s"] = time.perf_counter() - start
    start = time.perf_counter()
    compiled(*xs)
    row["second_call_s"] = time.perf_counter() - start
    sec["kiln"] = _time(lambda: compiled(*xs), quick)
    graph = compiled.current_graph
    plan = graph.program.plan if graph is not None and graph.program is not None else None
    row["notes"]["engine"] = getattr(plan, "engine", type(plan).__name__)
    row["notes"]["selection"] = getattr(plan, "selection", None)
    row["notes"]["nodes"] = len(graph.nodes) if graph is not None else None
    if graph is not None:
        row["notes"]["ops"] = sorted({n.op for n in graph.nodes})

    # The same, allowed to reassociate floating-point math (fusions that compute in their own
    # order, engines that round differently: jax.jit's own terms), waiting for the engine.
    fast = kiln.compile(w.kiln_fn, defaults=DefaultsOptions(allow_reassociation=True))
    fast(*xs)
    fast.wait_for_engines(timeout=600)
    fast(*xs)
    sec["kiln[reassoc]"] = _time(lambda: fast(*xs), quick)
    fast_graph = fast.current_graph
    fast_plan = fast_graph.program.plan if fast_graph is not None else None
    row["notes"]["engine[reassoc]"] = getattr(fast_plan, "engine", type(fast_plan).__name__)

    # Each engine explicitly, through kiln.trace.
    for engine, column in (
        ("numpy", "kiln[numpy]"),
        ("jax", "kiln[jax]"),
        ("onnxruntime", "kiln[ort]"),
    ):
        try:
            traced = kiln.trace(w.kiln_fn, *xs)
            # jax and onnxruntime forced: on jax.jit's terms (XLA's fused multiply-adds)
            reassociate = engine != "numpy"
            traced.optimize(defaults=DefaultsOptions(allow_reassociation=reassociate))
            traced.finalize(engine)
            traced(*xs)
            sec[column] = _time(lambda traced=traced: traced(*xs), quick)
            del traced
            gc.collect()
        except Exception as exc:
            row["notes"][column] = f"{type(exc).__name__}: {str(exc)[:160]}"

    if jaxmods is not None and w.jax_fn is not None:
        jax, jnp = jaxmods
        try:
            jitted = jax.jit(w.jax_fn(jnp, jax))
            jxs = [jnp.asarray(x) for x in xs]
            jax.block_until_ready(jitted(*jxs))
            sec["jax.jit"] = _time(lambda: jax.block_until_ready(jitted(*jxs)), quick)
        except Exception as exc:
            row["notes"]["jax.jit"] = f"{type(exc).__name__}: {str(exc)[:160]}"

    try:
        import onnxruntime as ort

        model = kiln.trace(w.kiln_fn, *xs).graph.to_onnx()
        options = ort.SessionOptions()
        options.intra_op_num_threads = os.cpu_count() or 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        session = ort.InferenceSession(
            model.SerializeToString(), options, providers=["CPUExecutionProvider"]
        )
        feeds = {i.name: x for i, x in zip(session.get_inputs(), xs)}
        session.run(None, feeds)
        run = session.run
        sec["ort"] = _time(lambda: run(None, feeds), quick)
        session = run = None  # release onnxruntime's threads before the next column
        gc.collect()
    except Exception as exc:
        row["notes"]["ort"] = f"{type(exc).__name__}: {str(exc)[:160]}"

    gc.collect()
    if w.roofline is not None:
        sec["memory copy"] = _time(w.roofline, quick)

    traced = kiln.trace(w.kiln_fn, *xs)
    traced.optimize()
    traced.finalize("numpy")
    row["peak_bytes"] = {
        "numpy": _peak_bytes(lambda: w.numpy_fn(*xs)),
        "kiln": _peak_bytes(lambda: compiled(*xs)),
        "kiln[numpy]": _peak_bytes(lambda: traced(*xs)),
    }
    return row


def bench_torch(w: Workload, row: dict[str, Any], quick: bool, torch: Any) -> None:
    """torch.compile, run after every other column: its OpenMP threads keep spinning after a
    call and would slow whatever is measured next."""
    sec, xs = row["seconds"], w.inputs
    if torch is not None and w.torch_fn is not None:
        try:
            fn = torch.compile(w.torch_fn(torch))
            txs = [torch.from_numpy(x) for x in xs]
            with torch.no_grad():
                start = time.perf_counter()
                fn(*txs)
                row["notes"]["torch_compile_first_s"] = time.perf_counter() - start

                def call() -> Any:
                    with torch.no_grad():
                        return fn(*txs)

                sec["torch.compile"] = _time(call, quick)
        except Exception as exc:
            row["notes"]["torch.compile"] = f"{type(exc).__name__}: {str(exc)[:160]}"


def _fmt(s: float | None) -> str:
    if s is None:
        return "-"
    if s < 1e-3:
        return f"{s * 1e6:.1f} us"
    return f"{s * 1e3:.2f} ms"


def targets(rows: list[dict[str, Any]]) -> list[tuple[str, str, bool | None]]:
    """(target, measured, met) for the issue's targets."""
    by = {r["name"]: r for r in rows}
    out: list[tuple[str, str, bool | None]] = []

    def sec(name: str, col: str) -> float | None:
        return by.get(name, {}).get("seconds", {}).get(col)

    k1, j1, n1 = sec("W1", "kiln"), sec("W1", "jax.jit"), sec("W1", "numpy")
    if k1 and j1:
        out.append(("W1 kiln <= 0.5x jax.jit", f"{k1 / j1:.2f}x", k1 / j1 <= 0.5))
    if k1 and n1:
        out.append(("W1 kiln <= 1.0x NumPy eager", f"{k1 / n1:.2f}x", k1 / n1 <= 1.0))
    k2, c2 = sec("W2", "kiln"), sec("W2", "memory copy")
    if k2 and c2:
        out.append(("W2 kiln <= 1.2x memory copy", f"{k2 / c2:.2f}x", k2 / c2 <= 1.2))
    for name in ("W3", "W4", "W5"):
        k, n = sec(name, "kiln"), sec(name, "numpy")
        fast = sec(name, "kiln[reassoc]")  # on jax.jit's terms: rounding may differ
        anchors = [v for v in (sec(name, "jax.jit"), sec(name, "ort")) if v]
        if fast and anchors:
            best = min(anchors)
            out.append(
                (
                    f"{name} kiln[reassoc] <= 1.0x min(jax.jit, ort)",
                    f"{fast / best:.2f}x",
                    fast / best <= 1.0,
                )
            )
        if k and n:
            out.append(
                (f"{name} kiln >= 2x faster than NumPy", f"{n / k:.2f}x faster", n / k >= 2.0)
            )
    if "W4" in by:
        first = by["W4"]["first_call_s"]
        out.append(("W4 first call <= 1 s", f"{first:.3f} s", first <= 1.0))
    return out


def table(rows: list[dict[str, Any]]) -> str:
    cols = [c for c in COLUMNS + ["memory copy"] if any(c in r["seconds"] for r in rows)]
    head = "| workload | " + " | ".join(cols)
    head += " | kiln/numpy | kiln/best anchor | engine (kiln / reassoc) |"
    lines = [head, "|" + "---|" * (len(cols) + 4)]
    for r in rows:
        s = r["seconds"]
        anchors = [v for k, v in s.items() if k in ("jax.jit", "ort", "torch.compile")]
        best = min(anchors) if anchors else None
        cells = [_fmt(s.get(c)) for c in cols]
        ratio_np = f"{s['kiln'] / s['numpy']:.2f}x"
        ratio_best = f"{s['kiln'] / best:.2f}x" if best else "-"
        lines.append(
            f"| {r['name']} | "
            + " | ".join(cells)
            + f" | {ratio_np} | {ratio_best} | {r['notes'].get('engine')}"
            + f" / {r['notes'].get('engine[reassoc]')} |"
        )
    return "\n".join(lines)


def extras(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| workload | first call (capture+optimize+finalize) | second call | peak memory numpy "
        "| peak memory kiln | peak memory kiln[numpy] |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        p = r["peak_bytes"]
        lines.append(
            f"| {r['name']} | {r['first_call_s'] * 1e3:.1f} ms | {r['second_call_s'] * 1e3:.2f} ms"
            f" | {p['numpy'] / 2**20:.2f} MiB | {p['kiln'] / 2**20:.2f} MiB"
            f" | {p['kiln[numpy]'] / 2**20:.2f} MiB |"
        )
    return "\n".join(lines)


def markdown(rows: list[dict[str, Any]], info: dict[str, Any]) -> str:
    met = targets(rows)
    target_lines = ["| target | measured | met |", "|---|---|---|"] + [
        f"| {t} | {m} | {'yes' if ok else 'no'} |" for t, m, ok in met
    ]
    workload_lines = [f"- **{r['name']}**: {r['title']}" for r in rows]
    return "\n".join(
        [
            "# Benchmarks",
            "",
            "Produced by `python benchmarks/run.py` (this page is rewritten by each run; the raw",
            "numbers are in `benchmarks/results/run.json`). Median time per call, every column",
            "measured in the same process. `kiln` is `kiln.compile(fn)` replayed with the engine",
            "chosen automatically, NumPy's bits exactly (an engine that rounds differently is",
            "never chosen); `kiln[reassoc]` is the same with",
            "`defaults=DefaultsOptions(allow_reassociation=True)`, jax.jit's terms (fusions and",
            "engines that round in their own way, within the selection's ulp bound);",
            "`kiln[numpy]`, `kiln[jax]`, `kiln[ort]` force one engine through `kiln.trace`;",
            "`ort` is onnxruntime on the kiln-exported model of the recorded graph.",
            "",
            f"Machine: {info['processor']}, {info['cores']} cores, {info['platform']}; Python "
            f"{info['python']}, NumPy {info['numpy']}"
            + "".join(f", {k} {v}" for k, v in info.get("versions", {}).items())
            + f". Load average before/after: {info['load_average_before'][0]:.2f} / "
            f"{info['load_average_after'][0]:.2f} (above ~0.5 on 2 cores other processes "
            "shared the cores, and multi-threaded columns, eager NumPy's BLAS above all, "
            "are inflated).",
            "",
            *workload_lines,
            "",
            table(rows),
            "",
            "Targets (issue 5):",
            "",
            *target_lines,
            "",
            "First call and memory (peak traced by tracemalloc during one call; XLA's and",
            "onnxruntime's own allocations are invisible to it):",
            "",
            extras(rows),
            "",
        ]
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter timings")
    parser.add_argument("--only", default="", help="comma-separated workloads, e.g. W2,W4")
    parser.add_argument("--no-docs", action="store_true", help="do not rewrite docs/benchmarks.md")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    jaxmods, torch = _jax(), _torch()
    info = machine()
    info["versions"] = {}
    info["load_average_before"] = os.getloadavg()
    for mod in ("jax", "onnxruntime", "torch", "numexpr"):
        try:
            info["versions"][mod] = __import__(mod).__version__
        except Exception:
            pass
    wanted = {s.strip() for s in args.only.split(",") if s.strip()}
    rows = []
    for w in workloads():
        if wanted and w.name not in wanted:
            continue
        print(f"running {w.name}: {w.title} ...", file=sys.stderr, flush=True)
        rows.append(bench(w, args.quick, jaxmods, torch))
    for w, row in zip([w for w in workloads() if not wanted or w.name in wanted], rows):
        print(f"running {w.name} on torch.compile ...", file=sys.stderr, flush=True)
        bench_torch(w, row, args.quick, torch)
    print(table(rows))
    print()
    for t, m, ok in targets(rows):
        print(f"{'MET ' if ok else 'MISS'} {t}: {m}")
    print()
    print(extras(rows))
    info["load_average_after"] = os.getloadavg()
    result = {"machine": info, "rows": rows, "targets": targets(rows)}
    write_json(HERE / "results" / "run.json", result)
    if not args.no_docs and not wanted:
        write_docs(markdown(rows, info))
    return result


def write_docs(text: str) -> None:
    """Write the workload part of docs/benchmarks.md: the sections other tools write there
    (from its first ``## `` heading on: the NumPy-kernel corpus) stay as they are."""
    doc = HERE.parent / "docs" / "benchmarks.md"
    old = doc.read_text() if doc.exists() else ""
    kept = old.find("\n## ")
    doc.write_text(text.rstrip("\n") + "\n" + (old[kept:] if kept >= 0 else ""))


if __name__ == "__main__":
    main()
