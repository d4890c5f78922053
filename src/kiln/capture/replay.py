"""One capture of a compiled function, and its replay.

A :class:`Capture` is one cache entry: the inputs it was recorded against, its finalized graph,
and the :class:`Replay` that serves calls from that graph (or, for a structure the tracer could
not record, the reason it serves eagerly). Both are frozen: a capture is made once, by
:func:`kiln.capture.recorder.record_capture`, and replaced as a whole when the function captures
again.

:meth:`Replay.serve` is the whole replay path: the shape guard, the plan's run, the value guards
and the rebuilt result. When it cannot serve a call it raises a :class:`ReplayMiss` saying why
(:class:`ShapeDrift` or :class:`GuardMiss`), which the compiled function turns into a
re-capture decision.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from ..errors import InputMismatchError
from ..ir.graph import ModelGraph
from ..tensor import Tensor
from .signature import CapturedInputs
from .traced import _Outputs

__all__ = ["Capture", "Replay", "ValueGuard", "ReplayMiss", "ShapeDrift", "GuardMiss", "Runner"]

Runner = Callable[[list[np.ndarray]], list[np.ndarray]]


class ValueGuard(NamedTuple):
    """A value the capture read on the host (``bool(t)``, ``t.item()``): the graph computes it
    as an extra output, and a replay is valid only while it equals what the capture saw."""

    output: int  # the graph output holding the value
    expected: np.ndarray
    where: str  # the host read and the user's line


class ReplayMiss(Exception):
    """Why a replay could not serve a call (internal: the compiled function handles it)."""


class ShapeDrift(ReplayMiss):
    """The inputs do not fit the graph's input shapes."""

    def __init__(self, mismatch: InputMismatchError) -> None:
        super().__init__(str(mismatch))
        self.mismatch = mismatch


class GuardMiss(ReplayMiss):
    """A value guard saw another value than the capture did."""

    def __init__(self, guard: ValueGuard, got: np.ndarray) -> None:
        super().__init__(guard.where)
        self.guard = guard
        self.got = got


@dataclass(frozen=True, slots=True)
class Replay:
    """Everything a replay needs, decided at capture time.

    Attributes:
        run: The plan's run with its input check (the shape guard).
        outputs: How the result's structure is rebuilt from the graph outputs.
        n_outputs: The number of graph outputs that are result tensors (value guards follow).
        guards: The value guards.
        static_shapes: For a static graph, its input shapes: the key already matched dtypes and
            ranks, so comparing shapes is the whole guard, and ``run_unchecked`` runs the plan.
        run_unchecked: The plan's run without its input check (static graphs only).
        one_tensor: The result is exactly one tensor and there are no value guards.
        container: ``list`` or ``tuple`` when the result is a flat one of tensors.
    """

    run: Runner
    outputs: _Outputs
    n_outputs: int
    guards: tuple[ValueGuard, ...] = ()
    static_shapes: tuple[tuple[int, ...], ...] | None = None
    run_unchecked: Runner | None = None
    one_tensor: bool = False
    container: type | None = None

    def serve(self, arrays: list[np.ndarray]) -> Any:
        """The result of the capture's graph on the call's input ``arrays``.

        Raises:
            ShapeDrift: The arrays do not fit the graph's input shapes.
            GuardMiss: A value guard failed.
        """
        static_shapes = self.static_shapes
        if static_shapes is not None:
            # A static graph: the full input check runs only to explain a miss.
            for array, shape in zip(arrays, static_shapes):
                if array.shape != shape:
                    break
            else:
                outs = self.run_unchecked(arrays)  # type: ignore[misc]
                if self.one_tensor:
                    return Tensor._wrap(outs[0])
                return self._result(outs)
        try:
            outs = self.run(arrays)
        except InputMismatchError as mismatch:
            raise ShapeDrift(mismatch) from None
        return self._result(outs)

    def _result(self, outs: list[np.ndarray]) -> Any:
        for guard in self.guards:
            if not np.array_equal(outs[guard.output], guard.expected):
                raise GuardMiss(guard, outs[guard.output])
        container = self.container
        if container is not None:  # a flat list or tuple of tensors: no unflattening
            return container([Tensor._wrap(a) for a in outs[: self.n_outputs]])
        return self.outputs.rebuild([Tensor._wrap(a) for a in outs[: self.n_outputs]])


@dataclass(frozen=True, slots=True)
class Capture:
    """One cache entry of a compiled function.

    Attributes:
        inputs: What the capture was recorded against (what explains the next change).
        graph: The finalized graph; None when the structure serves eagerly.
        replay: What serves calls from the graph; None when the structure serves eagerly.
        eager_reason: Why the structure serves eagerly (what the tracer could not record).
        pins: Why an operation fixed a dynamic size to one value, one message each.
        nbytes: The bytes held: the graph's constants and the guards' expected values.
    """

    inputs: CapturedInputs
    graph: ModelGraph | None = None
    replay: Replay | None = None
    eager_reason: str | None = None
    pins: tuple[str, ...] = ()
    nbytes: int = 0
