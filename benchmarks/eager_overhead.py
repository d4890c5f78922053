"""Per-op cost of kiln's own eager API on tiny tensors, against NumPy in the same run.

Each op runs on 8-element float32 operands (``@`` on 2x2 and 4x4 matrices) as: NumPy on arrays,
kiln eager with the eager cache off (``kiln.tensor.EAGER_CACHE = False``: every call validated in
full, as before the cache), and kiln eager now. Times are medians over repeated batches; the
machine may be shared, so read the ratios to NumPy measured in the same run.
Run: ``python benchmarks/eager_overhead.py``.
"""

from __future__ import annotations

import statistics
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


def cases(lib, a, b, m):  # noqa: ANN001, ANN201 - lib is numpy or kiln
    return {
        "a + b": lambda: a + b,
        "a * 2.0": lambda: a * 2.0,
        "exp(a)": lambda: lib.exp(a),
        "a.sum()": lambda: a.sum(),
        "a.sum(axis=0)": lambda: a.sum(axis=0),
        "m @ m": lambda: m @ m,
        "maximum(a, 0)": lambda: lib.maximum(a, 0),
    }


def interleaved(
    np_fn: Callable[[], Any], fn: Callable[[], Any], *, repeats: int = 21, number: int = 300
) -> tuple[float, float, float]:
    """Median seconds per call of NumPy, kiln with the cache off, and kiln now, measured in
    alternating batches so that load on a shared machine falls on all three alike."""
    samples: list[list[float]] = [[], [], []]
    for _ in range(repeats):
        for i, (f, cached) in enumerate(((np_fn, True), (fn, False), (fn, True))):
            ktensor.EAGER_CACHE = cached
            try:
                f()
                start = time.perf_counter()
                for _ in range(number):
                    f()
                samples[i].append((time.perf_counter() - start) / number)
            finally:
                ktensor.EAGER_CACHE = True
    numpy_s, full_s, now_s = (statistics.median(s) for s in samples)
    return numpy_s, full_s, now_s


def main() -> dict:
    a = np.arange(8, dtype=np.float32)
    b = np.ones(8, dtype=np.float32)
    m = np.arange(16, dtype=np.float32).reshape(4, 4)
    ka, kb, km = kiln.asarray(a), kiln.asarray(b), kiln.asarray(m)
    numpy_cases = cases(np, a, b, m)
    kiln_cases = cases(kiln, ka, kb, km)
    results = {"machine": machine(), "rows": []}
    for name, np_fn in numpy_cases.items():
        fn = kiln_cases[name]
        expected = np.asarray(np_fn())
        got = np.asarray(fn())
        assert got.dtype == expected.dtype and np.array_equal(got, expected), name
        numpy_s, full_s, now_s = interleaved(np_fn, fn)
        row = {"op": name, "numpy_us": numpy_s * 1e6, "kiln_full_us": full_s * 1e6}
        row["kiln_us"] = now_s * 1e6
        results["rows"].append(row)
    print(
        f"{'op':<15} {'numpy':>8} {'kiln full':>10} {'kiln now':>9} "
        f"{'full/np':>8} {'now/np':>7} {'speedup':>8}"
    )
    for row in results["rows"]:
        print(
            f"{row['op']:<15} {row['numpy_us']:6.2f}us {row['kiln_full_us']:8.2f}us "
            f"{row['kiln_us']:7.2f}us {row['kiln_full_us'] / row['numpy_us']:8.1f} "
            f"{row['kiln_us'] / row['numpy_us']:7.1f} "
            f"{row['kiln_full_us'] / row['kiln_us']:8.1f}"
        )
    write_json(Path(__file__).parent / "results" / "eager_overhead.json", results)
    return results


if __name__ == "__main__":
    main()
