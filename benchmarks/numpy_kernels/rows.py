"""Python loops over the rows of an array."""

from __future__ import annotations

import numpy as np

from . import kernel


def _table(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    return (rng.uniform(0.1, 1.0, (n, 64)),)


@kernel("row loop", make=_table, bench=200, tiny=3, inplace=True)
def row_normalize_loop(x):
    """Divide each row by its sum in a Python loop, filling a preallocated np.empty_like."""
    out = np.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = x[i] / x[i].sum()
    return out


def _table_weights(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    return rng.standard_normal((n, 64)), rng.standard_normal(64)


@kernel("row loop", make=_table_weights, bench=200, tiny=3)
def row_dot_list(x, w):
    """One dot product per row collected in a list, then np.array(list)."""
    scores = []
    for row in x:
        scores.append(np.tanh(row @ w))
    return np.array(scores)


@kernel("row loop", make=_table, bench=240, tiny=6)
def block_means(x):
    """Means of consecutive blocks of 3 rows, stacked (np.stack over a comprehension)."""
    return np.stack([x[i : i + 3].mean(axis=0) for i in range(0, x.shape[0], 3)])
