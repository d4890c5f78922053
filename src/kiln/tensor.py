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

import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from threading import Lock, get_ident
from typing import TYPE_CHECKING, Any

import numpy as np

from . import dtypes
from .device import Device, PlaceLike, as_device, cpu, require_backend
from .errors import ArgumentTypeError, OpArgumentError, UnsupportedOperationError
from .ops.dispatch import (
    as_outputs,
    current_handler,
    eager_kernel,
    handler_now,
    quiet_state,
    reset_fp_state,
    run_kernel,
    run_quiet,
    set_fp_state,
)
from .ops.folding import FOLDING_LIMITS
from .ops.registry import OpDef, TensorType, get_op
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
    "keyable",
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
    if op.is_view:
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
        # Copied in its own layout (order K), as NumPy's new array would be laid out (a copy
        # in C order made an F-ordered result C-ordered: a later sum added in another order).
        out.append(array.copy(order="K") if shared or not array.flags.writeable else array)
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

    # (``_array``, set only on a 0-d tensor that stands for a 0-d NumPy *array* rather than
    # the NumPy scalar a 0-d value almost always is: read with getattr, default False)
    __slots__ = ("_data", "_meta", "_trace", "_array", "__weakref__")
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
        if _recording is not None and meta.value is not None:  # are read anew each time
            _spoil()  # a front door reading contents: its lowering may depend on them
        return meta

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
        if _recording is not None:
            _spoil()  # values read on the host: a front door's lowering may depend on them
        handler = current_handler()
        if handler is not None and (self._trace is not None or self._data is None):
            return handler.host_read(self, what)
        assert self._data is not None
        return self._data

    def __getattr__(self, name: str) -> Any:
        """An ``np.ndarray`` attribute kiln does not implement (``x.view()``, ``x.strides``,
        ``x.tobytes()``): NumPy's, on the tensor's values read on the host. Inside a compiled
        function that is a host read (the capture then serves the structure eagerly, with one
        warning, and the call gets NumPy's answer); ``kiln.trace`` refuses it, naming it."""
        if name.startswith("_") or not hasattr(np.ndarray, name):
            raise AttributeError(f"'Tensor' object has no attribute {name!r}")
        return getattr(self._host(f"ndarray.{name}"), name)

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
        @property
        def real(self) -> Tensor: ...
        @property
        def imag(self) -> Tensor: ...

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
        def conj(self) -> Tensor: ...
        def conjugate(self) -> Tensor: ...
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
# of the small inputs join the key (so do those the operator's ``fast_kernel`` reads to give
# its direct call: a reduction's axes, even where the result's shape does not depend on them).
# A kernel that raises on a cached key sends the call down the full path, which raises the
# error that names the operator. The hot path builds one flat key tuple for one or two inputs
# (no per-call lists), and each entry knows once whether its results need the aliasing check
# of :func:`fresh_outputs`.

EAGER_CACHE = True  # False: every eager call takes the full path (benchmarks compare the two)
_EAGER_LIMIT = 4096  # entries; the cache is emptied when it fills (distinct keys are few)


class _Eager:
    """One cached eager key: the kernel to call on the inputs' arrays (attributes bound, see
    :func:`~kiln.ops.dispatch.eager_kernel`), which inputs' contents are part of the key
    (``needs``: the small inputs whose contents ``infer`` reads, such as Reshape's target; the
    entry under the key alone then only says so, and the entry under (key, their contents)
    runs), and whether its results can skip :func:`fresh_outputs` (``fresh``: a view
    operator's results alias as NumPy's views do, and a ufunc always returns new arrays)."""

    __slots__ = ("kernel", "needs", "op", "fresh", "quiet")

    def __init__(self, kernel: Callable[..., Any], needs: tuple[int, ...], op: OpDef) -> None:
        self.kernel = kernel
        self.needs = needs
        self.op = op  # its traits decide whether a result may alias an input
        self.fresh = op.is_view or isinstance(kernel, np.ufunc)
        # A view operator only moves data (no arithmetic, so no floating-point warnings to
        # silence): its kernel runs without switching NumPy's error state.
        self.quiet = not op.is_view


