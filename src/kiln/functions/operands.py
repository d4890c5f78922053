"""Turning a front door's arguments into operator inputs, with NumPy 2 promotion.

A front-door function (``kiln.add``, ``Tensor.__mul__``, ``np.add`` on a tensor) accepts tensors,
NumPy arrays and Python scalars. Its NumPy counterpart decides the dtypes: the ufunc's own type
resolution (``ufunc.resolve_dtypes``, with Python scalars weak as NEP 50 says) names the dtype
each operand is computed in. Operands are then cast to those dtypes (a recorded ``Cast``), and
the ONNX operator, which wants matching dtypes, sees exactly what NumPy would compute with.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import dtypes
from ..errors import CaptureError, OpTypeError
from ..ops.dispatch import current_handler
from ..symbolic import Dim, SymDim
from ..tensor import Tensor, call

__all__ = [
    "as_tensor",
    "is_scalar",
    "cast",
    "ufunc_operands",
    "same_dtype_operands",
    "constant",
    "shape_tensor",
    "size_scalar",
    "int_vector",
    "SHARED_CONSTANT_IDS",
]

_PY_SCALARS = (bool, int, float, complex)

# NumPy's own np.asarray: while a capture runs, the numpy module's is routed
# (kiln.capture.numpy_creation), and kiln's calls would each pay the routing's checks.
_np_asarray = getattr(np.asarray, "__kiln_original__", np.asarray)

# int_vector's tensors by contents (emptied when full), and their ids (emptied with them, so
# an id in the set is one of the tensors held: SHARED_CONSTANT_IDS, read by the tracer, which
# shares their graph constants by contents as it does for the small writable arrays it copies).
_INT_VECTORS: dict[tuple[int, ...], Tensor] = {}
SHARED_CONSTANT_IDS: set[int] = set()
_INT_VECTOR_LIMIT = 4096


def int_vector(values: tuple[int, ...]) -> Tensor:
    """A constant 1-D int64 tensor of ``values`` (a tuple of Python ints), for an operator's
    shape-like input (a slice's bounds, axes, a target shape): one shared tensor per contents,
    over a read-only array, so an unrolled loop that indexes with the same bounds again builds
    nothing and a tracer finds the tensor's graph constant by identity. Never hand one to
    the user: its array cannot be written.

    Example:
        >>> int_vector((0, 2)).tolist(), int_vector((0, 2)) is int_vector((0, 2))
        ([0, 2], True)
    """
    t = _INT_VECTORS.get(values)
    if t is None:
        array = _np_asarray(values, dtype=np.int64).reshape(len(values))
        array.flags.writeable = False
        t = Tensor._wrap(array)
        if len(_INT_VECTORS) >= _INT_VECTOR_LIMIT:
            _INT_VECTORS.clear()
            SHARED_CONSTANT_IDS.clear()
        _INT_VECTORS[values] = t
        SHARED_CONSTANT_IDS.add(id(t))
    return t


def new_array(x: Tensor) -> Tensor:
    """A new array with ``x``'s contents: NumPy's result of a value function that changes
    nothing (``np.trunc`` of integers, ``np.clip(x)``, ``np.roll(x, 0)``). Never ``x`` itself:
    a compiled function hands a result that *is* an input back as the caller's own array, and
    NumPy's result here is a new one."""
    return call("Identity", x)


def new_view(x: Tensor) -> Tensor:
    """A new view of the whole of ``x``: NumPy's result of a view function that moves nothing
    (``x[...]``, ``x.transpose()`` in order, ``np.squeeze`` of no axis). A write through it
    reaches ``x`` as through NumPy's view, but it is another object than ``x``."""
    return call("Transpose", x, perm=tuple(range(x.ndim)))


def is_scalar(x: Any) -> bool:
    """True for a Python ``bool``/``int``/``float``/``complex`` (weak under NEP 50)."""
    return isinstance(x, _PY_SCALARS)


def constant(value: Any, dtype: np.dtype | None = None) -> Tensor:
    """A tensor over ``value`` (a tracer turns it into a graph constant).

    Raises ``OverflowError`` as NumPy 2 does when a Python int does not fit ``dtype``.
    """
    if type(value) is not float and isinstance(value, float) and hasattr(value, "__kiln_tensor__"):
        # [issue 11, H5] a float argument kiln.compile made a 0-d graph input: a weak scalar
        # carrying its recording tensor (kiln.capture.scalars), used instead of a constant
        traced: Tensor = value.__kiln_tensor__
        return traced if dtype is None or traced.dtype == dtype else cast(traced, dtype)
    array = _np_asarray(value, dtype=dtype)
    if array.dtype not in dtypes.ALL_DTYPES:
        raise OpTypeError(f"kiln does not support dtype {array.dtype} (from {value!r})")
    return Tensor._wrap(array)


def as_tensor(x: Any, dtype: np.dtype | None = None) -> Tensor:
    """``x`` as a tensor: tensors pass through, arrays and scalars are wrapped.

    With ``dtype`` the result has that dtype (a recorded ``Cast`` for a tensor).
    """
    if isinstance(x, Tensor):
        return x if dtype is None or x.dtype == dtype else cast(x, dtype)
    if isinstance(x, (np.ndarray, np.generic)) or is_scalar(x):
        return constant(x, dtype)
    if isinstance(x, SymDim):
        return size_scalar(x, dtype)
    if isinstance(x, (list, tuple)):
        return constant(
            np.asarray([np.asarray(as_tensor(v)) if isinstance(v, Tensor) else v for v in x]), dtype
        )
    raise TypeError(f"expected a tensor, an array or a Python scalar, got {type(x).__name__}")


def cast(x: Tensor, dtype: np.dtype, *, drop_imaginary: bool = False) -> Tensor:
    """``x`` converted to ``dtype`` through the ``Cast`` operator (no-op when equal).

    A complex ``x`` becomes a real dtype only with ``drop_imaginary`` (``astype``, which
    warns as NumPy): NumPy never drops an imaginary part on its own, so a lowering that would
    (an ordering, an integer accumulator) raises ``OpTypeError`` instead, and a NumPy call
    falls back.
    """
    dtype = dtypes.as_dtype(dtype)
    if x.dtype == dtype:
        return x
    if x.dtype.kind == "c" and dtype.kind not in "cb" and not drop_imaginary:
        raise OpTypeError(
            f"a {x.dtype} value cannot become {dtype} here: that would drop its imaginary "
            "part (use np.real, np.abs or astype)"
        )
    return call("Cast", x, to=dtype_code(dtype))


def dtype_code(dtype: np.dtype) -> int:
    """The ONNX ``TensorProto`` data type number of ``dtype`` (Cast's ``to`` attribute)."""
    from ..dtypes import onnx_dtype_code

    return onnx_dtype_code(dtype)


def _dtype_of(x: Any) -> Any:
    if isinstance(x, Tensor):
        return x.dtype
    if isinstance(x, (np.ndarray, np.generic)):
        return x.dtype
    if isinstance(x, bool):
        return np.dtype(np.bool_)  # NEP 50: a Python bool acts as np.bool_
    if isinstance(x, int):
        return int
    if isinstance(x, float):
        return float
    if isinstance(x, complex):
        return complex  # weak: float32 * 1j is complex64 (NEP 50)
    if isinstance(x, SymDim):
        return int  # a size is a Python int: weak, as NEP 50 says
    raise TypeError(f"expected a tensor, an array or a Python scalar, got {type(x).__name__}")


def ufunc_operands(
    ufunc: np.ufunc, *operands: Any, name: str | None = None
) -> tuple[list[Tensor], np.dtype]:
    """The operands cast to the dtypes NumPy's ``ufunc`` computes in, and its output dtype.

    Example:
        >>> import kiln
        >>> (a, b), out = ufunc_operands(np.add, kiln.tensor([1, 2], dtype="int8"), 2.5)
        >>> a.dtype, b.dtype, out
        (dtype('float64'), dtype('float64'), dtype('float64'))
    """
    kinds = tuple(
        [
            x._data.dtype if type(x) is Tensor and x._data is not None else _operand_kind(x)
            for x in operands
        ]
    )
    key = (ufunc, kinds)
    hit = _resolved.get(key)
    if hit is None:
        hit = _resolved[key] = _resolve_loop(ufunc, kinds, name)
    loop, out, convert = hit
    if convert is None:
        return list(operands), out  # tensors already of their loop dtypes: the common case
    return [x if f is None else f(x, dt) for x, f, dt in zip(operands, convert, loop)], out


_ARRAY = "array"


def _operand_kind(x: Any) -> Any:
    """What the ufunc resolution cache keys an operand by: a tensor's dtype; ``(_ARRAY,
    kind)`` for a NumPy array or scalar, a Python bool or a symbolic size, which
    :func:`as_tensor` converts; the Python type of a weak Python scalar."""
    if isinstance(x, Tensor):
        return x.dtype
    kind = _dtype_of(x)
    if isinstance(kind, np.dtype) or isinstance(x, SymDim):
        return (_ARRAY, kind)  # converted by as_tensor (a symbolic size: recorded)
    return kind


# (ufunc, operand kinds) -> (the dtypes it computes in, its output dtype, how each operand
# becomes its operator input: None for a tensor of its loop dtype already, else ``cast``,
# ``constant`` or ``as_tensor``; the whole tuple None when no operand needs anything). The kinds
# are dtypes and Python scalar types, so the table stays small; resolving is pure, so it serves
# the eager path and captures alike.
_Converter = Callable[[Any, np.dtype], Tensor]
_resolved: dict[tuple[Any, ...], tuple[tuple[np.dtype, ...], np.dtype, Any]] = {}


def _resolve_loop(
    ufunc: np.ufunc, kinds: tuple[Any, ...], name: str | None
) -> tuple[tuple[np.dtype, ...], np.dtype, tuple[_Converter | None, ...] | None]:
    plain = tuple(k[1] if type(k) is tuple else k for k in kinds)
    try:
        resolved = ufunc.resolve_dtypes(plain + (None,) * ufunc.nout)
    except (TypeError, np.exceptions.DTypePromotionError) as exc:
        shown = ", ".join(getattr(k, "__name__", str(k)) for k in plain)
        raise OpTypeError(
            f"{name or ufunc.__name__}: no implementation for operand dtypes ({shown}): {exc}"
        ) from None
    loop = tuple(dtypes.as_dtype(dt) for dt in resolved[: len(kinds)])
    convert = tuple(_converter(k, dt) for k, dt in zip(kinds, loop))
    return loop, dtypes.as_dtype(resolved[len(kinds)]), None if not any(convert) else convert


def _converter(kind: Any, dtype: np.dtype) -> _Converter | None:
    # Only a tensor's kind is a bare dtype (``np.dtype == int`` holds for int64: never compare
    # a Python type with a dtype).
    if isinstance(kind, np.dtype):
        return None if kind == dtype else cast
    if kind in (int, float, complex):
        return constant  # a weak Python scalar (``OverflowError`` where it does not fit)
    return as_tensor


def same_dtype_operands(*operands: Any, name: str) -> list[Tensor]:
    """Operands promoted to their NumPy ``result_type`` (for non-ufunc functions such as
    ``where``, ``concatenate``, ``clip``)."""
    present = [x for x in operands if x is not None]
    target = dtypes.result_type(*[_weak_or_dtype(x) for x in present])
    return [as_tensor(x, target) for x in present]


def _weak_or_dtype(x: Any) -> Any:
    if is_scalar(x):
        return x
    if isinstance(x, SymDim):
        return 0  # a weak Python int
    if isinstance(x, (list, tuple)):
        return np.asarray(x).dtype
    return _dtype_of(x)


def size_scalar(d: SymDim, dtype: np.dtype | None = None) -> Tensor:
    """A symbolic size used as a number (``x / x.shape[0]``): a recorded 0-d int64 tensor
    computed from the graph inputs' shapes (``Shape`` -> arithmetic), cast to ``dtype``."""
    handler = current_handler()
    if handler is None:
        raise CaptureError(f"the symbolic size {d} can only be used inside a trace")
    flat = handler.size_tensor(d)
    scalar = call("Reshape", flat, constant(np.zeros(0, dtype=np.int64)))
    return scalar if dtype is None else cast(scalar, dtype)


def shape_tensor(dims: Sequence[Dim | Tensor]) -> Tensor:
    """A 1-D int64 tensor of sizes, for the shape inputs of Reshape, Expand, Tile, Slice, ...

    Static sizes become a constant. A symbolic size (a dynamic axis inside a trace) becomes the
    recorded computation of that size from the graph's inputs (``Shape`` -> ``Gather`` -> the
    arithmetic), so the graph stays valid for every size. A 0-d or 1-element integer tensor is
    taken as a size too (``x.reshape(n, -1)`` with ``n`` a tensor).

    Example:
        >>> shape_tensor([2, 3]).tolist()
        [2, 3]
    """
    if all(isinstance(d, (int, np.integer)) for d in dims):
        return int_vector(tuple([int(d) for d in dims]))
    parts: list[Tensor] = []
    for d in dims:
        if isinstance(d, SymDim):
            handler = current_handler()
            if handler is None:
                raise CaptureError(f"the symbolic size {d} can only be used inside a trace")
            parts.append(handler.size_tensor(d))
        elif isinstance(d, Tensor):
            parts.append(call("Reshape", cast(d, np.dtype(np.int64)), constant(np.asarray([1]))))
        else:
            parts.append(constant(np.asarray([int(d)], dtype=np.int64)))
    return call("Concat", *parts, axis=0)
