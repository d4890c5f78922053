"""In-place updates: stencils that update a grid where it lies, time steps that advance the
caller's state arrays, ``out=``, ``np.copyto(..., where=)``, ``fill``, boolean-mask and
fancy-index assignment, and writes through views.

Every kernel here writes into arrays (``inplace=True``); ``mutates`` names the arguments that
NumPy leaves changed, which a compiled kernel must leave changed alike.
"""

from __future__ import annotations

import numpy as np

from . import kernel


def _rod(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    return (rng.uniform(0.0, 1.0, n),)


@kernel("stencil update", make=_rod, bench=20_000, tiny=5, inplace=True, mutates=("u",))
def heat_1d_inplace(u):
    """20 explicit heat steps on a rod with fixed ends, updating the caller's array (u[1:-1] +=)."""
    alpha = 0.2
    for _ in range(20):
        u[1:-1] += alpha * (u[2:] - 2 * u[1:-1] + u[:-2])


def _plate(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    return (rng.uniform(0.0, 1.0, (n, n)),)


@kernel("stencil update", make=_plate, bench=256, tiny=5, inplace=True, mutates=("u",))
def diffuse_2d_inplace(u):
    """10 diffusion steps on a plate: ghost cells copied (u[0, :] = u[1, :]), interior view +=."""
    alpha = 0.1
    inner = u[1:-1, 1:-1]  # a view: writes through it update u, and u's writes show in it
    for _ in range(10):
        u[0, :] = u[1, :]
        u[-1, :] = u[-2, :]
        u[:, 0] = u[:, 1]
        u[:, -1] = u[:, -2]
        inner += alpha * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - 4 * inner)


def _poisson(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    u = np.zeros((n, n))
    u[0, :] = rng.uniform(0.0, 1.0, n)  # a boundary condition on one edge
    return u, rng.standard_normal((n, n))


def _relax(u, f, h2, i0, j0):
    """Gauss-Seidel update of the sub-lattice of interior points starting at (i0, j0), step 2."""
    u[i0:-1:2, j0:-1:2] = 0.25 * (
        u[i0 - 1 : -2 : 2, j0:-1:2]
        + u[i0 + 1 :: 2, j0:-1:2]
        + u[i0:-1:2, j0 - 1 : -2 : 2]
        + u[i0:-1:2, j0 + 1 :: 2]
        + h2 * f[i0:-1:2, j0:-1:2]
    )


@kernel("stencil update", make=_poisson, bench=128, tiny=6, inplace=True, mutates=("u",))
def red_black_gauss_seidel(u, f):
    """10 red-black Gauss-Seidel sweeps for -lap(u) = f, strided slice writes into caller's u."""
    h2 = (1.0 / (u.shape[0] - 1)) ** 2
    for _ in range(10):
        for i0, j0 in ((1, 1), (2, 2), (1, 2), (2, 1)):  # red points, then black
            _relax(u, f, h2, i0, j0)


def _particles(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    return rng.standard_normal((n, 3)), rng.standard_normal((n, 3)) * 0.1


@kernel(
    "time step",
    make=_particles,
    bench=20_000,
    tiny=4,
    drift=True,
    inplace=True,
    mutates=("pos", "vel"),
)
def advance_particles(pos, vel):
    """10 semi-implicit Euler steps of damped springs: vel += dt * acc; pos[:] = pos + vel * dt."""
    dt, k, c = 0.01, 1.0, 0.1
    for _ in range(10):
        acc = -k * pos - c * vel
        vel += dt * acc
        pos[:] = pos + vel * dt


def _populations(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    return (rng.uniform(0.5, 2.0, (2, n)),)


def _lotka_volterra(s):
    """Right-hand side of the predator-prey equations, filled row by row into np.empty_like."""
    ds = np.empty_like(s)
    ds[0] = 1.0 * s[0] - 0.5 * s[0] * s[1]
    ds[1] = 0.5 * s[0] * s[1] - 2.0 * s[1]
    return ds


@kernel("time step", make=_populations, bench=20_000, tiny=4, inplace=True, mutates=("state",))
def lotka_volterra_midpoint(state):
    """10 midpoint steps of predator-prey models advancing the caller's state (state += dt * f)."""
    dt = 0.001
    for _ in range(10):
        mid = state + 0.5 * dt * _lotka_volterra(state)
        state += dt * _lotka_volterra(mid)


def _neurons(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    return rng.uniform(0.0, 1.0, n), rng.uniform(0.5, 2.5, n)


@kernel("time step", make=_neurons, bench=20_000, tiny=6, inplace=True, mutates=("v",))
def leaky_integrate_fire(v, current):
    """20 steps of leaky integrate-and-fire neurons: v += ...; v[fired] = 0; spikes += fired."""
    dt, threshold = 0.1, 1.0
    spikes = np.zeros(v.shape, dtype=np.int64)
    for _ in range(20):
        v += dt * (current - v)
        fired = v >= threshold
        spikes += fired
        v[fired] = 0.0
    return spikes


def _embedding(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    rows = 4 * n
    idx = rng.choice(rows, n, replace=False)
    return rng.standard_normal((rows, 32)), idx, rng.standard_normal((n, 32))


@kernel("scatter", make=_embedding, bench=2_000, tiny=3, inplace=True, mutates=("w",))
def sparse_sgd_rows(w, idx, grad):
    """Sparse SGD step on the rows of an embedding table that a batch touched (w[idx] -= lr * g)."""
    lr = 0.1
    w[idx] -= lr * grad


def _logits32(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    return (rng.standard_normal((n, 512)).astype(np.float32) * 3,)


@kernel("out=", make=_logits32, bench=256, tiny=3, inplace=True, mutates=("x",))
def softmax_inplace(x):
    """Row softmax overwriting the caller's float32 array: x -= max; np.exp(x, out=x); x /= sum."""
    x -= x.max(axis=1, keepdims=True)
    np.exp(x, out=x)
    x /= x.sum(axis=1, keepdims=True)


def _wide(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    return (rng.standard_normal(n) * 10,)


@kernel("out=", make=_wide, bench=100_000, tiny=5, inplace=True)
def softplus_out(x):
    """Stable softplus through one buffer: np.abs/negative/exp/log1p(..., out=buf), buf += max."""
    buf = np.empty_like(x)
    np.abs(x, out=buf)
    np.negative(buf, out=buf)
    np.exp(buf, out=buf)
    np.log1p(buf, out=buf)
    buf += np.maximum(x, 0.0)
    return buf


def _channels(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    return rng.standard_normal((n, 8)) * 0.5, rng.uniform(0.5, 3.0, 8), np.zeros((n, 8))


@kernel("out=", make=_channels, bench=20_000, tiny=3, inplace=True, mutates=("out",))
def gain_into(signal, gain, out):
    """Apply per-channel gain into a caller's buffer and clip: np.multiply/np.clip(..., out=out)."""
    np.multiply(signal, gain, out=out)
    np.clip(out, -1.0, 1.0, out=out)
    return out


def _heavy(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    return (rng.standard_t(3, (n, 32)),)


@kernel("mask", make=_heavy, bench=4_000, tiny=40, inplace=True)
def winsorize_copyto(x):
    """Clamp each column to mean +- 3 std with np.copyto(y, bound, where=x < bound)."""
    mu = x.mean(axis=0)
    sd = x.std(axis=0)
    lo, hi = mu - 3 * sd, mu + 3 * sd
    y = x.copy()
    np.copyto(y, lo, where=x < lo)
    np.copyto(y, hi, where=x > hi)
    return y


def _spd(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    b = rng.standard_normal((n, n))
    return (b @ b.T / n,)


@kernel("fill", make=_spd, bench=128, tiny=4, inplace=True)
def power_iteration(a):
    """Largest eigenpair by 20 power iterations: v.fill(1 / sqrt(n)), then v[:] = w / norm(w)."""
    n = a.shape[0]
    v = np.empty(n)
    v.fill(1.0 / np.sqrt(n))
    for _ in range(20):
        w = a @ v
        v[:] = w / np.linalg.norm(w)
    return v, v @ a @ v


@kernel("mask", make=_logits32, bench=256, tiny=3, inplace=True)
def leaky_relu_mask(x):
    """Leaky ReLU on a copy by boolean-mask augmented assignment: y[y < 0] *= 0.01 (float32)."""
    y = x.copy()
    y[y < 0] *= 0.01
    return y


def _dirty(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    x = rng.standard_normal(n) * 3
    x[rng.random(n) < 0.05] = np.nan
    gap, spike = rng.choice(n, 2, replace=False)  # at least one of each at every size
    x[gap], x[spike] = np.nan, 7.0
    return (x,)


@kernel("mask", make=_dirty, bench=100_000, tiny=8, inplace=True, mutates=("x",))
def clean_signal_inplace(x):
    """Clean a signal in the caller's array (x[np.isnan(x)] = 0, clamp by masks), return its std."""
    x[np.isnan(x)] = 0.0
    x[x > 5.0] = 5.0
    x[x < -5.0] = -5.0
    return x.std()
