"""What the dispatch door needs below the tensor layer: the capture handler, and kernels on arrays.

Every operator call on kiln tensors goes through one door, :func:`kiln.tensor.dispatch` (called by
Tensor methods, ``kiln.*``/``kiln.nn.*`` functions, and NumPy's ``__array_ufunc__`` /
``__array_function__`` protocols). While a tracer is installed (:func:`handler_scope`) the door
hands the call to it, which records it; otherwise it runs the operator's kernel with
:func:`run_kernel`. This module knows operators and arrays but no ``Tensor``: it is shared with
the executors and passes that run kernels on arrays.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from .registry import ELEMENTWISE, KernelCall, OpDef, Typed

if TYPE_CHECKING:
    from ..tensor import Tensor

__all__ = [
    "Handler",
    "handler_scope",
    "current_handler",
    "handler_now",
    "run_kernel",
    "run_quiet",
    "quiet_state",
    "set_fp_state",
    "reset_fp_state",
    "eager_kernel",
    "as_outputs",
]


class Handler(Protocol):
    """What a tracer implements to receive every operator call and host conversion."""

    def apply(
        self, op: OpDef, inputs: Sequence[Tensor | None], attrs: dict[str, Any]
    ) -> tuple[Tensor, ...]:
        """Receive the call of ``op`` (``attrs`` bound); the door does not check the arity
        first: the handler does (a tracer, where it runs ``infer``)."""
        ...

    def host_read(self, tensor: Tensor, what: str) -> Any: ...

    def unsupported(self, what: str) -> None:
        """A NumPy function kiln lacks was called: raise, or return to let it run eagerly."""
        ...

    def size_tensor(self, size: Any) -> Tensor:
        """A recorded int64 tensor of shape (1,) computing the symbolic ``size``."""
        ...

    def write(
        self,
        t: Tensor,
        index: Any,
        value: Tensor,
        perform: Callable[[], Any],
        reduction: str = "none",
    ) -> None:
        """Record ``t[index] = value`` (``index`` ``None``: all of ``t``; ``value`` cast to
        ``t``'s dtype) around ``perform``, NumPy's write on the values the function sees;
        with a ``reduction`` (ScatterND's), combined with the contents (``ufunc.at``)."""
        ...


_handler: ContextVar[Handler | None] = ContextVar("kiln_dispatch_handler", default=None)


def current_handler() -> Handler | None:
    """The handler installed in this context, or ``None`` when running eagerly."""
    return _handler.get()


# current_handler() without a Python frame, for the eager door's hot path.
handler_now = _handler.get


@contextlib.contextmanager
def handler_scope(handler: Handler | None) -> Iterator[None]:
    """Route every operator call made inside the block (in this thread/context) to ``handler``."""
    token = _handler.set(handler)
    try:
        yield
    finally:
        _handler.reset(token)


# NumPy's floating-point error state lives in a context variable holding an opaque "extobj";
# ``np.errstate`` builds a new one on every entry, which costs more than a small kernel. The
# eager door instead sets a quiet extobj derived once from the caller's current one (so its
# buffer size and error callback are kept), falling back to ``np.errstate`` on a NumPy without
# these names.
try:
    from numpy._core.umath import _extobj_contextvar as _fp_state  # type: ignore[attr-defined]
    from numpy._core.umath import _make_extobj  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - older or future NumPy layouts
    _fp_state = None
    _make_extobj = None

_quiet: tuple[Any, Any] = (None, None)  # (the caller's extobj, its quiet version): one entry


def run_kernel(
    opdef: OpDef, arrays: Sequence[np.ndarray | None], attrs: Mapping[str, Any]
) -> tuple[np.ndarray, ...]:
    """Run ``opdef``'s CPU kernel, normalising its result to a tuple of arrays.

    Kernels run with NumPy's floating-point warnings silenced: a division by zero or an
    overflow is a value (inf, nan), as in ONNX, not a warning. An executor running many kernels
    sets that state once around the whole run and calls :func:`as_outputs` itself.
    """
    if attrs:
        return run_quiet(functools.partial(opdef.kernel, **attrs), arrays)
    return run_quiet(opdef.kernel, arrays)


def run_quiet(
    fn: Callable[..., Any], arrays: Sequence[np.ndarray | None]
) -> tuple[np.ndarray, ...]:
    """``fn(*arrays)`` with NumPy's floating-point warnings silenced, as a tuple of arrays."""
    if _fp_get is None:  # pragma: no cover
        with np.errstate(all="ignore"):
            return as_outputs(fn(*arrays))
    current = _fp_get()
    pair = _quiet  # replaced whole, never mutated: safe across threads
    token = _fp_set(pair[1] if pair[0] is current else _quiet_for(current))
    try:
        result = fn(*arrays)
    finally:
        _fp_reset(token)
    if type(result) is _ndarray:
        return (result,)
    return as_outputs(result)


def _quiet_for(current: Any) -> Any:
    """The quiet version of the caller's error state ``current`` (built from it, so its buffer
    size and callback are kept), remembered for the next call."""
    global _quiet
    quiet = _make_extobj(all="ignore")
    _quiet = (current, quiet)
    return quiet


# The context variable's methods, bound once: the eager door calls them on every kernel.
_fp_get = None if _fp_state is None else _fp_state.get
_fp_set = None if _fp_state is None else _fp_state.set
_fp_reset = None if _fp_state is None else _fp_state.reset
_ndarray = np.ndarray


def quiet_state() -> Any:
    """The quiet floating-point error state for the caller's current one, to install with
    :func:`set_fp_state` around kernels (as :func:`run_quiet` does) and restore with
    :func:`reset_fp_state`."""
    if _fp_get is None:  # pragma: no cover
        return None
    current = _fp_get()
    pair = _quiet
    return pair[1] if pair[0] is current else _quiet_for(current)


def _enter_errstate(state: Any) -> Any:  # pragma: no cover - NumPy without the names
    scope = np.errstate(all="ignore")
    scope.__enter__()
    return scope


def _exit_errstate(token: Any) -> None:  # pragma: no cover
    token.__exit__(None, None, None)


# ``token = set_fp_state(quiet_state())`` ... ``reset_fp_state(token)``.
set_fp_state: Callable[[Any], Any] = _enter_errstate if _fp_set is None else _fp_set
reset_fp_state: Callable[[Any], None] = _exit_errstate if _fp_reset is None else _fp_reset


def eager_kernel(
    opdef: OpDef,
    inputs: Sequence[Typed | None],
    outputs: Sequence[Typed],
    attrs: Mapping[str, Any],
) -> Callable[..., Any]:
    """The fastest correct callable computing ``opdef`` on arrays of these types, as the
    NumPy engine chooses for a node: the registry kernel when it is itself an elementwise
    ufunc, else the operator's ``fast_kernel`` where it covers the types (``np.maximum`` for
    a two-input Max, ``x.reshape(shape)`` for a static Reshape), else the registry kernel with
    ``attrs`` bound. The eager door caches it per call key.

    Example:
        >>> from kiln.ops.registry import get_op
        >>> eager_kernel(get_op("Add"), [], [], {}) is np.add
        True
    """
    kernel = opdef.kernel
    if isinstance(kernel, np.ufunc) and not attrs and opdef.has(ELEMENTWISE):
        return kernel
    if opdef.fast_kernel is not None:
        fast = opdef.fast_kernel(inputs, outputs, attrs)
        if fast is not None:
            return _compile_call(fast, len(inputs))
    return functools.partial(kernel, **attrs) if attrs else kernel


def _compile_call(call: KernelCall, arity: int) -> Callable[..., Any]:
    """``call``'s template as a function of ``arity`` arrays (``lambda x0, x1: b0(x0, x1)``)."""
    direct = "{b0}(" + ", ".join("{" + str(i) + "}" for i in range(arity)) + ")"
    if call.template == direct and len(call.binds) == 1:
        return call.binds[0]  # type: ignore[no-any-return]  # np.matmul(x0, x1): itself
    return _call_factory(call.template, arity, len(call.binds))(*call.binds)  # type: ignore[no-any-return]


@functools.lru_cache(maxsize=1024)
def _call_factory(template: str, arity: int, n_binds: int) -> Callable[..., Any]:
    """``lambda b0, ...: lambda x0, ...: <template>``, compiled once per template: a tracer
    asks for the kernel of each distinct call (a slice per loop index), and compiling it
    anew each time cost more than the call."""
    args = [f"x{i}" for i in range(arity)]
    names = [f"b{k}" for k in range(n_binds)]
    body = template.format(*args, **{name: name for name in names})
    source = f"lambda {', '.join(names)}: lambda {', '.join(args)}: {body}"
    return eval(source, {})  # type: ignore[no-any-return]  # noqa: S307 - kiln's own templates


# NumPy's own np.asarray, bound once: while a capture runs, the numpy module's is routed
# (kiln.capture.numpy_creation), and a full reduction's scalar would pay the routing's checks.
_np_asarray = getattr(np.asarray, "__kiln_original__", np.asarray)


def as_outputs(result: Any) -> tuple[np.ndarray, ...]:
    """A kernel's result as a tuple of arrays (a NumPy scalar becomes a 0-d array)."""
    if type(result) is np.ndarray:
        return (result,)
    if isinstance(result, (tuple, list)):
        return tuple(r if type(r) is np.ndarray else _np_asarray(r) for r in result)
    return (_np_asarray(result),)
