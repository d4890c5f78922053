"""The ONNX Runtime engine: a graph exported with ``graph.to_onnx()`` and run by an
``onnxruntime.InferenceSession`` on the CPU execution provider.

kiln operators are ONNX operators (same names, opset 21+ semantics), so export is 1:1 and ONNX
Runtime's own graph optimizations (GEMM/attention/LayerNorm fusions, MLAS kernels) apply. The
engine is optional: it needs ``onnxruntime`` (``pip install onnxruntime``) and the ``onnx``
exporter (:mod:`kiln.io.onnx_export`).

Exactness (SPEC 5b): nodes onnxruntime computes differently from NumPy (it skips NaN in
ReduceMax/ArgMax/MaxPool, fails on an integer division by zero, drops -0.0 in Where/Max/Relu,
wraps integer Pow differently, ...) are kept off this engine
by their records (``OpDef.engine_limits["onnxruntime"]``). Nodes it crashes on when an input is
empty (``EngineLimit.on_empty``: Einsum with an empty batch dies with SIGFPE) refuse the graph
when the recorded shape is empty, and a call whose symbolic sizes make one empty runs on the
NumPy plan. onnxruntime's own exceptions surface as :class:`~kiln.errors.EngineError` naming
the node.

Example:
    >>> import kiln, numpy as np
    >>> g = kiln.trace(lambda x: np.tanh(x) * 2, kiln.ones((2, 3), "float32")).graph
    >>> plan = OrtPlan(g)  # doctest: +SKIP
    >>> plan.run_arrays([np.zeros((2, 3), np.float32)])[0].shape  # doctest: +SKIP
    (2, 3)
"""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import dtypes
from ..errors import DeviceUnavailableError, EngineError, UnsupportedOperationError
from ..ir.builder import expand_node
from ..ops.control import subgraph_attrs
from ..ops.registry import get_op
from .inputs import InputChecker
from .plan import Plan, refuse_rounding

if TYPE_CHECKING:
    from ..ir.graph import ModelGraph, Node

__all__ = ["OrtPlan", "available", "intra_op_threads", "unsupported_nodes"]

# dtypes onnxruntime's Python binding exchanges as NumPy arrays (bfloat16 has no NumPy type
# there).
_EXCHANGEABLE = frozenset(
    np.dtype(t)
    for t in (
        np.bool_,
        np.int8,
        np.int16,
        np.int32,
        np.int64,
        np.uint8,
        np.uint16,
        np.uint32,
        np.uint64,
        np.float16,
        np.float32,
        np.float64,
    )
)


ENGINE = "onnxruntime"  # the key of this engine's facts in OpDef.engine_limits

# onnxruntime's CPU kernels mostly lack half precision: it runs such a node in float32 between
# Casts it inserts, then merges those with neighbouring Casts, the caller's own included, so
# values skip NumPy's rounding to float16 (np.abs(x.astype(float16)).astype(float32) gives x's
# float32 digits; np.dot of a float16 np.cos: an error of float16 size in a float32 result,
# fuzz 36:1807). Only the operators it runs in half precision itself, measured
# (tests/exec/test_ort_half.py), may read or make a half-precision value there.
_HALF = frozenset({np.dtype(np.float16), dtypes.bfloat16})
_HALF_NATIVE = frozenset(
    {
        *("Constant", "Cast", "IsNaN", "IsInf", "Shape", "Size", "Reshape", "Transpose"),
        *("Slice", "Concat", "Expand", "Gather", "GatherElements", "GatherND", "ScatterND"),
    }
)


def _half_precision(node: Node) -> str | None:
    """The half-precision dtype ``node`` reads or makes, where onnxruntime would not compute it
    in that dtype (see ``_HALF_NATIVE``); None otherwise."""
    if node.op in _HALF_NATIVE:
        return None
    for v in (*node.inputs, *node.outputs):
        if v is not None and v.dtype in _HALF:
            return str(v.dtype)
    return None


