"""How the first call's stages grow with the size of the trace (issue 13, item 1).

Unrolled Python loops make big traces: each iteration records a few nodes. This sweep builds
traces of about 1,000, 10,000 and 100,000 recorded nodes from two realistic kernels and times
each stage of a first call on its own:

- ``capture``: recording the trace (``kiln.trace`` with example values, so every operator also
  runs its kernel, as the first call of ``kiln.compile`` does);
- ``optimize``: the default optimizer pipeline;
- ``finalize``: plan generation on the NumPy engine (``finalize(engine="numpy")``);
- ``replay``: one run of the finalized graph;
- ``eager``: the plain NumPy function, for scale.

The table gives wall-clock seconds per stage and CPU microseconds per recorded node (the
process's own CPU time: on a shared, busy machine the wall clock also counts the waits), so
linear growth shows as a flat per-node column. A size runs only if the previous one took less
than ``--cap`` seconds in all (the next size would take about ten times as long).
``--first-call`` adds the whole first call of ``kiln.compile`` and how much longer its graph
took to be ready (a trace of 10,000 nodes or more is optimized and planned in the
background); ``--cases accumulate`` adds ``acc[i] += x[i] * 2`` in a loop
(tests/test_graph_size.py checks the same kernels' work grows linearly, by counting calls).

Run: ``python benchmarks/graph_size_sweep.py [--sizes 1000,10000,100000] [--cap 60]``
(prints the table, writes ``results/graph_size_sweep.json``).

``--per-op`` instead times recording alone, per front-door call, for the calls an unrolled
loop body makes (``x[i]``, ``x[i] - x[j]``, ``np.sum(x)``, ``np.sqrt(x)``, ``D[i, j] = 1.0``,
``D[i, j] = x[i, 0]``): CPU microseconds per call and per recorded node (the best of three
traces of 2,000 calls; the issue's goal is at most 20 µs per recorded node).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from timing import machine, write_json  # noqa: E402

import kiln  # noqa: E402

STAGES = ("capture", "optimize", "finalize", "replay")


def rows(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    """A preallocated array filled row by row: ``out[i] = tanh(x[i] * w) + b``."""
    out = np.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = np.tanh(x[i] * w) + b
    return out


def chain(x: np.ndarray, steps: int) -> np.ndarray:
    """An elementwise recurrence unrolled by a Python loop."""
    y = x
    for k in range(steps):
        y = y * 0.999 + np.sin(y) * 0.001 - (k % 3) * 1e-4
    return y


NODES_PER_ROW = 7  # x[i] (Slice, Squeeze), Mul, Tanh, Add; the write: Reshape, SliceUpdate
NODES_PER_STEP = 5  # Mul, Sin, Mul, Add, Sub


def rows_case(n_nodes: int) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    rng = np.random.default_rng(0)
    n = max(1, n_nodes // NODES_PER_ROW)
    x = rng.standard_normal((n, 16)).astype(np.float32)
    w = rng.standard_normal(16).astype(np.float32)
    b = rng.standard_normal(16).astype(np.float32)
    return rows, (x, w, b)


def chain_case(n_nodes: int) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    x = np.linspace(-1.0, 1.0, 64)
    steps = max(1, n_nodes // NODES_PER_STEP)
    return (lambda x: chain(x, steps)), (x,)


def accumulate(x: np.ndarray) -> np.ndarray:
    """Row-wise accumulation into a preallocated array: ``acc[i] += x[i] * 2``."""
    acc = np.zeros_like(x)
    for i in range(x.shape[0]):
        acc[i] += x[i] * 2.0
    return acc


NODES_PER_ACCUMULATION = 14


def accumulate_case(n_nodes: int) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    n = max(1, n_nodes // NODES_PER_ACCUMULATION)
    return accumulate, (np.random.default_rng(0).standard_normal((n, 16)),)


CASES = {"rows": rows_case, "chain": chain_case, "accumulate": accumulate_case}
DEFAULT_CASES = "rows,chain"


def _timed(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    """``fn()``, its wall-clock seconds and this process's CPU seconds (the CPU time shows
    the work alone on a shared, busy machine)."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn()
    return result, time.perf_counter() - wall, time.process_time() - cpu


