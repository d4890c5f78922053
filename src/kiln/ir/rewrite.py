"""Small helpers passes share to rebuild nodes after values are replaced, and to drop what
no output needs."""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from itertools import chain

from ..ops.registry import get_op
from ..symbolic import checked_at_run_time
from .graph import ModelGraph, Node, Value

__all__ = [
    "substitute",
    "substitute_node",
    "uses",
    "remove_unused",
    "can_raise",
    "topological_order",
]


def substitute_node(node: Node, mapping: Mapping[int, Value]) -> Node:
    """``node`` with each input found in ``mapping`` (by id) replaced; the same node if none."""
    # Most nodes read nothing replaced: one set operation over the inputs' ids, in C. (An
    # omitted input is None, whose id is no value's.)
    if mapping.keys().isdisjoint(map(id, node.inputs)):
        return node
    get = mapping.get
    inputs = tuple([get(id(v), v) for v in node.inputs])
    if inputs == node.inputs:  # (values compare by identity) every input mapped to itself
        return node
    return Node(node.op, inputs, node.outputs, node.attrs, node.name, node.source)


def substitute(nodes: Iterable[Node], mapping: Mapping[int, Value]) -> list[Node]:
    """Every node with its inputs substituted through ``mapping``."""
    if not mapping:
        return list(nodes)
    return [substitute_node(n, mapping) for n in nodes]


def topological_order(nodes: Sequence[Node], defined: Iterable[Value]) -> list[Node]:
    """``nodes`` in an order where each node follows the nodes that make its inputs, as close
    to the given order as that allows (a node moves later only until its inputs exist).

    ``defined`` are the values available before any node (graph inputs and constants). A
    rewrite that puts a replacement node after one of its users, or replaces a value by one
    made later, still yields a valid graph. A node whose input nothing makes (a value of
    another graph, a rename that missed a user) cannot be placed: such nodes keep their
    relative order at the end, where ``verify`` names them.

    Example:
        >>> import kiln, numpy as np
        >>> g = kiln.trace(lambda x: (x + 1.0) * 2.0, np.ones(2, np.float32)).graph
        >>> shuffled = list(reversed(g.nodes))
        >>> defined = [*g.input_values, *(c.value for c in g.constants)]
        >>> [n.op for n in topological_order(shuffled, defined)]
        ['Add', 'Mul']
    """
    ready = {id(v) for v in defined}
    ready.add(id(None))  # an omitted input is always there
    i = 0  # the common case: already in order, nothing to do
    add = ready.add
    for node in nodes:
        for v in node.inputs:
            if id(v) not in ready:
                break
        else:
            for v in node.outputs:
                add(id(v))
            i += 1
            continue
        break
    else:
        return list(nodes)
    ordered = list(nodes[:i])
    waiting: dict[int, list[int]] = {}  # a missing value -> positions of the nodes waiting on it
    missing: dict[int, int] = {}  # node position -> how many of its inputs are missing
    emitted: set[int] = set()

    def emit(position: int) -> None:
        heap = [position]  # nodes made ready, earliest first
        while heap:
            position = heapq.heappop(heap)
            node = nodes[position]
            ordered.append(node)
            emitted.add(position)
            for v in node.outputs:
                if id(v) in ready:
                    continue
                ready.add(id(v))
                for waiter in waiting.pop(id(v), ()):
                    missing[waiter] -= 1
                    if not missing[waiter]:
                        heapq.heappush(heap, waiter)

    for position in range(i, len(nodes)):
        node = nodes[position]
        if not waiting:  # no node waits: one whose inputs are all there is just placed
            for v in node.inputs:
                if id(v) not in ready:
                    break
            else:
                ordered.append(node)
                emitted.add(position)
                for v in node.outputs:
                    add(id(v))
                continue
        absent = {id(v) for v in node.inputs if v is not None and id(v) not in ready}
        if not absent:
            emit(position)
            continue
        missing[position] = len(absent)
        for key in absent:
            waiting.setdefault(key, []).append(position)
    ordered.extend(n for p, n in enumerate(nodes) if p >= i and p not in emitted)
    return ordered


