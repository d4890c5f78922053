"""Pytrees: nested containers of leaves, over optree.

kiln flattens a call's ``(args, kwargs)`` into leaves and a :class:`TreeSpec` (the structure),
and unflattens graph outputs back into the structure the function returned. Tuples, lists, dicts,
namedtuples, ``None`` (an empty node) and optree-registered types are containers; everything else
is a leaf.

Example:
    >>> leaves, spec = flatten({"w": 1, "b": (2, 3)})
    >>> leaves
    [2, 3, 1]
    >>> unflatten(spec, [4, 5, 6])
    {'w': 6, 'b': (4, 5)}
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import optree
from optree import PyTreeSpec as TreeSpec

from .tensor import Tensor

__all__ = ["TreeSpec", "flatten", "flatten_with_paths", "unflatten", "path_name", "is_leaf_tensor"]

# kiln tensors and NumPy arrays are leaves; optree already treats them so (they are not
# registered containers), and so are Python scalars and strings.


def flatten(tree: Any, is_leaf: Callable[[Any], bool] | None = None) -> tuple[list[Any], TreeSpec]:
    """The leaves of ``tree`` in order and its structure."""
    leaves, spec = optree.tree_flatten(tree, is_leaf=is_leaf)
    return leaves, spec


def flatten_with_paths(tree: Any) -> tuple[list[tuple[Any, ...]], list[Any], TreeSpec]:
    """The key path of each leaf (a tuple of keys/indices), the leaves, and the structure."""
    paths, leaves, spec = optree.tree_flatten_with_path(tree)
    return list(paths), leaves, spec


def unflatten(spec: TreeSpec, leaves: Any) -> Any:
    """The tree of structure ``spec`` holding ``leaves``."""
    return optree.tree_unflatten(spec, leaves)


def path_name(path: tuple[Any, ...]) -> str:
    """A dotted name for a key path: ``("params", "w")`` -> ``"params.w"``."""
    return ".".join(str(k) for k in path)


def is_leaf_tensor(x: Any) -> bool:
    """True for the leaves that become graph inputs: kiln tensors and NumPy arrays."""
    return isinstance(x, (Tensor, np.ndarray))
