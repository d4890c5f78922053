"""Neural-network functions: ``kiln.nn.relu``, ``softmax``, ``layer_norm``, ``conv2d``, ...

Signatures follow jax.nn and torch.nn.functional (an ``axis`` keyword, NumPy's word, where they
reduce). Each lowers onto registry operators through the same dispatch as every other call.
"""

from __future__ import annotations

__all__: list[str] = []
