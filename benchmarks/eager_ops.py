"""Microseconds per op of kiln's eager API on small tensors, against NumPy in the same run.

Each op runs on 8-element float64 operands (``@`` with an 8x8 matrix) outside any capture, as
NumPy on arrays and as kiln on tensors. Batches of the two alternate and each keeps its best
batch (the least disturbed by other load: the machine may be shared), so read the ratio to
NumPy measured in the same run. Issue 11's goal is 1.5 us per op. ``--full`` adds a column with
the eager cache off (``kiln.tensor.EAGER_CACHE = False``: every call validated in full).
Run: ``python benchmarks/eager_ops.py [--full]``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from timing import machine, write_json  # noqa: E402

import kiln  # noqa: E402

ktensor = sys.modules["kiln.tensor"]  # the module (``kiln.tensor`` is also a function)


def cases(lib: Any, a: Any, b: Any, m: Any) -> dict[str, Callable[[], Any]]:
    """The ops, written once for ``lib`` (numpy or kiln) and its arrays."""
    return {
        "a + b": lambda: a + b,
        "a * 2.0": lambda: a * 2.0,
        "a.sum()": lambda: a.sum(),
        "a.sum(axis=0)": lambda: a.sum(axis=0),
        "sum(a, axis=0)": lambda: lib.sum(a, axis=0),
        "a.mean(axis=0)": lambda: a.mean(axis=0),
        "exp(a)": lambda: lib.exp(a),
        "a[1:3]": lambda: a[1:3],
        "a.reshape(2, 4)": lambda: a.reshape(2, 4),
        "a @ m": lambda: a @ m,
        "where(a > 0, a, 0)": lambda: lib.where(a > 0, a, 0),
    }


def best_us(fns: list[Callable[[], Any]], *, rounds: int = 15, number: int = 2000) -> list[float]:
    """Best microseconds per call of each of ``fns``, over alternating batches."""
    best = [float("inf")] * len(fns)
    for fn in fns:
        fn()  # warm up (fills the eager caches)
    for _ in range(rounds):
        for i, fn in enumerate(fns):
            start = time.perf_counter()
            for _ in range(number):
                fn()
            best[i] = min(best[i], (time.perf_counter() - start) / number * 1e6)
    return best


def _uncached(fn: Callable[[], Any]) -> Callable[[], Any]:
    def run() -> Any:
        ktensor.EAGER_CACHE = False
        try:
            return fn()
        finally:
            ktensor.EAGER_CACHE = True

    return run


def main(full: bool = False) -> dict[str, Any]:
    x = np.arange(8.0) - 3.0
    y = np.ones(8)
    w = np.arange(64.0).reshape(8, 8)
    numpy_cases = cases(np, x, y, w)
    kiln_cases = cases(kiln, kiln.asarray(x), kiln.asarray(y), kiln.asarray(w))
    rows = []
    for name, np_fn in numpy_cases.items():
        fn = kiln_cases[name]
        expected, got = np.asarray(np_fn()), np.asarray(fn())
        assert got.dtype == expected.dtype and np.array_equal(got, expected), name
        fns = [np_fn, fn] + ([_uncached(fn)] if full else [])
        times = best_us(fns)
        row = {"op": name, "numpy_us": times[0], "kiln_us": times[1]}
        if full:
            row["kiln_full_us"] = times[2]
        rows.append(row)
    header = f"{'op':<20} {'numpy':>8} {'kiln':>8} {'kiln/np':>8}"
    print(header + (f" {'no cache':>9}" if full else ""))
    for row in rows:
        line = (
            f"{row['op']:<20} {row['numpy_us']:6.2f}us {row['kiln_us']:6.2f}us "
            f"{row['kiln_us'] / row['numpy_us']:8.1f}"
        )
        if full:
            line += f" {row['kiln_full_us']:7.2f}us"
        print(line)
    results = {"machine": machine(), "rows": rows}
    write_json(Path(__file__).parent / "results" / "eager_ops.json", results)
    return results


if __name__ == "__main__":
    main(full="--full" in sys.argv[1:])