def unsupported_nodes(graph: ModelGraph) -> list[str]:
    """Why onnxruntime would compute nodes of ``graph`` differently from NumPy, or crash on
    them, one line per node (empty: none).

    Each operator's record says where onnxruntime 1.x departs from the semantics kiln
    implements (``OpDef.engine_limits``, found by tests/exec/test_engines.py and
    tests/exec/test_engine_exactness.py against the reference executor): such nodes keep the
    graph off this engine rather than return different numbers.
    """
    problems: list[str] = []

    def visit(node: Node, scope: Any, where: str, inside: bool = False) -> None:
        opdef = get_op(node.op)
        expands = bool(opdef.domain) and opdef.expand is not None
        half = None if expands else _half_precision(node)
        if half is not None:
            problems.append(
                f"{where}: {node.op} on {half}, which onnxruntime computes in float32, "
                f"skipping NumPy's rounding to {half}"
            )
            return
        limit = opdef.engine_limits.get(ENGINE)
        if limit is not None:
            attrs = opdef.bind_attrs(node.attrs)
            why = limit.reason_for(node.inputs, node.outputs, attrs)
            if why is None and inside and limit.empty_limits(node.inputs, node.outputs, attrs):
                # a subgraph's sizes are not checked per call (see empty_guards)
                why = limit.empty_limits(node.inputs, node.outputs, attrs)[0].reason
            if why is not None:
                problems.append(f"{where}: {node.op} {why}")
                return
        for key, sub in subgraph_attrs(opdef, node.attrs).items():  # If/Loop/Scan bodies
            for inner in sub.nodes:
                visit(inner, sub.name_scope(), f"{where} ({key}: {inner.name!r})", True)
        if expands:
            # a kiln-domain (fused) node is exported as the ONNX nodes it expands into: the
            # limits of their operators apply (a float64 Tanh inside a FusedElementwise)
            for inner in expand_node(node, scope):
                visit(inner, scope, where, inside)

    scope = graph.name_scope()
    for node in graph.nodes:
        visit(node, scope, f"node {node.name!r}")
    return list(dict.fromkeys(problems))


def empty_guards(graph: ModelGraph) -> list[tuple[str, tuple[Any, ...]]]:
    """The nodes onnxruntime would crash on were an input empty (``EngineLimit.on_empty``)
    whose input sizes are symbolic: (node name, the symbolic sizes of its inputs). A call
    that makes one of those sizes 0 runs on the NumPy plan."""
    guards = []
    for node in graph.nodes:
        opdef = get_op(node.op)
        limit = opdef.engine_limits.get(ENGINE)
        if limit is None:
            continue
        if limit.empty_limits(node.inputs, node.outputs, opdef.bind_attrs(node.attrs)):
            sizes = tuple(
                d for v in node.inputs if v is not None for d in v.shape if not isinstance(d, int)
            )
            if sizes:
                guards.append((node.name, sizes))
    return guards


def available() -> bool:
    """True when ``onnxruntime`` is installed and the ONNX exporter exists."""
    return (
        importlib.util.find_spec("onnxruntime") is not None
        and importlib.util.find_spec("onnx") is not None
        and importlib.util.find_spec("kiln.io.onnx_export") is not None
    )


def intra_op_threads() -> int:
    """Threads for one operator: every core up to 8 (more rarely pays on small models)."""
    return max(1, min(os.cpu_count() or 1, 8))