_eager: dict[Any, _Eager] = {}


def _contents_key(arrays: Sequence[np.ndarray | None], needs: tuple[int, ...]) -> tuple[Any, ...]:
    return tuple(arrays[i].tobytes() for i in needs)  # type: ignore[union-attr]


def _eager_arrays(
    op: str | OpDef, inputs: Sequence[Tensor | None], attrs: Mapping[str, Any] | None
) -> Sequence[np.ndarray] | None:
    """The call's result arrays through the eager cache (aliasing as NumPy's results do), or
    ``None`` to take the full path."""
    if type(op) is not str:
        return None  # an OpDef object (unhashable; maybe not the registry's): the full path
    arrays: Sequence[np.ndarray | None]
    try:
        # Keys of different arities have different lengths, so they never compare equal.
        n = len(inputs)
        if n == 2:
            x = inputs[0]._data  # type: ignore[union-attr]
            y = inputs[1]._data  # type: ignore[union-attr]
            arrays = (x, y)
            key: tuple[Any, ...] = (
                op,
                tuple(attrs.items()) if attrs else (),
                x.dtype,  # type: ignore[union-attr]
                x.shape,  # type: ignore[union-attr]
                y.dtype,  # type: ignore[union-attr]
                y.shape,  # type: ignore[union-attr]
            )
        elif n == 1:
            x = inputs[0]._data  # type: ignore[union-attr]
            arrays = (x,)
            key = (op, tuple(attrs.items()) if attrs else (), x.dtype, x.shape)  # type: ignore[union-attr]
        else:
            raise AttributeError
    except AttributeError:  # an omitted input, a recorded tensor, another arity
        found = _general_key(op, inputs, attrs)
        if found is None:
            return None
        key, arrays = found
    try:
        entry = _eager.get(key)
    except TypeError:
        return None  # an unhashable attribute value (a list): the full path
    if entry is None or entry.needs:
        if entry is not None:
            entry = _eager.get((key, _contents_key(arrays, entry.needs)))
        if entry is None:
            results = _eager_first(op, inputs, attrs, arrays, key)
            if _recording is not None:
                _record(key, arrays, results)
            return results
    try:
        if entry.quiet:
            results = run_quiet(entry.kernel, arrays)
        else:
            results = as_outputs(entry.kernel(*arrays))
    except Exception:
        return None  # the full path validates the call and raises the operator's error
    if not entry.fresh:
        results = fresh_outputs(entry.op, arrays, results)  # type: ignore[assignment]
    if _recording is not None:
        _record(key, arrays, results)
    return results


def _general_key(
    op: str, inputs: Sequence[Tensor | None], attrs: Mapping[str, Any] | None
) -> tuple[tuple[Any, ...], list[np.ndarray | None]] | None:
    """The key and arrays of a call with any number of inputs, some omitted (``None``); or
    ``None`` for an input that is a recorded tensor outside its trace, or not a tensor."""
    arrays: list[np.ndarray | None] = []
    parts: list[Any] = []
    for t in inputs:
        if t is None:
            arrays.append(None)
            parts.append(None)
            continue
        data = getattr(t, "_data", None)
        if data is None:
            return None  # the full path explains
        arrays.append(data)
        parts.append(data.dtype)
        parts.append(data.shape)
    return (op, tuple(attrs.items()) if attrs else (), tuple(parts)), arrays


_new_tensor = object.__new__


def keyable(value: Any) -> bool:
    """Whether ``value`` as part of a key tells apart every attribute value that binds
    differently: not a float zero (``-0.0 == 0.0``) nor a NaN (never equal to itself)."""
    if isinstance(value, (float, np.floating)):
        return value != 0.0 and value == value
    if isinstance(value, tuple):
        return all(keyable(v) for v in value)
    return True


