"""``kiln.Tensor``: an n-d array, the constructors that wrap data in one, and the eager dispatch
door.

On the CPU a tensor's storage is a NumPy array: ``np.asarray(t)`` and ``t.numpy()`` return it
without copying. Tensors follow NumPy's in-place API (``t[i] = v``, ``t += u``, ``out=``,
``np.copyto``, ``fill``; attached by :mod:`kiln.functions.inplace`), and they alias as NumPy
arrays do: the result of a view operator (an op with the ``VIEW`` trait: slicing, transpose,
reshape where NumPy gives a view) shares its input's memory, every other result is a new array
(:func:`fresh_outputs`). Every computation on a tensor (operators, methods, ``kiln.*``
functions and NumPy functions applied to it) goes through :func:`dispatch`: while a tracer is
installed it records the call, otherwise the operator's kernel runs here and its arrays come back
as tensors.

The NumPy-style methods and operators (``t.sum()``, ``t + u``, ``t[i]``, the NumPy protocols) call
the functions layer above this module, so that layer attaches them
(:mod:`kiln.functions.tensor_methods`); they are declared in the class body for type checkers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from . import dtypes
from .device import Device, PlaceLike, as_device, cpu, require_backend
from .errors import ArgumentTypeError, OpArgumentError, UnsupportedOperationError
from .ops.dispatch import current_handler, eager_kernel, handler_now, run_kernel, run_quiet
from .ops.folding import FOLDING_LIMITS
from .ops.registry import VIEW, OpDef, TensorType, get_op
from .symbolic import Dim, Shape, format_shape

if TYPE_CHECKING:
    from .dtypes import DTypeLike

__all__ = [
    "Tensor",
    "tensor",
    "asarray",
    "from_dlpack",
    "plain_array",
    "dispatch",
    "call",
    "fresh_outputs",
    "rebind",
    "memory_root",
]

# Small integer tensors carry their contents in their TensorType, so shape arithmetic
# (Reshape's target, Slice's bounds) is known to ``infer`` rules; small float vectors too
# (Resize's scales decide its output shape).
_VALUE_LIMIT = FOLDING_LIMITS.known_ints
_FLOAT_VALUE_LIMIT = FOLDING_LIMITS.known_floats


def memory_root(array: np.ndarray) -> Any:
    """The object that owns ``array``'s memory (the end of its ``base`` chain): a view of an
    array, even an empty one, has the array's root; a copy has its own."""
    base = array.base
    while base is not None:
        array = base
        base = getattr(array, "base", None)
    return array


def fresh_outputs(
    op: OpDef, arrays: Sequence[np.ndarray | None], results: Sequence[np.ndarray]
) -> Sequence[np.ndarray]:
    """``results`` of ``op`` on ``arrays``, aliasing as NumPy's results do: a view operator's
    result may share its input's memory (a write through it reaches the input); any other
    result that shares memory with an input (a kernel returning its input unchanged, as
    ``Identity`` and a no-op ``Cast`` do) is copied, since NumPy gives a new array there."""
    if VIEW in op.traits:
        return results
    for array in results:
        if array.base is not None or not array.flags.writeable:
            break  # maybe a view of an input's memory, or read-only: look closer
        for a in arrays:
            if a is array:
                break
        else:
            continue
        break  # an input itself
    else:
        return results  # new arrays (the common case)
    roots = [memory_root(a) for a in arrays if a is not None]
    out = []
    for array in results:
        root = memory_root(array)
        shared = any(root is r for r in roots)
        out.append(array.copy() if shared or not array.flags.writeable else array)
    return tuple(out)


