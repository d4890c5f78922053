"""kiln's NumPy-style functions (``kiln.exp``, ``kiln.concatenate``, ...): the front doors that
lower Python-level calls onto registry operators. ``kiln`` re-exports them all."""

from __future__ import annotations

from .elementwise import *  # noqa: F403
from .elementwise import __all__ as _elementwise_all
from .linalg import *  # noqa: F403
from .linalg import __all__ as _linalg_all
from .reduce import *  # noqa: F403
from .reduce import __all__ as _reduce_all
from .shape import *  # noqa: F403
from .shape import __all__ as _shape_all

__all__ = [*_elementwise_all, *_linalg_all, *_reduce_all, *_shape_all]
