"""Linear-algebra front doors: ``kiln.matmul``, ``dot``, ``vdot``, ``inner``, ``outer``,
``tensordot``, ``einsum`` and ``kiln.norm`` (NumPy's ``np.linalg.norm``).

``matmul`` is NumPy's ufunc, so its dtypes follow the ufunc's own resolution (Python scalars weak).
The other functions convert every operand to an array first, as NumPy does, and compute in the
operands' ``result_type``. They lower onto ``MatMul`` where NumPy's semantics are matmul's, and
onto ``Einsum`` (with a generated equation) where they contract other axes; ``MatMul`` takes
neither bool nor 8/16-bit integers, so those are widened losslessly and cast back (a bool
product is the logical or of ands: a nonzero integer count).
"""

from __future__ import annotations

import operator
import string
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import dtypes
from ..errors import OpArgumentError, OpTypeError, UnsupportedOperationError
from ..ops.linalg import MATMUL_DTYPES
from ..ops.rules import normalize_axis
from ..symbolic import decide, describe
from ..tensor import Tensor, call, eager_plan
from . import reduce
from .numpy_protocol import implements
from .operands import as_tensor, cast, constant, int_vector, shape_tensor, ufunc_operands
from .reduce import normalize_axis_arg

__all__ = ["matmul", "dot", "vdot", "inner", "outer", "tensordot", "einsum", "norm"]

_EINSUM_DTYPES = frozenset(dtypes.NUMERIC_DTYPES)


# -- helpers -------------------------------------------------------------------------------


def _strong_dtype(x: Any) -> np.dtype:
    if isinstance(x, (Tensor, np.ndarray, np.generic)):
        return x.dtype
    return np.asarray(x).dtype


def _promote(name: str, *operands: Any) -> list[Tensor]:
    """The operands as tensors of their NumPy ``result_type`` (scalars count as arrays)."""
    target = dtypes.result_type(*[_strong_dtype(x) for x in operands])
    return [as_tensor(x, target) for x in operands]


def _widened(x: Tensor, supported: frozenset[np.dtype]) -> Tensor:
    if x.dtype in supported or x.dtype.kind == "c":
        return x  # complex: MatMul takes it, Einsum refuses it (a NumPy call falls back)
    if x.dtype == dtypes.bool_ or x.dtype in dtypes.SIGNED_DTYPES:
        return cast(x, dtypes.int64)
    return cast(x, dtypes.uint64)


def _narrowed(y: Tensor, dtype: np.dtype) -> Tensor:
    # Integer -> bool is "nonzero", which is what a product of bools summed with OR gives.
    return cast(y, dtype)


def _matmul(a: Tensor, b: Tensor) -> Tensor:
    dtype = a.dtype
    y = call("MatMul", _widened(a, MATMUL_DTYPES), _widened(b, MATMUL_DTYPES))
    return _narrowed(y, dtype)


def _einsum(equation: str, operands: Sequence[Tensor]) -> Tensor:
    dtype = operands[0].dtype
    y = call("Einsum", *[_widened(x, _EINSUM_DTYPES) for x in operands], equation=equation)
    return _narrowed(y, dtype)


def _multiply(a: Tensor, b: Tensor) -> Tensor:
    return call("And" if a.dtype == dtypes.bool_ else "Mul", a, b)


def _flatten(x: Tensor) -> Tensor:
    return x if x.ndim == 1 else call("Reshape", x, shape_tensor([-1]))


def _check_contraction(name: str, a: Tensor, b: Tensor, pairs: Sequence[tuple[int, int]]) -> None:
    """Contracted axes must have equal sizes (einsum alone would broadcast a size of 1); for
    symbolic sizes that is a shape guard of the capture."""
    for ia, ib in pairs:
        da, db = a.shape[ia], b.shape[ib]
        # Symbolic sizes: the call's sizes answer inside a capture and the answer becomes a
        # shape guard, so a later call whose sizes differ is refused (or re-captured).
        if not decide(da, "==", db, assume=True, what=f"{name}: contracted sizes {da} == {db}"):
            raise OpArgumentError(
                f"{name}: shapes {describe(a.shape)} and {describe(b.shape)} are not "
                f"aligned: axis {ia} of the first has size {describe(da)} but axis {ib} of the "
                f"second has size {describe(db)}"
            )


