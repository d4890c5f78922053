"""The graph's own input check: count, names, dtype, rank, static sizes, symbol bindings and
the graph's shape guards (the comparisons of sizes its capture depends on).

Built once when a graph is finalized. The common case (every input has the expected dtype and
static shape) costs one tuple comparison per input; anything else takes the slow path that
names the input, the axis, what was expected and what was given.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import ArgumentTypeError, InputMismatchError
from ..symbolic import ShapeGuard, SymDim, format_shape
from ..tensor import Tensor, plain_array

if TYPE_CHECKING:
    from ..ir.graph import ModelGraph

__all__ = ["InputChecker", "ShapeGuardError"]


class ShapeGuardError(InputMismatchError):
    """The inputs' sizes break a shape guard of the graph: the capture took another branch.

    ``kiln.compile`` re-captures such a call; a traced graph refuses it.
    """

    def __init__(self, message: str, guard: ShapeGuard, sizes: Mapping[str, int]) -> None:
        super().__init__(message)
        self.guard = guard
        self.sizes = dict(sizes)


class InputChecker:
    """Turns ``run``'s inputs into a list of arrays in signature order, or raises."""

    def __init__(self, graph: ModelGraph) -> None:
        self.graph_name = graph.name
        values = graph.input_values
        self.names: tuple[str, ...] = tuple(v.name for v in values)
        self.index = {name: i for i, name in enumerate(self.names)}
        self.dtypes = tuple(v.dtype for v in values)
        self.shapes = tuple(v.shape for v in values)
        self.guards = graph.shape_guards
        self.static = not self.guards and all(
            all(isinstance(d, int) for d in s) for s in self.shapes
        )

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
            if inputs is None or isinstance(inputs, (str, bytes)):
                raise ArgumentTypeError(
                    f"graph {self.graph_name!r}: run() takes a list of inputs (in the order "
                    f"{list(names)}) or a dict by input name, got {type(inputs).__name__}"
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
        if type(x) is np.ndarray:
            return x
        if isinstance(x, np.ndarray):  # np.matrix and masked arrays are refused, with why
            return plain_array(x, f"graph {self.graph_name!r}: input {name!r}")
        if x is None or isinstance(x, (str, bytes)):
            raise ArgumentTypeError(
                f"graph {self.graph_name!r}: input {name!r} must be a tensor or an array, got "
                f"{type(x).__name__} {x!r}"
            )
        try:
            return np.asarray(x)
        except Exception as exc:
            raise InputMismatchError(
                f"input {name!r}: expected a tensor or array, got {type(x).__name__}"
            ) from exc

    def _check(self, arrays: list[np.ndarray]) -> None:
        bound: dict[str, tuple[int, str, int]] = {}  # symbol -> (size, input, axis)
        for k, (array, name, dtype, shape) in enumerate(
            zip(arrays, self.names, self.dtypes, self.shapes)
        ):
            if array.dtype != dtype:
                text = dtype.kind == "O" and array.dtype.kind in "SU"  # ONNX strings, as str
                if array.dtype.newbyteorder("=") != dtype and not text:
                    raise InputMismatchError(
                        f"input {name!r}: expected dtype {dtype}, got {array.dtype}"
                    )
                # Big-endian data (or NumPy str for a string input): computed on a native copy
                array = arrays[k] = array.astype(dtype)
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
        for guard in self.guards:
            if not guard.holds(sizes):
                raise self._guard_error(guard, sizes, bound)

    def _guard_error(
        self,
        guard: ShapeGuard,
        sizes: Mapping[str, int],
        bound: Mapping[str, tuple[int, str, int]],
    ) -> ShapeGuardError:
        used = {name: sizes[name] for name in sorted(guard.symbols)}
        origin = "; ".join(
            f"{name} = {size} (input {bound[name][1]!r} axis {bound[name][2]})"
            for name, size in used.items()
        )
        what = guard.what or "a comparison of sizes"
        where = f" at {guard.where}" if guard.where else ""
        message = (
            f"graph {self.graph_name!r} holds only for sizes where {guard} ({what}{where}), "
            f"but here {origin or 'it is false'}, so the graph does not apply: NumPy takes "
            "another branch or raises for these sizes. kiln.compile captures such a call anew; "
            "for a traced graph, trace again with these sizes, or keep the choice in tensor "
            "operations (kiln.where)."
        )
        return ShapeGuardError(message, guard, used)
