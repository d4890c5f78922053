"""Linear-algebra operators: MatMul, Gemm and Einsum.

``MatMul`` has ``numpy.matmul`` semantics (a 1-D operand is promoted to a matrix and the added
axis removed again; batch axes broadcast). ``Gemm`` is ``alpha * A' @ B' + beta * C`` on matrices.
``Einsum`` takes its equation as an attribute; its ``infer`` parses the equation (explicit or
implicit output, ellipsis) and computes the output shape, on symbolic sizes too.
"""

from __future__ import annotations

import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import dtypes
from ..errors import OpArgumentError
from ..symbolic import Dim, Shape, broadcast_dim, format_shape
from . import batching
from .complex import COMPLEX
from .registry import (
    PURE,
    Attr,
    EngineLimit,
    Input,
    KernelCall,
    OpDef,
    Sample,
    TensorType,
    Typed,
    any_limit,
    register,
    same_dtype,
)
from .rules import (
    FLOATS,
    INTEGERS,
    NUMERIC,
    broadcast,
    require,
    require_dtype,
    require_same_dtype,
)
from .sampling import sample_array

__all__ = ["MATMUL_DTYPES", "matmul_shape", "EinsumEquation", "parse_einsum"]

# ONNX's type constraint of MatMul and Gemm.
MATMUL_DTYPES = FLOATS | {dtypes.int32, dtypes.int64, dtypes.uint32, dtypes.uint64}


def _compute(x: np.ndarray) -> np.ndarray:
    # ml_dtypes' bfloat16 matmul returns float32 and einsum rejects it: compute in float32.
    return x.astype(np.float32) if x.dtype == dtypes.bfloat16 else x


def _static_mismatch(a: Dim, b: Dim) -> bool:
    return isinstance(a, int) and isinstance(b, int) and a != b


# -- engine facts (OpDef.cost, OpDef.fast_kernel) ------------------------------------------

# The dtypes NumPy's matmul hands to BLAS; the registry kernels also cover integers, float16
# and bfloat16.
_BLAS_FLOATS = frozenset({dtypes.float32, dtypes.float64, *COMPLEX})


def _product_cost(
    inputs: Sequence[Typed | None], outputs: Sequence[Typed], attrs: Mapping[str, Any]
) -> float:
    """MatMul and Gemm: 2 * K per output element, a multiply and an add per summed product."""
    a = inputs[0]
    if a is None or not a.shape:
        return 1
    k = a.shape[-2] if attrs.get("transA") else a.shape[-1]
    return 2 * k if isinstance(k, int) else 1


def _matmul_fast(
    inputs: Sequence[Typed | None], outputs: Sequence[Typed], attrs: Mapping[str, Any]
) -> KernelCall | None:
    """``np.matmul`` itself on one float32/float64 dtype (no promotion, no bfloat16 cast)."""
    if not same_dtype(inputs, outputs) or outputs[0].dtype not in _BLAS_FLOATS:
        return None
    return KernelCall("{b0}({0}, {1})", (np.matmul,))


def _dot_fast(
    inputs: Sequence[Typed | None], outputs: Sequence[Typed], attrs: Mapping[str, Any]
) -> KernelCall | None:
    """``np.dot`` itself on one float32/float64/complex dtype (no promotion, no bfloat16
    cast): a fresh result the plan may write into, as MatMul's."""
    if not same_dtype(inputs, outputs) or outputs[0].dtype not in _BLAS_FLOATS:
        return None
    return KernelCall("{b0}({0}, {1})", (np.dot,))


def _gemm_unscaled(a: np.ndarray, b: np.ndarray, c: np.ndarray | None) -> np.ndarray:
    """Gemm with alpha = beta = 1 on one float dtype: one matmul and an in-place add."""
    y = np.matmul(a, b)
    if c is not None:
        np.add(y, c, out=y)
    return y


def _gemm_fast(
    inputs: Sequence[Typed | None], outputs: Sequence[Typed], attrs: Mapping[str, Any]
) -> KernelCall | None:
    """:func:`_gemm_unscaled` on one float32/float64 dtype with alpha = beta = 1, and a C of
    at most two axes (which the in-place add broadcasts into the (M, N) output); transposes
    are views written into the call."""
    c = inputs[2] if len(inputs) > 2 else None
    if (
        not same_dtype(inputs, outputs)
        or outputs[0].dtype not in _BLAS_FLOATS
        or attrs["alpha"] != 1.0
        or attrs["beta"] != 1.0
        or (c is not None and len(c.shape) > 2)
    ):
        return None
    a = "{0}.T" if attrs["transA"] else "{0}"
    b = "{1}.T" if attrs["transB"] else "{1}"
    c_arg = "None" if c is None else "{2}"
    return KernelCall(f"{{b0}}({a}, {b}, {c_arg})", (_gemm_unscaled,))


