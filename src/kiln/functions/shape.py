"""Front-door functions of the shape family."""

from __future__ import annotations

__all__: list[str] = []
