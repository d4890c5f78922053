"""Elementwise operators: unary math, activations, arithmetic, comparison, logic, Cast, Where.

Each operator is one record. Most are built by two small factories, :func:`unary` and
:func:`binary`, which fix the shared rules (NumPy broadcasting, ONNX's "inputs share one dtype"
constraint, the dtype sets each operator accepts); the record still states the operator's own
kernel, dtypes and samples in one place.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from .. import dtypes
from ..errors import OpTypeError
from .registry import (
    COMMUTATIVE,
    ELEMENTWISE,
    PURE,
    Attr,
    Input,
    OpDef,
    Sample,
    TensorType,
    register,
)
from .rules import ALL, FLOATS, NUMERIC, broadcast, require, require_dtype, require_same_dtype
from .sampling import sample_array

__all__ = ["unary", "binary", "onnx_dtype_code", "dtype_from_onnx_code"]

# ONNX TensorProto.DataType numbers.
_ONNX_CODES: dict[np.dtype, int] = {
    dtypes.float32: 1,
    dtypes.uint8: 2,
    dtypes.int8: 3,
    dtypes.uint16: 4,
    dtypes.int16: 5,
    dtypes.int32: 6,
    dtypes.int64: 7,
    dtypes.bool_: 9,
    dtypes.float16: 10,
    dtypes.float64: 11,
    dtypes.uint32: 12,
    dtypes.uint64: 13,
    dtypes.bfloat16: 16,
}
_FROM_ONNX = {code: dt for dt, code in _ONNX_CODES.items()}


def onnx_dtype_code(dtype: np.dtype) -> int:
    """The ONNX ``TensorProto`` data type number of a kiln dtype."""
    return _ONNX_CODES[dtypes.as_dtype(dtype)]


def dtype_from_onnx_code(code: int) -> np.dtype:
    """The kiln dtype of an ONNX ``TensorProto`` data type number."""
    try:
        return _FROM_ONNX[int(code)]
    except KeyError:
        raise OpTypeError(f"ONNX data type {code} is not supported by kiln") from None


# Shapes every elementwise op is sampled on: scalar, size 0, size 1, a plain matrix.
_UNARY_SHAPES: tuple[tuple[int, ...], ...] = ((), (0,), (1,), (3, 4))
# Pairs exercising broadcasting, size 0 and size 1.
_BINARY_SHAPES: tuple[tuple[tuple[int, ...], tuple[int, ...]], ...] = (
    ((3, 4), (3, 4)),
    ((2, 1, 4), (3, 1)),
    ((), (5,)),
    ((0, 3), (1, 3)),
    ((1,), (1,)),
)


def _unary_samples(
    dts: Iterable[np.dtype],
    low: float,
    high: float,
    reference: Callable[..., Any] | None,
    attrs: Sequence[Mapping[str, Any]],
) -> Callable[[], list[Sample]]:
    def make() -> list[Sample]:
        out = []
        for dt in dts:
            for shape in _UNARY_SHAPES:
                for a in attrs:
                    x = sample_array(shape, dt, low, high)
                    out.append(Sample((x,), a, reference, name=f"{dt.name}{shape}"))
        return out

    return make


def _binary_samples(
    dts: Iterable[np.dtype],
    low: float,
    high: float,
    reference: Callable[..., Any] | None,
    rhs_low: float | None = None,
) -> Callable[[], list[Sample]]:
    def make() -> list[Sample]:
        out = []
        for dt in dts:
            for sa, sb in _BINARY_SHAPES:
                a = sample_array(sa, dt, low, high)
                b = sample_array(sb, dt, low if rhs_low is None else rhs_low, high)
                out.append(Sample((a, b), {}, reference, name=f"{dt.name}{sa}{sb}"))
        return out

    return make


# -- factories -----------------------------------------------------------------------------


def unary(
    name: str,
    doc: str,
    kernel: Callable[..., np.ndarray],
    allowed: Iterable[np.dtype] = NUMERIC,
    *,
    attrs: Mapping[str, Attr] | None = None,
    out_dtype: np.dtype | None = None,
    sample_dtypes: Iterable[np.dtype] = (dtypes.float32, dtypes.float64),
    sample_range: tuple[float, float] = (-3.0, 3.0),
    sample_attrs: Sequence[Mapping[str, Any]] = ({},),
    reference: Callable[..., Any] | None = None,
) -> OpDef:
    """Register a one-input elementwise operator whose output has the input's shape."""
    allowed = frozenset(allowed)

    def infer(inputs: Sequence[TensorType | None], attrs: Mapping[str, Any]) -> list[TensorType]:
        x = require(name, "X", inputs[0])
        require_dtype(name, "X", x, allowed)
        return [TensorType(out_dtype or x.dtype, x.shape)]

    return register(
        OpDef(
            name=name,
            doc=doc,
            inputs=(Input("X"),),
            outputs=("Y",),
            attrs=attrs or {},
            infer=infer,
            kernel=kernel,
            traits=frozenset({ELEMENTWISE, PURE}),
            samples=_unary_samples(
                tuple(sample_dtypes), *sample_range, reference, tuple(sample_attrs)
            ),
        )
    )


