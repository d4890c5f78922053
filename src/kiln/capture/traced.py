"""``kiln.trace`` and :class:`TracedGraph`: record a function into a graph explicitly."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import CaptureWarning, InputMismatchError
from ..ir.graph import ModelGraph
from ..spec import TensorSpec
from ..tensor import Tensor
from ..tree import TreeSpec, flatten_with_paths, path_name, unflatten
from .signature import check_trace_arguments
from .trace import Tracer, plan_inputs, record

__all__ = ["trace", "TracedGraph", "output_leaves"]


@dataclass(frozen=True)
class _Outputs:
    """How to rebuild the traced function's result from the graph's flat outputs."""

    spec: TreeSpec
    tensor_positions: tuple[int, ...]  # which leaves of the result are graph outputs
    static_leaves: tuple[tuple[int, Any], ...]  # (position, value) of every other leaf
    static_inputs: tuple[tuple[int, Any], ...] = ()  # non-tensor input leaves at trace time

    def rebuild(self, tensors: Sequence[Tensor]) -> Any:
        leaves: list[Any] = [None] * (len(self.tensor_positions) + len(self.static_leaves))
        for position, t in zip(self.tensor_positions, tensors):
            leaves[position] = t
        for position, value in self.static_leaves:
            leaves[position] = value
        return unflatten(self.spec, leaves)


class TracedGraph:
    """The result of :func:`trace`: the recorded graph as :attr:`graph`, the structure of the
    traced inputs and outputs, and the graph's own surface (``run``, ``input_names``,
    ``output_names``, ``nodes``, ...) reachable directly on this object.

    ``run`` takes the flattened tensor inputs positionally (a list) or by name (a dict) and
    returns the graph's output list; calling the object takes the traced input structure and
    returns the traced output structure. The graph arrives as recorded: ``optimize()``, ``to()``
    and ``finalize()`` reach it through this object, and only a finalized graph runs.

    Example:
        >>> import kiln, numpy as np
        >>> tg = kiln.trace(lambda x, y: {"sum": x + y}, np.ones(2), np.ones(2))
        >>> tg.finalize()
        >>> tg(np.ones(2), np.full(2, 2.0))["sum"].tolist()
        [3.0, 3.0]
    """

    def __init__(self, graph: ModelGraph, in_spec: TreeSpec | None, outputs: _Outputs) -> None:
        self.graph = graph
        self._in_spec = in_spec
        self._outputs = outputs

    @property
    def in_spec(self) -> TreeSpec | None:
        """The pytree structure of the traced ``(args, kwargs)``; ``None`` when the trace ran
        against a signature alone."""
        return self._in_spec

    @property
    def out_spec(self) -> TreeSpec:
        """The pytree structure of the traced result."""
        return self._outputs.spec

    def finalize(self, engine: str | None = None) -> None:
        """Ready the graph to run (:meth:`ModelGraph.finalize`); calling it again changes
        nothing."""
        self.graph.finalize(engine)

    def is_finalized(self) -> bool:
        """True once :meth:`finalize` ran; a trace returns a graph that is not finalized yet."""
        return self.graph.is_finalized()

    def optimize(
        self,
        transforms: Sequence[Any] | None = None,
        max_num_iterations: int | None = None,
        *,
        defaults: Any = None,
    ) -> Any:
        """Run the graph optimizer on the recorded graph (:meth:`ModelGraph.optimize`);
        ``max_num_iterations`` None takes the graph's default cap."""
        return self.graph.optimize(transforms, max_num_iterations, defaults=defaults)

    def run(self, inputs: Sequence[Any] | Mapping[str, Any]) -> list[Tensor]:
        """Run the traced graph on flat tensor inputs and return its flat outputs: a sequence
        feeds the inputs in signature order, a mapping feeds them by input name. ``__call__``
        is the structured form."""
        return self.graph.run(inputs)

    def to(self, where: Any) -> None:
        """Choose where the graph runs, or move a finalized graph (:meth:`ModelGraph.to`)."""
        self.graph.to(where)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._in_spec is None:
            raise TypeError(
                f"graph {self.graph.name!r} was traced against a signature alone, so it has no "
                "input structure to call with; use run(list_or_dict_of_tensors)"
            )
        paths, leaves, spec = flatten_with_paths((args, kwargs))
        if spec != self._in_spec:
            raise InputMismatchError(
                f"graph {self.graph.name!r} was traced with input structure {self._in_spec}, "
                f"called with {spec}"
            )
        for position, value in self._outputs.static_inputs:
            given = leaves[position]
            if not same_static(given, value):
                raise InputMismatchError(
                    f"input {path_name(paths[position])!r} was the static value {value!r} when "
                    f"traced, got {given!r}; trace again for another value"
                )
        tensors = [x for x in leaves if isinstance(x, (Tensor, np.ndarray))]
        return self._outputs.rebuild(self.graph.run(tensors))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.graph, name)

    def __str__(self) -> str:
        return str(self.graph)

    def __repr__(self) -> str:
        return f"TracedGraph({self.graph!r})"


