"""NumPy's creation functions inside a captured function: arrays the function creates.

A NumPy kernel builds arrays with ``np.zeros``, ``np.empty``, ``np.arange``, ``np.array([...])``,
``x.copy()``, and then fills or combines them. NumPy's own functions return plain ndarrays that
kiln never sees: a kiln value written into one is a host read, and the array is baked into the
graph as a constant. So while a capture records, :func:`numpy_creation` routes the creation
functions of the ``numpy`` module to kiln's, which *record* the array (``ConstantOfShape``,
``Range`` and arithmetic, a copied constant for Python data): the function gets a fresh,
writable recording tensor, and everything it does with it is recorded.

Intercepted, as attributes of the ``numpy`` module looked up at call time (``np.zeros(...)``):
``zeros``, ``ones``, ``empty``, ``full``, ``zeros_like``, ``ones_like``, ``empty_like``,
``full_like``, ``arange``, ``linspace``, ``eye``, ``identity``, ``array``, ``asarray``,
``copy``. Their signatures and dtypes are NumPy's (float64 by default, ``dtype=`` and ``order=``
accepted; kiln arrays carry no memory layout). Not intercepted: a name bound before the
capture (``from numpy import zeros``), which stays NumPy's.

What returns what:

- ``np.asarray(t)``, ``np.array(t, copy=False)`` of a kiln tensor: the tensor itself (no host
  read); ``np.array(t)``, ``np.copy(t)``: a recorded copy (``Identity``).
- ``np.array``/``np.asarray``/``np.copy`` of Python data (numbers, nested lists): a recorded
  copy of a constant holding the data, so a later write cannot change the graph's constant;
  nested lists holding kiln tensors (``np.array([x[0], x[1]])``) are stacked (recorded).
- ``np.array``/``np.asarray``/``np.copy`` of a NumPy array: NumPy's own result, an ndarray,
  whatever its size. A copy made into a kiln tensor would be a graph constant all the same (the
  values are the array's), so wrapping it gains nothing for reads; and NumPy code that hands the
  array to other libraries keeps working. (Inside ``kiln.compile`` a closure's or a global's
  array is already a kiln tensor, an implicit input, when the function sees it.)
- Anything kiln's version does not take (``like=``, a device, an unsupported dtype such as
  complex or object, ragged data, an argument NumPy rejects): NumPy's own function, which
  computes the call or raises NumPy's error.

Who is intercepted: only a call made directly by code outside installed libraries (the user's
modules, scripts, notebooks, tests), in the thread whose capture installed the routing, while
its tracer is active. kiln's own code, NumPy's and other libraries' (scipy, jax, ...) always get
NumPy's functions: their C code may need a real ndarray. Another thread using NumPy during a
capture gets plain NumPy.

Cost: the ``numpy`` attributes are replaced only while at least one capture runs (a process-wide
count: nested and concurrent captures share one installation) and restored exactly when the last
one ends, exceptions included. Outside any capture NumPy's functions are the originals
(``np.zeros is`` the builtin); while another thread captures, a call pays one context-variable
read more.
"""

from __future__ import annotations

import dis
import functools
import sys
import sysconfig
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from types import CodeType, FrameType
from typing import Any

import numpy as np

from .. import dtypes
from ..errors import CaptureError
from ..functions import creation
from ..functions.operands import cast, constant, size_scalar
from ..functions.shape import stack
from ..functions.tensor_methods import copy as tensor_copy
from ..ops.dispatch import handler_now
from ..symbolic import SymDim
from ..tensor import Tensor, call

__all__ = ["numpy_creation", "INTERCEPTED", "is_installed"]

INTERCEPTED = (
    "zeros",
    "ones",
    "empty",
    "full",
    "zeros_like",
    "ones_like",
    "empty_like",
    "full_like",
    "arange",
    "linspace",
    "eye",
    "identity",
    "array",
    "asarray",
    "copy",
)