def _einsum_cost(
    inputs: Sequence[Typed | None], outputs: Sequence[Typed], attrs: Mapping[str, Any]
) -> float:
    """2 * the first operand's last axis per output element: a rough contraction length."""
    first = inputs[0]
    last = int(first.shape[-1]) if first is not None and first.shape else 1
    return 2 * max(last, 1)


def _spaced_or_upper_equation(
    inputs: Sequence[Typed | None], outputs: Sequence[Typed], attrs: Mapping[str, Any]
) -> bool:
    return any(c.isspace() or c.isupper() for c in str(attrs["equation"]))


# -- MatMul --------------------------------------------------------------------------------


def matmul_shape(op: str, a: Shape, b: Shape) -> Shape:
    """The ``numpy.matmul`` output shape of ``a @ b``, validating the contraction.

    Example:
        >>> from kiln.symbolic import symbol
        >>> matmul_shape("MatMul", (symbol("B"), 5, 64), (64, 32))
        (SymDim('B'), 5, 32)
    """
    for arg, shape in (("A", a), ("B", b)):
        if len(shape) == 0:
            raise OpArgumentError(
                f"{op}: input {arg!r} must have rank >= 1 (matmul does not take scalars), "
                "got a 0-d tensor"
            )
    a2 = (1, *a) if len(a) == 1 else tuple(a)
    b2 = (*b, 1) if len(b) == 1 else tuple(b)
    if _static_mismatch(a2[-1], b2[-2]):
        b_axis = -2 if len(b) >= 2 else -1
        raise OpArgumentError(
            f"{op}: inputs 'A' {format_shape(a)} and 'B' {format_shape(b)} do not contract: "
            f"axis -1 of A has size {a2[-1]} but axis {b_axis} of B has size {b2[-2]}"
        )
    batch = broadcast(op, a2[:-2], b2[:-2])
    out: list[Dim] = list(batch)
    if len(a) > 1:
        out.append(a2[-2])
    if len(b) > 1:
        out.append(b2[-1])
    return tuple(out)


def _matmul_infer(
    inputs: Sequence[TensorType | None], attrs: Mapping[str, Any]
) -> list[TensorType]:
    a = require("MatMul", "A", inputs[0])
    b = require("MatMul", "B", inputs[1])
    require_dtype("MatMul", "A", a, MATMUL_DTYPES | COMPLEX)
    require_same_dtype("MatMul", (a, b), ("A", "B"))
    return [TensorType(a.dtype, matmul_shape("MatMul", a.shape, b.shape))]


def _matmul_may_raise(
    inputs: Sequence[Typed | None], outputs: Sequence[Typed], attrs: Mapping[str, Any]
) -> bool:
    """A product whose contracted sizes, or whose batch sizes, are not known to agree (a
    symbolic size against another size than itself or 1) raises NumPy's error when they do
    not: it must run even when unused (fuzz 52:1907: a dead product whose batch axes
    broadcast ``s0`` against 2)."""
    a, b = inputs[0], inputs[1]
    if a is None or b is None or not a.shape or not b.shape:
        return False
    inner = b.shape[-2] if len(b.shape) >= 2 else b.shape[0]
    if a.shape[-1] != inner:
        return True
    batch_a, batch_b = tuple(a.shape[:-2]), tuple(b.shape[:-2])
    for x, y in zip(reversed(batch_a), reversed(batch_b)):
        if (type(x) is not int or type(y) is not int) and x != y and 1 not in (x, y):
            return True
    return False


