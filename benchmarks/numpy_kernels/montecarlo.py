"""Monte Carlo: NumPy's legacy global stream and Generators passed in."""

from __future__ import annotations

import numpy as np

from . import kernel


def _nothing_but_x(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    return (rng.standard_normal((n, 128)).astype(np.float32),)


@kernel("monte carlo", make=_nothing_but_x, bench=256, tiny=3, global_seed=True)
def dropout(x):
    """Inverted dropout with a fresh mask from np.random.rand on every call (legacy stream)."""
    p = 0.25
    mask = np.random.rand(*x.shape) >= p
    return x * mask / np.float32(1 - p)


def _samples(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    return (rng.uniform(-1, 1, (n, 2)),)


@kernel("monte carlo", make=_samples, bench=10_000, tiny=8, global_seed=True)
def mc_pi_jitter(pts):
    """Estimate pi from given points jittered by np.random.normal noise (legacy stream)."""
    p = pts + np.random.normal(0.0, 0.01, pts.shape)
    inside = (p**2).sum(axis=1) <= 1.0
    return 4.0 * inside.mean()


def _gbm_inputs(rng: np.random.Generator, n: int) -> tuple[object, ...]:
    return np.random.default_rng(int(rng.integers(1 << 30))), np.full(n, 100.0)


@kernel("monte carlo", make=_gbm_inputs, bench=2000, tiny=4)
def gbm_paths(gen, s0):
    """Geometric Brownian motion paths (50 steps) from a Generator passed in."""
    steps, dt, mu, sigma = 50, 1 / 50, 0.05, 0.2
    z = gen.standard_normal((s0.shape[0], steps))
    log_paths = np.cumsum((mu - 0.5 * sigma**2) * dt + sigma * np.sqrt(dt) * z, axis=1)
    return s0[:, None] * np.exp(log_paths)


def _data_gen(rng: np.random.Generator, n: int) -> tuple[object, ...]:
    return np.random.default_rng(int(rng.integers(1 << 30))), rng.standard_normal(n)


@kernel("monte carlo", make=_data_gen, bench=1000, tiny=6)
def bootstrap_mean(gen, x):
    """200 bootstrap resamples of the mean (Generator.integers indices, fancy indexing)."""
    idx = gen.integers(0, x.shape[0], (200, x.shape[0]))
    means = x[idx].mean(axis=1)
    return means.mean(), means.std()