def _eager_first(
    op: str | OpDef,
    inputs: Sequence[Tensor | None],
    attrs: Mapping[str, Any] | None,
    arrays: Sequence[np.ndarray | None],
    base: tuple[Any, ...],
) -> Sequence[np.ndarray]:
    """A call whose key is not cached yet: validated and run as the full path does, and its
    key cached with the kernel later calls use."""
    opdef = op if isinstance(op, OpDef) else get_op(op)
    bound = opdef.bind_attrs(attrs)
    opdef.check_arity(len(inputs))
    types = [None if t is None else _type_of(t) for t in inputs]
    outs = opdef.infer(types, bound)  # validates the call; raises errors naming the operator
    results = fresh_outputs(opdef, arrays, run_kernel(opdef, arrays, bound))
    if attrs and not all(keyable(v) for v in attrs.values()):
        return results  # not cached: every such call takes the full path
    needs = _needed_contents(opdef, types, outs, bound)
    needs = _fast_contents(opdef, types, outs, bound, needs)
    previous = _eager.get(base)
    if previous is not None and previous.needs:  # once contents mattered, they stay in the key
        needs = tuple(sorted(set(needs) | set(previous.needs)))
    # The kernel is chosen from the types with only the needed contents, so the contents left
    # out of the key cannot have chosen it.
    chosen = [
        t if t is None or i in needs else TensorType(t.dtype, t.shape) for i, t in enumerate(types)
    ]
    try:
        kernel = eager_kernel(opdef, chosen, outs, bound)
    except Exception:
        return results
    if len(_eager) >= _EAGER_LIMIT:
        _eager.clear()
    _eager[base] = _Eager(kernel, needs, opdef)
    if needs:
        _eager[(base, _contents_key(arrays, needs))] = _Eager(kernel, (), opdef)
    return results


def _needed_contents(
    opdef: OpDef, types: Sequence[TensorType | None], outs: Sequence[TensorType], attrs: Any
) -> tuple[int, ...]:
    """The inputs whose contents (carried by small tensors' types) ``infer`` needs to give
    ``outs``' dtypes and shapes: each one whose contents, left out alone, change or fail the
    answer (all of them when leaving the others out together still changes it)."""
    carrying = [i for i, t in enumerate(types) if t is not None and t.value is not None]
    if not carrying:
        return ()
    want = [(o.dtype, o.shape) for o in outs]

    def same_without(left_out: set[int]) -> bool:
        stripped = [
            TensorType(t.dtype, t.shape) if t is not None and i in left_out else t
            for i, t in enumerate(types)
        ]
        try:
            return [(o.dtype, o.shape) for o in opdef.infer(stripped, attrs)] == want
        except Exception:
            return False

    if same_without(set(carrying)):
        return ()
    needs = tuple(i for i in carrying if not same_without({i}))
    if not same_without(set(carrying) - set(needs)):
        return tuple(carrying)
    return needs


def _fast_contents(
    opdef: OpDef,
    types: Sequence[TensorType | None],
    outs: Sequence[TensorType],
    attrs: Any,
    needs: tuple[int, ...],
) -> tuple[int, ...]:
    """``needs`` with the inputs whose contents the operator's ``fast_kernel`` reads to give
    its faster call (a reduction's axes when ``infer`` did not need them: the sum over axis 0
    of a vector has shape ``()`` whatever the axes say), so that the kernel chosen with those
    contents is keyed on them; ``needs`` unchanged when the fast call is found without more
    contents, or not even with them."""
    if opdef.fast_kernel is None:
        return needs
    carrying = [
        i for i, t in enumerate(types) if t is not None and t.value is not None and i not in needs
    ]
    if not carrying:
        return needs

    def fast_with(kept: set[int]) -> bool:
        stripped = [
            t if t is None or i in kept else TensorType(t.dtype, t.shape)
            for i, t in enumerate(types)
        ]
        try:
            return opdef.fast_kernel(stripped, outs, attrs) is not None  # type: ignore[misc]
        except Exception:
            return False

    known = set(needs)
    if fast_with(known) or not fast_with(known | set(carrying)):
        return needs
    extra = [i for i in carrying if not fast_with(known | set(carrying) - {i})]
    if not fast_with(known | set(extra)):
        extra = carrying
    return tuple(sorted(known | set(extra)))


