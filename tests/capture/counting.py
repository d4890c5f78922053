"""A target that counts its Python calls: whether a compiled call ran the function or the
graph."""

from __future__ import annotations

from typing import Any


class Counted:
    """A target that counts its Python calls."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn
        self.calls = 0
        self.__name__ = fn.__name__
        self.__wrapped__ = fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        return self.fn(*args, **kwargs)
