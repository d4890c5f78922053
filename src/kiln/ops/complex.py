"""Operators of complex numbers that ONNX has no form of: the real and imaginary parts, the
conjugate, the angle and the magnitude (``np.real``, ``np.imag``, ``np.conjugate``,
``np.angle``, ``np.abs`` of a complex tensor).

They are kiln-domain operators without an ``expand`` hook: ONNX has no complex arithmetic at
all, so a graph holding complex values runs on the NumPy engine, and ONNX export refuses it
naming the node (:mod:`kiln.io.onnx_export`). The ONNX-domain operators that NumPy computes on
complex numbers (Add, Mul, Div, Pow, Exp, Log, Sqrt, the trigonometric functions, MatMul,
ReduceSum/Prod/Mean, Equal, Where, Cast and the layout operators) take the complex dtypes in
their own records (:data:`COMPLEX`); their kernels are NumPy's own, so exact.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from .. import dtypes
from .registry import ELEMENTWISE, PURE, VIEW, Input, OpDef, Sample, TensorType, register
from .rules import require, require_dtype

__all__ = ["COMPLEX", "real_dtype"]

COMPLEX = frozenset(dtypes.COMPLEX_DTYPES)

# The real dtype of each complex one (its parts' dtype).
_PARTS = {dtypes.complex64: dtypes.float32, dtypes.complex128: dtypes.float64}


def real_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype of the real and imaginary parts of ``dtype`` (float32 for complex64).

    Example:
        >>> real_dtype(np.dtype("complex128"))
        dtype('float64')
    """
    return _PARTS[dtype]


def _special_values(dtype: np.dtype) -> np.ndarray:
    """Values exercising signed zeros, infinities and NaN in either part."""
    parts = [0.0, -0.0, 1.5, -2.0, np.inf, -np.inf, np.nan]
    grid = [complex(a, b) for a in parts for b in parts]
    return np.asarray(grid, dtype=dtype)


def _samples(reference: Callable[..., Any]) -> Callable[[], list[Sample]]:
    def make() -> list[Sample]:
        rng = np.random.default_rng(11)
        out = []
        for dt in dtypes.COMPLEX_DTYPES:
            for shape in ((), (0,), (1,), (3, 4)):
                x = np.asarray(rng.standard_normal(shape) + 1j * rng.standard_normal(shape), dt)
                out.append(Sample((x,), {}, reference, name=f"{dt.name}{shape}"))
            out.append(Sample((_special_values(dt),), {}, reference, name=f"{dt.name}-special"))
        return out

    return make


def _pointwise(fn: Callable[[complex], Any], out: Callable[[np.dtype], np.dtype]) -> Callable:
    """A reference computing ``fn`` on each element as a Python complex."""

    def reference(x: np.ndarray) -> np.ndarray:
        values = [fn(complex(v)) for v in x.reshape(-1).tolist()]
        return np.asarray(values, dtype=out(x.dtype)).reshape(x.shape)

    return reference


def _complex_unary(
    name: str,
    doc: str,
    kernel: Callable[[np.ndarray], np.ndarray],
    real_output: bool,
    reference: Callable[..., Any],
    allowed: frozenset[np.dtype] = COMPLEX,
    view: bool = False,
) -> OpDef:
    """Register the kiln-domain operator ``name`` over one complex input (or one of
    ``allowed``): elementwise, its output the input's dtype or (``real_output``) the dtype of
    its parts (a real input's own)."""

    def infer(inputs: Sequence[TensorType | None], attrs: Mapping[str, Any]) -> list[TensorType]:
        x = require(name, "X", inputs[0])
        require_dtype(name, "X", x, allowed)
        out = real_dtype(x.dtype) if real_output and x.dtype in COMPLEX else x.dtype
        return [TensorType(out, x.shape)]

    return register(
        OpDef(
            name=name,
            doc=doc,
            inputs=(Input("X"),),
            outputs=("Y",),
            infer=infer,
            kernel=kernel,
            traits=frozenset({ELEMENTWISE, PURE} | ({VIEW} if view else set())),
            samples=_samples(reference),
            domain="kiln",
            bit_exact=view,  # the parts are data movement; other complex math is a formula
        )
    )


def _same(dtype: np.dtype) -> np.dtype:
    return dtype


# The parts are NumPy's views (the VIEW trait: a write through them reaches the input, as
# through ``ndarray.real``), so taking them copies nothing.
_complex_unary(
    "Real",
    "The real part of each element (np.real), in the dtype of the parts: a view.",
    lambda x: x.real,
    True,
    _pointwise(lambda v: v.real, real_dtype),
    view=True,
)
_complex_unary(
    "Imag",
    "The imaginary part of each element (np.imag), in the dtype of the parts: a view.",
    lambda x: x.imag,
    True,
    _pointwise(lambda v: v.imag, real_dtype),
    view=True,
)
_complex_unary(
    "Conj",
    "The complex conjugate of each element (np.conjugate): the imaginary part negated.",
    np.conjugate,
    False,
    _pointwise(lambda v: complex(v.real, -v.imag), _same),
)
_complex_unary(
    "Angle",
    "The angle of each element in radians (np.angle: atan2(imag, real)), in the dtype of the "
    "parts; a real element's is atan2(0, x).",
    np.angle,
    True,
    _pointwise(lambda v: float(np.arctan2(v.imag, v.real)), real_dtype),
    # np.angle of a real array is arctan2(0, x): 0 or pi by the sign bit, or NaN
    COMPLEX | {dtypes.float16, dtypes.float32, dtypes.float64},
)
_complex_unary(
    "ComplexAbs",
    "The magnitude of each element (np.abs of a complex number: hypot(real, imag)), in the "
    "dtype of the parts.",
    np.absolute,
    True,
    _pointwise(lambda v: float(np.hypot(v.real, v.imag)), real_dtype),
)
