"""``TensorSpec``: the shape, dtype and name of a graph input, without values; and the checks
of the arguments that describe inputs (``signature=``, ``dynamic_axes=``), shared by
``kiln.trace`` and ``kiln.compile`` so both refuse the same mistakes with the same words."""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Union

import numpy as np

from . import dtypes
from .errors import ArgumentError, ArgumentTypeError, InputMismatchError
from .symbolic import SymDim, format_shape

__all__ = [
    "TensorSpec",
    "SpecDim",
    "DynamicAxes",
    "MAX_SIZE",
    "check_signature",
    "check_dynamic_axes",
    "check_dynamic_axes_refer",
]

# The most elements (and so the largest size) any array holds: NumPy's and ONNX's int64.
MAX_SIZE = 2**63 - 1

# A spec's shape entry: an int (static), None (dynamic, anonymous) or a str (a named symbolic
# size: equal names are equal sizes). Graph specs use SymDim for symbolic sizes.
SpecDim = Union[int, str, None, SymDim]

# Axes of inputs to make dynamic, by input name or flat index: a list of axes (anonymous sizes) or
# a mapping from axis to the size's name.
DynamicAxes = Mapping[Union[str, int], Union[Sequence[int], Mapping[int, str]]]


@dataclass(frozen=True)
class TensorSpec:
    """The type of a tensor input: shape, dtype and an optional name.

    Example:
        >>> TensorSpec(("B", 4), "float32", name="x")
        TensorSpec(shape=('B', 4), dtype=float32, name='x')
        >>> TensorSpec((None, 4)).is_static
        False
    """

    shape: tuple[SpecDim, ...]
    dtype: np.dtype = dtypes.float32
    name: str | None = None

    def __init__(
        self, shape: Sequence[SpecDim], dtype: object = dtypes.float32, name: str | None = None
    ) -> None:
        object.__setattr__(self, "shape", _spec_shape(shape))
        object.__setattr__(self, "dtype", dtypes.as_dtype(dtype))
        if name is not None and (not isinstance(name, str) or not name):
            raise ArgumentTypeError(
                f"TensorSpec: 'name' must be a non-empty str or None, got "
                f"{type(name).__name__} {name!r}"
            )
        object.__setattr__(self, "name", name)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def is_static(self) -> bool:
        return all(isinstance(d, int) for d in self.shape)

    def __repr__(self) -> str:
        name = "" if self.name is None else f", name={self.name!r}"
        return f"TensorSpec(shape={self.shape!r}, dtype={self.dtype.name}{name})"

    def __str__(self) -> str:
        shape = format_shape("?" if d is None else d for d in self.shape)
        return f"{self.name + ': ' if self.name else ''}{self.dtype.name}{shape}"


def _spec_shape(shape: Any) -> tuple[SpecDim, ...]:
    """A TensorSpec's shape entries checked: non-negative ints (at most :data:`MAX_SIZE`
    elements in all), None or non-empty str names, symbolic sizes."""
    if isinstance(shape, (int, np.integer)) and not isinstance(shape, (bool, np.bool_)):
        shape = (shape,)  # as NumPy, a single size is a 1-D shape
    elif isinstance(shape, str):
        raise ArgumentTypeError(
            f"TensorSpec: 'shape' must be a sequence of sizes, got the str {shape!r}; write "
            f"{tuple(shape)!r} for one named size per character, or ({shape!r},) for one size"
        )
    elif not isinstance(shape, (Sequence, np.ndarray)):
        raise ArgumentTypeError(
            "TensorSpec: 'shape' must be a sequence of sizes (ints, None for a dynamic size, "
            f"or a str naming one), got {type(shape).__name__} {shape!r}; a 0-d spec is ()"
        )
    entries = tuple(shape)
    out: list[SpecDim] = []
    elements = 1
    for d in entries:
        if d is None or isinstance(d, SymDim) or (isinstance(d, str) and d):
            out.append(d)
            continue
        if not isinstance(d, (int, np.integer)) or isinstance(d, (bool, np.bool_)):
            raise ArgumentTypeError(
                "TensorSpec shape entries are non-negative ints, None (dynamic) or a non-empty "
                f"str (a named dynamic size); got {type(d).__name__} {d!r} in {entries}"
            )
        size = int(d)
        elements *= size
        if size < 0 or size > MAX_SIZE or elements > MAX_SIZE:
            raise ArgumentError(
                f"TensorSpec shape entries are sizes from 0 to 2**63 - 1, and a static shape "
                f"holds at most 2**63 - 1 elements; got {d!r} in {entries}"
            )
        out.append(size)
    return tuple(out)


def check_signature(signature: Any, where: str) -> tuple[TensorSpec, ...] | None:
    """``signature`` (one :class:`TensorSpec` per tensor input) as a tuple, None when it is
    None, or an error naming what is wrong (a str, an entry that is not a TensorSpec).

    Example:
        >>> check_signature([TensorSpec((2,))], "kiln.compile")
        (TensorSpec(shape=(2,), dtype=float32),)
    """
    if signature is None:
        return None
    if isinstance(signature, TensorSpec):
        raise ArgumentTypeError(
            f"{where}: 'signature' must be a list of TensorSpecs (one per tensor input), got a "
            f"single TensorSpec; write signature=[{signature!r}]"
        )
    if isinstance(signature, (str, bytes)) or not isinstance(signature, Sequence):
        raise ArgumentTypeError(
            f"{where}: 'signature' must be a list of TensorSpecs (one per tensor input), got "
            f"{type(signature).__name__} {signature!r}"
        )
    for i, spec in enumerate(signature):
        if not isinstance(spec, TensorSpec):
            raise ArgumentTypeError(
                f"{where}: signature[{i}] must be a kiln.TensorSpec, got "
                f"{type(spec).__name__} {spec!r}; describe each tensor input as "
                "TensorSpec(shape, dtype, name=None)"
            )
    return tuple(signature)


