"""kiln's NumPy-style functions (``kiln.exp``, ``kiln.concatenate``, ``kiln.zeros``, ...): the
front doors that lower Python-level calls onto registry operators. ``kiln`` re-exports them all.

Importing this package also attaches ``Tensor``'s NumPy-style methods and operators, which call
these functions (:mod:`kiln.functions.tensor_methods`).
"""

from __future__ import annotations

from .complex import *  # noqa: F403
from .complex import __all__ as _complex_all
from .control import *  # noqa: F403
from .control import __all__ as _control_all
from .creation import *  # noqa: F403
from .creation import __all__ as _creation_all
from .differences import *  # noqa: F403
from .differences import __all__ as _differences_all
from .elementwise import *  # noqa: F403
from .elementwise import __all__ as _elementwise_all
from .linalg import *  # noqa: F403
from .linalg import __all__ as _linalg_all
from .reduce import *  # noqa: F403
from .reduce import __all__ as _reduce_all
from .shape import *  # noqa: F403
from .shape import __all__ as _shape_all
from .tensor_methods import set_tensor_methods

set_tensor_methods()

__all__ = [
    *_control_all,
    *_complex_all,
    *_creation_all,
    *_differences_all,
    *_elementwise_all,
    *_linalg_all,
    *_reduce_all,
    *_shape_all,
]
