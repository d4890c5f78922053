"""Specialize a graph to concrete input sizes: every symbolic size becomes an int.

Used by finalization with ``specialize=True`` and by a trace whose operations pinned a dynamic
size: the specialized graph's types are inferred again with the sizes bound (each node rebuilt
by :meth:`kiln.ir.GraphBuilder.rebuild`), after which shape arithmetic folds away
(:mod:`fold_shapes`, :mod:`fold_constants`) and the executor can plan for fixed shapes.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..ir.graph import ModelGraph
from ..ir.sizes import bind_sizes
from .transform import DefaultsOptions, Transform

__all__ = ["specialize", "specialize_graph"]


def _specialize(graph: ModelGraph, sizes: Mapping[str, int]) -> tuple[ModelGraph, int]:
    """The specialized graph (:func:`kiln.ir.sizes.bind_sizes`) and how many values (inputs
    and node outputs) changed type."""
    special = bind_sizes(graph, sizes)
    before = [*graph.input_values, *(v for n in graph.nodes for v in n.outputs)]
    after = [*special.input_values, *(v for n in special.nodes for v in n.outputs)]
    return special, sum(a.type != b.type for a, b in zip(before, after))


def specialize_graph(graph: ModelGraph, sizes: Mapping[str, int]) -> ModelGraph:
    """A copy of ``graph`` whose inputs have the symbolic sizes in ``sizes`` bound to ints,
    with every node's output types inferred again. Data-dependent sizes stay symbolic.

    Example:
        >>> import kiln, numpy as np
        >>> x = np.ones((2, 3), np.float32)
        >>> g = kiln.trace(lambda x: x * 2, x, dynamic_axes={"x": [0]}).graph
        >>> specialize_graph(g, {"s0": 5}).outputs[0].shape
        (5, 3)
    """
    return _specialize(graph, sizes)[0]


def specialize(sizes: Mapping[str, int]) -> Transform:
    """The transform that binds the symbolic sizes in ``sizes`` (:func:`specialize_graph`); it
    counts the values whose type it changed, and gives back the graph itself when none.

    Example:
        >>> import kiln, numpy as np
        >>> x = np.ones((2, 3), np.float32)
        >>> g = kiln.trace(lambda x: x * 2, x, dynamic_axes={"x": [0]}).graph
        >>> special, n = specialize({"s0": 5})(g)
        >>> n, special.inputs[0].shape, specialize({"s0": 5})(special)[1]
        (2, (5, 3), 0)
    """
    bound = dict(sizes)

    def rewrite(graph: ModelGraph, options: DefaultsOptions) -> tuple[ModelGraph, int]:
        special, changed = _specialize(graph, bound)
        return (special, changed) if changed else (graph, 0)

    doc = "Bind the symbolic sizes " + ", ".join(f"{k}={v}" for k, v in sorted(bound.items()))
    return Transform("specialize", rewrite, doc)