# Top-level packages whose calls always get NumPy's functions (as kiln.capture.implicit, which
# does not search their globals either).
_LIBRARIES = frozenset(
    {"numpy", "kiln", "scipy", "jax", "jaxlib", "torch", "optree", "onnx", "onnxruntime"}
)
_LIBRARY_DIRS = tuple(
    p for p in {sysconfig.get_paths().get(k) for k in ("purelib", "platlib", "stdlib")} if p
)

_active: ContextVar[bool] = ContextVar("kiln_numpy_creation", default=False)
_active_now = _active.get
_lock = threading.Lock()
_count = 0  # captures running (all threads); the routing is installed while it is positive
_installed: dict[str, tuple[Any, Any]] = {}  # name -> (NumPy's function, its wrapper)
_is_user: dict[str, bool] = {}  # module name -> whether its calls are intercepted


class _Decline(Exception):
    """kiln's version does not take this call: NumPy's function runs it."""


def is_installed() -> bool:
    """Whether the ``numpy`` module's creation functions are routed now (some capture runs)."""
    return _count > 0


@contextmanager
def numpy_creation() -> Iterator[None]:
    """While the block runs, calls to NumPy's creation functions made by the user's code in
    this context (thread), with a capture handler active, create kiln recording tensors.

    Example:
        >>> import numpy as np
        >>> original = np.zeros
        >>> with numpy_creation():
        ...     routed = np.zeros is not original
        >>> routed, np.zeros is original
        (True, True)
    """
    global _count
    with _lock:
        if _count == 0:
            _install()
        _count += 1
    token = _active.set(True)
    try:
        yield
    finally:
        _active.reset(token)
        with _lock:
            _count -= 1
            if _count == 0:
                _uninstall()


def _install() -> None:
    for name in INTERCEPTED:
        original = getattr(np, name)
        wrapper = _wrap(name, original, _IMPLEMENTATIONS[name])
        _installed[name] = (original, wrapper)
        setattr(np, name, wrapper)


def _uninstall() -> None:
    for name, (original, wrapper) in _installed.items():
        if getattr(np, name, None) is wrapper:  # not replaced since by someone else
            setattr(np, name, original)
    _installed.clear()


def _from_user(module: str) -> bool:
    """Whether calls made by the module called ``module`` are intercepted (not a library's)."""
    known = _is_user.get(module)
    if known is None:
        top = module.partition(".")[0]
        found = sys.modules.get(module)
        path = getattr(found, "__file__", None) or ""
        known = top not in _LIBRARIES and not (path and path.startswith(_LIBRARY_DIRS))
        _is_user[module] = known
    return known


_LOADS = frozenset({"LOAD_GLOBAL", "LOAD_NAME", "LOAD_FAST", "LOAD_DEREF", "LOAD_CLASSDEREF"})
_ATTRS = frozenset({"LOAD_ATTR", "LOAD_METHOD"})
_sites: dict[tuple[CodeType, int], tuple[str, str, str] | None] = {}


def _call_site(code: CodeType, lasti: int) -> tuple[str, str, str] | None:
    """The callee of the call that the instruction at ``lasti`` of ``code`` makes, when it is
    written ``name.attribute(...)``: (how ``name`` is loaded, ``name``, ``attribute``).

    A creation function is routed only when the user's code calls it this way: the running call
    of the frame that called the wrapper must be ``np.zeros(...)`` itself. A C function the
    user called (``rng.random(shape)``, Cython code that calls ``np.empty`` internally, which
    leaves no Python frame) is running some other call, and keeps NumPy's arrays.
    """
    key = (code, lasti)
    site = _sites.get(key, _sites)
    if site is not _sites:
        return site  # type: ignore[return-value]
    site = None
    instructions = [i for i in dis.get_instructions(code) if i.offset <= lasti]
    call = instructions[-1] if instructions else None
    pos = call.positions if call is not None else None
    if pos is not None and None not in (pos.lineno, pos.col_offset, pos.end_lineno):
        start, end = (pos.lineno, pos.col_offset), (pos.end_lineno, pos.end_col_offset)
        parts = sorted(
            ((p.end_lineno, p.end_col_offset), i.opname, i.argval)
            for i in instructions[:-1]
            if (p := i.positions) is not None
            and (p.lineno, p.col_offset) == start
            and p.end_lineno is not None
            and (p.end_lineno, p.end_col_offset) < end
        )
        if len(parts) >= 2:
            (_, base_op, base), (_, attr_op, attr) = parts[-2], parts[-1]
            if base_op in _LOADS and attr_op in _ATTRS and isinstance(attr, str):
                site = (base_op, str(base), attr)
    if len(_sites) > 4096:
        _sites.clear()
    _sites[key] = site
    return site


