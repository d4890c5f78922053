"""A call's abstract signature, computed once per call, and what a capture was recorded against.

:class:`CallSignature` flattens a call's ``(args, kwargs)`` once: the leaves, the tree
structure, each tensor leaf's array and the *structure key* that the cache of a compiled function
is keyed by. The key is the tree structure, each static (non-tensor) leaf's type and value, and
each tensor leaf's dtype and rank (its shape with ``with_shapes``). The cache lookup, the capture
and the description of what changed all read the same signature; the parts only a cache miss
needs (leaf paths, which leaves are tensors) are computed on demand, so a replayed call does not
pay for them.

:class:`CapturedInputs` is the other side: what one capture recorded (structure, static values,
the graph's input names, dtypes and possibly symbolic shapes, the axes a drift made dynamic).
The re-capture policy compares a call's signature with it.

Example:
    >>> import numpy as np
    >>> sig = CallSignature((np.ones((2, 3), np.float32), 4), {}, with_shapes=False)
    >>> sig.key[1:]
    ((dtype('float32'), 2), (4, <class 'int'>))
    >>> sig.tensor_positions, sig.static_leaves
    ((0,), (4,))
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import optree

from ..errors import ArgumentTypeError
from ..spec import TensorSpec, check_dynamic_axes, check_signature
from ..symbolic import SymDim
from ..tensor import Tensor, plain_array
from ..tree import TreeSpec
from .scalars import is_promotable, scalar_array
from .trace import _derive_name, _parameter_names

__all__ = [
    "CallSignature",
    "CapturedInputs",
    "DriftAxes",
    "input_name",
    "positional_arrays",
    "check_trace_arguments",
]

# The axes a shape drift made dynamic: (tensor input index, axis) -> the size's name; axes that
# drifted together from one size to another share a name.
DriftAxes = Mapping[tuple[int, int], str]


class CallSignature:
    """One call's ``(args, kwargs)`` flattened once, and its structure key.

    Attributes:
        args: The call's positional arguments.
        kwargs: The call's keyword arguments.
        leaves: The leaves of ``(args, kwargs)`` in flattening order.
        treespec: The structure of ``(args, kwargs)``.
        key: The structure key (hashable unless a static leaf is not; see
            :meth:`unhashable_error`).
        arrays: The array of each tensor leaf (kiln tensor or NumPy array), in order.
    """

    __slots__ = (
        "args",
        "kwargs",
        "leaves",
        "treespec",
        "key",
        "arrays",
        "_native",
        "scalars",
        "converted",
    )

    def __init__(
        self,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        with_shapes: bool,
        scalars: frozenset[int] = frozenset(),
    ) -> None:
        tree: Any = (args, kwargs)
        leaves, treespec = optree.tree_flatten(tree)
        promoted: dict[int, Any] | None = None  # flat position -> the scalar made an input
        parts: list[Any] = [treespec]
        arrays: list[np.ndarray] = []
        native: dict[int, np.ndarray] | None = None  # id of a big-endian leaf -> native copy
        # The replay path runs this loop on every call: exact type checks, no isinstance.
        for position, leaf in enumerate(leaves):
            cls = type(leaf)
            if cls is Tensor:
                data = leaf._data
            elif cls is np.ndarray:
                data = leaf
                if not data.dtype.isnative:  # big-endian data: a native copy, as NumPy computes
                    native = native or {}
                    data = native[id(leaf)] = plain_array(data, "a big-endian input")
            elif scalars and position in scalars and is_promotable(leaf):
                # A float that changed once: a 0-d graph input (kiln.capture.scalars); the key
                # holds its type, not its value.
                data = scalar_array(leaf)
                promoted = promoted or {}
                promoted[position] = (leaf, data)
                arrays.append(data)
                parts.append(("scalar", cls))
                continue
            else:
                # (value, type): a type never equals an int or a shape, so no static part can
                # equal an array's (dtype, rank) part (np.dtype("int64") == int holds).
                parts.append((leaf, cls))
                continue
            arrays.append(data)
            parts.append((data.dtype, data.shape if with_shapes else data.ndim))
        self.converted: list[tuple[np.ndarray, np.ndarray]] | None = None
        if native is not None:
            # (the caller's big-endian array, its native copy): written inputs go back to it
            self.converted = [(leaf, native[id(leaf)]) for leaf in leaves if id(leaf) in native]
            leaves = [native.get(id(leaf), leaf) for leaf in leaves]
        if promoted is not None:
            leaves = list(leaves)
            for position, (_, data) in promoted.items():
                leaves[position] = data
        # The promoted scalars by flat position (None: none): (the value, its 0-d array).
        self.scalars = promoted
        self._native = native
        self.args = args
        self.kwargs = kwargs
        self.leaves: list[Any] = leaves
        self.treespec: TreeSpec = treespec
        self.key: Hashable = tuple(parts)
        self.arrays = arrays

    def promote(self, positions: frozenset[int]) -> None:
        """Make the float leaves at the flat ``positions`` 0-d tensor leaves (in place): the
        key then holds their type instead of their value, ``arrays`` and ``leaves`` their 0-d
        arrays (see :mod:`kiln.capture.scalars`)."""
        key = list(self.key)  # type: ignore[arg-type]
        arrays = list(self.arrays)
        leaves = list(self.leaves)
        promoted = dict(self.scalars or {})
        inserted = 0
        for position, leaf in enumerate(self.leaves):
            if isinstance(leaf, (Tensor, np.ndarray)) and position not in promoted:
                continue
            if position in positions and position not in promoted and is_promotable(leaf):
                data = scalar_array(leaf)
                before = sum(
                    1 for x in self.leaves[:position] if isinstance(x, (Tensor, np.ndarray))
                )
                arrays.insert(before + inserted, data)
                inserted += 1
                key[position + 1] = ("scalar", type(leaf))
                promoted[position] = (leaf, data)
                leaves[position] = data
        self.key = tuple(key)
        self.arrays = arrays
        self.leaves = leaves
        self.scalars = promoted or None

    # -- what a miss needs, computed on demand --------------------------------------------

    @property
    def native_args(self) -> tuple[Any, ...]:
        """The positional arguments with each big-endian array replaced by the native copy
        the capture computes on (``args`` itself keeps the caller's arrays, for an eager
        call), so a replay shortcut keyed on them sees the dtypes the graph takes."""
        native = self._native
        if native is None:
            return self.args
        return tuple(native.get(id(a), a) for a in self.args)

    @property
    def paths(self) -> list[tuple[Any, ...]]:
        """The key path of each leaf (from the structure: no second flattening)."""
        return list(self.treespec.paths())

    @property
    def tensor_positions(self) -> tuple[int, ...]:
        """The flat positions of the tensor leaves (graph inputs)."""
        return tuple(i for i, x in enumerate(self.leaves) if isinstance(x, (Tensor, np.ndarray)))

    @property
    def static_leaves(self) -> tuple[Any, ...]:
        """Every other leaf, in order: values baked into a capture."""
        return tuple(x for x in self.leaves if not isinstance(x, (Tensor, np.ndarray)))

    def unhashable_error(self, graph_name: str, parameter_names: Sequence[str]) -> TypeError:
        """The error for a call whose key cannot be hashed, naming the static input at fault
        (an ``np.matrix`` or masked array is not a plain array: the error says what to pass)."""
        for path, leaf in zip(self.paths, self.leaves):
            if isinstance(leaf, np.ndarray) and type(leaf) is not np.ndarray:
                name = input_name(path, parameter_names)
                try:
                    plain_array(leaf, f"{graph_name}: input {name!r}")
                except ArgumentTypeError as exc:
                    return exc
            if isinstance(leaf, (Tensor, np.ndarray)):
                continue
            try:
                hash(leaf)
            except TypeError:
                return TypeError(
                    f"{graph_name}: the static input {input_name(path, parameter_names)!r} "
                    f"is a {type(leaf).__name__}, which is not hashable, so it cannot be part of "
                    "the capture key; pass it as a tensor, or as a tuple / hashable value"
                )
        return TypeError(f"{graph_name}: the input structure is not hashable")


@dataclass(frozen=True, eq=False)
class CapturedInputs:
    """What one capture was recorded against: the abstract signature of its first call.

    Attributes:
        treespec: The structure of ``(args, kwargs)``.
        tensor_positions: The flat positions of the tensor leaves.
        static_leaves: The other leaves' values, in order.
        names: The graph input name of each tensor leaf.
        dtypes: Each tensor input's dtype.
        shapes: Each tensor input's shape as the graph takes it (ints and symbolic sizes).
        drift: The axes made dynamic because their size drifted.
    """

    treespec: TreeSpec
    tensor_positions: tuple[int, ...]
    static_leaves: tuple[Any, ...]
    names: tuple[str, ...]
    dtypes: tuple[np.dtype, ...]
    shapes: tuple[tuple[int | SymDim, ...], ...]
    drift: DriftAxes


def input_name(path: tuple[Any, ...], parameter_names: Sequence[str]) -> str:
    """The name an input leaf goes by in messages (``n``, ``opts.k``), as the tracer names it."""
    return _derive_name(path, parameter_names)


def positional_arrays(
    args: tuple[Any, ...], with_shapes: bool
) -> tuple[list[np.ndarray], Hashable] | None:
    """The replay shortcut for a call whose arguments are all arrays or tensors: their arrays,
    and a key of each one's dtype and rank (shape when ``with_shapes``), which needs no pytree
    flattening. None for any other call."""
    arrays = []
    key: list[Any] = []
    for a in args:
        cls = type(a)
        if cls is Tensor:
            a = a._data
        elif cls is not np.ndarray:
            return None
        arrays.append(a)
        key.append(a.dtype)
        key.append(a.shape if with_shapes else a.ndim)
    return arrays, tuple(key)


def check_trace_arguments(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    signature: Any,
    dynamic_axes: Any,
) -> tuple[
    tuple[Any, ...],
    dict[str, Any],
    tuple[TensorSpec, ...] | None,
    dict[Any, dict[int, str | None]] | None,
]:
    """``kiln.trace``'s arguments checked before anything runs: ``signature`` and
    ``dynamic_axes`` in their forms (see :func:`kiln.spec.check_signature`), no TensorSpec
    passed as an example input (it belongs in ``signature=``), array inputs plain (big-endian
    data becomes a native copy; ``np.matrix`` and masked arrays are refused, saying what to
    pass), and some inputs for a function that needs them.

    Returns:
        The checked ``(args, kwargs, signature, dynamic_axes)``.
    """
    checked = check_signature(signature, "kiln.trace")
    axes = check_dynamic_axes(dynamic_axes, "kiln.trace")
    tree: Any = (args, dict(kwargs))
    paths, leaves, treespec = optree.tree_flatten_with_path(tree)
    plain = list(leaves)
    changed = False
    for i, (path, leaf) in enumerate(zip(paths, leaves)):
        if isinstance(leaf, np.ndarray) and (
            type(leaf) is not np.ndarray or not leaf.dtype.isnative
        ):
            name = _derive_name(path, _parameter_names(fn))
            plain[i] = plain_array(leaf, f"kiln.trace: input {name!r}")
            changed = True
        if isinstance(leaf, TensorSpec):
            name = _derive_name(path, _parameter_names(fn))
            raise ArgumentTypeError(
                f"kiln.trace: the example input {name!r} is a TensorSpec ({leaf}); example "
                "inputs are arrays. To trace against specs alone, pass them as "
                f"signature=[...]: kiln.trace(fn, signature=[{leaf!r}])"
            )
    if not args and not kwargs:
        count = 0 if checked is None else len(checked)
        try:
            inspect.signature(fn).bind(*([None] * count))
        except TypeError as exc:
            what = (
                "no example inputs and no signature"
                if checked is None
                else f"a signature of {count} TensorSpec(s) and no example inputs"
            )
            raise ArgumentTypeError(
                f"kiln.trace: {getattr(fn, '__name__', 'fn')} was given {what}, which does not "
                f"fit its parameters ({exc}); pass example inputs (kiln.trace(fn, x)) or one "
                "TensorSpec per tensor input (kiln.trace(fn, signature=[TensorSpec(...)]))"
            ) from None
        except ValueError:  # no signature to read (a builtin): let the call decide
            pass
    if changed:
        tree = optree.tree_unflatten(treespec, plain)
    return tree[0], tree[1], checked, axes
