"""Timing helpers shared by the benchmarks: medians over repeated batches of calls."""

from __future__ import annotations

import json
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["median_seconds", "machine", "write_json"]


def median_seconds(fn: Callable[[], Any], *, min_time: float = 0.2, repeats: int = 7) -> float:
    """Median seconds per call of ``fn``; calls are batched so a batch takes ~min_time/repeats."""
    fn()  # warm up
    start = time.perf_counter()
    fn()
    once = max(time.perf_counter() - start, 1e-7)
    number = max(1, int(min_time / repeats / once))
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        samples.append((time.perf_counter() - start) / number)
    return float(np.median(samples))


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    import os

    return {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "processor": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "platform": platform.platform(),
    }


def write_json(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2))
