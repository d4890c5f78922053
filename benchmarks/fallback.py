"""What serving eagerly costs (issue 11 item 2): a compiled function that falls back against the
same function called plainly on NumPy arrays.

Three ways to fall back: an abandoned structure (a call kiln does not capture, ``np.unique``),
the re-capture budget spent (``dynamic=False`` and a new shape every call), and a graph taken with
``take_graph()``. Each runs on a small (64) and a medium (10,000 element) array. The machine is
noisy and shared, so plain and compiled calls are interleaved: each round times a batch of
plain calls, then a batch of compiled calls, and the speed ratio (plain time / compiled time,
1.0 = as fast as NumPy, the goal is >= 0.95) is the median over the rounds.

Run: ``python benchmarks/fallback.py`` (prints the table, writes ``results/fallback.json``).
"""

from __future__ import annotations

import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from timing import machine, write_json  # noqa: E402

import kiln  # noqa: E402
from kiln.errors import CaptureWarning, RecaptureWarning  # noqa: E402


def distinct_scaled(x):
    u = np.unique(np.round(x, 1))  # not captured: the structure serves eagerly
    return (x - u.mean()) * 2.0, u.size


def smooth(x, k):
    return np.tanh(x * k) + np.sqrt(np.abs(x)) - x.mean()


def abandoned(x: np.ndarray) -> tuple[Callable[[], Any], Callable[[], Any]]:
    f = kiln.compile(distinct_scaled)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CaptureWarning)
        f(x)
    assert f.state is kiln.State.Fallback
    return (lambda: distinct_scaled(x)), (lambda: f(x))


def budget_spent(x: np.ndarray) -> tuple[Callable[[], Any], Callable[[], Any]]:
    f = kiln.compile(smooth, dynamic=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RecaptureWarning)
        for n in range(1, 13):  # every shape its own capture: the budget is spent
            f(x[:n], 3.0)
    assert f.state is kiln.State.Fallback
    return (lambda: smooth(x, 3.0)), (lambda: f(x, 3.0))


def taken_graph(x: np.ndarray) -> tuple[Callable[[], Any], Callable[[], Any]]:
    f = kiln.compile(smooth)
    f(x, 2.0)
    f.take_graph()
    return (lambda: smooth(x, 2.0)), (lambda: f(x, 2.0))


CASES = {"abandoned structure": abandoned, "budget spent": budget_spent, "taken graph": taken_graph}


def batch_seconds(fn: Callable[[], Any], number: int) -> float:
    start = time.perf_counter()
    for _ in range(number):
        fn()
    return (time.perf_counter() - start) / number


def interleaved(plain: Callable[[], Any], compiled: Callable[[], Any], rounds: int = 15) -> dict:
    """Median seconds per call of each, and the median over rounds of plain / compiled."""
    plain(), compiled()  # warm up
    once = max(batch_seconds(plain, 3), 1e-7)
    number = max(1, int(0.01 / once))  # ~10 ms per batch
    p, c, ratios = [], [], []
    for _ in range(rounds):
        tp, tc = batch_seconds(plain, number), batch_seconds(compiled, number)
        p.append(tp)
        c.append(tc)
        ratios.append(tp / tc)
    return {
        "numpy_us": float(np.median(p)) * 1e6,
        "compiled_us": float(np.median(c)) * 1e6,
        "speed": float(np.median(ratios)),
        "speed_min": float(np.min(ratios)),
        "speed_max": float(np.max(ratios)),
    }


def main() -> dict:
    results: dict[str, Any] = {"machine": machine(), "rows": []}
    rng = np.random.default_rng(0)
    print(f"{'fall back':>20} {'size':>6} {'numpy':>9} {'compiled':>9} {'speed (range)':>20}")
    for name, make in CASES.items():
        for size in (64, 10_000):
            x = rng.standard_normal(size).astype(np.float32)
            plain, compiled = make(x)
            row = {"case": name, "size": size, **interleaved(plain, compiled)}
            results["rows"].append(row)
            print(
                f"{name:>20} {size:>6} {row['numpy_us']:7.1f}us {row['compiled_us']:7.1f}us "
                f"{row['speed']:8.2f}x ({row['speed_min']:.2f}-{row['speed_max']:.2f})"
            )
    write_json(Path(__file__).parent / "results" / "fallback.json", results)
    return results


if __name__ == "__main__":
    main()
