"""kiln's operators: the registry and one module per family.

Importing this package registers every operator. Calling an operator on tensors is
:func:`kiln.tensor.dispatch` (or :func:`kiln.tensor.call`), one layer up: ``kiln.ops`` knows
arrays, not ``Tensor``.
"""

from __future__ import annotations

from . import complex, control, elementwise, fused, linalg, nn, reduce, shape, writes  # noqa: F401  # register the families
from .registry import OpDef, TensorType, all_ops, get_op, register

__all__ = ["OpDef", "TensorType", "all_ops", "get_op", "register"]
