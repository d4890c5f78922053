"""A sum of booleans cast to numbers (``np.sum(b == k)``, ``(x > 0).sum(axis)``) runs as
NumPy's ``count_nonzero`` of the booleans on the NumPy plan: the same values and dtype as the
recorded Cast + ReduceSum, over any axes, keepdims, empty and size-1 inputs."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.exec.cpu import CpuPlan, count_true


def _counts(plan: CpuPlan) -> int:
    return sum(v is count_true for v in plan.run_arrays.__kwdefaults__.values())


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint8, np.float64])
@pytest.mark.parametrize("axis", [None, 0, 1, -1, (0, 2)])
@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("shape", [(4, 5, 6), (0, 3, 2), (1, 1, 1)])
def test_counts_equal_the_cast_sum(dtype, axis, keepdims, shape):
    def count(x):
        return np.sum((x > 0).astype(dtype), axis=axis, keepdims=keepdims)

    x = np.random.default_rng(0).standard_normal(shape)
    graph = kiln.trace(count, x).graph
    graph.optimize()
    plan = CpuPlan(graph)
    assert _counts(plan) == 1
    for seed in (1, 2):
        x = np.random.default_rng(seed).standard_normal(shape)
        (got,) = plan.run_arrays([x])
        expected = count(x)
        assert got.dtype == expected.dtype and got.shape == expected.shape
        np.testing.assert_array_equal(got, expected)


def test_a_cast_read_elsewhere_is_still_computed():
    def both(x):
        ones = (x > 0).astype(np.int64)
        return ones.sum(axis=0), ones * 2

    x = np.random.default_rng(3).standard_normal((50, 4))
    graph = kiln.trace(both, x).graph
    graph.optimize()
    plan = CpuPlan(graph)
    assert _counts(plan) == 0
    for got, expected in zip(plan.run_arrays([x]), both(x)):
        np.testing.assert_array_equal(got, expected)


def test_float32_sums_keep_their_own_kernel():
    # A float32 sum of many ones rounds once past 2**24: not a count.
    def count(x):
        return (x > 0).astype(np.float32).sum()

    plan = CpuPlan(kiln.trace(count, np.ones(10)).graph)
    assert _counts(plan) == 0


def test_histogram_loop_compiles_to_counts():
    def histogram(x):
        b = np.clip(((x + 3.0) / 6.0 * 16).astype(np.int64), 0, 15)
        counts = np.zeros(16, dtype=np.int64)
        for k in range(16):
            counts[k] = np.sum(b == k)
        return counts

    f = kiln.compile(histogram)
    rng = np.random.default_rng(4)
    for n in (1000, 1000, 1003, 0, 1):
        x = rng.standard_normal(n)
        np.testing.assert_array_equal(f(x), histogram(x))
