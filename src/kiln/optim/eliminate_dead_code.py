"""Remove nodes and constants no graph output depends on."""

from __future__ import annotations

from ..ir.graph import ModelGraph
from .pattern import prune
from .transform import DefaultsOptions, transform

__all__ = ["eliminate_dead_code"]


@transform("eliminate_dead_code")
def eliminate_dead_code(graph: ModelGraph, options: DefaultsOptions) -> tuple[ModelGraph, int]:
    """Drop every node whose outputs are unused and every unused constant (all kiln operators
    are pure, so an unused result can go)."""
    return prune(graph)  # (remove_unused, not again on a graph it returned)
