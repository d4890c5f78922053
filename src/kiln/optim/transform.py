"""Transforms, their options, the optimizer's report, and the fixed-point driver.

A :class:`Transform` is a named rewrite from graph to graph that says how many rewrites it
made. :func:`run_pipeline` applies a list of transforms repeatedly until a whole iteration
changes nothing (a fixed point) or the iteration cap is hit, and reports what happened.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from ..errors import GraphValidationError

if TYPE_CHECKING:
    from ..ir.graph import ModelGraph

__all__ = ["Transform", "DefaultsOptions", "OptimizeReport", "transform", "run_pipeline"]


@dataclass(frozen=True)
class DefaultsOptions:
    """Options every transform reads.

    Attributes:
        constant_folding_limit: Fold a node over constants only if its outputs hold at most
            this many elements in all (bigger results stay computed at run time, keeping the
            graph small).
        allow_reassociation: Allow rewrites that reorder floating-point math (off by default:
            results then match eager bit for bit where the kernels do).
        verify: Check the IR's invariants after every transform (slower; for debugging).
        fusion_min_elements: Elementwise fusion only fuses regions whose results hold at
            least this many elements (smaller ones cost more in call overhead than they save).
    """

    constant_folding_limit: int = 1 << 16
    allow_reassociation: bool = False
    verify: bool = False
    fusion_min_elements: int = 1 << 15


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


def run_pipeline(
    graph: ModelGraph,
    transforms: Sequence[Transform] | None,
    max_num_iterations: int,
    defaults: DefaultsOptions | None,
) -> tuple[ModelGraph, OptimizeReport]:
    """Apply ``transforms`` (the default pipeline when None) to a fixed point or the cap."""
    from .pipeline import default_pipeline

    if max_num_iterations < 1:
        raise ValueError(f"max_num_iterations must be at least 1, got {max_num_iterations}")
    options = defaults or DefaultsOptions()
    pipeline = list(default_pipeline() if transforms is None else transforms)
    for t in pipeline:
        if not isinstance(t, Transform):
            raise TypeError(f"optimize() takes kiln.optim.Transform objects, got {t!r}")
    report = OptimizeReport(nodes_before=len(graph.nodes))
    start = time.perf_counter()
    current = graph
    for _ in range(max_num_iterations):
        counts: dict[str, int] = {}
        for t in pipeline:
            current, n = t(current, options)
            counts[t.name] = counts.get(t.name, 0) + n
            if options.verify:
                try:
                    current.verify()
                except GraphValidationError as exc:
                    raise GraphValidationError(f"after transform {t.name}: {exc}") from exc
        report.rewrites.append(counts)
        report.iterations += 1
        if not any(counts.values()):
            report.fixed_point = True
            break
    report.nodes_after = len(current.nodes)
    report.seconds = time.perf_counter() - start
    return current, report
