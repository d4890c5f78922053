"""Which NumPy kernels round differently on contiguous and strided operands.

NumPy runs many elementwise functions through two loops: a SIMD one for contiguous operands
and a scalar one (the C library's ``atan``, ``exp``, ...) for strided ones, and the two do
not always round alike. On an AVX-512 machine with NumPy 2.4, ``np.arctan`` of a float32
array and of the same values reversed (``x[::-1]``) differ in the last bit for about one
element in four; ``np.exp`` and ``np.log`` of float64, ``np.power``, ``np.arctan2``, complex64
multiplication and complex ``abs`` too. So NumPy's own answer depends on the layout of the
arrays it is given, and a rewrite that changes the layout an operator reads (the loop
vectorizer stacking per-iteration values) must keep the class of layout (contiguous or not)
for these.

Which kernels are sensitive depends on the machine (its SIMD extensions) and NumPy's build,
so it is measured here, once per operator and dtypes, on the machine kiln runs on: the
operator's kernel on a probe of values of many magnitudes, contiguous and reversed.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import numpy as np

from .dispatch import run_kernel
from .registry import ELEMENTWISE, OpDef

__all__ = ["layout_sensitive"]

_PROBE_SIZE = 1 << 14


def _probe(dtype: np.dtype, salt: int) -> np.ndarray:
    """Values of many magnitudes (inside and outside [-1, 1], where inverse trigonometric
    functions change branch), of ``dtype``."""
    rng = np.random.default_rng(20261204 + salt)
    n = _PROBE_SIZE // 4
    parts = [rng.uniform(-1, 1, n), rng.uniform(1, 10, n), rng.standard_normal(n) * 40]
    parts.append(rng.standard_normal(n) * 0.01)
    real = np.concatenate(parts)
    if dtype.kind == "c":
        return (real + 1j * real[::-1]).astype(dtype)
    return real.astype(dtype)


def layout_sensitive(op: OpDef, dtypes: tuple[np.dtype, ...], attrs: Mapping[str, Any]) -> bool:
    """Whether NumPy's kernel of the elementwise ``op`` on inputs of ``dtypes`` gives other
    bits for contiguous operands than for strided ones (measured once; see the module
    docstring). False for operators that are not elementwise and for inputs that are not
    floating point (integer and boolean arithmetic is exact in any loop)."""
    if not op.has(ELEMENTWISE) or not any(d.kind in "fc" for d in dtypes):
        return False
    key = tuple(sorted(attrs.items())) if attrs else ()
    try:
        return _measured(op, dtypes, key)
    except TypeError:  # unhashable attributes: measure without the cache
        return _measure(op, dtypes, dict(attrs))


@functools.cache
def _measured(op: OpDef, dtypes: tuple[np.dtype, ...], attrs: tuple[tuple[str, Any], ...]) -> bool:
    return _measure(op, dtypes, dict(attrs))


def _measure(op: OpDef, dtypes: tuple[np.dtype, ...], attrs: dict[str, Any]) -> bool:
    inputs = [_probe(np.dtype(d), k) for k, d in enumerate(dtypes)]
    try:
        with np.errstate(all="ignore"):
            contiguous = run_kernel(op, inputs, attrs)
            strided = run_kernel(op, [x[::-1] for x in inputs], attrs)
    except Exception:  # the kernel refuses these values (say, an integer power's domain)
        return True  # unknown: treated as sensitive, which only keeps a layout as it was
    for a, b in zip(contiguous, strided):
        a, b = np.asarray(a), np.asarray(b)[::-1]
        if a.shape != b.shape or a.dtype.kind not in "fc":
            continue
        same = (a == b) | (np.isnan(a) & np.isnan(b))
        if not same.all():
            return True
    return False
