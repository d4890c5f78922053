"""Operators of the shape family (see the module docstring of kiln.ops.registry)."""

from __future__ import annotations
