"""kiln.tree: pytrees over optree."""

from __future__ import annotations

import collections

import numpy as np

import kiln
from kiln.tree import flatten, flatten_with_paths, is_leaf_tensor, path_name, unflatten

Pair = collections.namedtuple("Pair", ["a", "b"])


def test_flatten_and_unflatten_round_trip():
    tree = {"w": np.ones(2), "layers": [Pair(1, None), (2.0, "s")]}
    leaves, spec = flatten(tree)
    assert len(leaves) == 4  # None is an empty node, not a leaf
    rebuilt = unflatten(spec, leaves)
    assert rebuilt["layers"][0] == Pair(1, None) and rebuilt["layers"][1] == (2.0, "s")
    assert isinstance(spec, kiln.tree.TreeSpec)


def test_paths_name_leaves():
    paths, leaves, _ = flatten_with_paths({"params": {"w": 1}, "batch": (2, 3)})
    assert [path_name(p) for p in paths] == ["batch.0", "batch.1", "params.w"]
    assert leaves == [2, 3, 1]


def test_tensor_leaves():
    assert is_leaf_tensor(kiln.ones(2)) and is_leaf_tensor(np.ones(2))
    assert not is_leaf_tensor(1.0) and not is_leaf_tensor("x")
