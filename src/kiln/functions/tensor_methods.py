"""``Tensor``'s NumPy-style methods and operators, attached to :class:`kiln.Tensor` from here.

``kiln.tensor`` sits below the functions layer, so ``Tensor`` cannot call ``kiln.sum`` itself. As
jax's ``jax/_src/numpy/array_methods.py`` does for its ``Array``, this module holds the methods
that lower onto kiln functions, and :func:`set_tensor_methods`, which ``kiln.functions`` calls
when it is imported (``import kiln`` imports it, so every tensor a user sees has them), puts them
on the class. They are real functions on ``Tensor``: ``help(kiln.Tensor)`` lists them, and
``kiln/tensor.py`` declares their signatures for type checkers.

A binary operator calls the kiln function (``t + u`` is ``kiln.add(t, u)``; a complex operand,
which kiln has no operators for yet, goes to NumPy through the ufunc protocol) and its reflected
form swaps the operands; a method with NumPy's method signature (``t.reshape(2, -1)``) adapts its
arguments and calls the function.

Example:
    >>> import kiln
    >>> t = kiln.tensor([[1.0, 2.0], [3.0, 4.0]])
    >>> (1 - t.T).sum(axis=0).tolist()
    [-1.0, -5.0]
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import dtypes
from ..tensor import Tensor, call, eager_plan
from . import complex, elementwise, inplace, linalg, reduce, shape
from .numpy_protocol import array_function, array_ufunc, implements
from .operands import as_tensor

if TYPE_CHECKING:
    from ..dtypes import DTypeLike

__all__ = ["set_tensor_methods"]

# -- operators ------------------------------------------------------------------------------

# name: (function, symbol). Tensor.__<name>__ is the function; Tensor.__r<name>__ swaps operands.
_BINARY_OPERATORS: dict[str, tuple[Callable[[Any, Any], Tensor], str]] = {
    "add": (elementwise.add, "+"),
    "sub": (elementwise.subtract, "-"),
    "mul": (elementwise.multiply, "*"),
    "truediv": (elementwise.divide, "/"),
    "floordiv": (elementwise.floor_divide, "//"),
    "mod": (elementwise.remainder, "%"),
    "pow": (elementwise.power_operator, "**"),  # ndarray.__pow__: ** 2 is np.square
    "matmul": (linalg.matmul, "@"),
    "and": (elementwise.bitwise_and, "&"),
    "or": (elementwise.bitwise_or, "|"),
    "xor": (elementwise.bitwise_xor, "^"),
}

_UFUNCS: dict[str, np.ufunc] = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "truediv": np.true_divide,
    "floordiv": np.floor_divide,
    "mod": np.remainder,
    "pow": np.power,
    "matmul": np.matmul,
    "and": np.bitwise_and,
    "or": np.bitwise_or,
    "xor": np.bitwise_xor,
}

# Comparisons (elementwise, as NumPy's: ``t == u`` is a bool tensor), unary operators, indexing.
_OPERATORS: dict[str, Callable[..., Tensor]] = {
    "__eq__": elementwise.equal,
    "__ne__": elementwise.not_equal,
    "__lt__": elementwise.less,
    "__le__": elementwise.less_equal,
    "__gt__": elementwise.greater,
    "__ge__": elementwise.greater_equal,
    "__invert__": elementwise.invert,
    "__neg__": elementwise.negative,
    "__pos__": elementwise.positive,
    "__abs__": elementwise.abs,
    "__getitem__": shape.getitem,
}


def _complex(other: Any) -> bool:
    """Whether ``other`` is complex (NumPy's ufunc then decides, through the protocol: kiln's
    implementation where it has one, else its fallback)."""
    return type(other) is complex or (
        isinstance(other, (np.ndarray, np.generic)) and other.dtype.kind == "c"
    )


def _forward(name: str, fn: Callable[[Any, Any], Tensor]) -> Callable[..., Tensor]:
    """``Tensor.__<name>__``: ``fn(self, other)``; with a complex operand, NumPy's ufunc
    through the protocol (its fallback computes it; a capture serves the call eagerly)."""
    ufunc = _UFUNCS[name]

    def method(self: Tensor, other: Any) -> Tensor:
        if type(other) is not Tensor and _complex(other):
            return ufunc(self, other)  # type: ignore[no-any-return]
        return fn(self, other)

    method = eager_plan(2, binary=True)(method)
    method.__name__ = f"__{name}__"
    method.__qualname__ = f"Tensor.__{name}__"
    method.__doc__ = fn.__doc__
    return method


def _reflected(name: str, fn: Callable[[Any, Any], Tensor], symbol: str) -> Callable[..., Tensor]:
    """``Tensor.__r<name>__``: ``other <symbol> self``, i.e. ``fn(other, self)``."""
    ufunc = _UFUNCS[name]

    def method(self: Tensor, other: Any) -> Tensor:
        if type(other) is not Tensor and _complex(other):
            return ufunc(other, self)  # type: ignore[no-any-return]
        return fn(other, self)

    method = eager_plan(2, binary=True)(method)
    method.__name__ = f"__r{name}__"
    method.__qualname__ = f"Tensor.__r{name}__"
    method.__doc__ = f"``other {symbol} self``: :func:`kiln.{fn.__name__}` (other, self)."
    return method


# -- NumPy protocols ------------------------------------------------------------------------


def _array_ufunc(self: Tensor, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
    """NumPy's ufunc protocol: ``np.add(t, 1)`` runs :func:`kiln.add` (see ``numpy_protocol``)."""
    return array_ufunc(ufunc, method, inputs, kwargs)


