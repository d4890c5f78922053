"""The dtypes kiln tensors can hold, and NumPy 2 type promotion.

kiln dtypes *are* NumPy dtypes (``kiln.float32 == np.dtype("float32")``), as in JAX: no wrapper
to convert at every boundary. ``bfloat16`` comes from ``ml_dtypes``. Promotion follows NumPy 2
(NEP 50): Python scalars are *weak*, so ``float32_tensor * 2.0`` stays ``float32``.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from .errors import OpTypeError

__all__ = [
    "DType",
    "DTypeLike",
    "bool_",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "complex64",
    "complex128",
    "as_dtype",
    "result_type",
    "is_floating",
    "is_integer",
    "is_signed_integer",
    "is_bool",
    "is_complex",
    "ALL_DTYPES",
    "COMPLEX_DTYPES",
    "FLOAT_DTYPES",
    "INT_DTYPES",
    "NUMERIC_DTYPES",
    "onnx_dtype_code",
    "dtype_from_onnx_code",
]

DType = np.dtype
DTypeLike = Any  # anything np.dtype() accepts, or a kiln dtype

bool_ = np.dtype(np.bool_)
int8 = np.dtype(np.int8)
int16 = np.dtype(np.int16)
int32 = np.dtype(np.int32)
int64 = np.dtype(np.int64)
uint8 = np.dtype(np.uint8)
uint16 = np.dtype(np.uint16)
uint32 = np.dtype(np.uint32)
uint64 = np.dtype(np.uint64)
float16 = np.dtype(np.float16)
bfloat16 = np.dtype(ml_dtypes.bfloat16)
float32 = np.dtype(np.float32)
float64 = np.dtype(np.float64)
complex64 = np.dtype(np.complex64)
complex128 = np.dtype(np.complex128)

FLOAT_DTYPES: tuple[np.dtype, ...] = (float16, bfloat16, float32, float64)
SIGNED_DTYPES: tuple[np.dtype, ...] = (int8, int16, int32, int64)
UNSIGNED_DTYPES: tuple[np.dtype, ...] = (uint8, uint16, uint32, uint64)
INT_DTYPES: tuple[np.dtype, ...] = SIGNED_DTYPES + UNSIGNED_DTYPES
NUMERIC_DTYPES: tuple[np.dtype, ...] = INT_DTYPES + FLOAT_DTYPES
# Complex numbers are not in NUMERIC_DTYPES (the real numbers every ordered or integer operator
# takes): an operator that computes them says so by adding COMPLEX_DTYPES to its dtype set.
COMPLEX_DTYPES: tuple[np.dtype, ...] = (complex64, complex128)
ALL_DTYPES: tuple[np.dtype, ...] = (bool_,) + NUMERIC_DTYPES + COMPLEX_DTYPES
_SUPPORTED = frozenset(ALL_DTYPES)


def as_dtype(dtype: DTypeLike) -> np.dtype:
    """Return the kiln dtype for ``dtype`` (a kiln/NumPy dtype, a scalar type or a name).

    Example:
        >>> as_dtype("float32") == float32
        True
    """
    if isinstance(dtype, np.dtype) and dtype in _SUPPORTED:
        return dtype
    if dtype == "bfloat16":
        return bfloat16
    try:
        resolved = np.dtype(dtype)
    except TypeError as exc:
        raise OpTypeError(f"{dtype!r} is not a dtype; expected one of {_names()}") from exc
    if resolved not in _SUPPORTED:
        raise OpTypeError(f"kiln does not support dtype {resolved}; expected one of {_names()}")
    return resolved


def _names() -> str:
    return ", ".join(d.name for d in ALL_DTYPES)


def result_type(*operands: Any) -> np.dtype:
    """The dtype NumPy 2 gives an operation over ``operands``.

    Operands are dtypes, arrays or tensors (strong) and Python ``bool``/``int``/``float``/
    ``complex`` scalars (weak: they adopt the dtype of the strong operands where the kind allows).

    Example:
        >>> result_type(float32, 2.0)
        dtype('float32')
        >>> result_type(int32, 2.5)
        dtype('float64')
        >>> result_type(float32, 1j)
        dtype('complex64')
    """
    args = [getattr(op, "dtype", op) for op in operands]
    return as_dtype(np.result_type(*args))


def is_floating(dtype: np.dtype) -> bool:
    """True for float16, bfloat16, float32 and float64."""
    return dtype in FLOAT_DTYPES


def is_integer(dtype: np.dtype) -> bool:
    """True for the signed and unsigned integer dtypes (not bool)."""
    return dtype in INT_DTYPES


def is_signed_integer(dtype: np.dtype) -> bool:
    """True for int8, int16, int32 and int64."""
    return dtype in SIGNED_DTYPES


def is_bool(dtype: np.dtype) -> bool:
    """True for bool."""
    return dtype == bool_


def is_complex(dtype: np.dtype) -> bool:
    """True for complex64 and complex128."""
    return dtype in COMPLEX_DTYPES


# ONNX TensorProto.DataType numbers: Cast's ``to`` attribute, stash types, and the element
# types of ONNX files.
_ONNX_CODES: dict[np.dtype, int] = {
    float32: 1,
    uint8: 2,
    int8: 3,
    uint16: 4,
    int16: 5,
    int32: 6,
    int64: 7,
    bool_: 9,
    float16: 10,
    float64: 11,
    uint32: 12,
    uint64: 13,
    complex64: 14,
    complex128: 15,
    bfloat16: 16,
}
_FROM_ONNX = {code: dt for dt, code in _ONNX_CODES.items()}

# ONNX string tensors (data type 8) are NumPy object arrays of ``str``, as onnx.numpy_helper
# and onnxruntime give them. Not a kiln tensor dtype (``as_dtype`` refuses it): only an
# imported ONNX model's Cast/CastLike take or make strings.
string = np.dtype(object)
_STRING_CODE = 8
_FROM_ONNX[_STRING_CODE] = string


def onnx_dtype_code(dtype: DTypeLike) -> int:
    """The ONNX ``TensorProto`` data type number of a kiln dtype.

    Example:
        >>> onnx_dtype_code(float32), onnx_dtype_code("int64")
        (1, 7)
    """
    if isinstance(dtype, np.dtype) and dtype == string:
        return _STRING_CODE
    return _ONNX_CODES[as_dtype(dtype)]


def dtype_from_onnx_code(code: int) -> np.dtype:
    """The kiln dtype of an ONNX ``TensorProto`` data type number.

    Example:
        >>> dtype_from_onnx_code(16) == bfloat16
        True
    """
    try:
        return _FROM_ONNX[int(code)]
    except KeyError:
        raise OpTypeError(f"ONNX data type {code} is not supported by kiln") from None