def _matmul_kernel(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.asarray(np.matmul(_compute(a), _compute(b))).astype(a.dtype, copy=False)


def _matmul_reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Explicit loops over the broadcast batch, rows and columns, summing in float64/int."""
    a2 = a[np.newaxis, :] if a.ndim == 1 else a
    b2 = b[:, np.newaxis] if b.ndim == 1 else b
    batch = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    m, k, n = a2.shape[-2], a2.shape[-1], b2.shape[-1]
    wide = np.float64 if dtypes.is_floating(a.dtype) else object
    aa = np.broadcast_to(a2.astype(wide), batch + (m, k))
    bb = np.broadcast_to(b2.astype(wide), batch + (k, n))
    out = np.zeros(batch + (m, n), dtype=wide)
    for idx in np.ndindex(*batch):
        for i in range(m):
            for j in range(n):
                out[idx + (i, j)] = sum((aa[idx + (i, p)] * bb[idx + (p, j)] for p in range(k)), 0)
    if a.ndim == 1:
        out = out[..., 0, :]
    if b.ndim == 1:
        out = out[..., 0]
    if wide is object:
        info = np.iinfo(a.dtype)  # wrap like fixed-width integers do
        span = int(info.max) - int(info.min) + 1
        flat = [((int(v) - int(info.min)) % span) + int(info.min) for v in out.reshape(-1)]
        return np.asarray(flat, dtype=a.dtype).reshape(out.shape)
    return out.astype(a.dtype)


def _matmul_samples() -> list[Sample]:
    cases = (
        ((3, 4), (4, 5), dtypes.float32),
        ((2, 3, 4), (4, 2), dtypes.float64),  # batch x matrix
        ((2, 1, 3, 4), (5, 4, 2), dtypes.float32),  # broadcast batches
        ((4,), (4, 3), dtypes.int32),  # 1-D promotion on the left
        ((2, 3, 4), (4,), dtypes.int64),  # 1-D promotion on the right
        ((4,), (4,), dtypes.float32),  # inner product -> 0-d
        ((0, 3), (3, 2), dtypes.float32),  # empty rows
        ((2, 0), (0, 3), dtypes.float64),  # empty contraction: zeros
        ((1, 1), (1, 1), dtypes.uint32),
        ((3, 4), (4, 2), dtypes.float16),
        ((2, 3), (3, 2), dtypes.bfloat16),
    )
    return _product_samples(cases, _matmul_reference, "@")


def _product_samples(
    cases: Sequence[tuple[tuple[int, ...], tuple[int, ...], np.dtype]],
    reference: Any,
    sign: str,
    rtol: float | None = None,
) -> list[Sample]:
    """A sample of two operands per ``(shape_a, shape_b, dtype)`` case (uint32: from 0)."""
    out = []
    for sa, sb, dt in cases:
        low = 0 if dt == dtypes.uint32 else -3
        a = sample_array(sa, dt, low, 3)
        b = sample_array(sb, dt, low, 3)
        out.append(Sample((a, b), {}, reference, name=f"{dt.name}{sa}{sign}{sb}", rtol=rtol))
    return out


register(
    OpDef(
        name="MatMul",
        doc="numpy.matmul: matrix product over the last two axes, batch axes broadcast, a 1-D "
        "operand promoted to a matrix (the added axis is removed from the result).",
        inputs=(Input("A"), Input("B")),
        outputs=("Y",),
        infer=_matmul_infer,
        kernel=_matmul_kernel,
        samples=_matmul_samples,
        since_version=13,
        cost=_product_cost,
        fast_kernel=_matmul_fast,
        raises_on_values=_matmul_may_raise,
        batch=batching.matmul,
    )
)


# -- kiln.Dot: np.dot, as NumPy computes it -----------------------------------------------
# np.dot of an operand with more than two axes sums over the last axis of A and the second to
# last of B, one BLAS dot product per output element: MatMul (batched gemm) and Einsum add in
# other orders (up to 256 ulp in float32), so the NumPy plan calls np.dot itself.


def _dot_equation(ra: int, rb: int) -> str:
    """The einsum equation of ``np.dot`` for operands of ranks ``ra`` and ``rb`` (>= 1)."""
    letters = iter(string.ascii_letters)
    la = [next(letters) for _ in range(ra)]
    lb = [next(letters) for _ in range(rb)]
    lb[max(rb - 2, 0)] = la[-1]
    out = la[:-1] + [c for i, c in enumerate(lb) if i != max(rb - 2, 0)]
    return f"{''.join(la)},{''.join(lb)}->{''.join(out)}"


def _dot_infer(inputs: Sequence[TensorType | None], attrs: Mapping[str, Any]) -> list[TensorType]:
    a = require("kiln.Dot", "A", inputs[0])
    b = require("kiln.Dot", "B", inputs[1])
    require_dtype("kiln.Dot", "A", a, NUMERIC | COMPLEX | {dtypes.bool_})
    require_same_dtype("kiln.Dot", (a, b), ("A", "B"))
    if not a.shape or not b.shape:
        raise OpArgumentError("kiln.Dot: both operands need an axis (a scalar multiplies)")
    k = b.shape[-2] if len(b.shape) >= 2 else b.shape[0]
    if _static_mismatch(a.shape[-1], k):
        raise OpArgumentError(
            f"kiln.Dot: shapes {format_shape(a.shape)} and {format_shape(b.shape)} are not "
            f"aligned: the last axis of A has size {a.shape[-1]} but B's has {k}"
        )
    b_free = (*b.shape[:-2], b.shape[-1]) if len(b.shape) >= 2 else ()
    return [TensorType(a.dtype, (*a.shape[:-1], *b_free))]


def _dot_kernel(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype == dtypes.bfloat16:
        return np.asarray(np.dot(_compute(a), _compute(b))).astype(a.dtype)
    return np.asarray(np.dot(a, b))


def _dot_reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The einsum of np.dot's definition, summed in float64 (integers: in int64)."""
    wide = {"c": np.complex128, "f": np.float64}.get(a.dtype.kind, np.int64)
    if a.dtype == dtypes.bfloat16:
        wide = np.float64
    y = np.einsum(_dot_equation(a.ndim, b.ndim), a.astype(wide), b.astype(wide))
    return np.asarray(y).astype(a.dtype)


def _dot_samples() -> list[Sample]:
    cases = (
        ((5,), (5,), dtypes.float32),  # vectors and matrices: np.dot's BLAS calls
        ((4,), (4, 3), dtypes.float64),
        ((3, 4), (4, 2), dtypes.float32),
        ((1,), (1, 1), dtypes.float64),
        ((2, 3, 4), (4, 5), dtypes.float32),
        ((3, 4), (2, 4, 5), dtypes.float64),
        ((2, 3, 4), (3, 4, 2), dtypes.float32),
        ((2, 3, 4), (4,), dtypes.int64),
        ((4,), (2, 4, 3), dtypes.int32),
        ((2, 0, 3), (3, 2), dtypes.float64),
        ((2, 3, 0), (0, 2), dtypes.float32),
        ((2, 2, 3), (3, 2), dtypes.float16),
    )
    return _product_samples(cases, _dot_reference, ".", rtol=1e-3)


# The dtypes whose np.dot of vectors NumPy computes with the same loop as np.matmul's.
_DOT_BATCHES = frozenset({dtypes.float32, dtypes.float64, *INTEGERS})


def _dot_batch(
    builder: Any,
    op: str,
    inputs: Sequence[Any],
    batched: Sequence[bool],
    attrs: Mapping[str, Any],
) -> Sequence[Any] | None:
    """The loop vectorizer's rule for kiln.Dot of a vector with a vector or a matrix (a dot
    per iteration, ``D[i, j] = np.dot(x[i], y[j])``): a batched MatMul, whose NumPy loop runs
    each iteration's product with the very call np.dot makes (dot, gemv), so the same bits
    (checked on every inf, NaN and signed-zero combination). Not for a sum of one product
    (np.dot keeps ``-0.0 * 1`` as -0.0 where matmul adds it to +0.0), nor for matrices
    (np.dot's BLAS call skips zero operands where np.matmul's may not)."""
    a, b = inputs
    if len(a.shape) - batched[0] != 1 or len(b.shape) - batched[1] not in (1, 2):
        return None
    k = a.shape[-1]
    if not isinstance(k, int) or k < 2 or a.dtype not in _DOT_BATCHES:
        return None
    return batching.matmul.fn(builder, "MatMul", inputs, batched, {})


def _dot_expand(
    builder: Any, inputs: Sequence[Any], attrs: Mapping[str, Any], outputs: Sequence[Any]
) -> None:
    """The ONNX form: an Einsum of np.dot's definition."""
    a, b = inputs
    equation = _dot_equation(len(a.shape), len(b.shape))
    builder.add("Einsum", [a, b], {"equation": equation}, outputs=[outputs[0]])


register(
    OpDef(
        name="Dot",
        doc="numpy.dot: the sum over the last axis of A and the second to last of B (the "
        "last of a vector B), computed as NumPy does: BLAS's products of vectors and "
        "matrices (which skip a zero operand), a dot product per element for more axes.",
        inputs=(Input("A"), Input("B")),
        outputs=("Y",),
        infer=_dot_infer,
        kernel=_dot_kernel,
        samples=_dot_samples,
        cost=_product_cost,
        raises_on_values=_matmul_may_raise,
        fast_kernel=_dot_fast,
        batch=batching.BatchRule(_dot_batch),
        domain="kiln",
        expand=_dot_expand,
    )
)


# -- Gemm ----------------------------------------------------------------------------------


def _gemm_may_raise(
    inputs: Sequence[Typed | None], outputs: Sequence[Typed], attrs: Mapping[str, Any]
) -> bool:
    """As MatMul's (a Gemm is often a folded MatMul, fuzz 34:479): contracted sizes, or a C
    whose sizes are not known to broadcast, raise at run time when they do not agree."""
    a, b = inputs[0], inputs[1]
    if a is None or b is None or len(a.shape) != 2 or len(b.shape) != 2:
        return False
    m, ka = (a.shape[1], a.shape[0]) if attrs.get("transA") else a.shape
    kb, n = (b.shape[1], b.shape[0]) if attrs.get("transB") else b.shape
    c = inputs[2] if len(inputs) > 2 else None
    unsure_c = c is not None and any(cd != 1 and cd != td for cd, td in zip(c.shape[::-1], (n, m)))
    return bool(ka != kb) or unsure_c


def _gemm_infer(inputs: Sequence[TensorType | None], attrs: Mapping[str, Any]) -> list[TensorType]:
    a = require("Gemm", "A", inputs[0])
    b = require("Gemm", "B", inputs[1])
    c = inputs[2] if len(inputs) > 2 else None
    require_dtype("Gemm", "A", a, MATMUL_DTYPES | COMPLEX)
    require_same_dtype("Gemm", (a, b, c), ("A", "B", "C"))
    for arg, t in (("A", a), ("B", b)):
        if t.ndim != 2:
            raise OpArgumentError(
                f"Gemm: input {arg!r} must be a matrix (rank 2), got shape {format_shape(t.shape)}"
            )
    m, ka = (a.shape[1], a.shape[0]) if attrs["transA"] else a.shape
    kb, n = (b.shape[1], b.shape[0]) if attrs["transB"] else b.shape
    if _static_mismatch(ka, kb):
        raise OpArgumentError(
            f"Gemm: inputs 'A' {format_shape(a.shape)} (transA={attrs['transA']}) and 'B' "
            f"{format_shape(b.shape)} (transB={attrs['transB']}) do not contract: "
            f"A' has {ka} columns but B' has {kb} rows"
        )
    if c is not None:
        ok = c.ndim <= 2 and all(
            not _static_mismatch(cd, td) or cd == 1 for cd, td in zip(c.shape[::-1], (n, m))
        )
        if not ok:
            raise OpArgumentError(
                f"Gemm: input 'C' {format_shape(c.shape)} does not broadcast to the output shape "
                f"{format_shape((m, n))}"
            )
    return [TensorType(a.dtype, (m, n))]


def _gemm_kernel(
    a: np.ndarray,
    b: np.ndarray,
    c: np.ndarray | None = None,
    *,
    alpha: float = 1.0,
    beta: float = 1.0,
    transA: int = 0,  # noqa: N803 - ONNX's attribute name
    transB: int = 0,  # noqa: N803
) -> np.ndarray:
    aa = _compute(a.T if transA else a)
    bb = _compute(b.T if transB else b)
    y = np.matmul(aa, bb)
    if y.dtype.kind in "iu":
        # Integers: alpha and beta are floats, so scale in float64 and truncate back.
        scaled = y.astype(np.float64) * alpha if alpha != 1.0 else y
        if c is not None and beta != 0.0:
            scaled = scaled + (c.astype(np.float64) * beta if beta != 1.0 else c)
        return np.asarray(scaled).astype(a.dtype)
    if alpha != 1.0:
        y = y * y.dtype.type(alpha)
    if c is not None and beta != 0.0:
        cc = _compute(c)
        y = y + (cc * cc.dtype.type(beta) if beta != 1.0 else cc)
    return np.asarray(y).astype(a.dtype, copy=False)


def _gemm_reference(
    a: np.ndarray,
    b: np.ndarray,
    c: np.ndarray | None = None,
    *,
    alpha: float,
    beta: float,
    transA: int,  # noqa: N803
    transB: int,  # noqa: N803
) -> np.ndarray:
    aa = (a.T if transA else a).astype(np.float64)
    bb = (b.T if transB else b).astype(np.float64)
    m, k = aa.shape
    n = bb.shape[1]
    out = np.zeros((m, n))
    for i in range(m):
        for j in range(n):
            out[i, j] = alpha * sum(aa[i, p] * bb[p, j] for p in range(k))
    if c is not None:
        out = out + beta * np.broadcast_to(c.astype(np.float64), (m, n))
    return np.trunc(out).astype(a.dtype) if dtypes.is_integer(a.dtype) else out.astype(a.dtype)


def _gemm_samples() -> list[Sample]:
    cases: tuple[tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...] | None, dict], ...] = (
        ((3, 4), (4, 5), (3, 5), {}),
        ((4, 3), (4, 5), (5,), {"transA": 1, "alpha": 0.5}),
        ((3, 4), (5, 4), (3, 1), {"transB": 1, "beta": 2.0}),
        ((4, 3), (5, 4), (), {"transA": 1, "transB": 1, "alpha": 2.0, "beta": -1.0}),
        ((3, 4), (4, 2), None, {}),
        ((3, 4), (4, 2), (1, 2), {"beta": 0.0}),
        ((0, 4), (4, 2), (2,), {}),
        ((1, 1), (1, 1), (1, 1), {}),
    )
    out = []
    for i, (sa, sb, sc, attrs) in enumerate(cases):
        dt = (dtypes.float32, dtypes.float64, dtypes.int64, dtypes.float16)[i % 4]
        a = sample_array(sa, dt, -3, 3)
        b = sample_array(sb, dt, -3, 3)
        inputs = (a, b) if sc is None else (a, b, sample_array(sc, dt, -3, 3))
        out.append(Sample(inputs, attrs, _gemm_reference, name=f"{dt.name}{sa}{sb}{sc}{attrs}"))
    return out