def _full(
    op: str | OpDef, inputs: Sequence[Tensor | None], attrs: Mapping[str, Any] | None
) -> tuple[Tensor, ...]:
    """The call without the eager cache: to the capture handler when one is installed, else
    validated with the operator's ``infer`` and run with its kernel."""
    opdef = op if isinstance(op, OpDef) else get_op(op)
    bound = opdef.bind_attrs(attrs)
    handler = handler_now()
    if handler is not None:
        # The tracer checks the arity where it runs ``infer`` (a call it remembers from
        # before, on the same input types, was checked then): once per distinct call.
        return handler.apply(opdef, inputs, bound)
    opdef.check_arity(len(inputs))
    if _recording is not None:
        _spoil()  # an op call the eager cache did not serve: no plan can replay it
    types = [None if t is None else t.type for t in inputs]
    opdef.infer(types, bound)  # validates the call; raises errors that name the operator
    arrays = [None if t is None else t._data for t in inputs]
    return tuple(
        Tensor._wrap(a) for a in fresh_outputs(opdef, arrays, run_kernel(opdef, arrays, bound))
    )


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
    if EAGER_CACHE and handler_now() is None:
        arrays = _eager_arrays(op, inputs, attrs)
        if arrays is not None:
            return tuple(Tensor._wrap(a) for a in arrays)
    return _full(op, inputs, attrs)


def call(op: str | OpDef, *inputs: Tensor | None, **attrs: Any) -> Tensor:
    """:func:`dispatch` for a single-output operator, returning that output.

    Example:
        >>> import kiln
        >>> call("Relu", kiln.tensor([-1.0, 2.0])).tolist()
        [0.0, 2.0]
    """
    outputs: Sequence[Any] | None = None
    handler = handler_now()
    if handler is not None:
        # Recording (issue 13: every op of an unrolled loop comes here): _full's handler
        # branch, one call shallower.
        opdef = op if isinstance(op, OpDef) else get_op(op)
        outputs = handler.apply(
            opdef, inputs, opdef.bind_attrs(attrs) if attrs or opdef.attrs else {}
        )
    elif EAGER_CACHE:
        outputs = _eager_arrays(op, inputs, attrs)
        if outputs is not None and len(outputs) == 1:
            t = _new_tensor(Tensor)  # Tensor._wrap, inlined: the hot path of every eager op
            t._data = outputs[0]
            t._meta = None
            t._trace = None
            return t
    if outputs is None:
        outputs = _full(op, inputs, attrs)
    if len(outputs) != 1:
        name = op if isinstance(op, str) else op.name
        raise OpArgumentError(f"{name} has {len(outputs)} outputs; use dispatch() to get them all")
    return outputs[0]  # type: ignore[no-any-return]


# -- eager plans: a front door's op calls, replayed ----------------------------------------
#
# A front door (``t + u``, ``t.sum(axis=0)``, ``t[1:3]``, ``kiln.where``) lowers its arguments
# onto operator calls: it resolves dtypes, builds constant inputs (a slice's bounds, a
# reduction's axes, a scalar operand), casts, and calls operators. Outside a capture those
# decisions depend only on its arguments' dtypes, shapes and Python values, so
# :func:`eager_plan` records them once per such signature: the first call runs the front door
# while the eager door notes each operator call it serves (its cached kernel, and which arrays
# went in: an argument's, an earlier call's result, or a constant the front door made), and
# later calls with the same signature replay those kernels on the new arguments' arrays. A
# front door that reads a tensor's contents (a host read, or the contents a small integer
# tensor's type carries), calls an operator the eager cache does not serve, or returns anything
# but the last call's result is not planned; nor is a call inside another recording.


class _NoPlan(Exception):
    """An argument a plan cannot key on (an array, an object, a float zero or NaN)."""


class _Recording:
    """The operator calls one front door made, as the eager door served them."""

    __slots__ = ("thread", "steps", "ok")

    def __init__(self) -> None:
        self.thread = get_ident()
        # (the entry that served the call, its input arrays, its results, the inputs whose
        # contents chose the entry)
        self.steps: list[
            tuple[_Eager, Sequence[np.ndarray | None], Sequence[np.ndarray], tuple[int, ...]]
        ] = []
        self.ok = True


