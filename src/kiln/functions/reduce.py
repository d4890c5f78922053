"""Front-door functions of the reduce family."""

from __future__ import annotations

__all__: list[str] = []
