"""Graphs in and out: :class:`ModelGraph`, the IR users hold."""

from __future__ import annotations

from ..ir.graph import ModelGraph
from ..optim.transform import DefaultsOptions, OptimizeReport

__all__ = ["ModelGraph", "DefaultsOptions", "OptimizeReport"]
