"""Array expressions: elementwise formulas over large vectors."""

from __future__ import annotations

import numpy as np

from . import kernel


def _bs_inputs(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    price = rng.uniform(10.0, 50.0, n)
    strike = rng.uniform(10.0, 50.0, n)
    years = rng.uniform(0.25, 2.0, n)
    return price, strike, years


def _cnd(d: np.ndarray) -> np.ndarray:
    # Abramowitz-Stegun approximation of the normal CDF (as in the classic benchmarks).
    a1, a2, a3, a4, a5 = 0.31938153, -0.356563782, 1.781477937, -1.821255978, 1.330274429
    k = 1.0 / (1.0 + 0.2316419 * np.abs(d))
    w = 1.0 - 1.0 / np.sqrt(2 * np.pi) * np.exp(-d * d / 2.0) * (
        a1 * k + a2 * k**2 + a3 * k**3 + a4 * k**4 + a5 * k**5
    )
    return np.where(d < 0, 1.0 - w, w)


@kernel("expression", make=_bs_inputs, bench=200_000, tiny=16)
def black_scholes(price, strike, years):
    """Black-Scholes call and put prices (float64, normal CDF by polynomial)."""
    rate, vol = 0.02, 0.30
    sqrt_t = np.sqrt(years)
    d1 = (np.log(price / strike) + (rate + 0.5 * vol * vol) * years) / (vol * sqrt_t)
    d2 = d1 - vol * sqrt_t
    discount = np.exp(-rate * years)
    call = price * _cnd(d1) - strike * discount * _cnd(d2)
    put = call - price + strike * discount
    return call, put


def _latlon(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    lat1, lat2 = rng.uniform(-90, 90, n), rng.uniform(-90, 90, n)
    lon1, lon2 = rng.uniform(-180, 180, n), rng.uniform(-180, 180, n)
    return lat1, lon1, lat2, lon2


@kernel("expression", make=_latlon, bench=200_000, tiny=16)
def haversine(lat1, lon1, lat2, lon2):
    """Great-circle distance in km between point pairs given in degrees."""
    lat1, lon1, lat2, lon2 = map(np.radians, (lat1, lon1, lat2, lon2))
    a = (
        np.sin((lat2 - lat1) / 2) ** 2
        + np.cos(lat1) * np.cos(lat2) * np.sin((lon2 - lon1) / 2) ** 2
    )
    return 6371.0 * 2 * np.arcsin(np.sqrt(a))


def _vector32(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    return (rng.standard_normal(n).astype(np.float32),)


COEFFS = [0.5, -1.25, 0.75, 2.0, -0.3, 0.01, 1.5, -0.8]


@kernel("expression", make=_vector32, bench=500_000, tiny=16)
def horner_polynomial(x):
    """Degree-7 polynomial by Horner's rule over a Python list of coefficients (float32)."""
    y = np.zeros_like(x)
    for c in COEFFS:
        y = y * x + np.float32(c)
    return y


def _vector64(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    return (rng.uniform(-2.0, 2.0, n),)


@kernel("expression", make=_vector64, bench=200_000, tiny=16)
def rosenbrock(x):
    """Rosenbrock function value and gradient (slices of one vector, float64)."""
    xm, xl, xr = x[1:-1], x[:-2], x[2:]
    value = np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)
    grad_mid = 200 * (xm - xl**2) - 400 * (xr - xm**2) * xm - 2 * (1 - xm)
    grad_first = -400 * x[0] * (x[1] - x[0] ** 2) - 2 * (1 - x[0])
    grad_last = 200 * (x[-1] - x[-2] ** 2)
    grad = np.concatenate([np.atleast_1d(grad_first), grad_mid, np.atleast_1d(grad_last)])
    return value, grad


@kernel("expression", make=_vector32, bench=500_000, tiny=16)
def soft_threshold(x):
    """Soft thresholding and clipped sigmoid, as in sparse regression (np.where, np.clip)."""
    lam = np.float32(0.3)
    shrunk = np.sign(x) * np.maximum(np.abs(x) - lam, 0)
    gate = np.clip(1 / (1 + np.exp(-x)), np.float32(0.05), np.float32(0.95))
    return np.where(np.abs(x) > lam, shrunk * gate, np.float32(0))
