"""The graph's own input check: count, names, dtype, rank, static sizes, symbol bindings.

Built once when a graph is finalized. The common case (every input has the expected dtype and
static shape) costs one tuple comparison per input; anything else takes the slow path that
names the input, the axis, what was expected and what was given.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import InputMismatchError
from ..symbolic import SymDim, format_shape
from ..tensor import Tensor

if TYPE_CHECKING:
    from ..ir.graph import ModelGraph

__all__ = ["InputChecker"]


class InputChecker:
    """Turns ``run``'s inputs into a list of arrays in signature order, or raises."""

    def __init__(self, graph: ModelGraph) -> None:
        self.graph_name = graph.name
        values = graph.input_values
        self.names: tuple[str, ...] = tuple(v.name for v in values)
        self.index = {name: i for i, name in enumerate(self.names)}
        self.dtypes = tuple(v.dtype for v in values)
        self.shapes = tuple(v.shape for v in values)
        self.static = all(all(isinstance(d, int) for d in s) for s in self.shapes)

    def __call__(self, inputs: Sequence[Any] | Mapping[str, Any]) -> list[np.ndarray]:
        arrays = self._order(inputs)
        if self.static:
            for array, dtype, shape in zip(arrays, self.dtypes, self.shapes):
                if array.dtype != dtype or array.shape != shape:
                    break
            else:
                return arrays
        self._check(arrays)
        return arrays

    def bindings(self, arrays: Sequence[np.ndarray]) -> dict[str, int]:
        """The size each named symbol takes for these (already checked) arrays."""
        bound: dict[str, int] = {}
        for array, shape in zip(arrays, self.shapes):
            for axis, d in enumerate(shape):
                if isinstance(d, SymDim) and d.is_symbol():
                    bound.setdefault(d.name, array.shape[axis])
        return bound

    # -- slow paths -----------------------------------------------------------------------

    def _order(self, inputs: Sequence[Any] | Mapping[str, Any]) -> list[np.ndarray]:
        names = self.names
        if isinstance(inputs, Mapping):
            unknown = [k for k in inputs if k not in self.index]
            if unknown:
                raise InputMismatchError(
                    f"graph {self.graph_name!r} has no input named {unknown[0]!r}; its inputs "
                    f"are {list(names)}"
                )
            missing = [n for n in names if n not in inputs]
            if missing:
                raise InputMismatchError(
                    f"graph {self.graph_name!r}: input {missing[0]!r} is missing; expected "
                    f"inputs {list(names)}"
                )
            given = [inputs[n] for n in names]
        else:
            if isinstance(inputs, (Tensor, np.ndarray)):
                raise InputMismatchError(
                    f"graph {self.graph_name!r}: run() takes a list or dict of inputs, not a "
                    "single tensor; wrap it: run([x])"
                )
            given = list(inputs)
            if len(given) != len(names):
                raise InputMismatchError(
                    f"graph {self.graph_name!r} takes {len(names)} input(s) {list(names)}, "
                    f"got {len(given)}"
                )
        return [self._array(name, x) for name, x in zip(names, given)]

    def _array(self, name: str, x: Any) -> np.ndarray:
        if isinstance(x, Tensor):
            data = x._data
            if data is None:
                raise InputMismatchError(f"input {name!r}: got a traced tensor without values")
            return data
        if isinstance(x, np.ndarray):
            return x
        try:
            return np.asarray(x)
        except Exception as exc:
            raise InputMismatchError(
                f"input {name!r}: expected a tensor or array, got {type(x).__name__}"
            ) from exc

    def _check(self, arrays: Sequence[np.ndarray]) -> None:
        bound: dict[str, tuple[int, str, int]] = {}  # symbol -> (size, input, axis)
        for array, name, dtype, shape in zip(arrays, self.names, self.dtypes, self.shapes):
            if array.dtype != dtype:
                raise InputMismatchError(
                    f"input {name!r}: expected dtype {dtype}, got {array.dtype}"
                )
            if array.ndim != len(shape):
                raise InputMismatchError(
                    f"input {name!r}: expected rank {len(shape)} (shape "
                    f"{format_shape(shape)}), got rank {array.ndim} (shape "
                    f"{format_shape(array.shape)})"
                )
            for axis, d in enumerate(shape):
                size = array.shape[axis]
                if isinstance(d, int):
                    if d != size:
                        raise InputMismatchError(
                            f"input {name!r} axis {axis}: expected size {d}, got {size} "
                            f"(expected shape {format_shape(shape)}, got "
                            f"{format_shape(array.shape)})"
                        )
                elif d.is_symbol():
                    prior = bound.get(d.name)
                    if prior is None:
                        bound[d.name] = (size, name, axis)
                    elif prior[0] != size:
                        raise InputMismatchError(
                            f"input {name!r} axis {axis}: size {size} breaks the symbolic size "
                            f"{d.name}, which is {prior[0]} at input {prior[1]!r} axis {prior[2]}"
                        )
        sizes = {k: v[0] for k, v in bound.items()}
        for array, name, shape in zip(arrays, self.names, self.shapes):
            for axis, d in enumerate(shape):
                if isinstance(d, SymDim) and not d.is_symbol():
                    try:
                        want = d.evaluate(sizes)
                    except KeyError:
                        continue
                    if want != array.shape[axis]:
                        raise InputMismatchError(
                            f"input {name!r} axis {axis}: expected size {d} = {want}, got "
                            f"{array.shape[axis]}"
                        )