register(
    OpDef(
        name="Gemm",
        doc="alpha * A' @ B' + beta * C on matrices, A' = A.T when transA, B' = B.T when transB; "
        "C (optional) broadcasts to the (M, N) output.",
        inputs=(Input("A"), Input("B"), Input("C", optional=True)),
        outputs=("Y",),
        attrs={
            "alpha": Attr("float", 1.0),
            "beta": Attr("float", 1.0),
            "transA": Attr("int", 0),
            "transB": Attr("int", 0),
        },
        raises_on_values=_gemm_may_raise,
        infer=_gemm_infer,
        kernel=_gemm_kernel,
        samples=_gemm_samples,
        since_version=13,
        cost=_product_cost,
        fast_kernel=_gemm_fast,
    )
)


# -- Einsum --------------------------------------------------------------------------------

ELLIPSIS = "..."
_LABELS = frozenset(string.ascii_letters)


@dataclass(frozen=True)
class EinsumEquation:
    """A parsed einsum equation: per-operand label lists and the output labels.

    ``"..."`` stands for the broadcast (ellipsis) axes wherever it appears.
    """

    inputs: tuple[tuple[str, ...], ...]
    output: tuple[str, ...]


def _parse_term(equation: str, term: str) -> tuple[str, ...]:
    labels: list[str] = []
    i = 0
    while i < len(term):
        if term.startswith(ELLIPSIS, i):
            if ELLIPSIS in labels:
                raise OpArgumentError(
                    f"Einsum: equation {equation!r}: term {term!r} has more than one ellipsis"
                )
            labels.append(ELLIPSIS)
            i += 3
        elif term[i] in _LABELS:
            labels.append(term[i])
            i += 1
        else:
            raise OpArgumentError(
                f"Einsum: equation {equation!r}: invalid character {term[i]!r} in term "
                f"{term!r}; expected letters a-z, A-Z and '...'"
            )
    return tuple(labels)