def _direct(frame: FrameType, name: str) -> bool:
    """Whether ``frame`` (the caller of NumPy's ``name``) is user code calling
    ``<numpy module>.name(...)`` itself."""
    if not _from_user(frame.f_globals.get("__name__", "__main__")):
        return False
    site = _call_site(frame.f_code, frame.f_lasti)
    if site is None or site[2] != name:
        return False
    load, base, _ = site
    if load == "LOAD_GLOBAL":
        scope = frame.f_globals
        module = scope[base] if base in scope else frame.f_builtins.get(base)
    else:
        scope = frame.f_locals
        module = scope.get(base, frame.f_globals.get(base))
    return module is np


def _wrap(name: str, original: Callable[..., Any], impl: Callable[..., Any]) -> Callable[..., Any]:
    active, handler = _active_now, handler_now

    is_user, getframe = _is_user.get, sys._getframe

    @functools.wraps(original)
    def routed(*args: Any, **kwargs: Any) -> Any:
        # kiln's own calls (np.asarray of an index, a constant) come here several times per
        # recorded op: a library module is turned away by one lookup, without _direct.
        if (
            active()
            and handler() is not None
            and is_user(getframe(1).f_globals.get("__name__", "__main__")) is not False
            and _direct(getframe(1), name)
        ):
            try:
                return impl(*args, **kwargs)
            except CaptureError:
                raise
            except Exception:  # noqa: S110 - _Decline, or a call NumPy must judge
                pass
        return original(*args, **kwargs)

    routed.__kiln_original__ = original  # type: ignore[attr-defined]
    return routed


# -- the implementations ------------------------------------------------------------------


def _dtype(dtype: Any, default: Any = None) -> np.dtype | None:
    if dtype is None:
        return None if default is None else np.dtype(default)
    dt = np.dtype(dtype)
    if dt not in dtypes.ALL_DTYPES:
        raise _Decline
    return dt


def _plain_call(order: Any, device: Any = None, like: Any = None, orders: str = "CFAK") -> None:
    """Decline what kiln does not take: ``like=``, a device other than the CPU, a bad order."""
    if like is not None or device not in (None, "cpu"):
        raise _Decline
    if order is not None and not (isinstance(order, str) and order.upper() in orders):
        raise _Decline


def _zeros(
    shape: Any, dtype: Any = None, order: Any = "C", *, device: Any = None, like: Any = None
) -> Tensor:
    _plain_call(order, device, like, "CF")
    return creation.zeros(shape, _dtype(dtype, np.float64))


def _ones(
    shape: Any, dtype: Any = None, order: Any = "C", *, device: Any = None, like: Any = None
) -> Tensor:
    _plain_call(order, device, like, "CF")
    return creation.ones(shape, _dtype(dtype, np.float64))


def _empty(
    shape: Any, dtype: Any = None, order: Any = "C", *, device: Any = None, like: Any = None
) -> Tensor:
    _plain_call(order, device, like, "CF")
    return creation.empty(shape, _dtype(dtype, np.float64))


