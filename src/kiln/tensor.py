"""``kiln.Tensor``: an immutable n-d array, and the functions that make one.

On the CPU a tensor's storage is a read-only NumPy array: ``np.asarray(t)`` and ``t.numpy()``
return it without copying. Every computation on a tensor (operators, methods, ``kiln.*``
functions and NumPy functions applied to it) goes through :func:`kiln.ops.dispatch.dispatch`,
which is what lets a tracer record it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from . import dtypes
from .device import Device, PlaceLike, as_device, cpu, require_backend
from .errors import OpArgumentError, UnsupportedOperationError
from .ops.dispatch import current_handler
from .ops.registry import TensorType
from .symbolic import Dim, Shape, SymDim, format_shape

if TYPE_CHECKING:
    from .dtypes import DTypeLike

__all__ = [
    "Tensor",
    "tensor",
    "asarray",
    "zeros",
    "ones",
    "full",
    "empty",
    "arange",
    "zeros_like",
    "ones_like",
    "full_like",
    "empty_like",
    "from_dlpack",
]

# Small integer tensors carry their contents in their TensorType, so shape arithmetic
# (Reshape's target, Slice's bounds) is known to ``infer`` rules.
_VALUE_LIMIT = 64
_FLOAT_VALUE_LIMIT = 8  # small float vectors too: Resize's scales decide its output shape


def _readonly(array: np.ndarray) -> np.ndarray:
    if array.flags.writeable:
        array = array.view()
        array.flags.writeable = False
    return array


class Tensor:
    """An immutable n-dimensional array with a dtype, a shape and a device.

    Build one with :func:`kiln.tensor` (copies) or :func:`kiln.asarray` (no copy when possible).

    Example:
        >>> import kiln
        >>> t = kiln.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=kiln.float32)
        >>> (t * 2 + 1).tolist()
        [[3.0, 5.0], [7.0, 9.0]]
        >>> t.sum(axis=-1).dtype
        dtype('float32')
    """

    __slots__ = ("_data", "_meta", "_trace", "__weakref__")
    __array_priority__ = 1000  # ndarray <op> Tensor defers to Tensor's reflected operator
    __hash__ = None  # type: ignore[assignment]  # like ndarray: == is elementwise

    _data: np.ndarray | None
    _meta: TensorType | None
    _trace: Any

    def __init__(self, data: Any, dtype: DTypeLike | None = None) -> None:
        array = _native(np.array(data, dtype=None if dtype is None else dtypes.as_dtype(dtype)))
        _check_supported(array)
        self._data = _readonly(array)
        self._meta = None
        self._trace = None

    @classmethod
    def _wrap(cls, array: np.ndarray) -> Tensor:
        """A tensor over ``array`` without copying or checks (kernels' outputs)."""
        t = object.__new__(cls)
        t._data = _readonly(array)
        t._meta = None
        t._trace = None
        return t

    @classmethod
    def _abstract(cls, ttype: TensorType, trace: Any) -> Tensor:
        """A tensor with a type but no values (a tracer's symbolic stand-in)."""
        t = object.__new__(cls)
        t._data = None
        t._meta = ttype
        t._trace = trace
        return t

    # -- metadata -------------------------------------------------------------------------

    @property
    def type(self) -> TensorType:
        """The tensor's :class:`TensorType`: dtype, shape, and contents of a small int tensor."""
        meta = self._meta
        if meta is None:
            data = self._data
            assert data is not None
            value: tuple[int | float, ...] | None = None
            if data.ndim <= 1 and data.size <= _VALUE_LIMIT and data.dtype.kind in "iu":
                value = tuple(int(v) for v in data.reshape(-1).tolist())
            elif data.ndim == 1 and data.size <= _FLOAT_VALUE_LIMIT and data.dtype.kind == "f":
                value = tuple(float(v) for v in data.tolist())  # e.g. Resize's scales
            meta = self._meta = TensorType(data.dtype, data.shape, value)
        return meta

    @property
    def dtype(self) -> np.dtype:
        data = self._data
        return data.dtype if data is not None else self.type.dtype

    @property
    def shape(self) -> Shape:
        data = self._data
        if data is not None and self._meta is None:
            return data.shape
        return self.type.shape

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> Dim:
        total: Dim = 1
        for d in self.shape:
            total = total * d
        return total

    @property
    def device(self) -> Device:
        return cpu

    @property
    def T(self) -> Tensor:  # noqa: N802 - NumPy's name
        return _F.transpose(self)

    @property
    def mT(self) -> Tensor:  # noqa: N802 - NumPy's name
        return _F.matrix_transpose(self)

    # -- host conversion ------------------------------------------------------------------

    def _host(self, what: str) -> np.ndarray:
        handler = current_handler()
        if handler is not None and (self._trace is not None or self._data is None):
            return handler.host_read(self, what)
        assert self._data is not None
        return self._data

    def numpy(self) -> np.ndarray:
        """The values as a read-only NumPy array (zero-copy on the CPU)."""
        return self._host("Tensor.numpy()")

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        data = self._host("np.asarray(tensor)")
        if dtype is not None and np.dtype(dtype) != data.dtype:
            if copy is False:
                raise ValueError(
                    f"np.asarray(tensor, dtype={np.dtype(dtype)}, copy=False): converting "
                    f"{data.dtype} needs a copy"
                )
            return data.astype(dtype)
        return data.copy() if copy else data

    def __dlpack__(self, *, stream: Any = None, **kwargs: Any) -> Any:
        data = self._host("Tensor.__dlpack__()")
        kwargs.pop("dl_device", None)
        try:
            return data.__dlpack__(stream=stream, **kwargs)
        except BufferError:
            # An old consumer cannot be told the buffer is read-only: give it its own copy.
            kwargs.pop("copy", None)
            return np.array(data).__dlpack__(stream=stream, **kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)  # kDLCPU

    def item(self) -> Any:
        """The single value of a size-1 tensor as a Python scalar."""
        data = self._host("Tensor.item()")
        if data.size != 1:
            raise OpArgumentError(
                "Tensor.item() needs a tensor with one element, got shape "
                f"{format_shape(data.shape)}"
            )
        return data.item()

    def tolist(self) -> Any:
        """The values as nested Python lists of Python scalars."""
        return self._host("Tensor.tolist()").tolist()

    def __bool__(self) -> bool:
        data = self._host("bool(tensor)")
        if data.size != 1:
            raise ValueError(
                f"the truth value of a tensor of shape {format_shape(data.shape)} is ambiguous; "
                "use .any() or .all()"
            )
        return bool(data.reshape(()))

    def __float__(self) -> float:
        return float(self._scalar("float(tensor)"))

    def __int__(self) -> int:
        return int(self._scalar("int(tensor)"))

    def __index__(self) -> int:
        if self.dtype.kind not in "iu":  # as NumPy: a bool is not an index
            raise TypeError(f"only integer tensors can be used as an index, got {self.dtype}")
        return int(self._scalar("operator.index(tensor)"))

    def _scalar(self, what: str) -> Any:
        data = self._host(what)
        if data.size != 1:
            raise TypeError(
                f"{what} needs a tensor with one element, got shape {format_shape(data.shape)}"
            )
        return data.reshape(())[()]

    def __len__(self) -> int:
        shape = self.shape
        if not shape:
            raise TypeError("len() of a 0-d tensor")
        first = shape[0]
        if not isinstance(first, int):
            message = (
                f"len() of (or iterating over) a tensor whose first axis is the symbolic size "
                f"{first}: a graph cannot unroll a loop of unknown length. Use tensor.shape[0] "
                "to keep the size symbolic, or mark the axis static"
            )
            if current_handler() is not None:
                from .errors import CaptureError
                from .source import user_source

                raise CaptureError(f"{message} (at {user_source()})")
            raise TypeError(message)
        return first

    def __iter__(self) -> Iterator[Tensor]:
        for i in range(len(self)):
            yield self[i]

    def __repr__(self) -> str:
        head = f"dtype={self.dtype.name}, shape={format_shape(self.shape)}"
        if self._data is None:
            return f"Tensor(<traced>, {head})"
        body = np.array2string(self._data, separator=", ", prefix="Tensor(")
        return f"Tensor({body}, {head})"

    def __str__(self) -> str:
        return repr(self) if self._data is None else str(self._data)

    def __format__(self, spec: str) -> str:
        if spec and self._data is not None and self._data.ndim == 0:
            return format(self._data.item(), spec)
        return str(self)

    def __copy__(self) -> Tensor:
        return self  # immutable

    def __deepcopy__(self, memo: dict) -> Tensor:
        return self

    def __reduce__(self) -> tuple:
        return (Tensor._wrap, (np.array(self.numpy()),))

    # -- immutability ---------------------------------------------------------------------

    def __setitem__(self, index: Any, value: Any) -> None:
        raise TypeError(
            "kiln tensors are immutable: t[index] = value is not supported. Build the updated "
            "tensor instead, e.g. kiln.where(mask, value, t), or kiln.index_update(t, index, "
            "value) for an indexed update"
        )

    # -- NumPy protocols ------------------------------------------------------------------

    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        from .functions import numpy_protocol

        return numpy_protocol.array_ufunc(ufunc, method, inputs, kwargs)

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        from .functions import numpy_protocol

        return numpy_protocol.array_function(func, types, args, kwargs)

    # -- operators ------------------------------------------------------------------------

    def __add__(self, other: Any) -> Tensor:
        return _F.add(self, other)

    def __radd__(self, other: Any) -> Tensor:
        return _F.add(other, self)

    def __sub__(self, other: Any) -> Tensor:
        return _F.subtract(self, other)

    def __rsub__(self, other: Any) -> Tensor:
        return _F.subtract(other, self)

    def __mul__(self, other: Any) -> Tensor:
        return _F.multiply(self, other)

    def __rmul__(self, other: Any) -> Tensor:
        return _F.multiply(other, self)

    def __truediv__(self, other: Any) -> Tensor:
        return _F.divide(self, other)

    def __rtruediv__(self, other: Any) -> Tensor:
        return _F.divide(other, self)

    def __floordiv__(self, other: Any) -> Tensor:
        return _F.floor_divide(self, other)

    def __rfloordiv__(self, other: Any) -> Tensor:
        return _F.floor_divide(other, self)

    def __mod__(self, other: Any) -> Tensor:
        return _F.remainder(self, other)

    def __rmod__(self, other: Any) -> Tensor:
        return _F.remainder(other, self)

    def __pow__(self, other: Any) -> Tensor:
        return _F.power(self, other)

    def __rpow__(self, other: Any) -> Tensor:
        return _F.power(other, self)

    def __matmul__(self, other: Any) -> Tensor:
        return _F.matmul(self, other)

    def __rmatmul__(self, other: Any) -> Tensor:
        return _F.matmul(other, self)

    def __and__(self, other: Any) -> Tensor:
        return _F.bitwise_and(self, other)

    def __rand__(self, other: Any) -> Tensor:
        return _F.bitwise_and(other, self)

    def __or__(self, other: Any) -> Tensor:
        return _F.bitwise_or(self, other)

    def __ror__(self, other: Any) -> Tensor:
        return _F.bitwise_or(other, self)

    def __xor__(self, other: Any) -> Tensor:
        return _F.bitwise_xor(self, other)

    def __rxor__(self, other: Any) -> Tensor:
        return _F.bitwise_xor(other, self)

    def __invert__(self) -> Tensor:
        return _F.invert(self)

    def __neg__(self) -> Tensor:
        return _F.negative(self)

    def __pos__(self) -> Tensor:
        return self

    def __abs__(self) -> Tensor:
        return _F.abs(self)

    def __eq__(self, other: Any) -> Tensor:  # type: ignore[override]
        return _F.equal(self, other)

    def __ne__(self, other: Any) -> Tensor:  # type: ignore[override]
        return _F.not_equal(self, other)

    def __lt__(self, other: Any) -> Tensor:
        return _F.less(self, other)

    def __le__(self, other: Any) -> Tensor:
        return _F.less_equal(self, other)

    def __gt__(self, other: Any) -> Tensor:
        return _F.greater(self, other)

    def __ge__(self, other: Any) -> Tensor:
        return _F.greater_equal(self, other)

    def __getitem__(self, index: Any) -> Tensor:
        return _F.getitem(self, index)

    # -- methods (NumPy's names and signatures) ------------------------------------------

    def astype(self, dtype: DTypeLike) -> Tensor:
        """This tensor converted to ``dtype`` (the same tensor when it already has it)."""
        return _F.astype(self, dtype)

    def reshape(self, *shape: Any) -> Tensor:
        """The same values in a new shape; one entry may be -1. ``t.reshape(2, -1)`` or
        ``t.reshape((2, -1))``."""
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        return _F.reshape(self, shape)

    def transpose(self, *axes: Any) -> Tensor:
        """Axes permuted (reversed when none are given)."""
        if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
            axes = tuple(axes[0])
        return _F.transpose(self, axes or None)

    def squeeze(self, axis: int | Sequence[int] | None = None) -> Tensor:
        return _F.squeeze(self, axis)

    def flatten(self) -> Tensor:
        return _F.reshape(self, (-1,))

    ravel = flatten

    def sum(self, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> Tensor:
        return _F.sum(self, axis=axis, dtype=dtype, keepdims=keepdims)

    def mean(self, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> Tensor:
        return _F.mean(self, axis=axis, dtype=dtype, keepdims=keepdims)

    def max(self, axis: Any = None, keepdims: bool = False) -> Tensor:
        return _F.max(self, axis=axis, keepdims=keepdims)

    def min(self, axis: Any = None, keepdims: bool = False) -> Tensor:
        return _F.min(self, axis=axis, keepdims=keepdims)

    def prod(self, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> Tensor:
        return _F.prod(self, axis=axis, dtype=dtype, keepdims=keepdims)

    def argmax(self, axis: int | None = None, keepdims: bool = False) -> Tensor:
        return _F.argmax(self, axis=axis, keepdims=keepdims)

    def argmin(self, axis: int | None = None, keepdims: bool = False) -> Tensor:
        return _F.argmin(self, axis=axis, keepdims=keepdims)

    def var(self, axis: Any = None, ddof: int = 0, keepdims: bool = False) -> Tensor:
        return _F.var(self, axis=axis, ddof=ddof, keepdims=keepdims)

    def std(self, axis: Any = None, ddof: int = 0, keepdims: bool = False) -> Tensor:
        return _F.std(self, axis=axis, ddof=ddof, keepdims=keepdims)

    def any(self, axis: Any = None, keepdims: bool = False) -> Tensor:
        return _F.any(self, axis=axis, keepdims=keepdims)

    def all(self, axis: Any = None, keepdims: bool = False) -> Tensor:
        return _F.all(self, axis=axis, keepdims=keepdims)

    def cumsum(self, axis: int | None = None) -> Tensor:
        return _F.cumsum(self, axis=axis)

    def clip(self, min: Any = None, max: Any = None) -> Tensor:  # noqa: A002 - NumPy's names
        return _F.clip(self, min, max)

    def round(self, decimals: int = 0) -> Tensor:
        return _F.round(self, decimals)

    def swapaxes(self, axis1: int, axis2: int) -> Tensor:
        return _F.swapaxes(self, axis1, axis2)

    def dot(self, other: Any) -> Tensor:
        return _F.dot(self, other)


def _native(array: np.ndarray) -> np.ndarray:
    # Big-endian data (read from a file, say) has a supported dtype in a foreign byte order;
    # kernels and ``dtype ==`` checks expect native order, so convert (a copy) once here.
    if not array.dtype.isnative:
        array = array.astype(array.dtype.newbyteorder("="))
    return array


def _check_supported(array: np.ndarray) -> None:
    if array.dtype not in dtypes.ALL_DTYPES:
        raise TypeError(
            f"kiln does not support dtype {array.dtype}; expected one of "
            + ", ".join(d.name for d in dtypes.ALL_DTYPES)
        )


def _check_place(device: PlaceLike) -> None:
    if device is not None:
        require_backend(as_device(device))


def _unwrap(data: Any) -> Any:
    if isinstance(data, Tensor):
        return data.numpy()
    if isinstance(data, (list, tuple)):
        return type(data)(_unwrap(d) for d in data)
    return data


def tensor(data: Any, dtype: DTypeLike | None = None, device: PlaceLike = None) -> Tensor:
    """A new tensor holding a copy of ``data`` (nested lists, scalars, arrays, tensors).

    Example:
        >>> tensor([1, 2, 3]).dtype
        dtype('int64')
    """
    _check_place(device)
    return Tensor(_unwrap(data), dtype)


def asarray(data: Any, dtype: DTypeLike | None = None, device: PlaceLike = None) -> Tensor:
    """``data`` as a tensor, sharing memory with a NumPy array or tensor where it can.

    Example:
        >>> import numpy as np
        >>> a = np.arange(3.0)
        >>> np.shares_memory(np.asarray(asarray(a)), a)
        True
    """
    _check_place(device)
    if isinstance(data, Tensor) and (dtype is None or dtypes.as_dtype(dtype) == data.dtype):
        return data
    want = None if dtype is None else dtypes.as_dtype(dtype)
    if isinstance(data, Tensor):
        return data.astype(want)
    array = _native(np.asarray(_unwrap(data), dtype=want))
    _check_supported(array)
    return Tensor._wrap(array)


def _dims(shape: Any) -> tuple[Any, ...]:
    if isinstance(shape, (int, np.integer, SymDim)):
        return (shape,)
    return tuple(shape)


def full(
    shape: Any, fill_value: Any, dtype: DTypeLike | None = None, device: PlaceLike = None
) -> Tensor:
    """A tensor of ``shape`` filled with ``fill_value`` (NumPy's default dtypes).

    Sizes may be symbolic inside a trace (``kiln.zeros((x.shape[0], 4))``): the tensor is then
    computed by a recorded ``ConstantOfShape``.
    """
    _check_place(device)
    want = None if dtype is None else dtypes.as_dtype(dtype)
    dims = _dims(shape)
    if not all(isinstance(d, (int, np.integer)) for d in dims):
        return _F.constant_of_shape(dims, fill_value, want)
    if any(int(d) < 0 for d in dims):
        raise OpArgumentError(f"full: negative size in shape {dims}")
    array = np.full(tuple(int(d) for d in dims), _unwrap(fill_value), dtype=want)
    _check_supported(array)
    return Tensor._wrap(array)


def zeros(shape: Any, dtype: DTypeLike | None = None, device: PlaceLike = None) -> Tensor:
    """A tensor of zeros (float64 unless ``dtype`` says otherwise, as NumPy)."""
    return full(shape, 0, dtypes.float64 if dtype is None else dtype, device)


def ones(shape: Any, dtype: DTypeLike | None = None, device: PlaceLike = None) -> Tensor:
    """A tensor of ones (float64 unless ``dtype`` says otherwise, as NumPy)."""
    return full(shape, 1, dtypes.float64 if dtype is None else dtype, device)


def empty(shape: Any, dtype: DTypeLike | None = None, device: PlaceLike = None) -> Tensor:
    """A tensor of ``shape``; kiln tensors are immutable, so it is zero-filled."""
    return zeros(shape, dtype, device)


def _like(t: Any, dtype: DTypeLike | None) -> tuple[Any, np.dtype]:
    t = asarray(t)
    return t.shape, (t.dtype if dtype is None else dtypes.as_dtype(dtype))


def zeros_like(t: Any, dtype: DTypeLike | None = None) -> Tensor:
    shape, dt = _like(t, dtype)
    return full(shape, 0, dt)


def ones_like(t: Any, dtype: DTypeLike | None = None) -> Tensor:
    shape, dt = _like(t, dtype)
    return full(shape, 1, dt)


def full_like(t: Any, fill_value: Any, dtype: DTypeLike | None = None) -> Tensor:
    shape, dt = _like(t, dtype)
    return full(shape, fill_value, dt)


def empty_like(t: Any, dtype: DTypeLike | None = None) -> Tensor:
    return zeros_like(t, dtype)


def arange(
    start: Any,
    stop: Any = None,
    step: Any = 1,
    dtype: DTypeLike | None = None,
    device: PlaceLike = None,
) -> Tensor:
    """Evenly spaced values in ``[start, stop)``, as ``np.arange``."""
    _check_place(device)
    if stop is None:
        start, stop = 0, start
    want = None if dtype is None else dtypes.as_dtype(dtype)
    if not all(isinstance(v, (int, float, np.number)) for v in (start, stop, step)):
        return _F.range_(start, stop, step, want)  # symbolic bounds: a recorded Range
    array = np.arange(start, stop, step, dtype=want)
    _check_supported(array)
    return Tensor._wrap(array)


def from_dlpack(x: Any) -> Tensor:
    """A tensor sharing memory with any object that implements ``__dlpack__`` (CPU only)."""
    device_type, _ = x.__dlpack_device__() if hasattr(x, "__dlpack_device__") else (1, 0)
    if device_type != 1:
        raise UnsupportedOperationError(
            f"from_dlpack: the object lives on DLPack device type {device_type}; kiln's "
            "executor runs on the CPU today. Move it to the CPU first."
        )
    return Tensor._wrap(np.from_dlpack(x))


from . import functions as _F  # noqa: E402  # the methods above delegate to the function layer