def parse_einsum(equation: str, num_inputs: int) -> EinsumEquation:
    """Parse ``equation`` for ``num_inputs`` operands; implicit mode fills in the output.

    In implicit mode (no ``->``) the output is the ellipsis axes (if any operand has them) and
    then the labels that appear exactly once, in alphabetical (ASCII) order.

    Example:
        >>> parse_einsum("ij,jk", 2).output
        ('i', 'k')
    """
    text = equation.replace(" ", "")
    if text.count("->") > 1:
        raise OpArgumentError(f"Einsum: equation {equation!r} has more than one '->'")
    lhs, arrow, rhs = text.partition("->")
    terms = tuple(_parse_term(equation, t) for t in lhs.split(","))
    if len(terms) != num_inputs:
        raise OpArgumentError(
            f"Einsum: equation {equation!r} has {len(terms)} input term(s) but {num_inputs} "
            "input(s) were given"
        )
    if arrow:
        output = _parse_term(equation, rhs)
        seen = {label for term in terms for label in term}
        for label in output:
            if label != ELLIPSIS and label not in seen:
                raise OpArgumentError(
                    f"Einsum: equation {equation!r}: output label {label!r} does not appear in "
                    "any input term"
                )
        if len(set(output)) != len(output):
            raise OpArgumentError(f"Einsum: equation {equation!r}: the output repeats a label")
    else:
        counts: dict[str, int] = {}
        for term in terms:
            for label in term:
                counts[label] = counts.get(label, 0) + 1
        once = sorted(lb for lb, c in counts.items() if c == 1 and lb != ELLIPSIS)
        has_ellipsis = any(ELLIPSIS in term for term in terms)
        output = ((ELLIPSIS,) if has_ellipsis else ()) + tuple(once)
    return EinsumEquation(terms, output)


