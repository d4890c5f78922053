"""Group chains and DAG regions of elementwise operators into one ``kiln.FusedElementwise``.

A region grows backwards from a root node: a producer joins when it is an elementwise operator
that numexpr can evaluate in its dtypes and *every* use of its result is inside the region (and
it is not a graph output), so nothing computed inside is needed outside and the region has a
single result: the root's. Regions of at least two operators become one fused node, evaluated
by one numexpr expression: one pass over memory instead of one per operator, with no
temporaries. numexpr costs about 10 microseconds a call, so only results of at least
:data:`MIN_ELEMENTS` elements are fused (a symbolic size counts as 1).
"""

from __future__ import annotations

from ..ir.graph import ModelGraph, Node, Value
from ..ops import fused  # noqa: F401  # registers kiln.FusedElementwise
from ..ops.fused import NUMEXPR_DTYPES, format_step, numexpr_expression, parse_program
from ..ops.registry import ELEMENTWISE
from .transform import DefaultsOptions, transform

__all__ = ["fuse_elementwise", "MIN_ELEMENTS", "MAX_INPUTS"]

# Fuse only results this big: below it the per-operator cost of NumPy is already small.
# The pass reads it from its options; this is their default, kept under its old name.
MIN_ELEMENTS = DefaultsOptions.fusion_min_elements
# numexpr takes at most this many operands in one expression.
MAX_INPUTS = 30
FUSED_OP = "kiln.FusedElementwise"


def _static_size(value: Value) -> int:
    size = 1
    for d in value.shape:
        size *= d if isinstance(d, int) else 1
    return size


def _fusible(node: Node) -> bool:
    """An elementwise one-output ONNX operator with a numexpr form in these dtypes."""
    if node.op == FUSED_OP or len(node.outputs) != 1 or ELEMENTWISE not in node.opdef.traits:
        return False
    if node.opdef.domain or any(v is None for v in node.inputs):
        return False
    dts = [v.dtype for v in node.inputs if v is not None]
    if any(d not in NUMEXPR_DTYPES for d in (*dts, node.outputs[0].dtype)):
        return False
    args = ", ".join(f"v{i}" for i in range(len(dts)))
    try:
        steps = parse_program((f"{node.op}({args})",), len(dts))
    except Exception:
        return False
    bound = node.opdef.bind_attrs(node.attrs)
    defaults = {k: a.default for k, a in node.opdef.attrs.items()}
    if bound != defaults:  # numexpr forms exist only for the attribute-free operators
        return False
    return numexpr_expression(steps, dts, len(dts)) is not None


def _regions(graph: ModelGraph, min_elements: int) -> list[list[Node]]:
    """Maximal regions, each listed in graph order with its root last."""
    users: dict[int, set[int]] = {}
    producer: dict[int, int] = {}
    for index, node in enumerate(graph.nodes):
        for v in node.inputs:
            if v is not None:
                users.setdefault(id(v), set()).add(index)
        for v in node.outputs:
            producer[id(v)] = index
    outputs = {id(v) for v in graph.output_values}
    fusible = [_fusible(n) for n in graph.nodes]
    taken: set[int] = set()
    regions = []
    for root in reversed(range(len(graph.nodes))):
        node = graph.nodes[root]
        if root in taken or not fusible[root] or _static_size(node.outputs[0]) < min_elements:
            continue
        region = {root}
        frontier = [root]
        while frontier:
            current = graph.nodes[frontier.pop()]
            for v in current.inputs:
                p = producer.get(id(v)) if v is not None else None
                if p is None or p in region or p in taken or not fusible[p]:
                    continue
                if id(v) in outputs or not users.get(id(v), set()) <= region:
                    continue
                if len(_inputs_of([graph.nodes[i] for i in region | {p}])) > MAX_INPUTS:
                    continue
                region.add(p)
                frontier.append(p)
        if len(region) >= 2:
            taken |= region
            regions.append([graph.nodes[i] for i in sorted(region)])
    return regions


def _inputs_of(nodes: list[Node]) -> list[Value]:
    inside = {id(v) for n in nodes for v in n.outputs}
    seen: dict[int, Value] = {}
    for n in nodes:
        for v in n.inputs:
            if v is not None and id(v) not in inside:
                seen.setdefault(id(v), v)
    return list(seen.values())


def _fuse(region: list[Node]) -> Node:
    inputs = _inputs_of(region)
    index = {id(v): i for i, v in enumerate(inputs)}
    program = []
    for node in region:
        args = [index[id(v)] for v in node.inputs if v is not None]
        program.append(format_step(node.op, args, {}))
        index[id(node.outputs[0])] = len(index)
    root = region[-1]
    return Node(
        FUSED_OP, tuple(inputs), root.outputs, {"program": tuple(program)}, root.name, root.source
    )


def fuse_elementwise_regions(graph: ModelGraph, min_elements: int) -> tuple[ModelGraph, int]:
    """:func:`fuse_elementwise` with an explicit size threshold (tests use small tensors).

    Example:
        >>> import kiln, numpy as np
        >>> g = kiln.trace(lambda x: np.tanh(x * 2.0) + 1.0, np.ones(4, np.float32)).graph
        >>> g, n = fuse_elementwise_regions(g, min_elements=1)
        >>> n, [node.op for node in g.nodes]
        (1, ['kiln.FusedElementwise'])
    """
    regions = _regions(graph, min_elements)
    if not regions:
        return graph, 0
    replaced = {id(r[-1]): _fuse(r) for r in regions}
    dropped = {id(n) for r in regions for n in r[:-1]}
    nodes = [replaced.get(id(n), n) for n in graph.nodes if id(n) not in dropped]
    return graph.with_body(nodes), len(regions)


@transform("fuse_elementwise")
def fuse_elementwise(graph: ModelGraph, options: DefaultsOptions) -> tuple[ModelGraph, int]:
    """Fuse each maximal region of two or more numexpr-evaluable elementwise operators whose
    result has at least ``MIN_ELEMENTS`` elements (``options.fusion_min_elements`` when the
    options have it) into one ``kiln.FusedElementwise`` node."""
    threshold = options.fusion_min_elements
    return fuse_elementwise_regions(graph, threshold)