_recording: _Recording | None = None
_recording_lock = Lock()  # one recording at a time (the door's hooks read one global)
_PLAN_LIMIT = 1024  # plans per front door; its table is emptied when it fills


def _record(
    key: tuple[Any, ...], arrays: Sequence[np.ndarray | None], results: Sequence[np.ndarray]
) -> None:
    rec = _recording
    if rec is None or rec.thread != get_ident():
        return  # another thread's call: not part of the front door being recorded
    entry = _eager.get(key)
    needs: tuple[int, ...] = ()
    if entry is not None and entry.needs:
        needs = entry.needs
        entry = _eager.get((key, _contents_key(arrays, needs)))
    if entry is None:
        rec.ok = False  # not cached (an attribute that cannot be a key): not replayable
    else:
        rec.steps.append((entry, arrays, results, needs))


def _spoil() -> None:
    rec = _recording
    if rec is not None and rec.thread == get_ident():
        rec.ok = False


def _type_of(t: Tensor) -> TensorType:
    """``t.type`` for the eager door's own validation (not a read by the front door being
    recorded, so it does not spoil the recording)."""
    global _recording
    rec = _recording
    if rec is None:
        return t.type
    _recording = None  # the lock is held, so no other thread starts a recording meanwhile
    try:
        return t.type
    finally:
        _recording = rec


def _static_key(value: Any) -> Any:
    """``value`` as part of a plan's key: Python values that decide a lowering by what they
    are (its type is part of the key: ``1``, ``1.0`` and ``True`` differ)."""
    kind = type(value)
    if kind is int or kind is bool or kind is str or value is None or value is Ellipsis:
        return (kind, value)
    if kind is float:
        if value != 0.0 and value == value:  # -0.0 == 0.0 and NaN != NaN: not told apart
            return (kind, value)
        raise _NoPlan
    if kind is slice:
        start, stop, step = value.start, value.stop, value.step
        if type(start) is int and type(stop) is int and step is None:  # t[1:3]
            return (kind, start, stop)
        return (kind, _static_key(start), _static_key(stop), _static_key(step))
    if kind is tuple or kind is list:
        return (kind, tuple(_static_key(v) for v in value))
    if isinstance(value, np.dtype) or isinstance(value, type):
        return (type, value)
    raise _NoPlan


def _signature(
    args: tuple[Any, ...], kwargs: dict[str, Any], tensor_args: int
) -> tuple[tuple[Any, ...], list[np.ndarray]]:
    """A call's plan key and the arrays of its tensor arguments (the first ``tensor_args``
    positional arguments may be tensors; every other argument is a Python value).

    The key starts with the call's pattern (``"t"`` a tensor, ``"r"`` a tensor whose array came
    before, ``"s"`` a Python value, ``"k"`` a keyword), so two keys are only ever compared item
    by item where their items are of one kind (never a dtype with a Python value).
    """
    if tensor_args == 1 and args and type(args[0]) is Tensor:
        # One tensor and Python values (t.reshape(2, 4), t.sum(axis=0)): the key the general
        # loop below makes, without its lists.
        xd = args[0]._data
        if xd is None or args[0]._trace is not None:
            raise _NoPlan
        parts: list[Any] = ["t" + "s" * (len(args) - 1) + "k" * len(kwargs), xd.dtype, xd.shape]
        for value in args[1:]:
            parts.append(_static_key(value))
        for name, value in kwargs.items():
            parts.append(name)
            parts.append(_static_key(value))
        return tuple(parts), [xd]
    if not kwargs and 0 < len(args) <= 2:  # the common case, without the general loop
        x = args[0]
        if type(x) is Tensor and tensor_args:
            xd = x._data
            if xd is None or x._trace is not None:
                raise _NoPlan  # a tensor a tracer recorded: its shape may be symbolic
            if len(args) == 1:
                return ("t", xd.dtype, xd.shape), [xd]
            y = args[1]
            if type(y) is Tensor and tensor_args > 1:
                yd = y._data
                if yd is None or y._trace is not None:
                    raise _NoPlan
                if yd is xd:
                    return ("tr", xd.dtype, xd.shape, 0), [xd, yd]
                return ("tt", xd.dtype, xd.shape, yd.dtype, yd.shape), [xd, yd]
            return ("ts", xd.dtype, xd.shape, _static_key(y)), [xd]
    pattern: list[str] = []
    key: list[Any] = []
    arrays: list[np.ndarray] = []
    for i, value in enumerate(args):
        items: Sequence[Tensor]
        if i < tensor_args and type(value) is Tensor:
            items = (value,)
        elif (
            i < tensor_args
            and (type(value) is list or type(value) is tuple)
            and value
            and all(type(v) is Tensor for v in value)
        ):
            # A sequence of tensors (np.concatenate([t, u])): its kind and length, then each
            # tensor as an argument of its own.
            pattern.append("l")
            key.append((type(value), len(value)))
            items = value
        else:
            pattern.append("s")
            key.append(_static_key(value))
            continue
        for t in items:
            data = t._data
            if data is None or t._trace is not None:
                raise _NoPlan
            for j, seen in enumerate(arrays):
                if seen is data:  # the same array twice (x * x): its own key
                    pattern.append("r")
                    key.append(j)
                    break
            else:
                pattern.append("t")
                key.append(data.dtype)
                key.append(data.shape)
            arrays.append(data)
    for name, value in kwargs.items():
        pattern.append("k")
        key.append(name)
        key.append(_static_key(value))
    return ("".join(pattern), *key), arrays