def _contract(
    name: str, a: Tensor, b: Tensor, axes_a: Sequence[int], axes_b: Sequence[int]
) -> Tensor:
    """Sum over ``axes_a`` of ``a`` paired with ``axes_b`` of ``b``; the result has the free axes
    of ``a`` then those of ``b``, in order (``np.tensordot``'s layout)."""
    _check_contraction(name, a, b, list(zip(axes_a, axes_b)))
    letters = iter(string.ascii_letters)
    la = [next(letters) for _ in range(a.ndim)]
    lb = [next(letters) for _ in range(b.ndim)]
    for ia, ib in zip(axes_a, axes_b):
        lb[ib] = la[ia]
    out = [la[i] for i in range(a.ndim) if i not in axes_a]
    out += [lb[i] for i in range(b.ndim) if i not in axes_b]
    return _einsum(f"{''.join(la)},{''.join(lb)}->{''.join(out)}", [a, b])


# -- matmul and friends --------------------------------------------------------------------


@implements(np.matmul)
@eager_plan(2)
def matmul(x1: Any, x2: Any, /, out: Any = None, *, dtype: Any = None) -> Tensor:
    """The matrix product ``x1 @ x2`` with NumPy's ``np.matmul`` semantics: batch axes
    broadcast, a 1-D operand is promoted to a matrix and the added axis removed again.

    Example:
        >>> import kiln
        >>> a = kiln.tensor([[1.0, 2.0], [3.0, 4.0]], dtype="float32")
        >>> kiln.matmul(a, kiln.tensor([1.0, 1.0], dtype="float32")).tolist()
        [3.0, 7.0]
    """
    if out is not None:
        raise TypeError("matmul(..., out=...): recorded on ufuncs only")
    (a, b), result = ufunc_operands(np.matmul, x1, x2)
    if dtype is not None:
        result = dtypes.as_dtype(dtype)
        a, b = cast(a, result), cast(b, result)
    return _matmul(a, b)


@implements(np.dot)
@eager_plan(2)
def dot(a: Any, b: Any, out: Any = None) -> Tensor:
    """NumPy's ``np.dot``: the product of a scalar, the inner product of vectors, the matrix
    product of matrices, and for N-D operands the sum over the last axis of ``a`` and the
    second-to-last of ``b``.

    Example:
        >>> import kiln
        >>> kiln.dot(kiln.tensor([1, 2, 3]), kiln.tensor([4, 5, 6])).item()
        32
    """
    if out is not None:
        raise TypeError("dot(..., out=...): recorded on ufuncs only")
    x, y = _promote("dot", a, b)
    if x.ndim == 0 or y.ndim == 0:
        return _multiply(x, y)
    _check_contraction("dot", x, y, [(-1, -2 if y.ndim >= 2 else 0)])
    # kiln.Dot is np.dot itself on the NumPy plan: matrices go to BLAS's gemm/gemv, which skip
    # a zero operand (inf * 0 is never computed: np.dot gives 0 where np.matmul's own loop
    # for small shapes gives nan, fuzz 32:145); more axes, a dot product per element.
    return call("kiln.Dot", x, y)


@implements(np.vdot)
@eager_plan(2)
def vdot(a: Any, b: Any, /) -> Tensor:
    """The dot product of the flattened operands (NumPy's ``np.vdot`` on real numbers).

    Example:
        >>> import kiln
        >>> kiln.vdot(kiln.tensor([[1, 2], [3, 4]]), kiln.tensor([[1, 0], [0, 1]])).item()
        5
    """
    x, y = _promote("vdot", a, b)
    fx, fy = _flatten(x), _flatten(y)
    _check_contraction("vdot", fx, fy, [(0, 0)])
    return _matmul(fx, fy)