def einsum_shape(equation: str, shapes: Sequence[Shape]) -> Shape:
    """The output shape of ``np.einsum(equation, *operands)`` for operands of ``shapes``.

    Example:
        >>> einsum_shape("...ij,jk->...ik", [(2, 5, 3, 4), (4, 6)])
        (2, 5, 3, 6)
    """
    eq = parse_einsum(equation, len(shapes))
    sizes: dict[str, Dim] = {}
    ellipsis_shapes: list[Shape] = []
    for index, (term, shape) in enumerate(zip(eq.inputs, shapes)):
        letters = [label for label in term if label != ELLIPSIS]
        if ELLIPSIS in term:
            extra = len(shape) - len(letters)
            if extra < 0:
                raise OpArgumentError(
                    f"Einsum: equation {equation!r}: input {index} has shape "
                    f"{format_shape(shape)}, fewer axes than the {len(letters)} labels of its "
                    "term"
                )
            at = term.index(ELLIPSIS)
            ellipsis_shapes.append(tuple(shape[at : at + extra]))
            dims = list(shape[:at]) + list(shape[at + extra :])
        else:
            if len(shape) != len(letters):
                raise OpArgumentError(
                    f"Einsum: equation {equation!r}: input {index} has rank {len(shape)} "
                    f"(shape {format_shape(shape)}) but its term {''.join(term)!r} has "
                    f"{len(letters)} labels"
                )
            dims = list(shape)
        own: dict[str, Dim] = {}
        for label, d in zip(letters, dims):
            if label in own and _static_mismatch(own[label], d):
                raise OpArgumentError(
                    f"Einsum: equation {equation!r}: label {label!r} repeats in input {index} "
                    f"(shape {format_shape(shape)}) with different sizes {own[label]} and {d}"
                )
            own[label] = d
            if label in sizes:
                try:
                    sizes[label] = broadcast_dim(sizes[label], d)
                except ValueError:
                    raise OpArgumentError(
                        f"Einsum: equation {equation!r}: label {label!r} has size "
                        f"{sizes[label]} in one input and {d} in input {index} (shapes "
                        f"{', '.join(format_shape(s) for s in shapes)})"
                    ) from None
            else:
                sizes[label] = d
    ellipsis = broadcast("Einsum", *ellipsis_shapes) if ellipsis_shapes else ()
    if ELLIPSIS not in eq.output and len(ellipsis) > 0:
        raise OpArgumentError(
            f"Einsum: equation {equation!r}: the inputs have {len(ellipsis)} broadcast "
            "(ellipsis) axes, but the output has no '...' to hold them"
        )
    out: list[Dim] = []
    for label in eq.output:
        out.extend(ellipsis if label == ELLIPSIS else (sizes[label],))
    return tuple(out)


