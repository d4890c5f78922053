"""Tolerances per dtype, in one place, and the comparison every numeric test uses."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

# (rtol, atol) by dtype name. Integers and bools must match exactly.
TOLERANCES: dict[str, tuple[float, float]] = {
    "float64": (1e-12, 1e-12),
    "float32": (2e-6, 2e-6),
    "float16": (2e-3, 2e-3),
    "bfloat16": (1.6e-2, 1.6e-2),
}


def tolerance(dtype: np.dtype) -> tuple[float, float]:
    return TOLERANCES.get(np.dtype(dtype).name, (0.0, 0.0))


def assert_close(
    actual: Any,
    expected: Any,
    *,
    rtol: float | None = None,
    atol: float | None = None,
    check_dtype: bool = True,
    what: str = "",
) -> None:
    """``actual`` equals ``expected`` in shape, dtype and value within the dtype's tolerance."""
    a = np.asarray(actual)
    e = np.asarray(expected)
    prefix = f"{what}: " if what else ""
    assert a.shape == e.shape, f"{prefix}shape {a.shape} != expected {e.shape}"
    if check_dtype:
        assert a.dtype == e.dtype, f"{prefix}dtype {a.dtype} != expected {e.dtype}"
    default_rtol, default_atol = tolerance(e.dtype)
    rtol = default_rtol if rtol is None else rtol
    atol = default_atol if atol is None else atol
    if e.dtype == ml_dtypes.bfloat16 or e.dtype == np.float16:
        a, e = a.astype(np.float64), e.astype(np.float64)
    if a.dtype.kind in "biu" and e.dtype.kind in "biu":
        np.testing.assert_array_equal(a, e, err_msg=prefix)
    else:
        np.testing.assert_allclose(a, e, rtol=rtol, atol=atol, equal_nan=True, err_msg=prefix)