_AXES_FORM = "{'x': [0]} or {'x': {0: 'B'}}"


def check_dynamic_axes(
    dynamic_axes: Any, where: str
) -> dict[str | int, dict[int, str | None]] | None:
    """``dynamic_axes`` checked for its form and normalized: input (by name, or by flat index
    among the tensor inputs) -> {axis: size name or None}. Whether each key names an input
    and each axis exists is checked when the inputs are known
    (:func:`check_dynamic_axes_refer`).

    Example:
        >>> check_dynamic_axes({"x": [0], 1: {1: "T"}}, "kiln.trace")
        {'x': {0: None}, 1: {1: 'T'}}
    """
    if dynamic_axes is None:
        return None
    if not isinstance(dynamic_axes, Mapping):
        hint = ""
        if isinstance(dynamic_axes, (list, tuple)) and all(
            isinstance(a, int) for a in dynamic_axes
        ):
            hint = f"; for axes of the input x write {{'x': {list(dynamic_axes)}}}"
        elif isinstance(dynamic_axes, str):
            hint = f"; to make axis 0 of {dynamic_axes!r} dynamic write {{{dynamic_axes!r}: [0]}}"
        raise ArgumentTypeError(
            f"{where}: 'dynamic_axes' must be a mapping from input name (or flat index) to its "
            f"dynamic axes, such as {_AXES_FORM}; got {type(dynamic_axes).__name__} "
            f"{dynamic_axes!r}{hint}"
        )
    out: dict[str | int, dict[int, str | None]] = {}
    for key, axes in dynamic_axes.items():
        label = f"{where}: dynamic_axes[{key!r}]"
        bad_key = isinstance(key, bool) or not isinstance(key, (str, int))
        if bad_key or (isinstance(key, int) and key < 0) or key == "":
            raise ArgumentTypeError(
                f"{where}: dynamic_axes keys are input names (str) or flat input indices "
                f"(int >= 0), got {type(key).__name__} {key!r}"
            )
        if isinstance(axes, Mapping):
            named = dict(axes)
        elif isinstance(axes, Sequence) and not isinstance(axes, (str, bytes)):
            named = {a: None for a in axes}
        else:
            raise ArgumentTypeError(
                f"{label} must be a list of axes or a mapping from axis to a size name, such "
                f"as {_AXES_FORM}; got {type(axes).__name__} {axes!r}"
            )
        for axis, size_name in named.items():
            if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
                raise ArgumentTypeError(
                    f"{label}: axes are ints, got {type(axis).__name__} {axis!r}"
                )
            if size_name is not None and (not isinstance(size_name, str) or not size_name):
                raise ArgumentTypeError(
                    f"{label}: axis {axis} is named {size_name!r}, but a size name is a "
                    f"non-empty str (equal names are equal sizes), such as {{{axis}: 'B'}}"
                )
        out[key] = {int(a): n for a, n in named.items()}
    return out


def check_dynamic_axes_refer(
    dynamic_axes: Mapping[Any, Mapping[int, Any]] | None,
    inputs: Sequence[tuple[str, int]],
    static: Sequence[str] = (),
) -> None:
    """Each key of (checked) ``dynamic_axes`` must name one of ``inputs`` ((name, rank) of
    each tensor input, in flattening order) or index one, and each axis must exist.

    A key naming one of the call's ``static`` (non-tensor) inputs, or a flat index past the
    tensor inputs but not past all of them, is skipped: a compiled function's call of another
    structure (``f("ab")`` after ``f(x)``) is not an error. Only a key that names nothing is.

    Raises:
        InputMismatchError: naming the key or axis, and the inputs there are.
    """
    if not dynamic_axes:
        return
    names = [name for name, _ in inputs]
    ranks = dict(inputs)
    for key, axes in dynamic_axes.items():
        if key in static or (
            isinstance(key, int) and len(inputs) <= key < len(inputs) + len(static)
        ):
            continue
        if isinstance(key, int):
            if key >= len(inputs):
                raise InputMismatchError(
                    f"dynamic_axes[{key}]: there are {len(inputs)} tensor input(s) {names}, so "
                    f"flat index {key} names none"
                )
            name, rank = inputs[key]
        else:
            if key not in ranks:
                close = difflib.get_close_matches(key, names, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise InputMismatchError(
                    f"dynamic_axes names the input {key!r}, but the tensor inputs are {names}{hint}"
                )
            name, rank = key, ranks[key]
        for axis in axes:
            if not -rank <= axis < rank:
                raise InputMismatchError(
                    f"dynamic_axes: input {name!r} has rank {rank}, so axis {axis} does not exist"
                )