class _Step:
    """One operator call of a plan: the kernel the eager door served it with, and where each
    input comes from (an index into the plan's environment; ``None``: an omitted input)."""

    __slots__ = ("entry", "sources", "outputs")

    def __init__(self, entry: _Eager, sources: tuple[int | None, ...], outputs: int) -> None:
        self.entry = entry
        self.sources = sources
        self.outputs = outputs


_PlanRun = Callable[[list[np.ndarray]], "Tensor | None"]


def _compile_plan(
    steps: list[_Step], n_args: int, constants: list[np.ndarray], output: int
) -> _PlanRun:
    """A plan as one straight-line function of the arguments' arrays (``a``): the environment
    holds the arguments, then the constants (``c0``...), then each call's results; it returns
    the result tensor, or ``None`` when a kernel raised (the front door then runs, and raises
    its own error). For ``t + u``: ``o0 = k0(a[0], a[1])`` inside one quiet error state."""
    names: list[str] = [f"a[{i}]" for i in range(n_args)]
    names += [f"c{k}" for k in range(len(constants))]
    scope: dict[str, Any] = {f"c{k}": c for k, c in enumerate(constants)}
    scope.update(
        _set=set_fp_state,
        _reset=reset_fp_state,
        _quiet=quiet_state,
        _nd=np.ndarray,
        _scalar=np.generic,
        _asarray=getattr(np.asarray, "__kiln_original__", np.asarray),  # never the routed one
        _outputs=as_outputs,
        _fresh=fresh_outputs,
        _new=_new_tensor,
        _T=Tensor,
    )
    body: list[str] = []
    for j, step in enumerate(steps):
        args = ", ".join("None" if i is None else names[i] for i in step.sources)
        ins = f"({args},)" if args else "()"
        scope[f"k{j}"] = step.entry.kernel
        if not step.entry.fresh:
            scope[f"op{j}"] = step.entry.op
        if step.outputs == 1:  # one array, held as r<j>
            body.append(f"r{j} = k{j}({args})")
            if step.entry.fresh:
                body.append(f"if type(r{j}) is not _nd:")
                body.append(f"    r{j} = _outputs(r{j})[0]")
            else:  # a NumPy scalar (a full reduction's) becomes a new array: nothing to check
                body.append(f"if type(r{j}) is _nd or not isinstance(r{j}, _scalar):")
                body.append(f"    r{j} = _fresh(op{j}, {ins}, _outputs(r{j}))[0]")
                body.append("else:")
                body.append(f"    r{j} = _asarray(r{j})")
            names.append(f"r{j}")
            continue
        body.append(f"o{j} = k{j}({args})")
        body.append(f"o{j} = (o{j},) if type(o{j}) is _nd else _outputs(o{j})")
        if not step.entry.fresh:
            body.append(f"o{j} = _fresh(op{j}, {ins}, o{j})")
        names += [f"o{j}[{k}]" for k in range(step.outputs)]
    if any(step.entry.quiet for step in steps):
        guarded = ["    token = _set(_quiet())", "    try:", *[f"        {line}" for line in body]]
        guarded += ["    except Exception:", "        return None", "    finally:"]
        guarded += ["        _reset(token)"]
    else:  # views only: no arithmetic, no error state to switch
        guarded = ["    try:", *[f"        {line}" for line in body]]
        guarded += ["    except Exception:", "        return None"]
    source = "\n".join(
        [
            "def run(a):",
            *guarded,
            "    t = _new(_T)",
            f"    t._data = {names[output]}",
            "    t._meta = None",
            "    t._trace = None",
            "    return t",
        ]
    )
    exec(source, scope)  # noqa: S102 - kiln's own code, over the plan's own objects
    return scope["run"]  # type: ignore[no-any-return]


