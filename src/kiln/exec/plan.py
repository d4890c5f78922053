"""The interface every engine's plan implements.

A plan is a graph made ready to run on one engine: ``check_inputs`` turns ``run``'s inputs
(a sequence in signature order, or a mapping by input name) into arrays or raises
:class:`~kiln.errors.InputMismatchError`; ``run_arrays`` computes the output arrays from
checked arrays; ``run`` does both and wraps the results as tensors. A future accelerator plan
(CuPy kernels, CUDA graphs) implements the same three.

Every plan hands out outputs that share memory with nothing else: not with an input, not with
a constant, not with another output, not with what an earlier run returned (NumPy returns
copies; a caller refilling its input buffer never changes a result). :func:`output_copies`
decides, at plan-build time, which outputs need a copy for that, so outputs a kernel allocated
afresh cost nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Literal, NamedTuple

import numpy as np

from ..errors import OpArgumentError, UnsupportedOperationError
from ..ops.control import subgraph_attrs
from ..ops.registry import get_op
from ..tensor import Tensor

if TYPE_CHECKING:
    from ..ir.graph import ModelGraph, Value
    from .inputs import InputChecker

__all__ = ["Plan", "OutputCopy", "node_rounding", "output_copies", "refuse_rounding"]


class Plan:
    """Base of the engines' plans: ``check_inputs``, ``run_arrays``, ``run``.

    Subclasses set ``engine`` (its name), ``graph``, ``checker`` (the graph's
    :class:`~kiln.exec.inputs.InputChecker`) and ``check_inputs`` (the checker, or a faster
    front of it), and implement ``run_arrays``.
    """

    engine: ClassVar[str]
    graph: ModelGraph
    checker: InputChecker
    check_inputs: Callable[[Any], list[np.ndarray]]

    def run_arrays(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        """The output arrays for checked input ``arrays`` (signature order)."""
        raise NotImplementedError

    def run(self, inputs: Sequence[Any] | Mapping[str, Any]) -> list[Tensor]:
        """Run on flat inputs (signature order, or by name); returns the output tensors."""
        return [Tensor._wrap(a) for a in self.run_arrays(self.check_inputs(inputs))]

    def bindings(self, arrays: Sequence[np.ndarray]) -> dict[str, int]:
        """The size each named symbolic dimension takes for checked input ``arrays``."""
        return self.checker.bindings(arrays)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.graph.name!r}: {len(self.graph.nodes)} nodes>"


# -- engines never change an answer -------------------------------------------------------


def node_rounding(graph: ModelGraph) -> str | None:
    """The first node of ``graph`` whose operator's record does not say it is bit-exact
    (``OpDef.is_bit_exact``: a math-library function, a reduction or a product whose
    summation order is the engine's), as a reason; None when every node is. A control-flow
    node (If, Loop, Scan) is as exact as the nodes of its subgraphs."""
    for node in graph.nodes:
        opdef = get_op(node.op)
        attrs = opdef.bind_attrs(node.attrs)
        subgraphs = subgraph_attrs(opdef, attrs)
        if subgraphs:
            for key, sub in subgraphs.items():
                why = node_rounding(sub)
                if why is not None:
                    return f"node {node.name!r} ({node.op}, {key}): {why}"
        elif not opdef.is_bit_exact(node.inputs, node.outputs, attrs):
            return f"node {node.name!r} ({node.op}) rounds as the engine's library or order does"
    return None


def refuse_rounding(
    graph: ModelGraph, engine: str, *more: Callable[[ModelGraph], str | None]
) -> None:
    """Raise :class:`~kiln.errors.UnsupportedOperationError` naming the node when ``engine``,
    asked for by name, may round a result of ``graph`` otherwise than NumPy
    (:func:`node_rounding`, then each of the engine's own checks ``more``), unless the graph
    was optimized allowing reassociation: a forced engine never changes an answer either
    (SPEC 5b). An engine's ulp does not stay an ulp: a later ``sinh`` or subtraction magnifies
    it, and a sum in another order overflows to -inf where NumPy's gives NaN."""
    if graph.reassociation_allowed:
        return
    for check in (node_rounding, *more):
        why = check(graph)
        if why is not None:
            raise UnsupportedOperationError(
                f"graph {graph.name!r} cannot run on {engine} with NumPy's bits: {why}. Use "
                "engine='numpy' (or engine=None to let kiln choose), or optimize with "
                f"DefaultsOptions(allow_reassociation=True) to accept {engine}'s rounding"
            )


# -- outputs never alias ------------------------------------------------------------------


class OutputCopy(NamedTuple):
    """How a plan hands out one graph output so that it shares memory with nothing else.

    Attributes:
        action: ``"keep"``: the run allocated it and nothing else can view it; ``"copy"``:
            always copy it (a graph input, a constant, or a value that an earlier output
            already hands out); ``"check"``: it may be a view, so copy it unless the run's
            array owns its memory (``base is None``) and is none of the arrays in ``distinct``.
        distinct: For ``"check"``: the inputs, constants and other outputs the array may
            be the very object of.
    """

    action: Literal["keep", "copy", "check"]
    distinct: tuple[Value, ...] = ()


# Operators whose result may be a read-only view with overlapping elements (Expand is
# np.broadcast_to): an output computed through one is copied, as NumPy code that returns
# ``np.broadcast_to(...).copy()`` hands out a writable array (fuzz 35:4979).
_READ_ONLY_VIEWS = frozenset({"Expand"})


def _viewable(node: Any) -> list[Value]:
    """The inputs of ``node`` whose buffers its outputs may view: all but those its operator
    reads only for their values (a Reshape's shape, a Slice's bounds: ``Input.values_only``)."""
    try:
        opdef = get_op(node.op)
    except OpArgumentError:  # (not a registered operator: any input may be viewed)
        return [v for v in node.inputs if v is not None]
    viewable = []
    for i, v in enumerate(node.inputs):
        formal = opdef.input_at(i)
        if v is not None and (formal is None or not formal.values_only):
            viewable.append(v)
    return viewable


def output_copies(
    graph: ModelGraph,
    allocates: Callable[[Value], bool],
    constant: Callable[[Value], bool] = lambda v: False,
) -> list[OutputCopy]:
    """What each of ``graph``'s outputs needs so that no output shares memory with an input,
    a constant or another output (one :class:`OutputCopy` per output, in order).

    ``allocates(v)`` says the engine computes node output ``v`` into a buffer of its own (a
    ufunc's result: never a view); any other node output may be a view of any of its node's
    inputs (a reshape, a transpose, a cast to the same dtype). ``constant(v)`` marks node
    outputs the plan computed once and reuses at every run (a plan-time fold); the graph's
    own constants always count.

    Each value's *roots* are the buffers it may view: itself when it was allocated, a graph
    input or a constant, and otherwise its own buffer plus the roots of its node's inputs. An
    output is kept as is when its roots touch no input, constant or other output's roots.

    Example:
        >>> import kiln, numpy as np
        >>> g = kiln.trace(lambda x: (x.T, x * 2), kiln.ones((2, 3), "float32")).graph
        >>> muls = {id(v) for n in g.nodes if n.op == "Mul" for v in n.outputs}
        >>> [c.action for c in output_copies(g, lambda v: id(v) in muls)]
        ['check', 'keep']
    """
    roots: dict[int, frozenset[int]] = {}
    read_only: set[int] = set()  # values that may be a broadcast view (np.broadcast_to's)
    external: dict[int, Value] = {}  # inputs and constants, by id
    for v in (*graph.input_values, *(c.value for c in graph.constants)):
        roots[id(v)] = frozenset({id(v)})
        external[id(v)] = v
    for node in graph.nodes:
        upstream = frozenset().union(*(roots[id(v)] for v in _viewable(node)))
        for v in node.outputs:
            if constant(v):
                external[id(v)] = v
            mine = frozenset({id(v)})
            roots[id(v)] = mine if constant(v) or allocates(v) else mine | upstream
            if not allocates(v) and (
                node.op in _READ_ONLY_VIEWS or any(id(w) in read_only for w in _viewable(node))
            ):
                read_only.add(id(v))
    outputs = graph.output_values
    first: dict[int, int] = {}  # value id -> the index of its first occurrence
    for k, v in enumerate(outputs):
        first.setdefault(id(v), k)
    copies: list[OutputCopy] = []
    for k, v in enumerate(outputs):
        if first[id(v)] != k or id(v) in external or id(v) in read_only:
            copies.append(OutputCopy("copy"))  # (a broadcast view: read-only, overlapping)
            continue
        mine = roots[id(v)]
        others = [
            w
            for j, w in enumerate(outputs)
            if first[id(w)] == j and w is not v and roots[id(w)] & mine
        ]
        suspects = [w for i, w in external.items() if i in mine]
        if not others and not suspects:
            copies.append(OutputCopy("keep"))
            continue
        copies.append(OutputCopy("check", tuple(suspects + others)))
    return copies
