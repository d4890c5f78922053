"""TopK's values alone (``kiln.ops.reduce.topk_values``, what the NumPy plan runs when nothing
reads the indices) equal the operator's values bit for bit: NaNs, zeros of both signs,
integers, half floats, largest/smallest, any axis and K."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import dtypes
from kiln.exec.cpu import CpuPlan
from kiln.ops.reduce import topk_values
from kiln.ops.registry import get_op

_KERNEL = get_op("TopK").kernel


def _data(kind: str, dtype) -> np.ndarray:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((37, 6)) * 4
    if kind == "nan":
        x[rng.random(x.shape) < 0.1] = np.nan
    if kind == "zeros":
        x[::3] = 0.0
        x[1::3] = -0.0
    if kind == "ties":
        x = np.round(x)
    return x.astype(dtype)


@pytest.mark.parametrize("kind", ["plain", "nan", "zeros", "ties"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16, dtypes.bfloat16, np.int32])
@pytest.mark.parametrize("axis, k", [(0, 37), (0, 5), (1, 6), (-1, 2), (0, 0)])
@pytest.mark.parametrize("largest", [0, 1])
def test_values_equal_the_kernels_bit_for_bit(kind, dtype, axis, k, largest):
    if np.dtype(dtype).kind == "i" and kind == "nan":
        pytest.skip("integers have no NaN")
    x = _data(kind, dtype)
    k_arr = np.array([k], np.int64)
    expected = _KERNEL(x, k_arr, axis=axis, largest=largest, sorted=1)[0]
    got = topk_values(x, k_arr, axis=axis, largest=largest, sorted=1)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    assert got.tobytes() == expected.tobytes()


def test_k_out_of_range_raises_as_the_kernel():
    x = np.zeros((3, 4))
    with pytest.raises(ValueError, match="out of range"):
        topk_values(x, np.array([5], np.int64), axis=0)


def test_median_and_percentile_plans_sort_values_only():
    def robust(x):
        return (x - np.median(x, axis=0)) / np.subtract(*np.percentile(x, [75, 25], axis=0))

    x = np.random.default_rng(1).standard_normal((400, 8))
    graph = kiln.trace(robust, x).graph
    graph.optimize()
    plan = CpuPlan(graph)
    assert "None)" in plan.source  # the indices of the sort are never computed
    for seed in (2, 3):
        x = np.random.default_rng(seed).standard_normal((400, 8))
        np.testing.assert_array_equal(plan.run_arrays([x])[0], robust(x))