def _build_plan(rec: _Recording, arrays: list[np.ndarray], result: Any) -> _PlanRun | None:
    """The plan replaying ``rec``, or ``None`` where replaying could differ from the front
    door (see the section comment)."""
    if not rec.ok or not rec.steps or type(result) is not Tensor:
        return None
    n_args = len(arrays)
    index: dict[int, int] = {}  # id(array) -> its place in the plan's environment
    for i in reversed(range(n_args)):
        index[id(arrays[i])] = i
    constants: list[np.ndarray] = []  # every other input no earlier call made
    made: set[int] = set()
    for _, ins, outs, _ in rec.steps:
        for a in ins:
            if a is not None and id(a) not in index and id(a) not in made:
                index[id(a)] = n_args + len(constants)
                constants.append(a)
        made.update(id(a) for a in outs)
    # A "constant" over an argument's or a call's memory was made from it outside the
    # operators (by the front door itself): its contents change with the call.
    roots = [memory_root(a) for a in arrays]
    roots += [memory_root(a) for _, _, outs, _ in rec.steps for a in outs]
    for a in constants:
        if any(memory_root(a) is root for root in roots):
            return None
    steps: list[_Step] = []
    next_index = n_args + len(constants)
    for entry, ins, outs, needs in rec.steps:
        sources: list[int | None] = []
        for k, a in enumerate(ins):
            if a is None:
                sources.append(None)
                continue
            i = index[id(a)]
            constant = n_args <= i < n_args + len(constants)
            if constant and k == 0 and entry.op.is_view:
                return None  # a view of a constant would be handed out (and written into)
            if k in needs and not constant:
                return None  # the kernel was chosen for these contents
            sources.append(i)
        steps.append(_Step(entry, tuple(sources), len(outs)))
        for a in outs:
            index[id(a)] = next_index
            next_index += 1
    last = rec.steps[-1][2]
    if not last or result._data is not last[0]:
        return None  # not the last call's result: the front door did more than call
    return _compile_plan(steps, n_args, constants, next_index - len(last))