def _full(
    shape: Any,
    fill_value: Any,
    dtype: Any = None,
    order: Any = "C",
    *,
    device: Any = None,
    like: Any = None,
) -> Tensor:
    _plain_call(order, device, like, "CF")
    return creation.full(shape, fill_value, _dtype(dtype))


def _like(make: Callable[..., Tensor]) -> Callable[..., Tensor]:
    def like(
        a: Any,
        dtype: Any = None,
        order: Any = "K",
        subok: bool = True,
        shape: Any = None,
        *,
        device: Any = None,
    ) -> Tensor:
        _plain_call(order, device)
        if isinstance(a, np.ndarray) and type(a) is not np.ndarray:
            raise _Decline  # a subclass (np.matrix, masked): NumPy keeps it
        return make(a, _dtype(dtype), shape=shape)

    return like


def _full_like(
    a: Any,
    fill_value: Any,
    dtype: Any = None,
    order: Any = "K",
    subok: bool = True,
    shape: Any = None,
    *,
    device: Any = None,
) -> Tensor:
    _plain_call(order, device)
    if isinstance(a, np.ndarray) and type(a) is not np.ndarray:
        raise _Decline
    return creation.full_like(a, fill_value, _dtype(dtype), shape=shape)


def _arange(*args: Any, **kwargs: Any) -> Tensor:
    """``np.arange([start,] stop[, step], *, dtype, device, like)``, bounds also by keyword."""
    if len(args) > 3:
        raise _Decline
    bounds: dict[str, Any] = dict(zip(("start", "stop", "step"), args))
    for name in ("start", "stop", "step"):
        if name in kwargs:
            if name in bounds:
                raise _Decline  # given twice: NumPy's TypeError
            bounds[name] = kwargs.pop(name)
    dtype = kwargs.pop("dtype", None)
    _plain_call(None, kwargs.pop("device", None), kwargs.pop("like", None))
    if kwargs:
        raise _Decline
    start, stop, step = bounds.get("start"), bounds.get("stop"), bounds.get("step")
    if stop is None:
        if start is None:
            raise _Decline
        start, stop = 0, start
    start = 0 if start is None else start
    return creation.arange(start, stop, 1 if step is None else step, _dtype(dtype))


def _linspace(
    start: Any,
    stop: Any,
    num: Any = 50,
    endpoint: bool = True,
    retstep: bool = False,
    dtype: Any = None,
    axis: int = 0,
    *,
    device: Any = None,
) -> Any:
    _plain_call(None, device)
    return creation.linspace(start, stop, num, endpoint, retstep, _dtype(dtype), axis)


def _eye(
    N: Any,
    M: Any = None,
    k: Any = 0,
    dtype: Any = float,
    order: Any = "C",
    *,  # noqa: N803
    device: Any = None,
    like: Any = None,
) -> Tensor:
    _plain_call(order, device, like, "CF")
    return creation.eye(N, M, k, _dtype(dtype, np.float64))


def _identity(n: Any, dtype: Any = None, *, like: Any = None) -> Tensor:
    _plain_call(None, None, like)
    return creation.identity(n, _dtype(dtype, np.float64))


def _array(
    object: Any,
    dtype: Any = None,
    *,
    copy: Any = True,
    order: Any = "K",  # noqa: A002
    subok: bool = False,
    ndmin: int = 0,
    ndmax: int = 0,
    like: Any = None,
) -> Tensor:
    _plain_call(order, None, like)
    if ndmax:
        raise _Decline
    return _from_object(object, _dtype(dtype), copy, ndmin)


def _asarray(
    a: Any,
    dtype: Any = None,
    order: Any = None,
    *,
    device: Any = None,
    copy: Any = None,
    like: Any = None,
) -> Tensor:
    _plain_call(order, device, like)
    return _from_object(a, _dtype(dtype), copy, 0)


def _copy(a: Any, order: Any = "K", subok: bool = False) -> Tensor:
    _plain_call(order)
    return _from_object(a, None, True, 0)


