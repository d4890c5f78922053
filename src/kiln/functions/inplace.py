"""NumPy's in-place API on kiln tensors: ``t[index] = value``, the augmented assignments
(``+= -= *= /= //= %= **= @= &= |= ^= <<= >>=``), ``out=`` on ufuncs, ``np.copyto``,
``Tensor.fill``, ``np.put``, ``np.putmask`` and ``np.fill_diagonal``.

Eagerly a write is NumPy's own, on the tensor's array: the same values, casts, broadcasting,
buffering of overlapping operands and errors, and a write through a view reaches its base.
While a tracer records, the write still happens on the arrays the function sees (so call 1 is
NumPy's), and the tracer also records it as pure operators (:mod:`kiln.capture.views`): the
value is computed with kiln's operators first (from the contents before the write), NumPy then
performs and checks the write, and the tracer makes the result the written array's newest
version.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from ..errors import UnsupportedOperationError
from ..ops.dispatch import current_handler, handler_scope
from ..tensor import Tensor, call
from .operands import as_tensor, cast

__all__ = [
    "setitem",
    "fill",
    "copyto",
    "ufunc_at",
    "INPLACE_OPERATORS",
    "write_out",
    "host",
    "NoValues",
    "Flat",
    "FlatIter",
    "put",
    "putmask",
    "fill_diagonal",
]


def host(x: Any) -> Any:
    """``x`` with every tensor (also inside tuples and lists) replaced by its array, read
    without a host read: for NumPy to perform a write on the values the function sees."""
    if isinstance(x, Tensor):
        data = x._data
        if data is None:
            raise NoValues
        return data
    if isinstance(x, tuple):
        return tuple(host(e) for e in x)
    if isinstance(x, list):
        return [host(e) for e in x]
    if isinstance(x, dict):
        return {k: host(v) for k, v in x.items()}
    return x


class NoValues(Exception):
    """Raised by :func:`host` for a recorded tensor without values (a trace from a
    signature): only the graph writes (the tracer catches it)."""


def setitem(t: Tensor, index: Any, value: Any) -> None:
    """``t[index] = value`` (``Tensor.__setitem__``): NumPy's assignment, value broadcast to
    the indexed shape and cast to ``t``'s dtype; with repeated indices the last write wins.

    Example:
        >>> import kiln
        >>> t = kiln.zeros(4, dtype=kiln.int64)
        >>> t[1:3] = 7
        >>> t.tolist()
        [0, 7, 7, 0]
    """
    handler = current_handler()
    if handler is None:
        t._data[host(index)] = host(value)  # type: ignore[index]
        return
    v = _written_value(value, t.dtype)
    handler.write(t, index, v, lambda: t._data.__setitem__(host(index), host(value)))  # type: ignore[union-attr]


def _written_value(value: Any, dtype: np.dtype) -> Tensor:
    """``value`` cast to the written array's ``dtype``, as NumPy's assignment casts it. A
    value the function computed is cast by a recorded ``Cast``; a literal (``D[i] = 1.0``:
    nothing recorded computes it) is cast here by the same kernel, so each write of it does
    not record a ``Cast`` of one constant."""
    v = as_tensor(value)
    if v._trace is None and v._data is not None and v.dtype != dtype:
        with handler_scope(None):
            return cast(v, dtype)
    return cast(v, dtype)


def fill(t: Tensor, value: Any) -> None:
    """Set every element of ``t`` to the scalar ``value`` (``ndarray.fill``).

    Example:
        >>> import kiln
        >>> t = kiln.zeros(3)
        >>> t.fill(2.5)
        >>> t.tolist()
        [2.5, 2.5, 2.5]
    """
    handler = current_handler()
    if handler is None:
        t._data.fill(host(value))  # type: ignore[union-attr]
        return
    v = _written_value(value, t.dtype)
    handler.write(t, None, v, lambda: t._data.fill(host(value)))  # type: ignore[union-attr]


def copyto(dst: Any, src: Any, casting: str = "same_kind", where: Any = True) -> None:
    """``np.copyto``: copy ``src`` (broadcast) into ``dst`` where ``where`` holds, with
    NumPy's ``casting`` check (registered for ``np.copyto`` by kiln.functions.tensor_methods).

    Example:
        >>> import kiln, numpy as np
        >>> t = kiln.zeros(3)
        >>> np.copyto(t, kiln.tensor([1.0, 2.0, 3.0]), where=kiln.tensor([True, False, True]))
        >>> t.tolist()
        [1.0, 0.0, 3.0]
    """
    handler = current_handler()
    if not isinstance(dst, Tensor):  # into a NumPy array: NumPy's (reading tensors' values)
        np.copyto(dst, np.asarray(src), casting=casting, where=np.asarray(where))  # type: ignore[arg-type]
        return
    if handler is None:
        np.copyto(dst._data, host(src), casting=casting, where=host(where))  # type: ignore[arg-type]
        return
    v = cast(as_tensor(src), dst.dtype)
    if not (where is True or where is np.True_):
        v = call("Where", cast(as_tensor(where), np.dtype(bool)), v, dst)
    handler.write(
        dst,
        None,
        cast(v, dst.dtype),
        lambda: np.copyto(dst._data, host(src), casting=casting, where=host(where)),  # type: ignore[arg-type]
    )


class Flat(NamedTuple):
    """A write's index into the C-order flattening of the written tensor (``a.flat[index]``,
    as ``np.put`` and ``np.fill_diagonal`` address it), for the tracer."""

    index: Any


class FlatIter:
    """``t.flat``: ``t`` indexed as if flattened in C order, as NumPy's ``flatiter``. Reading
    gives a copy (a scalar for an int index, as NumPy's ``a.flat[i]``), writing goes into ``t``
    (``t.flat[idx] = v``, values repeated as NumPy repeats them), and iterating yields the
    elements in order.

    Example:
        >>> import kiln
        >>> t = kiln.zeros((2, 2))
        >>> t.flat[[0, 3]] = 5.0
        >>> t.tolist(), t.flat[3].item()
        ([[5.0, 0.0], [0.0, 5.0]], 5.0)
    """

    __slots__ = ("base",)

    def __init__(self, base: Tensor) -> None:
        self.base = base

    def _flat(self) -> Tensor:
        return self.base.reshape(-1)

    def __len__(self) -> int:
        return int(self.base.size)

    def __iter__(self) -> Any:
        return iter(self._flat())

    def __getitem__(self, index: Any) -> Tensor:
        return self._flat()[index].copy()  # NumPy's flatiter reads copy

    def __setitem__(self, index: Any, value: Any) -> None:
        t = self.base
        handler = current_handler()
        if handler is None:
            t._data.flat[host(index)] = host(value)  # type: ignore[union-attr]
            return
        count = self._flat()[index].size
        values = _repeated(cast(as_tensor(value), t.dtype), count)
        handler.write(
            t,
            Flat(index),
            values,
            lambda: t._data.flat.__setitem__(host(index), host(value)),  # type: ignore[union-attr]
        )

    def copy(self) -> Tensor:
        """The elements as a new 1-D tensor (``ndarray.flat.copy()``)."""
        return self._flat().copy()

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return np.asarray(self.base).ravel().astype(dtype or self.base.dtype, copy=True)


def put(a: Any, ind: Any, v: Any, mode: str = "raise") -> None:
    """``np.put(a, ind, v, mode)``: ``a.flat[ind] = v``, ``v`` repeated as needed, indices
    wrapped or clipped by ``mode``.

    Example:
        >>> import kiln, numpy as np
        >>> t = kiln.zeros(5, dtype=kiln.int64)
        >>> np.put(t, [0, -1], [7, 8])
        >>> t.tolist()
        [7, 0, 0, 0, 8]
    """
    if not isinstance(a, Tensor):
        raise TypeError("np.put needs an ndarray to write into")  # NumPy's call does the rest
    handler = current_handler()
    if handler is None:
        a._data.put(host(ind), host(v), mode=mode)  # type: ignore[union-attr]
        return
    if mode not in ("raise", "wrap", "clip"):
        raise ValueError(f"clipmode must be one of 'clip', 'raise', or 'wrap' (got {mode!r})")
    index = cast(as_tensor(ind), np.dtype(np.int64)).reshape(-1)
    if mode != "raise" and not (type(a.size) is int and a.size == 0):  # maybe symbolic
        size = call("Size", a)
        one = Tensor._wrap(np.int64(1))
        if mode == "wrap":
            index = call("Mod", index, size)
        else:  # NumPy's clip: too large is the last, negative is the first
            index = call("Clip", index, Tensor._wrap(np.int64(0)), call("Sub", size, one))
    values = _repeated(cast(as_tensor(v), a.dtype), index.shape[0])
    handler.write(
        a,
        Flat(index),
        values,
        lambda: a._data.put(host(ind), host(v), mode=mode),  # type: ignore[union-attr]
    )


def putmask(a: Any, mask: Any, values: Any) -> None:
    """``np.putmask(a, mask, values)``: ``a.flat[n] = values.flat[n % values.size]`` where
    ``mask.flat[n]`` holds (``mask`` has ``a``'s shape).

    Example:
        >>> import kiln, numpy as np
        >>> t = kiln.zeros(4)
        >>> np.putmask(t, kiln.tensor([True, False, True, True]), [1.0, 2.0])
        >>> t.tolist()
        [1.0, 0.0, 1.0, 2.0]
    """
    if not isinstance(a, Tensor):
        raise TypeError("np.putmask needs an ndarray to write into")
    handler = current_handler()
    if handler is None:
        np.putmask(a._data, host(mask), host(values))  # type: ignore[arg-type]
        return
    every = _repeated(cast(as_tensor(values), a.dtype), a.size)
    if every.ndim:
        every = every.reshape(a.shape)
    chosen = call("Where", cast(as_tensor(mask), np.dtype(bool)), every, a)
    handler.write(a, None, chosen, lambda: np.putmask(a._data, host(mask), host(values)))  # type: ignore[arg-type]


def fill_diagonal(a: Any, val: Any, wrap: bool = False) -> None:
    """``np.fill_diagonal(a, val, wrap)``: the main diagonal (``a[i, i, ...]``) set to ``val``,
    repeated as needed; a tall 2-D matrix restarts it below every ``columns + 1`` rows when
    ``wrap``.

    Example:
        >>> import kiln, numpy as np
        >>> t = kiln.zeros((2, 3))
        >>> np.fill_diagonal(t, 5.0)
        >>> t.tolist()
        [[5.0, 0.0, 0.0], [0.0, 5.0, 0.0]]
    """
    if not isinstance(a, Tensor):
        raise TypeError("np.fill_diagonal needs an ndarray to write into")
    handler = current_handler()
    if handler is None:
        np.fill_diagonal(a._data, host(val), wrap=wrap)  # type: ignore[arg-type]
        return
    if a.ndim < 2:
        raise UnsupportedOperationError("np.fill_diagonal of fewer than 2 dimensions")
    dims = [int(d) for d in a.shape]  # a dynamic size is specialized (and guarded)
    if len(dims) == 2:
        step = dims[1] + 1
        end = None if wrap else dims[1] * dims[1]
    else:  # NumPy needs equal dimensions here (its own call raises otherwise)
        step = 1 + int(np.cumprod(dims[:-1]).sum())
        end = None
    positions = np.arange(int(np.prod(dims)))[:end:step]
    values = _repeated(cast(as_tensor(val), a.dtype), len(positions))
    handler.write(
        a,
        Flat(Tensor._wrap(positions.astype(np.int64))),
        values,
        lambda: np.fill_diagonal(a._data, host(val), wrap=wrap),  # type: ignore[arg-type]
    )


def _repeated(v: Tensor, n: Any) -> Tensor:
    """``v``'s elements in C order repeated to ``n`` of them (NumPy's rule for the values of
    ``put``, ``putmask`` and flat assignment); a single value as it is (it broadcasts)."""
    size = v.size
    if size == 1:
        return v.reshape(())
    if size == n:
        return v.reshape(-1)
    size, n = int(size), int(n)  # dynamic sizes are specialized (and guarded)
    if size == 0:  # no values: NumPy's own call decides, when the caller falls back
        raise UnsupportedOperationError("np.put or np.putmask with no values")
    picks = np.arange(n, dtype=np.int64) % size
    return call("Gather", v.reshape(-1), Tensor._wrap(picks), axis=0)


def ufunc_at(ufunc: np.ufunc, t: Tensor, index: Any, *values: Any) -> str | None:
    """``ufunc.at(t, index, values)`` (``np.add.at(h, idx, 1.0)``), NumPy's unbuffered
    in-place ``ufunc``: repeated indices accumulate, in index order. Eagerly NumPy's own call
    on ``t``'s array. While a tracer records, ``np.add``, ``np.subtract`` (adding the negated
    values), ``np.multiply``, ``np.maximum`` and ``np.minimum`` become a write with the
    matching ``ScatterND`` reduction, when that reproduces NumPy's loop exactly (see
    :func:`_at_update`). Returns None when done, else why the call cannot be recorded
    exactly, having done nothing: the caller falls back (NumPy computes it, the tracer is told).

    Example:
        >>> import kiln, numpy as np
        >>> h = kiln.zeros(3)
        >>> np.add.at(h, [0, 2, 0], 1.0)
        >>> h.tolist()
        [2.0, 0.0, 1.0]
    """
    handler = current_handler()
    if handler is None:
        ufunc.at(t._data, host(index), *host(values))  # type: ignore[arg-type]
        return None
    reduction = _AT_REDUCTIONS.get(ufunc)
    if reduction is None or len(values) != 1:
        return (
            "kiln records ufunc.at(a, indices, values) of np.add, np.subtract, np.multiply, "
            "np.maximum and np.minimum"
        )
    update = _at_update(ufunc, t.dtype, values[0])
    if isinstance(update, str):
        return update
    handler.write(
        t,
        index,
        update,
        lambda: ufunc.at(host(t), host(index), host(values[0])),
        reduction=reduction,
    )
    return None


# The ScatterND reduction doing ``ufunc.at`` (subtract adds the negated values: exact, as
# IEEE subtraction is the addition of the negation and integers wrap alike).
_AT_REDUCTIONS: dict[np.ufunc, str] = {
    np.add: "add",
    np.subtract: "add",
    np.multiply: "mul",
    np.maximum: "max",
    np.minimum: "min",
}
# Significand bits: a float loop at least 2p+2 bits wide rounds +, -, * of p-bit operands
# back to the p-bit format exactly as the p-bit operation does (no double rounding).
_PRECISION = {"float16": 11, "bfloat16": 8, "float32": 24, "float64": 53}


def _at_update(ufunc: np.ufunc, dtype: np.dtype, value: Any) -> Tensor | str:
    """The values ``ufunc.at`` combines into an array of ``dtype``, as a tensor of that dtype
    for the ScatterND reduction, or why the reduction would not give NumPy's result.

    NumPy's ``ufunc.at`` converts the values with ``np.asarray`` (a Python scalar is not
    weak there: ``np.add.at(float32_array, i, 0.1)`` runs the float64 loop), runs the loop the
    two dtypes promote to, and casts each result back (``unsafe``). The reduction computes in
    ``dtype`` on the values cast to it, which is the same when the loop is ``dtype``'s own;
    for ``+ - *`` on integers (wrapping is a ring map); and for constant values ``dtype``
    holds exactly, combined in a float loop wide enough not to round twice (or an integer
    one)."""
    static = not _holds_tensor(value)
    if not (static or isinstance(value, Tensor)):
        return "the values are a sequence holding tensors (pass one array)"
    try:
        given = value.dtype if isinstance(value, Tensor) else np.asarray(value).dtype
        loop = tuple(ufunc.resolve_dtypes((dtype, given, None)))
    except (TypeError, ValueError) as exc:  # no loop: NumPy raises its own error
        return str(exc)
    if loop != (dtype, dtype, dtype) and not _wraps_alike(ufunc, dtype, loop):
        if not (static and _widens_exactly(dtype, loop, value)):
            return (
                f"NumPy computes it on a {dtype} array with {given} values in its {loop[0]} "
                f"loop, casting each step back; kiln records it only where that equals the "
                f"{dtype} loop (cast the values: values.astype(np.{dtype}))"
            )
    negate = ufunc is np.subtract
    if static:
        array = np.asarray(value).astype(dtype)  # NumPy's unsafe cast
        return Tensor._wrap(np.negative(array) if negate else array)
    v = cast(value, dtype)
    return -v if negate else v


def _holds_tensor(x: Any) -> bool:
    if isinstance(x, Tensor):
        return True
    return isinstance(x, (tuple, list)) and any(_holds_tensor(e) for e in x)


def _wraps_alike(ufunc: np.ufunc, dtype: np.dtype, loop: tuple[np.dtype, ...]) -> bool:
    ring = ufunc in (np.add, np.subtract, np.multiply)
    return ring and all(d.kind in "iu" for d in (dtype, *loop))


def _widens_exactly(dtype: np.dtype, loop: tuple[np.dtype, ...], value: Any) -> bool:
    wide = loop[0]
    if any(d != wide for d in loop):
        return False
    if dtype.kind in "iu":
        if wide.kind not in "iu":
            return False
    else:
        p, q = _PRECISION.get(dtype.name), _PRECISION.get(wide.name)
        if p is None or q is None or q < 2 * p + 2:
            return False
    given = np.asarray(value)
    with np.errstate(all="ignore"):
        held = given.astype(dtype).astype(wide)
        return bool(np.array_equal(held, given.astype(wide), equal_nan=wide.kind == "f"))


def write_out(outs: tuple[Tensor, ...], results: Any, numpy_call: Callable[[], Any]) -> Any:
    """A ufunc's ``out=`` tensors given kiln's ``results`` of the call (recorded): NumPy
    performs the call into the tensors' arrays (its values, casts and errors), then each
    write is recorded; returns what NumPy returns (the out tensors)."""
    handler = current_handler()
    if handler is None or results is None:
        numpy_call()
    else:
        produced = results if isinstance(results, tuple) else (results,)
        values = [cast(as_tensor(r), out.dtype) for out, r in zip(outs, produced)]
        handler.write(outs[0], None, values[0], numpy_call)  # NumPy writes all the outs
        for out, value in zip(outs[1:], values[1:]):
            handler.write(out, None, value, _nothing)
    return outs[0] if len(outs) == 1 else outs


def _nothing() -> None:
    pass


def _inplace(ufunc: np.ufunc, symbol: str) -> Callable[[Tensor, Any], Tensor]:
    def method(self: Tensor, other: Any) -> Tensor:
        handler = current_handler()
        if handler is None:
            ufunc(self._data, host(other), out=self._data)
            return self
        forward = getattr(Tensor, f"__{_FORWARD[ufunc.__name__]}__", None)
        if forward is None:  # no kiln operator (the shifts): NumPy's write, not recorded
            handler.unsupported(f"t {symbol}= other (np.{ufunc.__name__})")
            ufunc(self._data, host(other), out=self._data)
            return self
        result = forward(self, other)  # recorded, from the contents before the write
        if result is NotImplemented:
            return NotImplemented
        handler.write(
            self,
            None,
            cast(result, self.dtype),
            lambda: ufunc(self._data, host(other), out=self._data),
        )
        return self

    method.__name__ = f"__i{_FORWARD[ufunc.__name__]}__"
    method.__doc__ = f"``t {symbol}= other`` in place (``np.{ufunc.__name__}(t, other, out=t)``)."
    return method


_FORWARD = {
    "add": "add",
    "subtract": "sub",
    "multiply": "mul",
    "divide": "truediv",
    "floor_divide": "floordiv",
    "remainder": "mod",
    "power": "pow",
    "matmul": "matmul",
    "bitwise_and": "and",
    "bitwise_or": "or",
    "bitwise_xor": "xor",
    "left_shift": "lshift",
    "right_shift": "rshift",
}

_SYMBOLS = {
    np.add: "+",
    np.subtract: "-",
    np.multiply: "*",
    np.true_divide: "/",
    np.floor_divide: "//",
    np.remainder: "%",
    np.power: "**",
    np.matmul: "@",
    np.bitwise_and: "&",
    np.bitwise_or: "|",
    np.bitwise_xor: "^",
    np.left_shift: "<<",
    np.right_shift: ">>",
}

# ``__iadd__`` and friends, attached by kiln.functions.tensor_methods.
INPLACE_OPERATORS: dict[str, Callable[[Tensor, Any], Tensor]] = {
    f"__i{_FORWARD[u.__name__]}__": _inplace(u, s) for u, s in _SYMBOLS.items()
}
