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
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from .registry import OpDef

if TYPE_CHECKING:
    from ..tensor import Tensor

__all__ = [
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
