"""Simulations that preallocate a result and fill it step by step, and particle codes."""

from __future__ import annotations

import numpy as np

from . import kernel


def _oscillators(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    return rng.uniform(-1, 1, n), rng.uniform(-1, 1, n)


@kernel("simulation", make=_oscillators, bench=1000, tiny=4, inplace=True)
def euler_trajectory(x0, v0):
    """Damped oscillators by explicit Euler: preallocate (steps, n) arrays and fill row t."""
    steps, dt, k, c = 50, 0.01, 4.0, 0.1
    xs = np.empty((steps, x0.shape[0]))
    vs = np.empty((steps, x0.shape[0]))
    xs[0], vs[0] = x0, v0
    for t in range(1, steps):
        a = -k * xs[t - 1] - c * vs[t - 1]
        vs[t] = vs[t - 1] + dt * a
        xs[t] = xs[t - 1] + dt * vs[t]
    return xs, vs


def _bodies(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    return rng.standard_normal((n, 3)), rng.uniform(0.5, 1.5, n)


@kernel("simulation", make=_bodies, bench=300, tiny=4)
def nbody_accel(pos, mass):
    """Softened gravitational accelerations of N bodies (all pairs, broadcasting)."""
    d = pos[None, :, :] - pos[:, None, :]
    inv_r3 = (np.sum(d * d, axis=-1) + 0.01) ** -1.5
    return np.einsum("ijk,ij,j->ik", d, inv_r3, mass)


def _rates(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    return rng.uniform(2.5, 4.0, n), rng.uniform(0.1, 0.9, n)


@kernel("simulation", make=_rates, bench=10_000, tiny=8)
def logistic_map(r, x):
    """100 iterations of the logistic map x <- r x (1 - x) for many growth rates."""
    for _ in range(100):
        x = r * x * (1 - x)
    return x


def _positions(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    return rng.standard_normal((n, 2)), rng.standard_normal((n, 2)) * 0.1


@kernel("simulation", make=_positions, bench=2000, tiny=4, inplace=True)
def verlet_positions(x, v):
    """Velocity Verlet in a harmonic well; positions stored into a preallocated history."""
    steps, dt = 30, 0.05
    hist = np.zeros((steps,) + x.shape)
    a = -x
    for t in range(steps):
        x = x + v * dt + 0.5 * a * dt * dt
        a_new = -x
        v = v + 0.5 * (a + a_new) * dt
        a = a_new
        hist[t] = x
    return hist