class Tensor:
    """An n-dimensional array with a dtype, a shape and a device (NumPy's semantics,
    in-place writes included).

    Build one with :func:`kiln.tensor` (copies) or :func:`kiln.asarray` (no copy when possible).
    Its NumPy-style methods and operators are attached by
    :mod:`kiln.functions.tensor_methods` when kiln is imported.

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
        check_supported(array)
        self._data = array
        self._meta = None
        self._trace = None

    @classmethod
    def _wrap(cls, array: np.ndarray) -> Tensor:
        """A tensor over ``array`` without copying or checks (kernels' outputs)."""
        t = object.__new__(cls)
        t._data = array
        t._meta = None
        t._trace = None
        return t

    @classmethod
    def _abstract(cls, ttype: TensorType, trace: Any, data: np.ndarray | None = None) -> Tensor:
        """A tensor a tracer records: its type, the tracer's reference, and its values when the
        tracer computed them (``None``: symbolic only)."""
        t = object.__new__(cls)
        t._data = data
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
            meta = TensorType(data.dtype, data.shape, value)
            if value is None or not data.flags.writeable:
                self._meta = meta  # contents that a write (here or through a view) can change
        return meta  # are read anew each time

    @property
    def dtype(self) -> np.dtype:
        data = self._data
        return data.dtype if data is not None else self.type.dtype

    @property
    def shape(self) -> Shape:
        meta = self._meta  # a recorded tensor's shape may be symbolic where its data's is not
        if meta is not None:
            return meta.shape
        data = self._data
        assert data is not None
        return data.shape

    @property
    def ndim(self) -> int:
        meta = self._meta
        if meta is not None:
            return len(meta.shape)
        data = self._data
        assert data is not None
        return data.ndim

    @property
    def size(self) -> Dim:
        total: Dim = 1
        for d in self.shape:
            total = total * d
        return total

    @property
    def device(self) -> Device:
        return cpu

    # -- host conversion ------------------------------------------------------------------

    def _host(self, what: str) -> np.ndarray:
        handler = current_handler()
        if handler is not None and (self._trace is not None or self._data is None):
            return handler.host_read(self, what)
        assert self._data is not None
        return self._data

    def numpy(self) -> np.ndarray:
        """The values as a NumPy array sharing the tensor's memory (zero-copy on the CPU)."""
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
            # Python needs an int: the capture specializes the size and guards it.
            from .symbolic import specialize

            return specialize(first, f"len() of a tensor of shape {format_shape(shape)}")
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

    def __reduce__(self) -> tuple:
        return (Tensor._wrap, (np.array(self.numpy()),))

    # -- attached by kiln.functions.tensor_methods ----------------------------------------

    if TYPE_CHECKING:
        # The NumPy-style methods and operators call kiln.functions, which sits above this
        # module, so that layer attaches them when kiln is imported (jax's array_methods.py
        # does the same for its Array). Declared here so type checkers and readers see them.

        @property
        def T(self) -> Tensor: ...  # noqa: N802 - NumPy's name
        @property
        def mT(self) -> Tensor: ...  # noqa: N802 - NumPy's name
        @property
        def flat(self) -> Any: ...  # kiln.functions.inplace.FlatIter

        def __array_ufunc__(
            self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any
        ) -> Any: ...
        def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any: ...

        def __add__(self, other: Any) -> Tensor: ...
        def __radd__(self, other: Any) -> Tensor: ...
        def __sub__(self, other: Any) -> Tensor: ...
        def __rsub__(self, other: Any) -> Tensor: ...
        def __mul__(self, other: Any) -> Tensor: ...
        def __rmul__(self, other: Any) -> Tensor: ...
        def __truediv__(self, other: Any) -> Tensor: ...
        def __rtruediv__(self, other: Any) -> Tensor: ...
        def __floordiv__(self, other: Any) -> Tensor: ...
        def __rfloordiv__(self, other: Any) -> Tensor: ...
        def __mod__(self, other: Any) -> Tensor: ...
        def __rmod__(self, other: Any) -> Tensor: ...
        def __pow__(self, other: Any) -> Tensor: ...
        def __rpow__(self, other: Any) -> Tensor: ...
        def __matmul__(self, other: Any) -> Tensor: ...
        def __rmatmul__(self, other: Any) -> Tensor: ...
        def __and__(self, other: Any) -> Tensor: ...
        def __rand__(self, other: Any) -> Tensor: ...
        def __or__(self, other: Any) -> Tensor: ...
        def __ror__(self, other: Any) -> Tensor: ...
        def __xor__(self, other: Any) -> Tensor: ...
        def __rxor__(self, other: Any) -> Tensor: ...
        def __invert__(self) -> Tensor: ...
        def __pos__(self) -> Tensor: ...
        def __neg__(self) -> Tensor: ...
        def __abs__(self) -> Tensor: ...
        def __eq__(self, other: Any) -> Tensor: ...  # type: ignore[override]
        def __ne__(self, other: Any) -> Tensor: ...  # type: ignore[override]
        def __lt__(self, other: Any) -> Tensor: ...
        def __le__(self, other: Any) -> Tensor: ...
        def __gt__(self, other: Any) -> Tensor: ...
        def __ge__(self, other: Any) -> Tensor: ...
        def __getitem__(self, index: Any) -> Tensor: ...
        def __setitem__(self, index: Any, value: Any) -> None: ...
        def __copy__(self) -> Tensor: ...
        def __deepcopy__(self, memo: dict) -> Tensor: ...
        def __iadd__(self, other: Any) -> Tensor: ...
        def __isub__(self, other: Any) -> Tensor: ...
        def __imul__(self, other: Any) -> Tensor: ...
        def __itruediv__(self, other: Any) -> Tensor: ...
        def __ifloordiv__(self, other: Any) -> Tensor: ...
        def __imod__(self, other: Any) -> Tensor: ...
        def __ipow__(self, other: Any) -> Tensor: ...
        def __imatmul__(self, other: Any) -> Tensor: ...
        def __iand__(self, other: Any) -> Tensor: ...
        def __ior__(self, other: Any) -> Tensor: ...
        def __ixor__(self, other: Any) -> Tensor: ...
        def __ilshift__(self, other: Any) -> Tensor: ...
        def __irshift__(self, other: Any) -> Tensor: ...
        def fill(self, value: Any) -> None: ...
        def __lshift__(self, other: Any) -> Any: ...
        def __rlshift__(self, other: Any) -> Any: ...
        def __rshift__(self, other: Any) -> Any: ...
        def __rrshift__(self, other: Any) -> Any: ...

        def astype(self, dtype: DTypeLike) -> Tensor: ...
        def copy(self, order: str = "C") -> Tensor: ...
        def reshape(self, *shape: Any) -> Tensor: ...
        def transpose(self, *axes: Any) -> Tensor: ...
        def squeeze(self, axis: int | Sequence[int] | None = None) -> Tensor: ...
        def flatten(self) -> Tensor: ...
        def ravel(self) -> Tensor: ...
        def sum(self, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> Tensor: ...
        def mean(self, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> Tensor: ...
        def max(self, axis: Any = None, keepdims: bool = False) -> Tensor: ...
        def min(self, axis: Any = None, keepdims: bool = False) -> Tensor: ...
        def prod(self, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> Tensor: ...
        def argmax(self, axis: int | None = None, keepdims: bool = False) -> Tensor: ...
        def argmin(self, axis: int | None = None, keepdims: bool = False) -> Tensor: ...
        def var(self, axis: Any = None, ddof: int = 0, keepdims: bool = False) -> Tensor: ...
        def std(self, axis: Any = None, ddof: int = 0, keepdims: bool = False) -> Tensor: ...
        def any(self, axis: Any = None, keepdims: bool = False) -> Tensor: ...
        def all(self, axis: Any = None, keepdims: bool = False) -> Tensor: ...
        def cumsum(self, axis: int | None = None) -> Tensor: ...
        def clip(self, min: Any = None, max: Any = None) -> Tensor: ...  # noqa: A002
        def round(self, decimals: int = 0) -> Tensor: ...
        def swapaxes(self, axis1: int, axis2: int) -> Tensor: ...
        def dot(self, other: Any) -> Tensor: ...


def plain_array(array: np.ndarray, where: str) -> np.ndarray:
    """``array`` as a plain ndarray in native byte order, as kiln computes on: big-endian data
    becomes a native copy (NumPy's results are native too), a subclass that only adds
    storage (``np.memmap``) a view; ``np.matrix`` and masked arrays, whose operators mean
    something else, are refused with what to pass instead.

    Args:
        array: The array.
        where: What it is, for the message (``input 'x'``).

    Raises:
        ArgumentTypeError: for an ``np.matrix`` or a masked array.

    Example:
        >>> plain_array(np.ones(2, ">f4"), "x").dtype.isnative
        True
    """
    if isinstance(array, np.ma.MaskedArray):
        raise ArgumentTypeError(
            f"{where} is a masked array (numpy.ma.MaskedArray); kiln computes on plain arrays "
            "and would ignore its mask: pass m.filled(value) to replace the masked entries, "
            "or np.asarray(m) for the data as stored"
        )
    if isinstance(array, np.matrix):
        raise ArgumentTypeError(
            f"{where} is a numpy.matrix, whose * is a matrix product and whose results stay "
            "2-D; kiln computes with plain array semantics: pass np.asarray(m) (and use @ for "
            "matrix products)"
        )
    if type(array) is not np.ndarray:
        array = array.view(np.ndarray)
    return _native(array)


def _native(array: np.ndarray) -> np.ndarray:
    # Big-endian data (read from a file, say) has a supported dtype in a foreign byte order;
    # kernels and ``dtype ==`` checks expect native order, so convert (a copy) once here.
    if not array.dtype.isnative:
        array = array.astype(array.dtype.newbyteorder("="))
    return array


def rebind(t: Tensor, trace: Any, ttype: TensorType) -> None:
    """Point the recording tensor ``t`` at another graph value (``trace``, of type ``ttype``):
    a tracer's new version of an array after a write into it, or a view it re-read
    (:mod:`kiln.capture.views`). Its values, when it has them, stay where they are."""
    t._trace = trace
    t._meta = ttype


# check_supported, check_place and unwrap are shared with kiln.functions.creation (kiln.zeros,
# kiln.arange, ...), which builds tensors from NumPy arrays the same way.


def check_supported(array: np.ndarray) -> None:
    """Raise ``TypeError`` unless kiln supports ``array``'s dtype."""
    if array.dtype not in dtypes.ALL_DTYPES:
        raise TypeError(
            f"kiln does not support dtype {array.dtype}; expected one of "
            + ", ".join(d.name for d in dtypes.ALL_DTYPES)
        )


def check_place(device: PlaceLike) -> None:
    """Raise unless ``device`` (``None``: the default) has its backend installed."""
    if device is not None:
        require_backend(as_device(device))


def unwrap(data: Any) -> Any:
    """``data`` with each tensor (also inside lists and tuples) replaced by its array."""
    if isinstance(data, Tensor):
        return data.numpy()
    if isinstance(data, (list, tuple)):
        return type(data)(unwrap(d) for d in data)
    return data


def tensor(data: Any, dtype: DTypeLike | None = None, device: PlaceLike = None) -> Tensor:
    """A new tensor holding a copy of ``data`` (nested lists, scalars, arrays, tensors).

    Example:
        >>> tensor([1, 2, 3]).dtype
        dtype('int64')
    """
    check_place(device)
    return Tensor(unwrap(data), dtype)


def asarray(data: Any, dtype: DTypeLike | None = None, device: PlaceLike = None) -> Tensor:
    """``data`` as a tensor, sharing memory with a NumPy array or tensor where it can.

    Example:
        >>> import numpy as np
        >>> a = np.arange(3.0)
        >>> np.shares_memory(np.asarray(asarray(a)), a)
        True
    """
    check_place(device)
    if isinstance(data, Tensor) and (dtype is None or dtypes.as_dtype(dtype) == data.dtype):
        return data
    want = None if dtype is None else dtypes.as_dtype(dtype)
    if isinstance(data, Tensor):
        return data.astype(want)
    array = _native(np.asarray(unwrap(data), dtype=want))
    check_supported(array)
    return Tensor._wrap(array)


def from_dlpack(x: Any) -> Tensor:
    """A tensor sharing memory with any object that implements ``__dlpack__`` (CPU only).

    Example:
        >>> import numpy as np
        >>> from_dlpack(np.arange(3)).tolist()
        [0, 1, 2]
    """
    if not hasattr(x, "__dlpack__"):
        raise ArgumentTypeError(
            f"from_dlpack: 'x' must be an array that implements __dlpack__ (a NumPy array, "
            f"a torch or jax array, a kiln Tensor), got {type(x).__name__}; for other data "
            "use kiln.asarray"
        )
    device_type, _ = x.__dlpack_device__() if hasattr(x, "__dlpack_device__") else (1, 0)
    if device_type != 1:
        raise UnsupportedOperationError(
            f"from_dlpack: the object lives on DLPack device type {device_type}; kiln's "
            "executor runs on the CPU today. Move it to the CPU first."
        )
    return Tensor._wrap(np.from_dlpack(x))


# -- the dispatch door ----------------------------------------------------------------------


# -- the eager fast path --------------------------------------------------------------------
#
# Outside a capture, what ``infer`` checks about a call depends only on the operator, its
# attributes and the inputs' dtypes and shapes (and, for some operators, the contents of small
# inputs: Reshape's target, a reduction's axes). The first call with a given key runs the full
# validation; later calls with the same key go straight to the kernel. A key records whether
# ``infer`` gave the same answer without the inputs' contents; where it did not, the contents
# of the small inputs join the key. A kernel that raises on a cached key sends the call down the
# full path, which raises the error that names the operator.

EAGER_CACHE = True  # False: every eager call takes the full path (benchmarks compare the two)
_EAGER_LIMIT = 4096  # entries; the cache is emptied when it fills (distinct keys are few)


class _Eager:
    """One cached eager key: the kernel to call on the inputs' arrays (attributes bound, see
    :func:`~kiln.ops.dispatch.eager_kernel`), and whether the key alone decides the call
    (``False``: the contents of small inputs are part of the key)."""

    __slots__ = ("kernel", "value_free", "op")

    def __init__(self, kernel: Callable[..., Any], value_free: bool, op: OpDef) -> None:
        self.kernel = kernel
        self.value_free = value_free
        self.op = op  # its traits decide whether a result may alias an input


_eager: dict[Any, _Eager] = {}


def _carries_value(data: np.ndarray) -> bool:
    """Whether a tensor over ``data`` carries its contents in its type (see ``Tensor.type``)."""
    kind = data.dtype.kind
    if kind in "iu":
        return data.ndim <= 1 and data.size <= _VALUE_LIMIT
    return kind == "f" and data.ndim == 1 and data.size <= _FLOAT_VALUE_LIMIT


def _contents_key(arrays: Sequence[np.ndarray | None]) -> tuple[Any, ...]:
    return tuple(a.tobytes() if a is not None and _carries_value(a) else None for a in arrays)


def _eager_call(
    op: str | OpDef, inputs: Sequence[Tensor | None], attrs: Mapping[str, Any] | None
) -> tuple[Tensor, ...] | None:
    """The call's outputs through the eager cache, or ``None`` to take the full path."""
    if type(op) is not str:
        return None  # an OpDef object (unhashable; maybe not the registry's): the full path
    arrays: list[np.ndarray | None] = []
    key: list[Any] = [op, tuple(attrs.items()) if attrs else ()]
    for t in inputs:
        if t is None:
            arrays.append(None)
            key.append(None)
            continue
        data = t._data
        if data is None:
            return None  # a recorded tensor outside its trace: the full path explains
        arrays.append(data)
        key.append(data.dtype)
        key.append(data.shape)
    try:
        base = tuple(key)
        entry = _eager.get(base)
    except TypeError:
        return None  # an unhashable attribute value (a list): the full path
    if entry is None:
        return _eager_first(op, inputs, attrs, arrays, base)
    if not entry.value_free:
        entry = _eager.get((base, _contents_key(arrays)))
        if entry is None:
            return _eager_first(op, inputs, attrs, arrays, base)
    try:
        results = run_quiet(entry.kernel, arrays)
    except Exception:
        return None  # the full path validates the call and raises the operator's error
    wrapped = []
    for array in fresh_outputs(entry.op, arrays, results):
        t = _new_tensor(Tensor)
        t._data = array
        t._meta = None
        t._trace = None
        wrapped.append(t)
    return tuple(wrapped)


_new_tensor = object.__new__


def _keyable(value: Any) -> bool:
    """Whether ``value`` as part of a key tells apart every attribute value that binds
    differently: not a float zero (``-0.0 == 0.0``) nor a NaN (never equal to itself)."""
    if isinstance(value, (float, np.floating)):
        return value != 0.0 and value == value
    if isinstance(value, tuple):
        return all(_keyable(v) for v in value)
    return True


def _eager_first(
    op: str | OpDef,
    inputs: Sequence[Tensor | None],
    attrs: Mapping[str, Any] | None,
    arrays: list[np.ndarray | None],
    base: tuple[Any, ...],
) -> tuple[Tensor, ...]:
    """A call whose key is not cached yet: validated and run as the full path does, and its
    key cached with the kernel later calls use."""
    opdef = op if isinstance(op, OpDef) else get_op(op)
    bound = opdef.bind_attrs(attrs)
    opdef.check_arity(len(inputs))
    types = [None if t is None else t.type for t in inputs]
    outs = opdef.infer(types, bound)  # validates the call; raises errors naming the operator
    results = fresh_outputs(opdef, arrays, run_kernel(opdef, arrays, bound))
    outputs = tuple(Tensor._wrap(a) for a in results)
    bare = [None if t is None else TensorType(t.dtype, t.shape) for t in types]
    try:
        plain = opdef.infer(bare, bound)
        value_free = [(o.dtype, o.shape) for o in plain] == [(o.dtype, o.shape) for o in outs]
    except Exception:
        value_free = False  # ``infer`` needs the contents (a reduction's axes)
    if attrs and not all(_keyable(v) for v in attrs.values()):
        return outputs  # not cached: every such call takes the full path
    try:
        kernel = eager_kernel(opdef, types, outs, bound)
    except Exception:
        return outputs
    if len(_eager) >= _EAGER_LIMIT:
        _eager.clear()
    if value_free and base not in _eager:
        _eager[base] = _Eager(kernel, True, opdef)
    else:  # once a key's contents mattered, they stay part of it
        _eager[base] = _Eager(kernel, False, opdef)
        _eager[(base, _contents_key(arrays))] = _Eager(kernel, True, opdef)
    return outputs


def dispatch(
    op: str | OpDef, inputs: Sequence[Tensor | None], attrs: Mapping[str, Any] | None = None
) -> tuple[Tensor, ...]:
    """Apply operator ``op`` to ``inputs`` (kiln tensors; ``None`` for an omitted optional input).

    Every computation on a tensor comes through here. While a capture handler is installed
    (:func:`kiln.ops.dispatch.handler_scope`) the call goes to it, and a tracer records it.
    Otherwise the call is validated with the operator's ``infer`` rule and its CPU kernel runs;
    later calls with the same operator, attributes, input dtypes and shapes (see the eager fast
    path above) skip the validation and run the kernel cached for them.

    Returns the tuple of output tensors.

    Example:
        >>> import kiln
        >>> (y,) = dispatch("Relu", [kiln.tensor([-1.0, 2.0])])
        >>> y.tolist()
        [0.0, 2.0]
    """
    handler = handler_now()
    if handler is None and EAGER_CACHE:
        outputs = _eager_call(op, inputs, attrs)
        if outputs is not None:
            return outputs
    opdef = op if isinstance(op, OpDef) else get_op(op)
    bound = opdef.bind_attrs(attrs)
    opdef.check_arity(len(inputs))
    if handler is not None:
        return handler.apply(opdef, inputs, bound)
    types = [None if t is None else t.type for t in inputs]
    opdef.infer(types, bound)  # validates the call; raises errors that name the operator
    arrays = [None if t is None else t._data for t in inputs]
    return tuple(
        Tensor._wrap(a) for a in fresh_outputs(opdef, arrays, run_kernel(opdef, arrays, bound))
    )


def call(op: str | OpDef, *inputs: Tensor | None, **attrs: Any) -> Tensor:
    """:func:`dispatch` for a single-output operator, returning that output.

    Example:
        >>> import kiln
        >>> call("Relu", kiln.tensor([-1.0, 2.0])).tolist()
        [0.0, 2.0]
    """
    if EAGER_CACHE and handler_now() is None:
        eager = _eager_call(op, inputs, attrs)
        if eager is not None and len(eager) == 1:
            return eager[0]
    outputs = dispatch(op, inputs, attrs)
    if len(outputs) != 1:
        name = op if isinstance(op, str) else op.name
        raise OpArgumentError(f"{name} has {len(outputs)} outputs; use dispatch() to get them all")
    return outputs[0]