def same_static(a: Any, b: Any) -> bool:
    """Whether two static (non-tensor) input leaves are the same value of the same type."""
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:
        return a is b


def output_leaves(result: Any) -> tuple[list[Any], list[str], _Outputs]:
    """Split a traced function's result into tensor leaves (graph outputs), their derived
    names, and the rest of the structure."""
    paths, leaves, spec = flatten_with_paths(result)
    tensors, names, positions, statics = [], [], [], []
    for i, (path, leaf) in enumerate(zip(paths, leaves)):
        if isinstance(leaf, np.ndarray):
            leaf = Tensor._wrap(leaf)
        if isinstance(leaf, Tensor):
            tensors.append(leaf)
            positions.append(i)
            if not path:
                names.append("output")
            elif isinstance(path[0], int):
                names.append("output." + path_name(path))
            else:
                names.append(path_name(path))
        else:
            statics.append((i, leaf))
    return tensors, names, _Outputs(spec, tuple(positions), tuple(statics))


def trace(
    fn: Callable[..., Any],
    *args: Any,
    signature: Sequence[TensorSpec] | None = None,
    dynamic_axes: Mapping[Any, Any] | None = None,
    output_names: Sequence[str] | None = None,
    graph_name: str | None = None,
    **kwargs: Any,
) -> TracedGraph:
    """Record ``fn`` into a graph.

    With example inputs, ``fn`` runs once on recording tensors that also compute values; tensor
    leaves of ``(args, kwargs)`` (kiln tensors and NumPy arrays) become graph inputs, every other
    leaf is static, and tensors ``fn`` reaches otherwise become constants. With only a
    ``signature`` of :class:`TensorSpec`, the trace is abstract (types alone) and ``in_spec``
    is ``None``.

    Args:
        fn: The function to record.
        *args: Example positional inputs (a pytree).
        signature: One TensorSpec per tensor input, in flattening order: names, dtypes and
            shapes (``None`` or a str entry is a dynamic size).
        dynamic_axes: Axes to make dynamic, by input name or flat index: ``{"x": [0]}`` or
            ``{"x": {0: "B"}}``.
        output_names: Names for the graph outputs (default ``output`` or derived from the
            result's structure).
        graph_name: The graph's name (default: ``fn.__name__``).
        **kwargs: Example keyword inputs.

    Returns:
        A :class:`TracedGraph`, not yet finalized.

    Example:
        >>> import kiln, numpy as np
        >>> tg = kiln.trace(lambda x: np.tanh(x), signature=[kiln.TensorSpec(("B", 3))])
        >>> tg.graph.inputs
        [TensorSpec(shape=(SymDim('B'), 3), dtype=float32, name='x')]
    """
    args, kwargs, signature, dynamic_axes = check_trace_arguments(
        fn, args, kwargs, signature, dynamic_axes
    )
    abstract = signature is not None and not args and not kwargs
    if abstract:
        assert signature is not None
        leaves: list[Any] = [None] * len(signature)
        paths: list[tuple[Any, ...]] = [(0, i) for i in range(len(signature))]
        in_spec = None

        def rebuild(new: list[Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
            return tuple(new), {}
    else:
        paths, leaves, in_spec = flatten_with_paths((args, kwargs))

        def rebuild(new: list[Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
            return unflatten(in_spec, new)

    slots = plan_inputs(paths, leaves, signature, dynamic_axes, fn)
    tracer = Tracer(compute=not abstract)
    result = record(fn, args, kwargs, slots, leaves, rebuild, tracer)
    tensors, names, outputs = output_leaves(result)
    if output_names is not None:
        if len(output_names) != len(tensors):
            raise InputMismatchError(
                f"output_names has {len(output_names)} name(s) but the function returns "
                f"{len(tensors)} tensor(s)"
            )
        names = list(output_names)
    slot_positions = {s.index for s in slots}
    static_inputs = tuple((i, x) for i, x in enumerate(leaves) if i not in slot_positions)
    outputs = _Outputs(outputs.spec, outputs.tensor_positions, outputs.static_leaves, static_inputs)
    name = graph_name or str(getattr(fn, "__name__", "graph"))
    if name == "<lambda>":
        name = "lambda"
    graph = tracer.finish(name, tensors, names)
    for _, _, message in tracer.pins:
        warnings.warn(message, CaptureWarning, stacklevel=2)
    if not graph.input_values:
        warnings.warn(
            f"kiln.trace({name}): the function takes no tensor inputs, so everything it read "
            "was baked into the graph as constants and every run gives the same result; pass "
            "the arrays it computes from as arguments",
            CaptureWarning,
            stacklevel=2,
        )
    return TracedGraph(graph, in_spec, outputs)
