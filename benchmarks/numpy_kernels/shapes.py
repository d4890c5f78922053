"""Shape-dependent code: sizes in arithmetic, len(), np.arange(n), branches on a size.

These kernels drift: each call has a larger first axis, so a compiled function re-captures
with that axis dynamic and the sizes become symbolic.
"""

from __future__ import annotations

import numpy as np

from . import kernel


def _batch(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    return (rng.standard_normal((n, 32)),)


@kernel("shape", make=_batch, bench=500, tiny=4, drift=True)
def center_by_count(x):
    """Center columns with x.sum(0) / x.shape[0] (a size in arithmetic)."""
    return x - x.sum(0) / x.shape[0]


@kernel("shape", make=_batch, bench=500, tiny=4, drift=True)
def time_weighted_mean(x):
    """Mean weighted by position: t = np.arange(len(x)), sum(t * x) / sum(t)."""
    t = np.arange(len(x), dtype=x.dtype)
    return (t[:, None] * x).sum(axis=0) / t.sum()


@kernel("shape", make=_batch, bench=500, tiny=4, drift=True)
def branch_on_size(x):
    """Branch on the batch size (if x.shape[0] > 6), then an unbiased variance by int(n)."""
    n = x.shape[0]
    if n > 6:
        x = x[: n - n % 2]  # an even number of rows, paired below
        x = 0.5 * (x[0::2] + x[1::2])
    m = int(x.shape[0])
    return ((x - x.mean(axis=0)) ** 2).sum(axis=0) / float(m - 1)


def _series(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    return (rng.standard_normal((n, 8)),)


@kernel("shape", make=_series, bench=400, tiny=5, drift=True)
def lagged_differences(x):
    """Differences at lags 1..3 concatenated, scaled by 1/sqrt(len) (range over a size)."""
    parts = [x[lag:] - x[:-lag] for lag in range(1, 4)]
    return np.concatenate(parts, axis=0) / np.sqrt(len(x))
