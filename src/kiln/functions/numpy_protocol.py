"""NumPy's dispatch protocols for kiln tensors: ``__array_ufunc__`` and ``__array_function__``.

Front-door functions register the NumPy callables they implement with :func:`implements`
(``@implements(np.concatenate)``). A NumPy call on a kiln tensor then runs that function, and so
is recorded like any other kiln call. A NumPy function kiln does not implement raises
:class:`~kiln.errors.UnsupportedOperationError` while a tracer is active; outside a capture it is
computed eagerly by NumPy on the tensors' arrays and the array results come back as tensors.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from .. import dtypes
from ..errors import UnsupportedOperationError
from ..ops.dispatch import current_handler
from ..tensor import Tensor

__all__ = ["implements", "array_ufunc", "array_function", "HANDLED_FUNCTIONS", "HANDLED_UFUNCS"]

F = TypeVar("F", bound=Callable[..., Any])

HANDLED_FUNCTIONS: dict[Any, Callable[..., Any]] = {}
# (ufunc, method) -> implementation; method is "__call__", "reduce" or "accumulate".
HANDLED_UFUNCS: dict[tuple[np.ufunc, str], Callable[..., Any]] = {}


def implements(*numpy_callables: Any, method: str = "__call__") -> Callable[[F], F]:
    """Register the decorated kiln function as the implementation of NumPy callables."""

    def decorate(fn: F) -> F:
        for target in numpy_callables:
            if isinstance(target, np.ufunc):
                HANDLED_UFUNCS[(target, method)] = fn
            else:
                HANDLED_FUNCTIONS[target] = fn
        return fn

    return decorate


def _describe_ufunc(ufunc: np.ufunc, method: str) -> str:
    return f"np.{ufunc.__name__}" + ("" if method == "__call__" else f".{method}")


def array_ufunc(ufunc: np.ufunc, method: str, inputs: tuple, kwargs: dict) -> Any:
    """``Tensor.__array_ufunc__``."""
    if kwargs.get("out") is not None:
        raise TypeError(
            f"{_describe_ufunc(ufunc, method)}(..., out=...): kiln tensors are immutable; "
            "use the returned value instead of out="
        )
    kwargs.pop("out", None)
    impl = HANDLED_UFUNCS.get((ufunc, method))
    if impl is not None and method == "__call__" and kwargs:
        raise UnsupportedOperationError(
            f"{_describe_ufunc(ufunc, method)}: the keyword(s) {', '.join(sorted(kwargs))} are "
            "not supported on kiln tensors; cast with .astype() and select with kiln.where()"
        )
    if impl is not None:
        return impl(*inputs, **kwargs)
    return _unsupported(_describe_ufunc(ufunc, method), getattr(ufunc, method), inputs, kwargs)


def array_function(func: Any, types: Any, args: tuple, kwargs: dict) -> Any:
    """``Tensor.__array_function__``."""
    impl = HANDLED_FUNCTIONS.get(func)
    if impl is not None:
        return impl(*args, **kwargs)
    name = f"np.{getattr(func, '__name__', repr(func))}"
    return _unsupported(name, func, args, kwargs)


def _unsupported(name: str, func: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
    handler = current_handler()
    if handler is not None:
        # A tracer raises; a compile-time tracer may instead abandon its capture and let the
        # call compute eagerly below.
        handler.unsupported(name)
    result = func(*_to_numpy(args), **_to_numpy(kwargs))
    return _to_kiln(result)


def _to_numpy(obj: Any) -> Any:
    if isinstance(obj, Tensor):
        return obj.numpy()
    if isinstance(obj, tuple):
        return tuple(_to_numpy(o) for o in obj)
    if isinstance(obj, list):
        return [_to_numpy(o) for o in obj]
    if isinstance(obj, dict):
        return {k: _to_numpy(v) for k, v in obj.items()}
    return obj


def _to_kiln(obj: Any) -> Any:
    if isinstance(obj, np.ndarray) and obj.dtype in dtypes.ALL_DTYPES:
        return Tensor._wrap(obj)
    if isinstance(obj, tuple):
        return tuple(_to_kiln(o) for o in obj)
    if isinstance(obj, list):
        return [_to_kiln(o) for o in obj]
    return obj