@implements(np.inner)
@eager_plan(2)
def inner(a: Any, b: Any, /) -> Tensor:
    """The sum over the last axes of ``a`` and ``b`` (NumPy's ``np.inner``); the result has
    shape ``a.shape[:-1] + b.shape[:-1]``; a scalar operand multiplies.

    Example:
        >>> import kiln
        >>> kiln.inner(kiln.tensor([[1, 2], [3, 4]]), kiln.tensor([1, 1])).tolist()
        [3, 7]
    """
    x, y = _promote("inner", a, b)
    if x.ndim == 0 or y.ndim == 0:
        return _multiply(x, y)
    _check_contraction("inner", x, y, [(x.ndim - 1, y.ndim - 1)])
    if y.ndim >= 2:  # np.inner(a, b) is np.dot(a, swapaxes(b, -1, -2))
        perm = [*range(y.ndim - 2), y.ndim - 1, y.ndim - 2]
        y = call("Transpose", y, perm=perm)
    return call("kiln.Dot", x, y)  # np.dot(a, swapaxes(b)), as NumPy computes it


@implements(np.outer)
@eager_plan(2)
def outer(a: Any, b: Any, out: Any = None) -> Tensor:
    """The outer product of the flattened operands: ``result[i, j] = a[i] * b[j]``.

    Example:
        >>> import kiln
        >>> kiln.outer(kiln.tensor([1, 2]), kiln.tensor([1, 10])).tolist()
        [[1, 10], [2, 20]]
    """
    if out is not None:
        raise TypeError("outer(..., out=...): recorded on ufuncs only")
    x, y = _promote("outer", a, b)
    # NumPy's definition: multiply(a.ravel()[:, None], b.ravel()[None, :]) (an einsum adds
    # each product to a zero: -0.0 became +0.0).
    column = call("Reshape", _flatten(x), shape_tensor([-1, 1]))
    row = call("Reshape", _flatten(y), shape_tensor([1, -1]))
    return _multiply(column, row)


def _axis_list(name: str, axes: Any, ndim: int) -> list[int]:
    items = list(axes) if isinstance(axes, (list, tuple)) else [axes]
    result = []
    for item in items:
        ax = operator.index(item)
        result.append(normalize_axis(name, ax, ndim, scalar=False, numpy_wording=True))
    if len(set(result)) != len(result):
        raise OpArgumentError(f"{name}: repeated axis in {axes}")
    return result


@implements(np.tensordot)
def tensordot(a: Any, b: Any, axes: Any = 2) -> Tensor:
    """NumPy's ``np.tensordot``: sum over the last ``axes`` axes of ``a`` and the first ``axes``
    of ``b``, or over the axis lists ``axes = (axes_a, axes_b)``.

    Example:
        >>> import kiln
        >>> kiln.tensordot(kiln.tensor([[1, 2], [3, 4]]), kiln.tensor([[1, 0], [0, 1]])).item()
        5
    """
    x, y = _promote("tensordot", a, b)
    if isinstance(axes, (list, tuple)):
        if len(axes) != 2:
            raise OpArgumentError(
                f"tensordot: axes must be an int or a pair of axis lists, got {axes!r}"
            )
        axes_a = _axis_list("tensordot", axes[0], x.ndim)
        axes_b = _axis_list("tensordot", axes[1], y.ndim)
        if len(axes_a) != len(axes_b):
            raise OpArgumentError(
                f"tensordot: axes {axes!r} pair {len(axes_a)} axes of a with {len(axes_b)} of b"
            )
    else:
        n = operator.index(axes)
        if n < 0 or n > x.ndim or n > y.ndim:
            raise OpArgumentError(
                f"tensordot: axes={n} does not fit operands of ranks {x.ndim} and {y.ndim}"
            )
        axes_a = list(range(x.ndim - n, x.ndim))
        axes_b = list(range(n))
    _check_contraction("tensordot", x, y, list(zip(axes_a, axes_b)))
    if len(set(axes_a)) != len(axes_a) or len(set(axes_b)) != len(axes_b):
        return _contract("tensordot", x, y, axes_a, axes_b)  # (raises NumPy's error)
    # NumPy's own algorithm: both operands transposed and flattened to matrices, one matrix
    # product (the BLAS call NumPy makes, so the same sums: an einsum orders them otherwise,
    # and with infinities a BLAS fused multiply-add and a plain sum disagree on inf vs nan).
    free_a = [k for k in range(x.ndim) if k not in axes_a]
    free_b = [k for k in range(y.ndim) if k not in axes_b]
    inner = _size_product([x.shape[k] for k in axes_a])
    left = _matrix(x, free_a + axes_a, (_size_product([x.shape[k] for k in free_a]), inner))
    right = _matrix(y, axes_b + free_b, (inner, _size_product([y.shape[k] for k in free_b])))
    shape = [x.shape[k] for k in free_a] + [y.shape[k] for k in free_b]
    return call("kiln.Dot", left, right).reshape(tuple(shape))  # NumPy's np.dot (see dot)


