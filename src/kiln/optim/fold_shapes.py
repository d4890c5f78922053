"""Replace shape computations whose results are known by constants.

Every value's type may carry its known contents (``TensorType.value``): ``Shape`` of an input
whose sizes are static has value ``(2, 3)``, and the arithmetic on it propagates. A node whose
outputs all have fully static contents computes nothing at run time; this pass turns it into
constants. On a dynamic graph only the static parts fold; symbolic sizes stay computed.
"""

from __future__ import annotations

from ..ir.graph import Constant, ModelGraph
from ..ops.folding import known_array
from .transform import DefaultsOptions, transform

__all__ = ["fold_shapes"]


@transform("fold_shapes")
def fold_shapes(graph: ModelGraph, options: DefaultsOptions) -> tuple[ModelGraph, int]:
    """Turn each node whose outputs' contents are statically known into constants."""
    nodes = []
    constants = list(graph.constants)
    folded = 0
    for node in graph.nodes:
        known = []
        for out in node.outputs:
            # Integer contents only: this pass folds shape arithmetic; a type keeps contents
            # up to FoldingLimits.known_ints elements, so the constants stay that small.
            data = known_array(out.type, integral=True)
            if data is None:
                break
            known.append(Constant(out, data))
        if len(known) != len(node.outputs) or not node.outputs:
            nodes.append(node)
            continue
        constants.extend(known)
        folded += 1
    if not folded:
        return graph, 0
    return graph.with_body(nodes, constants=constants), folded