def eager_plan(
    tensor_args: int, *, binary: bool = False
) -> Callable[[Callable[..., Tensor]], Callable[..., Tensor]]:
    """Decorate a front door whose lowering depends only on its arguments' dtypes, shapes and
    Python values (never on a tensor's contents), so that outside a capture its operator calls
    are recorded once per signature and replayed (see the section comment). The first
    ``tensor_args`` positional arguments may be tensors; the others are Python values.
    ``binary``: the front door takes exactly two positional arguments (``Tensor.__add__``),
    so the wrapper does too (no ``*args`` tuple and ``**kwargs`` dict per call).

    Example:
        >>> import kiln
        >>> @eager_plan(1)
        ... def twice(x):
        ...     return call("Add", x, x)
        >>> twice(kiln.tensor([1.0])).tolist(), twice(kiln.tensor([2.0])).tolist()
        ([2.0], [4.0])
    """

    def decorate(fn: Callable[..., Tensor]) -> Callable[..., Tensor]:
        plans: dict[tuple[Any, ...], _PlanRun | None] = {}

        # The two wrappers below are one logic: key the call (inline for one or two tensors,
        # as _signature would), then replay its plan, record one, or run the front door.

        def front_door_2(x: Any, y: Any) -> Tensor:
            if EAGER_CACHE and _recording is None and handler_now() is None:
                key: tuple[Any, ...]
                arrays: list[Any]
                try:
                    if (
                        type(x) is Tensor
                        and type(y) is Tensor
                        and x._trace is None
                        and y._trace is None
                        and tensor_args > 1
                    ):
                        xd: Any = x._data
                        yd: Any = y._data
                        arrays = [xd, yd]
                        if xd is yd:
                            key = ("tr", xd.dtype, xd.shape, 0)
                        else:
                            key = ("tt", xd.dtype, xd.shape, yd.dtype, yd.shape)
                    elif (
                        type(x) is Tensor
                        and type(y) is not Tensor
                        and x._trace is None
                        and tensor_args
                    ):
                        xd = x._data  # t * 2.0, t[1:3]: as _signature keys it
                        arrays = [xd]
                        key = ("ts", xd.dtype, xd.shape, _static_key(y))
                    else:
                        key, arrays = _signature((x, y), {}, tensor_args)
                    plan = plans.get(key, False)
                except (_NoPlan, TypeError, AttributeError):  # AttributeError: no data
                    return fn(x, y)
                if plan is False:
                    return _record_plan(fn, plans, key, arrays, (x, y), {})
                if plan is not None:
                    result = plan(arrays)  # type: ignore[operator]
                    if result is not None:
                        return result
            return fn(x, y)

        def front_door(*args: Any, **kwargs: Any) -> Tensor:
            if EAGER_CACHE and _recording is None and handler_now() is None:
                key: tuple[Any, ...]
                arrays: list[Any]
                try:
                    if len(args) == 1 and type(args[0]) is Tensor:
                        xd: Any = args[0]._data  # t.sum(), -t, kiln.exp(t): as _signature
                        if args[0]._trace is not None or not tensor_args:
                            raise _NoPlan
                        arrays = [xd]
                        if not kwargs:
                            key = ("t", xd.dtype, xd.shape)
                        else:  # t.sum(axis=0, keepdims=True): as _signature keys it
                            parts: list[Any] = ["t" + "k" * len(kwargs), xd.dtype, xd.shape]
                            for name, value in kwargs.items():
                                parts.append(name)
                                parts.append(_static_key(value))
                            key = tuple(parts)
                    elif len(args) == 2 and not kwargs:
                        return front_door_2(*args)
                    else:
                        key, arrays = _signature(args, kwargs, tensor_args)
                    plan = plans.get(key, False)
                except (_NoPlan, TypeError, AttributeError):  # AttributeError: no data
                    return fn(*args, **kwargs)
                if plan is False:
                    return _record_plan(fn, plans, key, arrays, args, kwargs)
                if plan is not None:
                    result = plan(arrays)  # type: ignore[operator]
                    if result is not None:
                        return result
            return fn(*args, **kwargs)

        return functools.wraps(fn)(front_door_2 if binary else front_door)

    return decorate


def _record_plan(
    fn: Callable[..., Tensor],
    plans: dict[tuple[Any, ...], _PlanRun | None],
    key: tuple[Any, ...],
    arrays: list[np.ndarray],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Tensor:
    """Run ``fn`` while recording its operator calls, and keep the plan they make."""
    global _recording
    if not _recording_lock.acquire(blocking=False):
        return fn(*args, **kwargs)  # another thread is recording: just run it
    rec = _Recording()
    try:
        _recording = rec
        result = fn(*args, **kwargs)
    finally:
        _recording = None
        _recording_lock.release()
    try:
        plan = None if any(result is a for a in args) else _build_plan(rec, arrays, result)
    except Exception:  # a recording the plan builder does not foresee: run the front door
        plan = None
    if len(plans) >= _PLAN_LIMIT:
        plans.clear()
    plans[key] = plan  # None: this signature is never planned (it runs the front door)
    return result