def measure(fn: Callable[..., Any], args: tuple[Any, ...], first_call: bool) -> dict[str, Any]:
    """Seconds per stage of one first call of ``fn`` on ``args``, and the node counts."""
    row: dict[str, Any] = {}
    expected, row["eager"], _ = _timed(lambda: fn(*args))
    traced, row["capture"], row["capture_cpu"] = _timed(lambda: kiln.trace(fn, *args))
    graph = traced.graph
    row["nodes_recorded"] = len(graph.nodes)
    report, row["optimize"], row["optimize_cpu"] = _timed(graph.optimize)
    row["iterations"] = report.iterations
    row["nodes_optimized"] = len(graph.nodes)
    _, row["finalize"], row["finalize_cpu"] = _timed(lambda: graph.finalize(engine="numpy"))
    arrays = [a for a in args if isinstance(a, np.ndarray)]
    (result,), row["replay"], row["replay_cpu"] = _timed(lambda: graph.run(arrays))
    np.testing.assert_allclose(np.asarray(result), expected, rtol=1e-5, atol=1e-6)
    if first_call:  # kiln.compile's whole first call (engine choice in the background)
        compiled = kiln.compile(fn)
        _, row["first_call"], _ = _timed(lambda: compiled(*args))
        # A trace of DefaultsOptions.background_nodes or more is optimized and planned in the
        # background: how much longer until its graph is ready (the second call waits for it).
        _, row["ready_after"], _ = _timed(lambda: compiled.current_graph)
    return row


PER_OP: dict[str, Callable[..., Any]] = {
    "x[i]": lambda x, D, i, j: x[i],
    "x[i] - x[j]": lambda x, D, i, j: x[i] - x[j],
    "np.sum(x)": lambda x, D, i, j: np.sum(x),
    "np.sqrt(x)": lambda x, D, i, j: np.sqrt(x),
    "D[i, j] = 1.0": lambda x, D, i, j: D.__setitem__((i, j), 1.0),
    "D[i, j] = x[i, 0]": lambda x, D, i, j: D.__setitem__((i, j), x[i, 0]),
}


def per_op(calls: int = 2000, repeats: int = 3) -> list[dict[str, Any]]:
    """CPU microseconds per recorded call of each body of :data:`PER_OP` (``i, j`` running
    over a 40 x 40 grid, ``x`` of shape (40, 3)), and per recorded node."""
    x = np.random.default_rng(0).random((40, 3))
    rows = []
    for name, body in PER_OP.items():

        def loop(x: np.ndarray, body: Callable[..., Any] = body) -> np.ndarray:
            D = np.zeros((40, 40))
            for k in range(calls):
                body(x, D, k % 40, (k // 40) % 40)
            return D

        best, nodes = float("inf"), 0
        for _ in range(repeats):
            traced, _, cpu = _timed(lambda loop=loop: kiln.trace(loop, x))
            best, nodes = min(best, cpu), len(traced.graph.nodes)
        per_call = best / calls * 1e6
        rows.append({"call": name, "us_per_call": per_call, "us_per_node": best / nodes * 1e6})
        print(f"{name:20} {per_call:8.1f} us/call {best / nodes * 1e6:8.1f} us/node", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--cases", default=DEFAULT_CASES)
    parser.add_argument(
        "--cap", type=float, default=60.0, help="skip the next size when one took longer (s)"
    )
    parser.add_argument("--first-call", action="store_true", help="also time kiln.compile's")
    parser.add_argument("--no-json", action="store_true")
    parser.add_argument("--per-op", action="store_true", help="time recording per call only")
    ns = parser.parse_args()
    if ns.per_op:
        per_op()
        return
    sizes = [int(s) for s in ns.sizes.split(",")]
    results = []
    print(
        f"{'case':10} {'nodes':>7} {'opt.':>7} {'it':>2} {'eager s':>8}"
        + "".join(f" {s + ' s':>11}" for s in STAGES)
        + (f" {'1st call s':>11} {'ready +s':>9}" if ns.first_call else "")
        + "".join(f" {s[:7] + ' cpu us/n':>16}" for s in STAGES)
    )
    for case in ns.cases.split(","):
        for size in sizes:
            fn, args = CASES[case](size)
            row = measure(fn, args, ns.first_call)
            row.update(case=case, target_nodes=size)
            results.append(row)
            n = row["nodes_recorded"]
            print(
                f"{case:10} {n:7d} {row['nodes_optimized']:7d} {row['iterations']:2d} "
                f"{row['eager']:8.3f}"
                + "".join(f" {row[s]:11.3f}" for s in STAGES)
                + (f" {row['first_call']:11.3f} {row['ready_after']:9.3f}" if ns.first_call else "")
                + "".join(f" {row[s + '_cpu'] / n * 1e6:16.1f}" for s in STAGES),
                flush=True,
            )
            if sum(row[s] for s in STAGES) > ns.cap:
                print(f"  (next size skipped: this one took more than {ns.cap:.0f} s)")
                break
    if not ns.no_json:
        path = Path(__file__).parent / "results" / "graph_size_sweep.json"
        write_json(path, {"machine": machine(), "results": results})


if __name__ == "__main__":
    main()
