"""The interface every engine's plan implements.

A plan is a graph made ready to run on one engine: ``check_inputs`` turns ``run``'s inputs
(a sequence in signature order, or a mapping by input name) into arrays or raises
:class:`~kiln.errors.InputMismatchError`; ``run_arrays`` computes the output arrays from
checked arrays; ``run`` does both and wraps the results as tensors. A future accelerator plan
(CuPy kernels, CUDA graphs) implements the same three.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ..tensor import Tensor

if TYPE_CHECKING:
    from ..ir.graph import ModelGraph
    from .inputs import InputChecker

__all__ = ["Plan"]


class Plan:
    """Base of the engines' plans: ``check_inputs``, ``run_arrays``, ``run``.

    Subclasses set ``engine`` (its name), ``graph``, ``checker`` (the graph's
    :class:`~kiln.exec.inputs.InputChecker`) and ``check_inputs`` (the checker, or a faster
    front of it), and implement ``run_arrays``.
    """

    engine: ClassVar[str]
    graph: ModelGraph
    checker: InputChecker
    check_inputs: Callable[[Any], list[np.ndarray]]

    def run_arrays(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        """The output arrays for checked input ``arrays`` (signature order)."""
        raise NotImplementedError

    def run(self, inputs: Sequence[Any] | Mapping[str, Any]) -> list[Tensor]:
        """Run on flat inputs (signature order, or by name); returns the output tensors."""
        return [Tensor._wrap(a) for a in self.run_arrays(self.check_inputs(inputs))]

    def bindings(self, arrays: Sequence[np.ndarray]) -> dict[str, int]:
        """The size each named symbolic dimension takes for checked input ``arrays``."""
        return self.checker.bindings(arrays)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.graph.name!r}: {len(self.graph.nodes)} nodes>"