class OrtPlan(Plan):
    """A graph run by ONNX Runtime (see the module docstring). Same interface as
    :class:`~kiln.exec.reference.ReferencePlan`.

    Raises :class:`~kiln.errors.DeviceUnavailableError` saying what to install when
    onnxruntime or the exporter is missing, and :class:`~kiln.errors.UnsupportedOperationError`
    when the graph cannot be exported or loaded.
    """

    engine = ENGINE

    def __init__(self, graph: ModelGraph, fallback: Any = None) -> None:
        try:
            import onnxruntime as ort
        except ImportError as exc:
            raise DeviceUnavailableError(
                "the 'onnxruntime' engine needs the 'onnxruntime' package, which is not "
                "installed: pip install onnxruntime (or finalize with engine='numpy')"
            ) from exc
        for v in (*graph.input_values, *graph.output_values):
            if v.dtype not in _EXCHANGEABLE:
                raise UnsupportedOperationError(
                    f"graph {graph.name!r} cannot run on onnxruntime: {v.name!r} is "
                    f"{v.dtype}, which onnxruntime does not exchange with NumPy"
                )
        problems = unsupported_nodes(graph)
        if problems:
            raise UnsupportedOperationError(
                f"graph {graph.name!r} cannot run on onnxruntime with NumPy's results: "
                f"{'; '.join(problems)}. Use engine='numpy' (or engine=None to let kiln choose)"
            )
        refuse_rounding(graph, ENGINE)
        guards = empty_guards(graph)
        bound = {d.name for v in graph.input_values for d in v.shape if _is_symbol(d)}
        for name, sizes in guards:
            late = [d for d in sizes if not d.symbols <= bound]
            if late:
                raise UnsupportedOperationError(
                    f"graph {graph.name!r} cannot run on onnxruntime with NumPy's results: node "
                    f"{name!r} crashes onnxruntime or computes otherwise than NumPy on an empty "
                    "input, and its input size "
                    f"{late[0]} is known only when the graph runs (a size its values decide), so "
                    "a call cannot be routed around it. Use engine='numpy' (or engine=None to "
                    "let kiln choose)"
                )
        try:
            model = graph.to_onnx()
        except (ImportError, AttributeError) as exc:
            raise DeviceUnavailableError(
                "the 'onnxruntime' engine needs kiln's ONNX exporter (kiln.io.onnx_export) "
                f"and the 'onnx' package (pip install onnx): {exc}"
            ) from exc
        options = ort.SessionOptions()
        options.intra_op_num_threads = intra_op_threads()
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.log_severity_level = 3
        # onnxruntime's default: its intra-op threads spin briefly between runs. Turning that
        # off frees the cores sooner for the code that runs next, but costs ~50 us a call on a
        # small model (W3: 311 vs 260 us on 2 cores), so kiln keeps what ORT users get.
        options.add_session_config_entry("session.intra_op.allow_spinning", "1")
        try:
            self.session = ort.InferenceSession(
                model.SerializeToString(),
                options,
                providers=["CPUExecutionProvider"],
                # onnxruntime's NoopElimination drops ``0 + x``, wrong for x = -0.0 (NumPy:
                # 0.0), and DivMulFusion turns ``(1 / x) * y`` into ``y / x``, which rounds
                # once where NumPy rounds twice (fuzz 37:4379); kiln's own simplify_algebra
                # keeps only the exact identities
                disabled_optimizers=["NoopElimination", "DivMulFusion"],
            )
        except Exception as exc:  # onnxruntime's own errors (NOT_IMPLEMENTED, INVALID_GRAPH)
            raise UnsupportedOperationError(
                f"graph {graph.name!r} cannot run on onnxruntime: {exc}"
            ) from exc
        self.graph = graph
        self.checker = InputChecker(graph)
        self.check_inputs: Callable[[Any], list[np.ndarray]] = self.checker
        self._input_names = [i.name for i in self.session.get_inputs()]
        self._output_names = graph.output_names
        # One value handed out twice: onnxruntime returns one buffer for both; copy the repeats.
        outs = graph.output_values
        self._repeats = tuple(k for k, v in enumerate(outs) if any(v is w for w in outs[:k]))
        if len(self._input_names) != len(graph.input_values):
            # onnxruntime drops inputs no node reads; feed only those it kept.
            kept = set(self._input_names)
            self._positions = [i for i, v in enumerate(graph.input_values) if v.name in kept]
        else:
            self._positions = None
        self._run = self.session.run
        self.fallback = fallback
        self._numpy: Any = None
        self._empty_guards = guards
        if self._empty_guards:
            self.run_arrays = self._run_guarded  # type: ignore[method-assign]

    def run_arrays(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        if self._positions is not None:
            feeds = dict(zip(self._input_names, [arrays[i] for i in self._positions]))
        else:
            feeds = dict(zip(self._input_names, arrays))
        try:
            outputs = self._run(self._output_names, feeds)
        except Exception as exc:  # onnxruntime's Fail, RuntimeException, InvalidArgument
            if self.fallback is not None:  # chosen automatically: NumPy's answer instead
                return self.fallback.run_arrays(arrays)
            raise EngineError(
                f"onnxruntime failed running graph {self.graph.name!r}"
                f"{_node_named(str(exc))}: {exc}. Finalize with engine='numpy' to run it on NumPy"
            ) from exc
        results = [np.asarray(o) for o in outputs]
        for k in self._repeats:
            results[k] = results[k].copy()
        return results

    def _run_guarded(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        """``run_arrays`` for a graph with nodes onnxruntime crashes on when an input is
        empty: a call that makes one empty runs on the NumPy plan."""
        bindings = self.checker.bindings(arrays)
        for _, sizes in self._empty_guards:
            if any(_size(d, bindings) == 0 for d in sizes):
                return self._numpy_plan().run_arrays(arrays)
        return OrtPlan.run_arrays(self, arrays)

    def _numpy_plan(self) -> Any:
        """The NumPy plan of the graph (the automatic selection's, or one of its own)."""
        if self.fallback is not None:
            return self.fallback
        if self._numpy is None:
            from .cpu import CpuPlan

            self._numpy = CpuPlan(self.graph)
        return self._numpy


def _is_symbol(d: Any) -> bool:
    return not isinstance(d, int) and d.is_symbol()


def _size(d: Any, bindings: Mapping[str, int]) -> int:
    return d.evaluate(bindings) if hasattr(d, "evaluate") else int(d)


def _node_named(message: str) -> str:
    """`` at node 'x' (Op)`` from an onnxruntime message ("... running Div node.
    Name:'div' ..."), or nothing."""
    found = re.search(r"running (\w+) node\. Name:'([^']*)'", message)
    return f" at node {found.group(2)!r} ({found.group(1)})" if found else ""