def binary(
    name: str,
    doc: str,
    kernel: Callable[[np.ndarray, np.ndarray], np.ndarray],
    allowed: Iterable[np.dtype] = NUMERIC,
    *,
    out_dtype: np.dtype | None = None,
    commutative: bool = False,
    sample_dtypes: Iterable[np.dtype] = (dtypes.float32, dtypes.int32),
    sample_range: tuple[float, float] = (-3.0, 3.0),
    rhs_low: float | None = None,
    reference: Callable[..., Any] | None = None,
) -> OpDef:
    """Register a two-input elementwise operator with NumPy broadcasting and one shared dtype."""
    allowed = frozenset(allowed)

    def infer(inputs: Sequence[TensorType | None], attrs: Mapping[str, Any]) -> list[TensorType]:
        a = require(name, "A", inputs[0])
        b = require(name, "B", inputs[1])
        require_dtype(name, "A", a, allowed)
        require_same_dtype(name, (a, b), ("A", "B"))
        return [TensorType(out_dtype or a.dtype, broadcast(name, a.shape, b.shape))]

    traits = {ELEMENTWISE, PURE} | ({COMMUTATIVE} if commutative else set())
    return register(
        OpDef(
            name=name,
            doc=doc,
            inputs=(Input("A"), Input("B")),
            outputs=("C",),
            infer=infer,
            kernel=kernel,
            traits=frozenset(traits),
            samples=_binary_samples(tuple(sample_dtypes), *sample_range, reference, rhs_low),
        )
    )


# -- the operators -------------------------------------------------------------------------

unary("Exp", "e raised to each element.", np.exp, FLOATS)
unary(
    "Relu",
    "max(x, 0).",
    lambda x: np.maximum(x, x.dtype.type(0)),
    NUMERIC - {dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64},
    reference=lambda x: np.where(x > 0, x, np.zeros_like(x)),
)

binary("Add", "a + b.", np.add, NUMERIC, commutative=True)


def _cast_infer(inputs: Sequence[TensorType | None], attrs: Mapping[str, Any]) -> list[TensorType]:
    x = require("Cast", "input", inputs[0])
    require_dtype("Cast", "input", x, ALL)
    target = dtype_from_onnx_code(attrs["to"])
    return [TensorType(target, x.shape, x.value if dtypes.is_integer(target) else None)]


def _cast_kernel(
    x: np.ndarray, *, to: int, saturate: int = 1, round_mode: str = "up"
) -> np.ndarray:
    return x.astype(dtype_from_onnx_code(to))


def _cast_samples() -> list[Sample]:
    out = []
    for src in (dtypes.float32, dtypes.int64, dtypes.bool_, dtypes.float16):
        for dst in (dtypes.float64, dtypes.int32, dtypes.bool_, dtypes.bfloat16):
            x = sample_array((2, 3), src, -5, 5)
            out.append(
                Sample(
                    (x,),
                    {"to": onnx_dtype_code(dst)},
                    lambda x, to, **_: x.astype(dtype_from_onnx_code(to)),
                    name=f"{src.name}->{dst.name}",
                )
            )
    return out


register(
    OpDef(
        name="Cast",
        doc="Each element converted to the dtype ``to`` (an ONNX data type number).",
        inputs=(Input("input"),),
        outputs=("output",),
        attrs={"to": Attr("int"), "saturate": Attr("int", 1), "round_mode": Attr("str", "up")},
        infer=_cast_infer,
        kernel=_cast_kernel,
        traits=frozenset({ELEMENTWISE, PURE}),
        samples=_cast_samples,
    )
)
