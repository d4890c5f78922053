"""Float arguments that change: 0-d graph inputs that still act as Python floats.

A Python or NumPy scalar argument is static at a function's first capture (part of the
structure key). When a call changes the value of a float one (a Python ``float`` or a NumPy
floating scalar), the re-capture makes it a 0-d graph input (``float64`` for a ``float``, its
own dtype for a NumPy scalar), so later values replay the same graph: a changing learning rate
costs one re-capture. Ints and bools stay static (an int is often a size, an axis or a count).

While that capture records, the function receives a stand-in that behaves like the scalar it
replaces. A NumPy scalar's stand-in is a 0-d recording tensor of its dtype (NumPy scalars are
strongly typed, as 0-d tensors are). A Python ``float`` must stay *weak* (NEP 50:
``float32_array * lr`` stays float32), so its stand-in is a :class:`TracedFloat`: a ``float``
subclass with the captured value that carries the 0-d recording tensor. kiln's operators take it
as the weak scalar it is and use its tensor (cast to the dtype NumPy computes in) instead of a
constant; Python arithmetic on it (``1 - beta``, ``lr * 0.5``) and NumPy ufuncs (``np.exp(lr)``)
are recorded; comparisons and conversions (``if lr > 0.1``, ``float(lr)``, ``round(lr)``) and an
operator attribute given the stand-in read it on the host as value guards: a replay whose value
gives another answer re-captures.

What cannot be seen: C code reading the float directly (``math.exp(lr)``, a NumPy function
called without any tensor argument such as ``np.full(shape, lr)``): such a use is baked at the
value of the promoting call.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import numpy as np

from ..tensor import Tensor

__all__ = ["TracedFloat", "standin", "is_promotable", "scalar_array"]


def is_promotable(x: Any) -> bool:
    """A scalar that becomes a 0-d graph input when it changes: a Python ``float`` or a NumPy
    floating scalar. Ints and bools stay static: an int is often a size, an axis or a count
    that code reads directly, which a graph input could not guard."""
    return type(x) is float or isinstance(x, np.floating)


def scalar_array(x: Any) -> np.ndarray:
    """The 0-d array a promoted scalar ``x`` is passed to the graph as."""
    return np.array(x, dtype=np.float64) if type(x) is float else np.array(x)


def standin(x: Any, tensor: Tensor) -> Any:
    """What the function receives for the promoted scalar ``x`` while a capture records."""
    return TracedFloat(x, tensor) if type(x) is float else tensor


def _tensor_of(x: Any) -> Any:
    return x.__kiln_tensor__ if isinstance(x, TracedFloat) else x


def _wrap(result: Any, python_value: Any) -> Any:
    """A 0-d tensor ``result`` of a scalar computation whose Python value is ``python_value``,
    as the stand-in of the Python type Python would give."""
    if isinstance(python_value, bool):
        return bool(result)  # a comparison: read on the host (a value guard)
    if isinstance(python_value, float):
        return TracedFloat(python_value, result.astype(np.float64))
    if isinstance(python_value, int):
        return int(result)  # read on the host (a value guard)
    return python_value


def _binary(op: Callable[[Any, Any], Any], reflected: bool) -> Callable[[Any, Any], Any]:
    def method(self: Any, other: Any) -> Any:
        if not isinstance(other, (int, float)):
            return NotImplemented  # tensors, arrays: their reflected operator (weak scalar)
        plain_self, plain_other = self.__kiln_plain__(), _plain(other)
        a, b = (other, self) if reflected else (self, other)
        pa, pb = (plain_other, plain_self) if reflected else (plain_self, plain_other)
        value = op(pa, pb)  # what Python computes (its type decides the stand-in's type)
        return _wrap(op(_tensor_of(a), _tensor_of(b)), value)

    return method


def _plain(x: Any) -> Any:
    return float.__float__(x) if isinstance(x, TracedFloat) else x


def _unary(op: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def method(self: Any) -> Any:
        return _wrap(op(self.__kiln_tensor__), op(self.__kiln_plain__()))

    return method


class _Traced:
    """The recording behaviour of a stand-in (its operators are set below)."""

    __kiln_tensor__: Tensor

    def __kiln_plain__(self) -> Any:
        return _plain(self)

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        if any(isinstance(x, Tensor) for x in inputs):
            return NotImplemented  # the tensor's protocol takes this as a weak scalar
        if any(isinstance(x, np.ndarray) for x in inputs):  # keep the scalar weak
            inputs = tuple(Tensor._wrap(x) if isinstance(x, np.ndarray) else x for x in inputs)
        else:  # scalars only: NumPy computes in float64, as the tensor does
            inputs = tuple(_tensor_of(x) for x in inputs)
        return getattr(ufunc, method)(*inputs, **kwargs)

    def __bool__(self) -> bool:
        return bool(self.__kiln_tensor__)

    def __float__(self) -> float:
        return float(self.__kiln_tensor__)

    def __int__(self) -> int:
        return int(self.__kiln_tensor__)

    def __reduce__(self) -> Any:  # copy/pickle: the plain value
        return (type(self.__kiln_plain__()), (self.__kiln_plain__(),))


_BINARY = {
    "add": operator.add,
    "sub": operator.sub,
    "mul": operator.mul,
    "truediv": operator.truediv,
    "floordiv": operator.floordiv,
    "mod": operator.mod,
    "pow": operator.pow,
}
_COMPARE = {
    "__lt__": operator.lt,
    "__le__": operator.le,
    "__gt__": operator.gt,
    "__ge__": operator.ge,
    "__eq__": operator.eq,
    "__ne__": operator.ne,
}


def _compare(op: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    def method(self: Any, other: Any) -> Any:
        if not isinstance(other, (int, float)):
            return NotImplemented
        return bool(op(self.__kiln_tensor__, _tensor_of(other)))  # a value guard

    return method


def _via_float(name: str) -> Callable[..., Any]:
    def method(self: Any, *args: Any) -> Any:
        return getattr(float(self), name)(*args)  # float(self) is a value guard

    return method


class TracedFloat(_Traced, float):
    """A ``float`` argument recorded as a 0-d ``float64`` graph input (see the module)."""

    def __new__(cls, value: float, tensor: Tensor) -> TracedFloat:
        self = float.__new__(cls, value)
        self.__kiln_tensor__ = tensor
        return self

    __hash__ = float.__hash__


for _cls in (TracedFloat,):
    for _name, _op in _BINARY.items():
        setattr(_cls, f"__{_name}__", _binary(_op, reflected=False))
        setattr(_cls, f"__r{_name}__", _binary(_op, reflected=True))
    for _name, _cmp in _COMPARE.items():
        setattr(_cls, _name, _compare(_cmp))
    for _name in ("__round__", "__trunc__", "__floor__", "__ceil__"):
        setattr(_cls, _name, _via_float(_name))
    _cls.__neg__ = _unary(operator.neg)  # type: ignore[method-assign,assignment]
    _cls.__pos__ = _unary(operator.pos)  # type: ignore[method-assign,assignment]
    _cls.__abs__ = _unary(operator.abs)  # type: ignore[method-assign,assignment]
