"""Executors: turn a finalized graph into a plan for its place, and run it.

A plan has ``run(inputs) -> list[Tensor]``; :func:`build_plan` picks the executor for a place.
The CPU has the reference interpreter today; an accelerator executor plugs in here by device
type.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..device import as_device, require_backend
from .reference import ReferencePlan

if TYPE_CHECKING:
    from ..ir.graph import ModelGraph

__all__ = ["build_plan", "ReferencePlan"]


ENGINES = ("reference",)


def build_plan(graph: ModelGraph, place: object, engine: str | None = None) -> ReferencePlan:
    """The plan that runs ``graph`` at ``place`` (``None``: the CPU) on ``engine``
    (``None``: chosen for the graph)."""
    device = as_device(place)  # type: ignore[arg-type]
    require_backend(device)
    if engine not in (None, *ENGINES):
        raise ValueError(f"unknown engine {engine!r}; kiln has {list(ENGINES)}")
    return ReferencePlan(graph)
