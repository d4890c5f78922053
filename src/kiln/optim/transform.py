"""Transforms, their options and the optimizer's report.

A :class:`Transform` is a named rewrite from graph to graph that says how many rewrites it
made. :func:`kiln.optim.pipeline.run_pipeline` applies a list of them to a fixed point.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from ..ops.folding import FOLDING_LIMITS

if TYPE_CHECKING:
    from ..ir.graph import ModelGraph

__all__ = ["Transform", "DefaultsOptions", "OptimizeReport", "transform"]


@dataclass(frozen=True)
class DefaultsOptions:
    """Options every transform reads.

    Attributes:
        constant_folding_limit: Fold a node over constants only if its outputs hold at most
            this many elements in all (bigger results stay computed at run time, keeping the
            graph small). Defaults to the optimizer's limit in
            :data:`kiln.ops.folding.FOLDING_LIMITS`, where every folding size limit lives.
        allow_reassociation: Allow rewrites that reorder floating-point math (off by default:
            results then match eager bit for bit where the kernels do).
        verify: Check the IR's invariants after every transform (slower; for debugging).
        fusion_min_elements: Elementwise fusion only fuses regions whose results hold at
            least this many elements (smaller ones cost more in call overhead than they save).
        max_nodes: The node budget of a capture (``kiln.compile(..., defaults=...)``): a call
            that records more nodes than this (a long unrolled Python loop) is not captured;
            its input structure serves eagerly, with one ``CaptureWarning``. Every stage of a
            capture is linear in the number of nodes, so the budget bounds the first call's
            cost and the memory a graph holds.
        background_nodes: A capture that records at least this many nodes (an unrolled
            loop) is optimized and planned in a background thread: its first call returns as
            soon as the function has run, and the next call that needs the graph waits for it
            (:mod:`kiln.capture.background`). 0 for every capture; above ``max_nodes`` for
            none.
    """

    constant_folding_limit: int = FOLDING_LIMITS.optimizer
    allow_reassociation: bool = False
    verify: bool = False
    fusion_min_elements: int = 1 << 15
    max_nodes: int = 200_000
    background_nodes: int = 10_000


RewriteFn = Callable[["ModelGraph", DefaultsOptions], "tuple[ModelGraph, int]"]


@dataclass(frozen=True)
class Transform:
    """A named rewrite of a :class:`~kiln.io.ModelGraph`.

    Calling it returns the rewritten graph and how many rewrites it made (0: unchanged).

    Example:
        >>> from kiln.optim import eliminate_dead_code
        >>> eliminate_dead_code.name
        'eliminate_dead_code'
    """

    name: str
    rewrite: RewriteFn = field(repr=False)
    doc: str = field(default="", repr=False)

    def __call__(
        self, graph: ModelGraph, options: DefaultsOptions | None = None
    ) -> tuple[ModelGraph, int]:
        return self.rewrite(graph, options or DefaultsOptions())


def transform(name: str) -> Callable[[RewriteFn], Transform]:
    """Make a rewrite function into a :class:`Transform` called ``name``."""

    def wrap(fn: RewriteFn) -> Transform:
        return Transform(name, fn, (fn.__doc__ or "").strip())

    return wrap


@dataclass
class OptimizeReport:
    """What an optimizer run did.

    Attributes:
        iterations: How many passes over the pipeline ran.
        fixed_point: True when the last iteration changed nothing; False when the cap stopped it.
        rewrites: For each iteration, the rewrites each transform made.
        nodes_before / nodes_after: Node counts around the run.
        seconds: Time spent.
    """

    iterations: int = 0
    fixed_point: bool = False
    rewrites: list[dict[str, int]] = field(default_factory=list)
    nodes_before: int = 0
    nodes_after: int = 0
    seconds: float = 0.0

    @property
    def total_rewrites(self) -> int:
        return sum(sum(it.values()) for it in self.rewrites)

    def per_transform(self) -> dict[str, int]:
        """Rewrites per transform, summed over iterations."""
        totals: dict[str, int] = {}
        for it in self.rewrites:
            for name, n in it.items():
                totals[name] = totals.get(name, 0) + n
        return totals

    def to_dict(self) -> dict:
        data = asdict(self)
        data["total_rewrites"] = self.total_rewrites
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def __str__(self) -> str:
        stop = "fixed point" if self.fixed_point else "iteration cap"
        lines = [
            f"optimized in {self.iterations} iteration(s) ({stop}), {self.seconds * 1e3:.1f} ms: "
            f"{self.nodes_before} -> {self.nodes_after} nodes, {self.total_rewrites} rewrite(s)"
        ]
        for name, n in self.per_transform().items():
            if n:
                per_iter = ", ".join(str(it.get(name, 0)) for it in self.rewrites)
                lines.append(f"  {name}: {n} ({per_iter})")
        return "\n".join(lines)
