"""NumPy's dispatch protocols for kiln tensors: ``__array_ufunc__`` and ``__array_function__``.

Front-door functions register the NumPy callables they implement with :func:`implements`
(``@implements(np.concatenate)``). A NumPy call on a kiln tensor then runs that function, and so
is recorded like any other kiln call.

Every NumPy call kiln cannot capture exactly takes one path, :func:`_fallback`: a NumPy function
kiln does not implement, a keyword or value kiln's implementation does not take (``initial=``,
``mode='clip'``, an ``out=`` NumPy array, ``norm(ord=...)``), or any other failure of kiln's
implementation. NumPy then computes the call on the tensors' values. If NumPy raises too, the
call itself is invalid and NumPy's error propagates (kiln's own error when it is of NumPy's
type). If NumPy succeeds, the active tracer is told (``handler.unsupported``): a compile capture
abandons the structure (one ``CaptureWarning``; ``CaptureError`` with ``fullgraph=True``),
``kiln.trace`` raises; outside a capture NumPy's result comes back as tensors.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from .. import dtypes
from ..errors import CaptureError, KilnError, UnsupportedOperationError
from ..ops.dispatch import current_handler
from ..tensor import Tensor
from .inplace import host, ufunc_at, write_out
from .operands import as_tensor, cast

__all__ = [
    "implements",
    "array_ufunc",
    "array_function",
    "HANDLED_FUNCTIONS",
    "HANDLED_UFUNCS",
]

F = TypeVar("F", bound=Callable[..., Any])

HANDLED_FUNCTIONS: dict[Any, Callable[..., Any]] = {}
# (ufunc, method) -> implementation; method is "__call__", "reduce" or "accumulate".
HANDLED_UFUNCS: dict[tuple[np.ufunc, str], Callable[..., Any]] = {}

# What a kiln implementation raises for a call kiln does not capture (a NumPy call that NumPy
# may still run): kiln's own errors and the built-in ones its argument checks raise. A
# CaptureError (fullgraph=True) is the user's answer and always propagates.
_KILN_FAILURES = (KilnError, TypeError, ValueError, IndexError, NotImplementedError)
# Ufunc keywords at their default values, which change nothing.
# The dtype a Python scalar operand casts from (the kind is what same_kind casting checks).
_PYTHON_SCALARS = {
    bool: np.dtype(np.bool_),
    int: np.dtype(np.int64),
    float: np.dtype(np.float64),
    complex: np.dtype(np.complex128),
}
_UFUNC_DEFAULTS = {"casting": "same_kind", "order": "K", "subok": True, "where": True}


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
    if method == "__call__" and not kwargs:  # np.exp(t), np.add(t, 1): the common case
        impl = HANDLED_UFUNCS.get((ufunc, method))
        if impl is not None:
            try:
                return impl(*inputs)
            except CaptureError:
                raise
            except _KILN_FAILURES as exc:
                return _fallback(_describe_ufunc(ufunc, method), ufunc, inputs, kwargs, cause=exc)
    name = _describe_ufunc(ufunc, method)
    func = getattr(ufunc, method)
    if method == "at" and isinstance(inputs[0], Tensor) and not kwargs:
        # Into a kiln tensor: NumPy's write, recorded where exact (kiln.functions.inplace).
        why = ufunc_at(ufunc, *inputs)
        if why is None:
            return None
        return _fallback(name, func, inputs, kwargs, cause=UnsupportedOperationError(why))
    out = kwargs.get("out")
    if out is not None:
        outs = out if isinstance(out, tuple) else (out,)
        if all(isinstance(o, Tensor) for o in outs):
            return _into_tensors(name, ufunc, method, inputs, kwargs, outs)
        # out= a NumPy array: a write kiln records only into its own tensors.
        return _fallback(name, func, inputs, kwargs, "out=")
    kwargs.pop("out", None)
    impl = HANDLED_UFUNCS.get((ufunc, method))
    if impl is None:
        return _fallback(name, func, inputs, kwargs)
    if method == "__call__" and kwargs:
        extra = {k: v for k, v in kwargs.items() if not _is_default(k, v)}
        if set(extra) - {"dtype"}:
            return _fallback(name, func, inputs, kwargs, ", ".join(f"{k}=" for k in extra))
        if "dtype" in extra:
            return _with_dtype(name, func, impl, inputs, kwargs, extra["dtype"])
        kwargs = {}
    try:
        return impl(*inputs, **kwargs)
    except CaptureError:
        raise
    except _KILN_FAILURES as exc:
        return _fallback(name, func, inputs, kwargs, cause=exc)


def _into_tensors(
    name: str, ufunc: np.ufunc, method: str, inputs: tuple, kwargs: dict, outs: tuple
) -> Any:
    """A ufunc call with ``out=`` kiln tensors: NumPy's call on the tensors' arrays, and,
    while a tracer records, kiln's result of the call recorded as a write into each out
    tensor (kiln.functions.inplace)."""
    func = getattr(ufunc, method)
    rest = {k: v for k, v in kwargs.items() if k != "out"}

    def numpy_call() -> Any:
        return func(*host(inputs), out=tuple(host(o) for o in outs), **rest)

    handler = current_handler()
    if handler is None:
        numpy_call()
        return outs[0] if len(outs) == 1 else outs
    impl = HANDLED_UFUNCS.get((ufunc, method))
    if impl is None or set(rest) - {"casting"}:
        handler.unsupported(f"{name}(..., out=...)")
        return write_out(outs, None, numpy_call)
    return write_out(outs, impl(*inputs), numpy_call)


class _UnsetType:
    pass


_UNSET: Any = _UnsetType()


def _is_default(key: str, value: Any) -> bool:
    default = _UFUNC_DEFAULTS.get(key, _UNSET)
    if default is _UNSET:
        return value is None and key in ("dtype", "signature")
    return bool(value is default or (isinstance(value, str) and value == default))


def _with_dtype(
    name: str, func: Any, impl: Callable[..., Any], inputs: tuple, kwargs: dict, dtype: Any
) -> Any:
    """A ufunc with ``dtype=``: NumPy casts the inputs (``same_kind``) to the loop of that
    dtype and computes there; kiln records the same casts, when the kiln op's result then has
    that dtype (else the call falls back)."""
    try:
        target = dtypes.as_dtype(dtype)
        operands = []
        for x in inputs:
            source = x.dtype if isinstance(x, Tensor) else _PYTHON_SCALARS.get(type(x))
            if source is None:
                source = np.result_type(x)
            if not np.can_cast(source, target, "same_kind"):
                raise UnsupportedOperationError(f"{name}: casting {source} to {target}")
            operands.append(cast(as_tensor(x), target))
        result = impl(*operands)
        if not isinstance(result, Tensor) or result.dtype != target:
            raise UnsupportedOperationError(f"{name}: no {target} loop in kiln")
        return result
    except CaptureError:
        raise
    except _KILN_FAILURES as exc:
        return _fallback(name, func, inputs, kwargs, "dtype=", cause=exc)


def array_function(func: Any, types: Any, args: tuple, kwargs: dict) -> Any:
    """``Tensor.__array_function__``."""
    impl = HANDLED_FUNCTIONS.get(func)
    out = kwargs.get("out")
    if impl is not None and out is not None and current_handler() is not None:
        outs = out if isinstance(out, tuple) else (out,)
        if all(isinstance(o, Tensor) for o in outs):
            return _function_into_tensors(func, impl, args, kwargs, outs)
    if impl is not None:
        try:
            return impl(*args, **kwargs)
        except CaptureError:
            raise
        except _KILN_FAILURES as exc:
            return _fallback(_describe_function(func), func, args, kwargs, cause=exc)
    return _fallback(_describe_function(func), func, args, kwargs)


def _function_into_tensors(
    func: Any, impl: Callable[..., Any], args: tuple, kwargs: dict, outs: tuple
) -> Any:
    """A NumPy function with ``out=`` kiln tensors while a tracer records: kiln's result
    without ``out=`` (recorded), written into the out tensors after NumPy's own call on the
    values (its casting rules and errors)."""
    rest = {k: v for k, v in kwargs.items() if k != "out"}
    try:
        result = impl(*args, **rest)
    except CaptureError:
        raise
    except _KILN_FAILURES as exc:
        return _fallback(_describe_function(func), func, args, kwargs, cause=exc)

    def numpy_call() -> Any:
        return func(*host(args), **host(kwargs))

    return write_out(outs, result, numpy_call)


def _describe_function(func: Any) -> str:
    module = getattr(func, "__module__", "") or ""
    prefix = "np.linalg." if module.endswith("linalg") else "np.fft." if "fft" in module else "np."
    return prefix + getattr(func, "__name__", repr(func))


def _fallback(
    name: str,
    func: Callable[..., Any],
    args: tuple,
    kwargs: dict,
    keywords: str = "",
    cause: Exception | None = None,
) -> Any:
    """NumPy computes a call kiln does not capture (see the module docstring)."""
    what = _describe_call(name, kwargs, keywords, cause)
    handler = current_handler()
    try:
        np_args, np_kwargs = _values(args), _values(kwargs)
    except _NoValues:
        # Recording without values (kiln.trace): nothing to compute; the tracer raises.
        if cause is not None and not isinstance(cause, UnsupportedOperationError):
            raise cause from None
        assert handler is not None
        handler.unsupported(what)
        raise UnsupportedOperationError(f"{what} is not implemented by kiln") from cause
    try:
        result = func(*np_args, **np_kwargs)
    except Exception as numpy_error:
        # NumPy refuses the call too: it is invalid, and raises as NumPy does.
        if cause is not None and isinstance(cause, type(numpy_error)):
            raise cause from None
        raise
    if handler is not None:
        handler.unsupported(what)
    out = kwargs.get("out")
    if out is not None:  # NumPy returns its out= arrays: give back the caller's objects
        given = out if isinstance(out, tuple) else (out,)
        written = np_kwargs["out"] if isinstance(np_kwargs["out"], tuple) else (np_kwargs["out"],)
        for obj, array in zip(given, written):
            if result is array:
                return obj
        if isinstance(result, tuple) and len(result) == len(given):
            return tuple(g if r is a else _to_kiln(r) for g, r, a in zip(given, result, written))
    return _to_kiln(result)


def _describe_call(name: str, kwargs: dict, keywords: str, cause: Exception | None) -> str:
    if not keywords and kwargs:
        keywords = ", ".join(f"{k}=" for k in kwargs)
    call = f"{name}(..., {keywords})" if keywords else f"{name}(...)"
    if cause is None:
        return call
    reason = str(cause).split("\n", 1)[0]
    if len(reason) > 160:
        reason = reason[:157] + "..."
    return f"{call} [kiln: {type(cause).__name__}: {reason}]"


class _NoValues(Exception):
    """A tensor of the call has no values (a recording without them)."""


def _holds_tensor(obj: Any) -> bool:
    if isinstance(obj, Tensor):
        return True
    if isinstance(obj, (tuple, list)):
        return any(_holds_tensor(o) for o in obj)
    return False


def _values(obj: Any) -> Any:
    """``obj`` with each tensor replaced by its values, without a host read (a fall back
    computes the call in NumPy, it does not read the values into Python)."""
    if isinstance(obj, Tensor):
        data = obj._data
        if data is None:
            raise _NoValues
        return data
    if isinstance(obj, tuple):
        return tuple(_values(o) for o in obj)
    if isinstance(obj, list):
        return [_values(o) for o in obj]
    if isinstance(obj, dict):
        return {k: _values(v) for k, v in obj.items()}
    return obj


def _to_kiln(obj: Any) -> Any:
    """NumPy's results as tensors (a NumPy scalar as a 0-d tensor)."""
    if isinstance(obj, (np.ndarray, np.generic)) and obj.dtype in dtypes.ALL_DTYPES:
        return Tensor._wrap(np.asarray(obj))
    if isinstance(obj, tuple):
        return (
            type(obj)(*(_to_kiln(o) for o in obj))
            if hasattr(obj, "_fields")
            else tuple(_to_kiln(o) for o in obj)
        )
    if isinstance(obj, list):
        return [_to_kiln(o) for o in obj]
    return obj
