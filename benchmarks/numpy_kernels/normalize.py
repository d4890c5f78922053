"""Normalizations: column standardization, softmax, layer norm, covariance, in-place scaling."""

from __future__ import annotations

import numpy as np

from . import kernel


def _table64(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    return (rng.standard_normal((n, 64)) * rng.uniform(0.5, 5.0, 64) + rng.uniform(-3, 3, 64),)


def _table32(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    return (rng.standard_normal((n, 512)).astype(np.float32) * 3,)


@kernel("normalization", make=_table64, bench=4000, tiny=5)
def zscore_columns(x):
    """Standardize each column of a data table: (x - mean) / std (float64)."""
    return (x - x.mean(axis=0)) / x.std(axis=0)


@kernel("normalization", make=_table32, bench=512, tiny=4)
def softmax_rows(x):
    """Numerically stable softmax over each row (float32)."""
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _layer_norm_inputs(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    x = rng.standard_normal((n, 256)).astype(np.float32)
    gamma = rng.uniform(0.5, 1.5, 256).astype(np.float32)
    beta = rng.uniform(-0.1, 0.1, 256).astype(np.float32)
    return x, gamma, beta


@kernel("normalization", make=_layer_norm_inputs, bench=1024, tiny=3)
def layer_norm(x, gamma, beta):
    """Layer normalization written out in NumPy (float32, eps inside the sqrt)."""
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + 1e-5) * gamma + beta


@kernel("normalization", make=_table64, bench=4000, tiny=5)
def minmax_scale(x):
    """Rescale each column to [0, 1] by its min and max (float64)."""
    lo = x.min(axis=0)
    return (x - lo) / (x.max(axis=0) - lo)


@kernel("normalization", make=_table32, bench=512, tiny=4)
def logsumexp_rows(x):
    """log(sum(exp(x))) per row, shifted by the row max (float32)."""
    m = np.max(x, axis=1)
    return m + np.log(np.sum(np.exp(x - m[:, None]), axis=1))


@kernel("normalization", make=_table64, bench=4000, tiny=5)
def l2_normalize_rows(x):
    """Scale each row to unit Euclidean norm with np.linalg.norm (float64)."""
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@kernel("normalization", make=_table64, bench=4000, tiny=5)
def covariance(x):
    """Sample covariance and correlation matrices of the columns (like np.cov, float64)."""
    xc = x - x.mean(axis=0)
    cov = xc.T @ xc / (x.shape[0] - 1)
    sd = np.sqrt(np.diag(cov))
    return cov, cov / np.outer(sd, sd)


@kernel("normalization", make=_table64, bench=4000, tiny=5)
def robust_scale(x):
    """Center on the median and scale by the interquartile range (np.median, np.percentile)."""
    med = np.median(x, axis=0)
    q75, q25 = np.percentile(x, [75, 25], axis=0)
    return (x - med) / (q75 - q25)


@kernel("normalization", make=_table64, bench=4000, tiny=5, mutates=("x",))
def standardize_inplace(x):
    """Standardize a table in place (x -= mean; x /= std), returning nothing (mutates input)."""
    x -= x.mean(axis=0)
    x /= x.std(axis=0)
