"""Elementwise front-door functions: ``kiln.add``, ``kiln.exp``, ... and their NumPy ufuncs.

Each function takes tensors, arrays or Python scalars, resolves dtypes exactly as the NumPy ufunc
of the same name would (:func:`~kiln.functions.operands.ufunc_operands`), and lowers onto
registry operators through :func:`~kiln.ops.dispatch.call`. Each is registered for NumPy's
protocol with :func:`~kiln.functions.numpy_protocol.implements`, so ``np.exp(t)`` runs it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..ops.dispatch import call
from ..tensor import Tensor
from .numpy_protocol import implements
from .operands import ufunc_operands

__all__ = ["add", "exp"]


@implements(np.add)
def add(x: Any, y: Any) -> Tensor:
    """``x + y`` elementwise, with NumPy broadcasting and promotion (bool: logical or).

    Example:
        >>> import kiln
        >>> kiln.add(kiln.tensor([1.0, 2.0], dtype="float32"), 1).tolist()
        [2.0, 3.0]
    """
    (a, b), out = ufunc_operands(np.add, x, y)
    return call("Or" if out == np.bool_ else "Add", a, b)


@implements(np.exp)
def exp(x: Any) -> Tensor:
    """e to the power of each element (integers compute in float64, as NumPy)."""
    (a,), _ = ufunc_operands(np.exp, x)
    return call("Exp", a)
