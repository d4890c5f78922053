"""The one door every operator call goes through.

:func:`dispatch` is called by all three front doors (Tensor methods, ``kiln.*``/``kiln.nn.*``
functions, and NumPy's ``__array_ufunc__``/``__array_function__`` protocols). Outside a capture it
validates the call with the operator's ``infer`` rule and runs its CPU kernel. While a tracer is
installed (:func:`handler_scope`) the call goes to the tracer instead, which records it; nothing
can compute on a kiln tensor without passing here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ..errors import OpArgumentError
from .registry import OpDef, get_op

if TYPE_CHECKING:
    from ..tensor import Tensor

__all__ = [
    "dispatch",
    "call",
    "Handler",
    "handler_scope",
    "current_handler",
    "run_kernel",
    "as_outputs",
]


class Handler(Protocol):
    """What a tracer implements to receive every operator call and host conversion."""

    def apply(
        self, op: OpDef, inputs: Sequence[Tensor | None], attrs: dict[str, Any]
    ) -> tuple[Tensor, ...]: ...

    def host_read(self, tensor: Tensor, what: str) -> Any: ...

    def unsupported(self, what: str) -> None:
        """A NumPy function kiln lacks was called: raise, or return to let it run eagerly."""
        ...

    def size_tensor(self, size: Any) -> Tensor:
        """A recorded int64 tensor of shape (1,) computing the symbolic ``size``."""
        ...


_handler: ContextVar[Handler | None] = ContextVar("kiln_dispatch_handler", default=None)


def current_handler() -> Handler | None:
    """The handler installed in this context, or ``None`` when running eagerly."""
    return _handler.get()


@contextlib.contextmanager
def handler_scope(handler: Handler | None) -> Iterator[None]:
    """Route every operator call made inside the block (in this thread/context) to ``handler``."""
    token = _handler.set(handler)
    try:
        yield
    finally:
        _handler.reset(token)


def dispatch(
    op: str | OpDef, inputs: Sequence[Tensor | None], attrs: Mapping[str, Any] | None = None
) -> tuple[Tensor, ...]:
    """Apply operator ``op`` to ``inputs`` (kiln tensors; ``None`` for an omitted optional input).

    Returns the tuple of output tensors.

    Example:
        >>> import kiln
        >>> (y,) = dispatch("Relu", [kiln.tensor([-1.0, 2.0])])
        >>> y.tolist()
        [0.0, 2.0]
    """
    opdef = op if isinstance(op, OpDef) else get_op(op)
    bound = opdef.bind_attrs(attrs)
    opdef.check_arity(len(inputs))
    handler = _handler.get()
    if handler is not None:
        return handler.apply(opdef, inputs, bound)
    from ..tensor import Tensor

    types = [None if t is None else t.type for t in inputs]
    opdef.infer(types, bound)  # validates the call; raises errors that name the operator
    arrays = [None if t is None else t._data for t in inputs]
    return tuple(Tensor._wrap(a) for a in run_kernel(opdef, arrays, bound))


def run_kernel(
    opdef: OpDef, arrays: Sequence[np.ndarray | None], attrs: Mapping[str, Any]
) -> tuple[np.ndarray, ...]:
    """Run ``opdef``'s CPU kernel, normalising its result to a tuple of arrays.

    Kernels run with NumPy's floating-point warnings silenced: a division by zero or an
    overflow is a value (inf, nan), as in ONNX, not a warning. An executor running many kernels
    sets that state once around the whole run and calls :func:`as_outputs` itself.
    """
    with np.errstate(all="ignore"):
        return as_outputs(opdef.kernel(*arrays, **attrs))


def as_outputs(result: Any) -> tuple[np.ndarray, ...]:
    """A kernel's result as a tuple of arrays (a NumPy scalar becomes a 0-d array)."""
    if type(result) is np.ndarray:
        return (result,)
    if isinstance(result, (tuple, list)):
        return tuple(r if type(r) is np.ndarray else np.asarray(r) for r in result)
    return (np.asarray(result),)


def call(op: str | OpDef, *inputs: Tensor | None, **attrs: Any) -> Tensor:
    """:func:`dispatch` for a single-output operator, returning that output."""
    outputs = dispatch(op, inputs, attrs)
    if len(outputs) != 1:
        name = op if isinstance(op, str) else op.name
        raise OpArgumentError(f"{name} has {len(outputs)} outputs; use dispatch() to get them all")
    return outputs[0]