def _einsum_infer(
    inputs: Sequence[TensorType | None], attrs: Mapping[str, Any]
) -> list[TensorType]:
    if not inputs:
        raise OpArgumentError("Einsum: needs at least one input")
    types = [require("Einsum", f"Inputs[{i}]", t) for i, t in enumerate(inputs)]
    require_dtype("Einsum", "Inputs[0]", types[0], NUMERIC)
    require_same_dtype("Einsum", types, [f"Inputs[{i}]" for i in range(len(types))])
    shape = einsum_shape(attrs["equation"], [t.shape for t in types])
    return [TensorType(types[0].dtype, shape)]


def _einsum_kernel(*operands: np.ndarray, equation: str) -> np.ndarray:
    result = np.einsum(equation, *(_compute(x) for x in operands))
    return np.array(result, dtype=operands[0].dtype)


def _einsum_reference(*operands: np.ndarray, equation: str) -> np.ndarray:
    """Explicit loops over every label's range, multiplying in float64 / Python ints."""
    eq = parse_einsum(equation, len(operands))
    # Give the ellipsis axes their own labels (digits), broadcasting as NumPy does.
    n_ell = max(
        (x.ndim - (len(t) - 1) for t, x in zip(eq.inputs, operands) if ELLIPSIS in t), default=0
    )
    ell = tuple(str(i) for i in range(n_ell))
    terms = []
    for t, x in zip(eq.inputs, operands):
        if ELLIPSIS in t:
            k = x.ndim - (len(t) - 1)
            at = t.index(ELLIPSIS)
            t = t[:at] + ell[n_ell - k :] + t[at + 1 :]
        terms.append(t)
    out_labels = []
    for label in eq.output:
        out_labels.extend(ell if label == ELLIPSIS else (label,))
    sizes: dict[str, int] = {}
    for t, x in zip(terms, operands):
        for label, d in zip(t, x.shape):
            sizes[label] = max(sizes.get(label, 1), d) if d != 0 else 0
    labels = sorted(sizes)
    wide = np.float64 if dtypes.is_floating(operands[0].dtype) else object
    out = np.zeros(tuple(sizes[lb] for lb in out_labels), dtype=wide)
    for values in np.ndindex(*(sizes[lb] for lb in labels)):
        env = dict(zip(labels, values))
        term_product: Any = 1
        for t, x in zip(terms, operands):
            idx = tuple(0 if x.shape[i] == 1 else env[lb] for i, lb in enumerate(t))
            term_product = term_product * (float(x[idx]) if wide is np.float64 else int(x[idx]))
        out[tuple(env[lb] for lb in out_labels)] += term_product
    return out.astype(operands[0].dtype)


