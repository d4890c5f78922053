"""Control flow with ``jax.lax`` semantics: :func:`cond`, :func:`fori_loop`, :func:`scan`.

Eagerly they are plain Python (one branch runs; the loop runs in Python). While a capture
records (``kiln.trace``, ``kiln.compile``), each records one ``If`` / ``Loop`` / ``Scan`` node
whose subgraphs are the functions traced once (a trace through :func:`cond` records both
branches), so a long recurrence does not unroll. The recording is done by the capture layer,
which installs itself here (:func:`install_control_capture`); this module only lowers the
Python-level call.

The functions receive and return pytrees of tensors. A loop's carried values keep their
dtypes and shapes from one iteration to the next, as in jax.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import ArgumentError
from ..ops.dispatch import handler_now
from ..tensor import Tensor, asarray
from ..tree import flatten, unflatten
from .shape import stack

__all__ = ["cond", "fori_loop", "scan"]

# ``capture(kind, handler, *args)``: record the call with the active capture handler, or
# return NotImplemented when that handler does not record control flow (then the call runs
# as plain Python). kiln.capture installs it.
_capture: Callable[..., Any] | None = None


def install_control_capture(capture: Callable[..., Any]) -> None:
    """Let captures record :func:`cond`, :func:`fori_loop` and :func:`scan` as single nodes
    (kiln.capture installs its recorder here when kiln is imported)."""
    global _capture
    _capture = capture


def _recorded(kind: str, *args: Any) -> Any:
    handler = handler_now()
    if handler is None or _capture is None:
        return NotImplemented
    return _capture(kind, handler, *args)


def cond(
    pred: Any, true_fn: Callable[..., Any], false_fn: Callable[..., Any], *operands: Any
) -> Any:
    """``true_fn(*operands)`` if ``pred`` else ``false_fn(*operands)`` (``jax.lax.cond``).

    Under a capture whose ``pred`` is a recorded tensor, both branches are traced and one
    ``If`` node is recorded; the branches must return the same structure with the same
    dtypes (a size that differs between them becomes a size known when the graph runs).

    Example:
        >>> import kiln, numpy as np
        >>> x = np.array([1.0, -2.0])
        >>> kiln.cond(x.sum() > 0, lambda v: v * 2, lambda v: -v, x).tolist()
        [-1.0, 2.0]
    """
    if isinstance(pred, Tensor):
        result = _recorded("cond", pred, true_fn, false_fn, operands)
        if result is not NotImplemented:
            return result
    return true_fn(*operands) if bool(pred) else false_fn(*operands)


def fori_loop(lower: Any, upper: Any, body_fun: Callable[[Any, Any], Any], init_val: Any) -> Any:
    """``val = body_fun(i, val)`` for ``i`` in ``range(lower, upper)`` (``jax.lax.fori_loop``);
    ``i`` is an int64 0-d tensor.

    Under a capture this records one ``Loop`` node (the body traced once); ``body_fun`` must
    return the structure, dtypes and shapes of ``init_val``.

    Example:
        >>> import kiln, numpy as np
        >>> kiln.fori_loop(0, 4, lambda i, acc: acc + i, np.zeros(2, np.int64)).tolist()
        [6, 6]
    """
    result = _recorded("fori_loop", lower, upper, body_fun, init_val)
    if result is not NotImplemented:
        return result
    val = init_val
    for i in range(int(lower), int(upper)):
        val = body_fun(asarray(np.int64(i)), val)
    return val


def scan(f: Callable[[Any, Any], Any], init: Any, xs: Any) -> tuple[Any, Any]:
    """``carry, y = f(carry, x)`` for each ``x`` along axis 0 of ``xs``; returns the final
    carry and the ``y`` stacked along a new axis 0 (``jax.lax.scan``, without ``length`` and
    ``reverse``).

    Under a capture this records one ``Scan`` node (``f`` traced once).

    Example:
        >>> import kiln, numpy as np
        >>> total, partial = kiln.scan(lambda c, x: (c + x, c + x), np.float64(0), np.arange(4.0))
        >>> float(total), partial.tolist()
        (6.0, [0.0, 1.0, 3.0, 6.0])
    """
    result = _recorded("scan", f, init, xs)
    if result is not NotImplemented:
        return result  # type: ignore[no-any-return]
    leaves, spec = flatten(xs)
    arrays = [asarray(x) for x in leaves]
    if not arrays:
        raise ArgumentError("kiln.scan: xs has no arrays to scan over; pass at least one")
    length = int(arrays[0].shape[0]) if arrays[0].ndim else 0
    if any(a.ndim == 0 or int(a.shape[0]) != length for a in arrays):
        raise ArgumentError(
            "kiln.scan: every array of xs must have the same length along axis 0, got "
            f"shapes {[tuple(a.shape) for a in arrays]}"
        )
    if length == 0:
        raise ArgumentError(
            "kiln.scan: xs has length 0, so the stacked outputs' shapes are unknown when run "
            "eagerly; scan at least one element"
        )
    carry = init
    ys: list[Any] = []
    for t in range(length):
        carry, y = f(carry, unflatten(spec, [a[t] for a in arrays]))
        ys.append(y)
    y_leaves = [flatten(y)[0] for y in ys]
    y_spec = flatten(ys[0])[1]
    stacked = [stack([asarray(step[k]) for step in y_leaves]) for k in range(len(y_leaves[0]))]
    return carry, unflatten(y_spec, stacked)
