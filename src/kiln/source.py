"""Finding the user's source line for error messages and node provenance."""

from __future__ import annotations

import os
import sys

__all__ = ["user_source", "user_stacklevel"]

_KILN_DIR = os.path.dirname(os.path.abspath(__file__))
_STDLIB_DIR = os.path.dirname(os.path.abspath(os.__file__))
_NUMPY_DIR: str | None = None
_INSIDE: dict[str, bool] = {}  # file name -> inside kiln, NumPy or the stdlib
# (id(code), instruction offset) -> (code, its text): the tracer asks at every operator it
# records, and an unrolled loop asks from the same few instructions (finding the line number
# and formatting it cost more than the walk). The code object is kept to check the id.
_TEXT: dict[tuple[int, int], tuple[object, str]] = {}
_TEXT_LIMIT = 1 << 14


def _numpy_dir() -> str:
    global _NUMPY_DIR
    if _NUMPY_DIR is None:
        import numpy

        _NUMPY_DIR = os.path.dirname(os.path.abspath(numpy.__file__))
    return _NUMPY_DIR


def user_source() -> str:
    """``file:line (function)`` of the innermost frame outside kiln, NumPy and the stdlib.

    Example:
        >>> user_source().split(":")[0] != ""
        True
    """
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        inside = _INSIDE.get(filename)
        if inside is None:  # once per file: the tracer asks at every operator it records
            numpy_dir = _numpy_dir()
            inside = _INSIDE[filename] = filename.startswith((_KILN_DIR, numpy_dir)) or (
                filename.startswith(_STDLIB_DIR) and "site-packages" not in filename
            )
        if not inside:
            code = frame.f_code
            key = (id(code), frame.f_lasti)
            known = _TEXT.get(key)
            if known is not None and known[0] is code:
                return known[1]
            text = f"{filename}:{frame.f_lineno} ({code.co_name})"
            if len(_TEXT) >= _TEXT_LIMIT:
                _TEXT.clear()
            _TEXT[key] = (code, text)
            return text
        frame = frame.f_back  # type: ignore[assignment]
    return "<unknown>"


def user_stacklevel() -> int:
    """The ``stacklevel`` that makes ``warnings.warn``, called by the caller of this function,
    point at the user's line (the innermost frame outside kiln)."""
    frame = sys._getframe(1)  # the frame that will call warnings.warn: stacklevel 1
    level = 1
    while frame is not None and frame.f_code.co_filename.startswith(_KILN_DIR):
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    return level
