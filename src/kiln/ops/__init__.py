"""kiln's operators: the registry and one module per family.

Importing this package registers every operator.
"""

from __future__ import annotations

from . import elementwise, fused, linalg, nn, reduce, shape  # noqa: F401  # register the families
from .dispatch import call, dispatch
from .registry import OpDef, TensorType, all_ops, get_op, register

__all__ = ["OpDef", "TensorType", "all_ops", "call", "dispatch", "get_op", "register"]