def _einsum_samples() -> list[Sample]:
    cases: tuple[tuple[str, tuple[tuple[int, ...], ...], np.dtype], ...] = (
        ("ij,jk->ik", ((3, 4), (4, 2)), dtypes.float32),
        ("ij,jk", ((2, 3), (3, 2)), dtypes.int32),  # implicit output
        ("bij,bjk->bik", ((2, 3, 4), (2, 4, 2)), dtypes.float64),
        ("...ij,...jk->...ik", ((2, 1, 3, 4), (5, 4, 2)), dtypes.float32),
        ("...i,i", ((2, 3, 4), (4,)), dtypes.int64),  # implicit with ellipsis
        ("ii->i", ((3, 3),), dtypes.float32),  # diagonal
        ("ii", ((3, 3),), dtypes.int32),  # trace
        ("ij->ji", ((2, 3),), dtypes.float64),
        ("i,j->ij", ((3,), (4,)), dtypes.float16),
        ("ij->", ((0, 3),), dtypes.float32),  # sum of nothing
        ("i j , j -> i", ((2, 3), (3,)), dtypes.uint8),  # spaces
        ("Ab,bC", ((2, 3), (3, 1)), dtypes.float32),  # upper case labels
        ("ij,ij->ij", ((2, 3), (1, 3)), dtypes.float32),  # size-1 label broadcast
    )
    out = []
    for equation, shapes, dt in cases:
        low = 0 if dt == dtypes.uint8 else -3
        inputs = tuple(sample_array(s, dt, low, 3) for s in shapes)
        out.append(
            Sample(
                inputs,
                {"equation": equation},
                _einsum_reference,
                name=f"{dt.name}:{equation}",
            )
        )
    return out


register(
    OpDef(
        name="Einsum",
        doc="Einstein summation over the inputs by ``equation`` (NumPy's einsum grammar: letters, "
        "'...', explicit '->' output or implicit output).",
        inputs=(Input("Inputs", variadic=True),),
        outputs=("Output",),
        attrs={"equation": Attr("str")},
        infer=_einsum_infer,
        kernel=_einsum_kernel,
        traits=frozenset({PURE}),
        samples=_einsum_samples,
        since_version=12,
        cost=_einsum_cost,
        engine_limits={
            # Where onnxruntime 1.x departs from NumPy's grammar (found by
            # tests/exec/test_engines.py against the reference executor).
            "onnxruntime": any_limit(
                EngineLimit(
                    "with spaces or upper-case labels in its equation", _spaced_or_upper_equation
                ),
                # onnxruntime 1.x dies with SIGFPE on '...ij,...kj->...ik' with an empty batch
                # (issue 10): such calls run on the NumPy plan.
                EngineLimit("with an empty input (onnxruntime crashes)", on_empty=True),
            )
        },
    )
)
