"""Every stage of a first call does work linear in the size of the trace (issue 13).

Unrolled Python loops record traces of 100,000 nodes; a stage quadratic in the node count
(a rewrite that rescans the graph per match, a read that walks every earlier write) turns a
first call of seconds into hours. These tests count work, not time: the number of Python
function calls a stage makes (cProfile's count, the same on every run and machine) on traces
of n, 2n and 4n nodes. For linear work the second increment is twice the first; a quadratic
term makes it up to four times. Fixed costs cancel in the increments.
"""

from __future__ import annotations

import cProfile
import pstats
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import kiln
from kiln.optim.pipeline import verify_every_transform

# Linear work gives 2.0 (up to the small variations of sweep counts); a quadratic term that
# is a tenth of the work at the smallest size already gives about 2.3.
MAX_GROWTH = 2.25


def rows(x, w, b):
    out = np.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = np.tanh(x[i] * w) + b
    return out


def accumulate(x):
    acc = np.zeros_like(x)
    for i in range(x.shape[0]):
        acc[i] += x[i] * 2.0
    return acc


def scatter_accumulate(x):
    acc = np.zeros_like(x)
    for i in range(x.shape[0]):
        acc[[i]] += x[[i]] * 2.0  # a list index: a ScatterND write, a Gather read
    return acc


def chain(x, steps):
    y = x
    for k in range(steps):
        y = y * 0.999 + np.sin(y) * 0.001 - (k % 3) * 1e-4
    return y


def _rows(n: int) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    rng = np.random.default_rng(0)
    return rows, (rng.standard_normal((n, 4)), rng.standard_normal(4), rng.standard_normal(4))


def _accumulate(n: int) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    return accumulate, (np.random.default_rng(0).standard_normal((n, 4)),)


def _scatter_accumulate(n: int) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    return scatter_accumulate, (np.random.default_rng(0).standard_normal((n, 4)),)


def _chain(n: int) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    return (lambda x: chain(x, n)), (np.random.default_rng(0).standard_normal(4),)


# name -> (make a trace of n iterations, n): 7, 12, 6 and 5 recorded nodes an iteration
WORKLOADS = {
    "rows": (_rows, 60),
    "accumulate": (_accumulate, 60),
    "scatter_accumulate": (_scatter_accumulate, 60),
    "chain": (_chain, 90),
}
STAGES = ("trace", "optimize", "verify", "finalize")


def _calls(fn: Callable[[], Any]) -> tuple[int, Any]:
    profile = cProfile.Profile()
    profile.enable()
    try:
        result = fn()
    finally:
        profile.disable()
    return pstats.Stats(profile).total_calls, result  # type: ignore[attr-defined]


def _work(make: Callable[[int], tuple[Callable[..., Any], tuple[Any, ...]]], n: int) -> dict:
    fn, args = make(n)
    work: dict[str, int] = {}
    work["trace"], traced = _calls(lambda: kiln.trace(fn, *args))
    graph = traced.graph
    work["nodes"] = len(graph.nodes)
    checking = verify_every_transform(False)  # the suite's check is not the optimizer's work
    try:
        work["optimize"], _ = _calls(graph.optimize)
    finally:
        verify_every_transform(checking)
    work["verify"], _ = _calls(graph.verify)
    work["finalize"], _ = _calls(lambda: graph.finalize(engine="numpy"))
    (result,) = graph.run([a for a in args if isinstance(a, np.ndarray)])
    np.testing.assert_allclose(result, fn(*args), rtol=1e-12, atol=1e-12)
    return work


_measured: dict[str, list[dict]] = {}


def _growth(workload: str, stage: str) -> tuple[float, str]:
    if workload not in _measured:
        make, n = WORKLOADS[workload]
        _measured[workload] = [_work(make, n * k) for k in (1, 2, 4)]
    small, middle, large = (w[stage] for w in _measured[workload])
    nodes = [w["nodes"] for w in _measured[workload]]
    if middle == small:  # constant work (a stage over a graph vectorize_loops batched)
        return (0.0 if large == middle else float("inf")), f"{stage} of {workload}: constant"
    growth = (large - middle) / (middle - small)
    return growth, f"{stage} of {workload}: {nodes} nodes, {[small, middle, large]} calls"


@pytest.mark.parametrize(
    ("workload", "stage"),
    [(w, s) for w in WORKLOADS for s in STAGES],
)
def test_each_stage_does_linear_work(workload, stage):
    growth, detail = _growth(workload, stage)
    assert growth <= MAX_GROWTH, f"growth {growth:.2f} (linear: 2.0): {detail}"
