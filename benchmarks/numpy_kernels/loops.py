"""Python loops over elements, rows and windows: the unrolled traces kiln's loop vectorizer
(``kiln.optim.vectorize_loops``) turns back into array operations (issue 13)."""

from __future__ import annotations

import numpy as np

from . import kernel


def _points(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    return (rng.standard_normal((n, 3)),)


@kernel("loop", make=_points, bench=40, tiny=3, inplace=True)
def distance_matrix_double_loop(x):
    """Euclidean distance matrix filled element by element in a double loop (D[i, j] = ...)."""
    n = x.shape[0]
    D = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            D[i, j] = np.sqrt(np.sum((x[i] - x[j]) ** 2))
    return D


def _grid(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    return (rng.standard_normal((n, n)).astype(np.float32),)


@kernel("loop", make=_grid, bench=24, tiny=4, inplace=True)
def neighbourhood_max(grid):
    """3x3 neighbourhood maximum over np.ndindex of the interior, one window per element."""
    h, w = grid.shape
    out = np.empty((h - 2, w - 2), grid.dtype)
    for i, j in np.ndindex(h - 2, w - 2):
        out[i, j] = grid[i : i + 3, j : j + 3].max()
    return out


def _particles(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    return rng.uniform(-1.0, 1.0, (n, 2)), rng.standard_normal((n, 2))


@kernel("loop", make=_particles, bench=400, tiny=3, mutates=("pos", "vel"))
def particle_loop(pos, vel):
    """One time step per particle in a Python loop: damped velocity, then position (in place)."""
    dt, damping = 0.01, 0.99
    for p in range(pos.shape[0]):
        vel[p] = vel[p] * damping - pos[p] * dt
        pos[p] += vel[p] * dt


def _series(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    return (rng.standard_normal((n, 64)),)


@kernel("loop", make=_series, bench=400, tiny=3, inplace=True)
def running_sum_loop(x):
    """Running sum of rows in a loop (out[i] = out[i - 1] + x[i]), as np.cumsum would."""
    out = np.empty_like(x)
    out[0] = x[0]
    for i in range(1, x.shape[0]):
        out[i] = out[i - 1] + x[i]
    return out


def _samples(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    return rng.standard_normal((n, 32)), rng.uniform(0.0, 1.0, n)


@kernel("loop", make=_samples, bench=300, tiny=3)
def weighted_sum_loop(x, w):
    """Weighted sum of rows accumulated in a loop (total += w[i] * x[i])."""
    total = np.zeros(x.shape[1])
    for i in range(x.shape[0]):
        total += w[i] * x[i]
    return total