def uses(nodes: Iterable[Node]) -> dict[int, int]:
    """How many times each value (by id) is used as a node input."""
    counts = Counter(map(id, chain.from_iterable(node.inputs for node in nodes)))  # in C
    counts.pop(id(None), None)  # omitted inputs
    return dict(counts)


def can_raise(node: Node) -> bool:
    """Whether running ``node`` can raise where NumPy does, so that it must run even when its
    results are unused: its kernel raises on some input values (``OpDef.raises_on_values``:
    an integer to a negative integer power, an index out of range), or an output size is
    checked at run time (a broadcast of two symbolic sizes).

    Example:
        >>> import kiln, numpy as np
        >>> g = kiln.trace(lambda x: x ** x, np.ones(2, np.int32)).graph
        >>> can_raise(g.nodes[0])
        True
    """
    opdef = get_op(node.op)
    if opdef.raises_on_values and opdef.may_raise(
        node.inputs, node.outputs, opdef.bind_attrs(node.attrs)
    ):
        return True
    for v in node.outputs:
        for d in v.shape:
            if type(d) is not int and checked_at_run_time(d):  # (most sizes are ints)
                return True
    return False


def _gathers_own_nonzero(node: Node, producer: dict[int, Node]) -> bool:
    """A ``GatherND(x, Transpose(NonZero(m)))`` with ``m`` of ``x``'s shape (what ``x[m]``
    records): its indices are in range by construction, so it cannot raise."""
    if node.op != "GatherND" or node.attrs.get("batch_dims", 0):
        return False
    transpose = producer.get(id(node.inputs[1]))
    if transpose is None or transpose.op != "Transpose" or transpose.attrs.get("perm"):
        return False
    nonzero = producer.get(id(transpose.inputs[0]))
    if nonzero is None or nonzero.op != "NonZero" or nonzero.inputs[0] is None:
        return False
    data = node.inputs[0]
    return data is not None and tuple(nonzero.inputs[0].shape) == tuple(data.shape)


def remove_unused(graph: ModelGraph) -> tuple[ModelGraph, int]:
    """``graph`` without the nodes and constants no graph output depends on, and how many were
    removed (0: ``graph`` itself comes back). Every kiln operator is pure, so an unused result
    can go, unless the node can raise where NumPy does (:func:`can_raise`): it stays. The
    ``eliminate_dead_code`` pass, and the rewrite driver after each sweep, use it.

    Example:
        >>> import kiln, numpy as np
        >>> def f(x):
        ...     kiln.exp(x)  # computed, never used
        ...     return x + 1.0
        >>> g, n = remove_unused(kiln.trace(f, np.ones(2, np.float32)).graph)
        >>> n, [node.op for node in g.nodes]
        (1, ['Add'])
    """
    live = {id(v) for v in graph.output_values}
    producer: dict[int, Node] | None = None  # made when a GatherND may need it
    kept = []
    add = live.add
    for node in reversed(graph.nodes):
        # A node that can raise (on its values, or on sizes checked at run time) is live even
        # when unused: the run raises where NumPy would.
        for v in node.outputs:
            if id(v) in live:
                break
        else:
            if not can_raise(node):
                continue
            if node.op == "GatherND":
                if producer is None:
                    producer = {id(o): n for n in graph.nodes for o in n.outputs}
                if _gathers_own_nonzero(node, producer):
                    continue
        kept.append(node)
        for v in node.inputs:
            add(id(v))  # (an omitted input adds id(None): no value has it)
    kept.reverse()
    constants = [c for c in graph.constants if id(c.value) in live]
    removed = len(graph.nodes) - len(kept) + len(graph.constants) - len(constants)
    if not removed:
        return graph, 0
    return graph.with_body(kept, constants=constants), removed
