"""Arrays the kernel creates and then fills: ``np.zeros``/``np.empty``/``np.full``/
``np.empty_like`` followed by row, column, slice, scalar and fancy-index writes, recurrences
that read what the previous iteration wrote, and histogram-like scatters.

Every kernel here writes into arrays (``inplace=True``); none mutates its inputs.
"""

from __future__ import annotations

import numpy as np

from . import kernel


def _cloud(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    return (rng.standard_normal((n, 3)),)


@kernel("fill", make=_cloud, bench=64, tiny=4, inplace=True)
def distance_matrix_loop(x):
    """Euclidean distance matrix filled row by row into np.zeros((n, n)) (D[i] = ...)."""
    n = x.shape[0]
    D = np.zeros((n, n))
    for i in range(n):
        D[i] = np.sqrt(((x - x[i]) ** 2).sum(axis=1))
    return D


def _abscissae(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    return (rng.uniform(-1.0, 1.0, n),)


@kernel("fill", make=_abscissae, bench=50_000, tiny=5, inplace=True)
def vandermonde_columns(x):
    """Polynomial features to degree 6: np.empty((n, 7)), V[:, 0] = 1, V[:, k] = V[:, k-1] * x."""
    deg = 6
    V = np.empty((x.shape[0], deg + 1))
    V[:, 0] = 1.0
    for k in range(1, deg + 1):
        V[:, k] = V[:, k - 1] * x
    return V


def _profile(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    return (np.cumsum(rng.standard_normal(n)),)


@kernel("fill", make=_profile, bench=100_000, tiny=5, inplace=True)
def central_difference(y):
    """Derivative by central differences into np.empty_like, one-sided at both ends."""
    h = 0.1
    d = np.empty_like(y)
    d[1:-1] = (y[2:] - y[:-2]) / (2 * h)
    d[0] = (y[1] - y[0]) / h
    d[-1] = (y[-1] - y[-2]) / h
    return d


@kernel("fill", make=_profile, bench=50_000, tiny=6, inplace=True)
def lag_matrix(y):
    """Design matrix of 5 lags: np.full((n, 5), np.nan), column k gets y shifted by k."""
    p = 5
    n = y.shape[0]
    X = np.full((n, p), np.nan)
    for k in range(p):
        X[k:, k] = y[: n - k]
    return X


def _shocks(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    return rng.standard_normal((16, n)), rng.uniform(0.5, 0.99, n)


@kernel("recurrence", make=_shocks, bench=20_000, tiny=3, inplace=True)
def ar1_filter(x, a):
    """AR(1) recurrence over 16 time steps for many series: out[i] = out[i-1] * a + x[i]."""
    out = np.empty_like(x)
    out[0] = x[0]
    for i in range(1, x.shape[0]):
        out[i] = out[i - 1] * a + x[i]
    return out


def _returns(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    return (rng.normal(0.0005, 0.01, (32, n)),)


@kernel("recurrence", make=_returns, bench=5_000, tiny=3, inplace=True)
def drawdown_loop(r):
    """Wealth, running peak and drawdown over 32 periods, each row from the one before."""
    steps = r.shape[0]
    wealth = np.ones((steps + 1, r.shape[1]))
    peak = np.empty_like(wealth)
    peak[0] = wealth[0]
    for t in range(steps):
        wealth[t + 1] = wealth[t] * (1 + r[t])
        peak[t + 1] = np.maximum(peak[t], wealth[t + 1])
    return wealth, 1 - wealth / peak


def _samples(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    return (rng.standard_normal(n),)


@kernel("scatter", make=_samples, bench=20_000, tiny=7, drift=True, inplace=True)
def histogram_loop(x):
    """16-bin histogram on [-3, 3) without np.histogram: counts[b] = np.sum(bin == b)."""
    nbins, lo, hi = 16, -3.0, 3.0
    b = np.clip(((x - lo) / (hi - lo) * nbins).astype(np.int64), 0, nbins - 1)
    counts = np.zeros(nbins, dtype=np.int64)
    for k in range(nbins):
        counts[k] = np.sum(b == k)
    return counts


def _values_order(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    v = rng.exponential(1.0, n)
    return v, np.argsort(v)


@kernel("scatter", make=_values_order, bench=100_000, tiny=6, inplace=True)
def unsort_cumsum(values, order):
    """Cumulative share in sorted order, scattered back to the original positions (out[order] =)."""
    out = np.empty_like(values)
    out[order] = np.cumsum(values[order]) / values.sum()
    return out


def _points2d(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    return (rng.uniform(0.0, 1.0, (n, 2)),)


@kernel("scatter", make=_points2d, bench=20_000, tiny=5, inplace=True)
def occupancy_grid(p):
    """Occupied cells of a 32x32 grid: occ[iy, ix] = True with computed, repeated indices."""
    g = 32
    ij = np.minimum((p * g).astype(np.int64), g - 1)
    occ = np.zeros((g, g), dtype=bool)
    occ[ij[:, 1], ij[:, 0]] = True
    return occ


def _events(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    return rng.integers(0, 64, n), rng.uniform(0.0, 1.0, n)


@kernel("scatter", make=_events, bench=20_000, tiny=6, inplace=True)
def last_value_per_key(keys, values):
    """Latest value per key: table[keys] = values (repeated keys: last write wins), else NaN."""
    table = np.full(64, -1.0)
    table[keys] = values
    seen = table >= 0
    table[~seen] = np.nan
    return table, seen