def _from_object(obj: Any, dtype: np.dtype | None, copy: Any, ndmin: int) -> Tensor:
    """``np.array(obj, dtype, copy=copy, ndmin=ndmin)`` as a kiln tensor (see the module)."""
    if isinstance(obj, Tensor):
        result = obj
        if dtype is not None and dtype != obj.dtype:
            if copy is False:
                raise _Decline  # NumPy raises: a dtype change needs a copy
            result = cast(obj, dtype)  # a new array already
        elif copy:
            result = tensor_copy(obj)
    elif _holds_tensor(obj):
        result = _stacked(obj, dtype)
    elif isinstance(obj, (list, tuple, bool, int, float, np.generic)):
        data = np.array(obj, dtype=dtype)  # Python data: NumPy's own coercion and dtype
        if data.dtype not in dtypes.ALL_DTYPES or data.dtype.kind not in "biuf":
            raise _Decline
        result = creation.fresh(constant(data))  # the graph keeps `data`; the copy is the user's
    else:
        raise _Decline  # an ndarray (NumPy's result is kept) or another array-like
    if ndmin > result.ndim:  # leading axes of size 1, as NumPy's ndmin
        axes = np.arange(ndmin - result.ndim, dtype=np.int64)
        result = call("Unsqueeze", result, constant(axes))
    return result


def _holds_tensor(obj: Any, depth: int = 0) -> bool:
    """Whether ``obj`` (a nested list/tuple) holds a kiln tensor or a traced float."""
    if isinstance(obj, (Tensor, SymDim)) or hasattr(obj, "__kiln_tensor__"):
        return True
    if isinstance(obj, (list, tuple)) and depth < 32:
        return any(_holds_tensor(o, depth + 1) for o in obj)
    return False


def _stacked(obj: Any, dtype: np.dtype | None) -> Tensor:
    """Nested lists of tensors and scalars (``[x[0], 2 * x[1]]``) stacked as NumPy's
    ``np.array`` builds them: NumPy's dtype (Python scalars as their default dtypes), every
    element of one level of one shape (else NumPy decides)."""
    leaves: list[Tensor] = []

    def leaf(x: Any) -> Tensor:
        if isinstance(x, Tensor):
            return x
        if hasattr(x, "__kiln_tensor__"):
            return x.__kiln_tensor__
        if isinstance(x, SymDim):  # a dynamic size (np.array(x.shape)): computed from Shape
            return size_scalar(x)
        data = np.asarray(x)
        if data.dtype not in dtypes.ALL_DTYPES or data.dtype.kind not in "biuf":
            raise _Decline
        return constant(data)

    def walk(x: Any) -> Any:
        if isinstance(x, (list, tuple)):
            if not x:
                raise _Decline
            return [walk(o) for o in x]
        t = leaf(x)
        leaves.append(t)
        return t

    tree = walk(obj)
    want = dtype if dtype is not None else np.result_type(*(t.dtype for t in leaves))

    def build(x: Any) -> Tensor:
        if isinstance(x, Tensor):
            return cast(x, want)
        parts = [build(o) for o in x]
        shapes = {tuple(p.shape) for p in parts}
        if len(shapes) != 1:
            raise _Decline  # ragged, or sizes that may differ: NumPy's call
        return stack(parts)

    result = build(tree)
    return creation.fresh(result) if len(leaves) == 1 else result


_IMPLEMENTATIONS: dict[str, Callable[..., Any]] = {
    "zeros": _zeros,
    "ones": _ones,
    "empty": _empty,
    "full": _full,
    "zeros_like": _like(creation.zeros_like),
    "ones_like": _like(creation.ones_like),
    "empty_like": _like(creation.empty_like),
    "full_like": _full_like,
    "arange": _arange,
    "linspace": _linspace,
    "eye": _eye,
    "identity": _identity,
    "array": _array,
    "asarray": _asarray,
    "copy": _copy,
}
