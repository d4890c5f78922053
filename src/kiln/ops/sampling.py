"""Deterministic test data for operators' samples."""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import dtypes

__all__ = ["sample_array"]


def sample_array(
    shape: Sequence[int], dtype: Any, low: float = -3.0, high: float = 3.0
) -> np.ndarray:
    """Test data of ``shape`` and ``dtype`` in ``[low, high)``, the same in every process.

    Example:
        >>> sample_array((2, 3), "int32", 0, 5).dtype
        dtype('int32')
    """
    dt = dtypes.as_dtype(dtype)
    seed = zlib.crc32(repr((tuple(shape), dt.name, low, high)).encode())
    rng = np.random.default_rng(seed)
    if dt == dtypes.bool_:
        return np.asarray(rng.random(shape) < 0.5)
    if dtypes.is_integer(dt):
        lo = max(int(low), int(np.iinfo(dt).min))
        hi = min(int(high), int(np.iinfo(dt).max))
        return np.asarray(rng.integers(lo, max(hi, lo + 1), size=shape), dtype=dt)
    return np.asarray(rng.random(shape) * (high - low) + low).astype(dt)
