"""Distance and similarity matrices between point sets."""

from __future__ import annotations

import numpy as np

from . import kernel


def _points(dim: int):
    def make(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
        return rng.standard_normal((n, dim)), rng.standard_normal((n + n // 4 + 1, dim))

    return make


@kernel("distance", make=_points(3), bench=300, tiny=4)
def pairwise_broadcast(a, b):
    """All-pairs Euclidean distances by broadcasting a[:, None] - b[None] (3-D points)."""
    diff = a[:, None, :] - b[None, :, :]
    return np.sqrt((diff**2).sum(axis=-1))


@kernel("distance", make=_points(32), bench=800, tiny=4)
def pairwise_gemm(a, b):
    """All-pairs distances through |a|^2 + |b|^2 - 2 a.b^T, clamped at zero (32-D)."""
    aa = np.sum(a * a, axis=1)[:, None]
    bb = np.sum(b * b, axis=1)[None, :]
    return np.sqrt(np.maximum(aa + bb - 2.0 * a @ b.T, 0.0))


@kernel("distance", make=_points(64), bench=800, tiny=4)
def cosine_similarity(a, b):
    """Cosine similarity matrix between the rows of two sets (64-D)."""
    an = a / np.linalg.norm(a, axis=1, keepdims=True)
    bn = b / np.linalg.norm(b, axis=1, keepdims=True)
    return an @ bn.T


@kernel("distance", make=_points(16), bench=600, tiny=4)
def rbf_kernel(a, b):
    """Gaussian (RBF) kernel matrix exp(-gamma * |a_i - b_j|^2) (16-D)."""
    gamma = 0.5
    d2 = (a**2).sum(1)[:, None] + (b**2).sum(1)[None, :] - 2 * np.dot(a, b.T)
    return np.exp(-gamma * d2)


@kernel("distance", make=_points(8), bench=800, tiny=4)
def nearest_neighbor(a, b):
    """Index of and distance to each point's nearest neighbour in another set (argmin)."""
    d2 = ((a[:, None, :] - b[None, :, :]) ** 2).sum(-1)
    idx = np.argmin(d2, axis=1)
    return idx, np.sqrt(d2.min(axis=1))
