"""``TensorSpec``: the shape, dtype and name of a graph input, without values."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Union

import numpy as np

from . import dtypes
from .symbolic import SymDim, format_shape

__all__ = ["TensorSpec", "SpecDim", "DynamicAxes"]

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
        entries = tuple(shape)
        for d in entries:
            ok = (
                d is None
                or isinstance(d, (str, SymDim))
                or (isinstance(d, (int, np.integer)) and not isinstance(d, bool) and int(d) >= 0)
            )
            if not ok:
                raise ValueError(
                    f"TensorSpec shape entries are non-negative ints, None (dynamic) or str "
                    f"(a named dynamic size); got {d!r} in {entries}"
                )
        object.__setattr__(
            self, "shape", tuple(int(d) if isinstance(d, (int, np.integer)) else d for d in entries)
        )
        object.__setattr__(self, "dtype", dtypes.as_dtype(dtype))
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