def _size_product(sizes: Sequence[Any]) -> Any:
    total: Any = 1
    for d in sizes:
        total = total * d
    return total


def _matrix(x: Tensor, order: list[int], shape: tuple[Any, Any]) -> Tensor:
    """``x.transpose(order).reshape(shape)``, as NumPy's tensordot builds its operands."""
    if order != list(range(x.ndim)):
        x = x.transpose(tuple(order))
    return x.reshape(shape)


@implements(np.einsum)
def einsum(
    subscripts: Any,
    *operands: Any,
    out: Any = None,
    dtype: Any = None,
    order: str = "K",
    casting: str = "safe",
    optimize: Any = False,
) -> Tensor:
    """Einstein summation (NumPy's ``np.einsum``, string form): ``"ij,jk->ik"``, implicit output
    (``"ij,jk"``), ellipsis (``"...ij,...jk"``). Operands are promoted to a common dtype.

    Example:
        >>> import kiln
        >>> a = kiln.tensor([[1, 2], [3, 4]])
        >>> kiln.einsum("ii", a).item(), kiln.einsum("ij->j", a).tolist()
        (5, [4, 6])
    """
    if out is not None:
        raise TypeError("einsum(..., out=...): recorded on ufuncs only")
    if not isinstance(subscripts, str):
        raise UnsupportedOperationError(
            "einsum: only the string form einsum('ij,jk->ik', a, b) is supported by kiln, not "
            "the interleaved operand/sublist form"
        )
    if not operands:
        raise OpArgumentError("einsum: needs at least one operand")
    tensors = _promote("einsum", *operands)
    if dtype is not None:
        tensors = [cast(t, dtypes.as_dtype(dtype)) for t in tensors]
    return _einsum(subscripts, tensors)


