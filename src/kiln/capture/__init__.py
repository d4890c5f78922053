"""Capture: recording Python functions into graphs (``kiln.trace``; ``kiln.compile``)."""

from __future__ import annotations

from .traced import TracedGraph, trace

__all__ = ["TracedGraph", "trace"]
