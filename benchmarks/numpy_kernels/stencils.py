"""Stencils on grids: slices, np.roll, cumulative sums, np.gradient."""

from __future__ import annotations

import numpy as np

from . import kernel


def _grid(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    return (rng.standard_normal((n, n)),)


@kernel("stencil", make=_grid, bench=512, tiny=6)
def laplacian_5point(u):
    """5-point Laplacian of the interior of a 2-D grid by slicing (float64)."""
    return u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - 4 * u[1:-1, 1:-1]


@kernel("stencil", make=_grid, bench=256, tiny=6, inplace=True)
def jacobi_sweeps(u):
    """10 Jacobi sweeps on a copy, writing the interior in place (u[1:-1, 1:-1] = ...)."""
    u = u.copy()
    for _ in range(10):
        u[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])
    return u


def _signal(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    return (np.cumsum(rng.standard_normal(n)),)


@kernel("stencil", make=_signal, bench=200_000, tiny=16)
def moving_average(x):
    """Moving average over a window of 8 by differences of a cumulative sum."""
    w = 8
    c = np.cumsum(np.concatenate([np.zeros(1), x]))
    return (c[w:] - c[:-w]) / w


@kernel("stencil", make=_grid, bench=512, tiny=6)
def gradient_2d(f):
    """np.gradient along both axes of a 2-D field with spacing 0.1, and its magnitude."""
    gy, gx = np.gradient(f, 0.1)
    return np.hypot(gx, gy)


def _board(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    return ((rng.random((n, n)) < 0.3).astype(np.int8),)


@kernel("stencil", make=_board, bench=256, tiny=6)
def game_of_life(board):
    """Four steps of Conway's Game of Life on a torus (np.roll neighbour counts, int8)."""
    for _ in range(4):
        n = sum(
            np.roll(np.roll(board, dy, axis=0), dx, axis=1)
            for dy in (-1, 0, 1)
            for dx in (-1, 0, 1)
            if (dy, dx) != (0, 0)
        )
        board = ((n == 3) | ((board == 1) & (n == 2))).astype(np.int8)
    return board


def _rod(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    return (rng.uniform(0.0, 1.0, n),)


@kernel("stencil", make=_rod, bench=10_000, tiny=8)
def heat_1d(u):
    """20 explicit steps of the 1-D heat equation on a ring (np.roll, out of place)."""
    alpha = 0.2
    for _ in range(20):
        u = u + alpha * (np.roll(u, 1) - 2 * u + np.roll(u, -1))
    return u