def _array_function(self: Tensor, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
    """NumPy's function protocol: ``np.concatenate([t, u])`` runs :func:`kiln.concatenate`."""
    return array_function(func, types, args, kwargs)


# -- methods (NumPy's names and signatures) ------------------------------------------------


def _transpose_property(self: Tensor) -> Tensor:
    """The tensor with its axes reversed (``np.ndarray.T``)."""
    return shape.transpose(self)


def _matrix_transpose_property(self: Tensor) -> Tensor:
    """The tensor with its last two axes swapped (``np.ndarray.mT``)."""
    return shape.matrix_transpose(self)


def _astype(
    self: Tensor,
    dtype: DTypeLike,
    order: str = "K",
    casting: str = "unsafe",
    subok: bool = True,
    copy: bool = True,
) -> Tensor:
    """This tensor converted to ``dtype`` (``ndarray.astype``: a new array unless
    ``copy=False`` and it already has ``dtype``; ``casting`` is checked as NumPy does)."""
    if casting != "unsafe" and not np.can_cast(self.dtype, dtypes.as_dtype(dtype), casting):
        raise TypeError(
            f"Cannot cast array data from {self.dtype!r} to {dtypes.as_dtype(dtype)!r} "
            f"according to the rule {casting!r}"
        )
    return elementwise.astype(self, dtype, copy=copy)


_ORDERS = frozenset({"C", "F", "A", "K"})


@implements(np.copy)
def copy(a: Any, order: str = "K", subok: bool = False) -> Tensor:
    """A copy of ``a`` (``np.copy``, ``ndarray.copy``): a new tensor with the same values.

    ``order='C'`` (``ndarray.copy()``'s default) is a new C-ordered array, as NumPy's: a
    ``kiln.Contiguous(order='C')``, which the optimizer keeps (a later float sum adds in the
    copy's memory order, and a transpose's C copy adds otherwise than the transpose). Any
    other ``order`` ('F', 'A', 'K': the input's own layout for the dense inputs kiln's
    plans make) is an ``Identity``, whose result never shares memory with its input.

    Example:
        >>> import kiln
        >>> t = kiln.tensor([1, 2])
        >>> c = t.copy()
        >>> c is t, c.tolist()
        (False, [1, 2])
    """
    if not (order is None or (isinstance(order, str) and order.upper() in _ORDERS)):
        raise ValueError(f"order must be one of 'C', 'F', 'A', or 'K' (got {order!r})")
    if isinstance(order, str) and order.upper() == "C":
        return call("kiln.Contiguous", as_tensor(a), order="C")
    return call("Identity", as_tensor(a))


def _copy(self: Tensor, order: str = "C") -> Tensor:
    """A copy of this tensor (``ndarray.copy``): :func:`copy`."""
    return copy(self, order)


def _reshape(self: Tensor, *dims: Any) -> Tensor:
    """The same values in a new shape; one entry may be -1. ``t.reshape(2, -1)`` or
    ``t.reshape((2, -1))``."""
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
        dims = tuple(dims[0])
    return shape.reshape(self, dims)


def _transpose(self: Tensor, *axes: Any) -> Tensor:
    """Axes permuted (reversed when none are given)."""
    if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
        axes = tuple(axes[0])
    return shape.transpose(self, axes or None)


def _squeeze(self: Tensor, axis: int | Sequence[int] | None = None) -> Tensor:
    """Size-1 axes removed (all of them, or those in ``axis``): :func:`kiln.squeeze`."""
    return shape.squeeze(self, axis)


def _flatten(self: Tensor, order: str = "C") -> Tensor:
    """A 1-D copy of the values (``ndarray.flatten``: always a new array)."""
    return copy(shape.reshape(self, (-1,)), order)


def _ravel(self: Tensor, order: str = "C") -> Tensor:
    """The values as a 1-D tensor (``ndarray.ravel``: a view where NumPy gives one)."""
    return shape.ravel(self, order)


def _copy_protocol(self: Tensor) -> Tensor:
    """``copy.copy(t)``: a new tensor with the same values (as ``ndarray.__copy__``)."""
    return copy(self)


def _deepcopy_protocol(self: Tensor, memo: dict) -> Tensor:
    """``copy.deepcopy(t)``: a new tensor with the same values."""
    return copy(self)


def _sum(
    self: Tensor,
    axis: Any = None,
    dtype: Any = None,
    out: Any = None,
    keepdims: bool = False,
    **options: Any,
) -> Tensor:
    """:func:`kiln.sum` of this tensor (``initial=`` and ``where=`` as ``ndarray.sum``)."""
    return reduce.sum(self, axis=axis, dtype=dtype, out=out, keepdims=keepdims, **options)


def _mean(
    self: Tensor,
    axis: Any = None,
    dtype: Any = None,
    out: Any = None,
    keepdims: bool = False,
    **options: Any,
) -> Tensor:
    """:func:`kiln.mean` of this tensor (``where=`` as ``ndarray.mean``)."""
    return reduce.mean(self, axis=axis, dtype=dtype, out=out, keepdims=keepdims, **options)


def _max(
    self: Tensor, axis: Any = None, out: Any = None, keepdims: bool = False, **options: Any
) -> Tensor:
    """:func:`kiln.max` of this tensor (``initial=`` and ``where=`` as ``ndarray.max``)."""
    return reduce.max(self, axis=axis, out=out, keepdims=keepdims, **options)


def _min(
    self: Tensor, axis: Any = None, out: Any = None, keepdims: bool = False, **options: Any
) -> Tensor:
    """:func:`kiln.min` of this tensor (``initial=`` and ``where=`` as ``ndarray.min``)."""
    return reduce.min(self, axis=axis, out=out, keepdims=keepdims, **options)


def _prod(
    self: Tensor,
    axis: Any = None,
    dtype: Any = None,
    out: Any = None,
    keepdims: bool = False,
    **options: Any,
) -> Tensor:
    """:func:`kiln.prod` of this tensor (``initial=`` and ``where=`` as ``ndarray.prod``)."""
    return reduce.prod(self, axis=axis, dtype=dtype, out=out, keepdims=keepdims, **options)


def _argmax(self: Tensor, axis: int | None = None, keepdims: bool = False) -> Tensor:
    """:func:`kiln.argmax` of this tensor."""
    return reduce.argmax(self, axis=axis, keepdims=keepdims)


def _argmin(self: Tensor, axis: int | None = None, keepdims: bool = False) -> Tensor:
    """:func:`kiln.argmin` of this tensor."""
    return reduce.argmin(self, axis=axis, keepdims=keepdims)


def _var(self: Tensor, axis: Any = None, ddof: int = 0, keepdims: bool = False) -> Tensor:
    """:func:`kiln.var` of this tensor."""
    return reduce.var(self, axis=axis, ddof=ddof, keepdims=keepdims)


def _std(self: Tensor, axis: Any = None, ddof: int = 0, keepdims: bool = False) -> Tensor:
    """:func:`kiln.std` of this tensor."""
    return reduce.std(self, axis=axis, ddof=ddof, keepdims=keepdims)


def _any(self: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:
    """:func:`kiln.any` of this tensor."""
    return reduce.any(self, axis=axis, keepdims=keepdims)


def _all(self: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:
    """:func:`kiln.all` of this tensor."""
    return reduce.all(self, axis=axis, keepdims=keepdims)


def _cumsum(self: Tensor, axis: int | None = None) -> Tensor:
    """:func:`kiln.cumsum` of this tensor."""
    return reduce.cumsum(self, axis=axis)


def _clip(self: Tensor, min: Any = None, max: Any = None) -> Tensor:  # noqa: A002 - NumPy's names
    """:func:`kiln.clip` of this tensor to ``[min, max]``."""
    return elementwise.clip(self, min, max)


def _round(self: Tensor, decimals: int = 0) -> Tensor:
    """:func:`kiln.round` of this tensor."""
    return elementwise.round(self, decimals)


def _swapaxes(self: Tensor, axis1: int, axis2: int) -> Tensor:
    """:func:`kiln.swapaxes` of this tensor."""
    return shape.swapaxes(self, axis1, axis2)


def _dot(self: Tensor, other: Any) -> Tensor:
    """:func:`kiln.dot` of this tensor and ``other``."""
    return linalg.dot(self, other)


implements(np.copyto)(inplace.copyto)
implements(np.put)(inplace.put)
implements(np.putmask)(inplace.putmask)
implements(np.fill_diagonal)(inplace.fill_diagonal)


def _shift(ufunc: np.ufunc, reflected: bool) -> Callable[[Tensor, Any], Any]:
    """``t << u`` and friends: NumPy's shift through the ufunc protocol (kiln has no shift
    operator, so NumPy computes it and a capture serves the call eagerly)."""

    def method(self: Tensor, other: Any) -> Any:
        return ufunc(other, self) if reflected else ufunc(self, other)

    return method


def _conj(self: Tensor) -> Tensor:
    """``x.conj()``: NumPy's method hands a real array back itself (``np.conj`` copies)."""
    return complex.conjugate(self) if self.dtype.kind == "c" else self


_SHIFTS = {
    "__lshift__": _shift(np.left_shift, False),
    "__rlshift__": _shift(np.left_shift, True),
    "__rshift__": _shift(np.right_shift, False),
    "__rrshift__": _shift(np.right_shift, True),
}

_METHODS: dict[str, Callable[..., Any]] = {
    "__array_ufunc__": _array_ufunc,
    "__array_function__": _array_function,
    "astype": _astype,
    "conj": _conj,
    "conjugate": _conj,
    "copy": _copy,
    "reshape": _reshape,
    "transpose": _transpose,
    "squeeze": _squeeze,
    "flatten": _flatten,
    "ravel": _ravel,
    "fill": inplace.fill,
    "__setitem__": inplace.setitem,
    "__copy__": _copy_protocol,
    "__deepcopy__": _deepcopy_protocol,
    "sum": _sum,
    "mean": _mean,
    "max": _max,
    "min": _min,
    "prod": _prod,
    "argmax": _argmax,
    "argmin": _argmin,
    "var": _var,
    "std": _std,
    "any": _any,
    "all": _all,
    "cumsum": _cumsum,
    "clip": _clip,
    "round": _round,
    "swapaxes": _swapaxes,
    "dot": _dot,
}

_PROPERTIES: dict[str, Callable[[Tensor], Any]] = {
    "T": _transpose_property,
    "mT": _matrix_transpose_property,
    "flat": inplace.FlatIter,
    "real": complex.real_property,
    "imag": complex.imag_property,
}


# Operators and methods whose lowering depends only on their arguments' dtypes, shapes and
# Python values, with how many leading arguments may be tensors: outside a capture each
# replays its operator calls per signature (``kiln.tensor.eager_plan``). In-place operators,
# ``fill`` and the NumPy protocols are not planned.
_PLANNED: dict[str, int] = {
    "__eq__": 2,
    "__ne__": 2,
    "__lt__": 2,
    "__le__": 2,
    "__gt__": 2,
    "__ge__": 2,
    "__invert__": 1,
    "__neg__": 1,
    "__pos__": 1,
    "__abs__": 1,
    "__getitem__": 1,
    "astype": 1,
    "copy": 1,
    "reshape": 1,
    "transpose": 1,
    "squeeze": 1,
    "flatten": 1,
    "ravel": 1,
    "sum": 1,
    "mean": 1,
    "max": 1,
    "min": 1,
    "prod": 1,
    "argmax": 1,
    "argmin": 1,
    "var": 1,
    "std": 1,
    "any": 1,
    "all": 1,
    "cumsum": 1,
    "clip": 1,
    "round": 1,
    "swapaxes": 1,
    "dot": 2,
}


# Methods kiln computes on real numbers only: on a complex tensor, NumPy's function of the
# same name through the protocol, whose fallback computes NumPy's answer (NumPy's methods
# take the arguments its functions take after the array, in the same order).
_COMPLEX_VIA_NUMPY: dict[str, Callable[..., Any]] = {
    "max": np.max,
    "min": np.min,
    "argmax": np.argmax,
    "argmin": np.argmin,
    "cumsum": np.cumsum,
    "var": np.var,
    "std": np.std,
    "clip": np.clip,
    "round": np.round,
}


def _complex_via_numpy(method: Callable[..., Any], numpy_fn: Callable[..., Any]) -> Callable:
    def forward(self: Tensor, *args: Any, **kwargs: Any) -> Any:
        if self.dtype.kind == "c":
            return numpy_fn(self, *args, **kwargs)
        return method(self, *args, **kwargs)

    forward.__name__, forward.__qualname__ = method.__name__, method.__qualname__
    forward.__doc__ = method.__doc__
    return forward


# Methods whose result is a NumPy *array* where NumPy's is (``ndarray.T``, ``.copy()``,
# ``.reshape(())``, ...): a 0-d result stays marked as an array when this tensor is one (a 0-d
# array argument of a compiled function), and ``reshape``/``squeeze`` of a tensor with axes
# make one. Only ``**`` reads the mark: two NumPy scalars use libm's pow, an array operand
# the array loop (fuzz 36:1874).
_ARRAY_RESULTS = {
    "T": False,
    "astype": False,
    "copy": False,
    "transpose": False,
    "swapaxes": False,
    "reshape": True,
    "squeeze": True,
}


def _keeps_array(method: Callable[..., Any], from_axes: bool) -> Callable[..., Any]:
    @functools.wraps(method)
    def wrapper(self: Tensor, *args: Any, **kwargs: Any) -> Any:
        out = method(self, *args, **kwargs)
        if type(out) is Tensor and out.ndim == 0:
            if getattr(self, "_array", False) or (from_axes and self.ndim > 0):
                out._array = True
        return out

    return wrapper


def set_tensor_methods() -> None:
    """Attach the operators, NumPy protocols, methods and properties above to ``Tensor``.

    Idempotent; ``kiln.functions`` calls it once when it is imported.

    Example:
        >>> import kiln
        >>> set_tensor_methods()
        >>> kiln.Tensor.__add__.__doc__ == kiln.add.__doc__
        True
    """
    for name, (fn, symbol) in _BINARY_OPERATORS.items():
        setattr(Tensor, f"__{name}__", _forward(name, fn))
        setattr(Tensor, f"__r{name}__", _reflected(name, fn, symbol))
    for name, method in {**_OPERATORS, **_METHODS, **_SHIFTS, **inplace.INPLACE_OPERATORS}.items():
        if name in _COMPLEX_VIA_NUMPY:
            method = _complex_via_numpy(method, _COMPLEX_VIA_NUMPY[name])
        if name in _ARRAY_RESULTS:
            method = _keeps_array(method, _ARRAY_RESULTS[name])
        planned = _PLANNED.get(name)
        if planned is not None:  # ``t[index]`` always has two arguments: the binary wrapper
            method = eager_plan(planned, binary=name == "__getitem__")(method)
        setattr(Tensor, name, method)
    for name, getter in _PROPERTIES.items():
        if name in _ARRAY_RESULTS:
            getter = _keeps_array(getter, _ARRAY_RESULTS[name])
        setattr(Tensor, name, property(getter))