@implements(np.linalg.norm)
def norm(x: Any, ord: Any = None, axis: Any = None, keepdims: bool = False) -> Tensor:  # noqa: A002
    """NumPy's ``np.linalg.norm``: ``ord=None`` (2-norm of vectors, Frobenius norm of matrices
    and flattened arrays); on vectors ``ord`` = ``inf``, ``-inf``, 0, 1, 2 or any other number
    (``sum(abs(x)**ord)**(1/ord)``); on matrices ``'fro'``, 1, -1, ``inf``, ``-inf``. Integers
    give float64. The matrix orders that need singular values (2, -2, ``'nuc'``) are not
    implemented (a NumPy call falls back).

    Example:
        >>> import kiln
        >>> kiln.norm(kiln.tensor([3.0, 4.0])).item(), kiln.norm(kiln.tensor([3.0, -4.0]), 1).item()
        (5.0, 7.0)
    """
    t = as_tensor(x)
    if dtypes.is_complex(t.dtype):
        raise OpTypeError(f"norm: {t.dtype} input is not captured (a NumPy call falls back)")
    if not dtypes.is_floating(t.dtype):
        t = cast(t, dtypes.float64)
    axes = normalize_axis_arg("norm", axis, t.ndim)
    reduced = t.ndim if axes is None else len(axes)
    if ord is None or (ord == "fro" and reduced == 2) or (ord == 2 and reduced == 1):
        return _reduce_axes("ReduceL2", t, axes, keepdims)
    if reduced == 1 and not isinstance(ord, str):
        return _vector_norm(t, float(ord), axes, keepdims)
    if reduced == 2 and not isinstance(ord, str) and ord in (1, -1, np.inf, -np.inf):
        order = (0, 1) if axis is None else tuple(_matrix_axis(a, t.ndim) for a in axis)
        return _matrix_norm(t, float(ord), order, keepdims)
    raise UnsupportedOperationError(
        f"norm: ord={ord!r} over {reduced} axes is not supported by kiln; supported are "
        "ord=None, 'fro', 1, -1, inf, -inf (matrices) and any number (vectors)"
    )


def _reduce_axes(op: str, t: Tensor, axes: tuple[int, ...] | None, keepdims: bool) -> Tensor:
    if axes is None:
        return call(op, t, keepdims=int(keepdims))
    axes_t = int_vector(tuple(int(a) for a in axes))
    return call(op, t, axes_t, keepdims=int(keepdims), noop_with_empty_axes=int(not axes))


def _vector_norm(t: Tensor, ord: float, axes: tuple[int, ...] | None, keepdims: bool) -> Tensor:
    """NumPy's vector norms other than 2: max/min of ``abs``, the count of nonzeros, and
    ``sum(abs(x)**ord)**(1/ord)`` (computed as NumPy does, in the input's float dtype)."""
    magnitude = call("Abs", t)
    if ord == np.inf:  # (initial=0, as NumPy: the norm of nothing is 0)
        return reduce.max(magnitude, axis=axes, keepdims=keepdims, initial=0)
    if ord == -np.inf:
        return reduce.min(magnitude, axis=axes, keepdims=keepdims)
    if ord == 0:
        nonzero = cast(call("Not", call("Equal", t, constant(np.zeros((), t.dtype)))), t.dtype)
        return reduce.sum(nonzero, axis=axes, keepdims=keepdims)
    if ord == 1:
        return _reduce_axes("ReduceL1", t, axes, keepdims)
    powered = call("Pow", magnitude, constant(np.asarray(ord, dtype=t.dtype)))
    total = reduce.sum(powered, axis=axes, keepdims=keepdims)
    root = constant(np.reciprocal(np.asarray(ord, dtype=t.dtype)))
    # NumPy's ``ret **= 1/ord``: on the scalar of a whole reduction, the scalar's power
    scalar = total.ndim == 0 and total.dtype in (dtypes.float16, dtypes.float32, dtypes.float64)
    return call("kiln.ScalarPow" if scalar else "Pow", total, root)


def _matrix_axis(axis: Any, ndim: int) -> int:
    return normalize_axis("norm", operator.index(axis), ndim, scalar=False, numpy_wording=True)


def _matrix_norm(t: Tensor, ord: float, axes: tuple[int, ...], keepdims: bool) -> Tensor:
    """NumPy's matrix norms 1, -1 (extreme column sum of ``abs``) and inf, -inf (row sum)."""
    row_axis, col_axis = axes
    if abs(ord) == np.inf:
        row_axis, col_axis = col_axis, row_axis
    sums = reduce.sum(call("Abs", t), axis=row_axis, keepdims=True)
    if ord > 0:  # (initial=0, as NumPy: the norm of nothing is 0)
        result = reduce.max(sums, axis=col_axis, keepdims=True, initial=0)
    else:
        result = reduce.min(sums, axis=col_axis, keepdims=True)
    if keepdims:
        return result
    return call("Squeeze", result, int_vector(tuple(sorted(int(a) for a in axes))))
