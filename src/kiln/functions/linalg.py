"""Front-door functions of the linalg family."""

from __future__ import annotations

__all__: list[str] = []
