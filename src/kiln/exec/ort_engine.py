"""The ONNX Runtime engine: a graph exported with ``graph.to_onnx()`` and run by an
``onnxruntime.InferenceSession`` on the CPU execution provider.

kiln operators are ONNX operators (same names, opset 21+ semantics), so export is 1:1 and ONNX
Runtime's own graph optimizations (GEMM/attention/LayerNorm fusions, MLAS kernels) apply. The
engine is optional: it needs ``onnxruntime`` (``pip install onnxruntime``) and the ``onnx``
exporter (:mod:`kiln.io.onnx_export`).

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
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import DeviceUnavailableError, UnsupportedOperationError
from ..ops.registry import get_op
from .inputs import InputChecker
from .plan import Plan

if TYPE_CHECKING:
    from ..ir.graph import ModelGraph

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


def unsupported_nodes(graph: ModelGraph) -> list[str]:
    """Why onnxruntime would compute nodes of ``graph`` differently from kiln (empty: none).

    Each operator's record says where onnxruntime 1.x departs from the ONNX semantics kiln
    implements (``OpDef.engine_limits``, found by tests/exec/test_engines.py against the
    reference executor): such nodes keep the graph off this engine rather than return
    different numbers.
    """
    problems = []
    for node in graph.nodes:
        opdef = get_op(node.op)
        limit = opdef.engine_limits.get(ENGINE)
        if limit is not None and limit.applies(
            node.inputs, node.outputs, opdef.bind_attrs(node.attrs)
        ):
            problems.append(f"{node.op} {limit.reason}")
    return problems


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

    def __init__(self, graph: ModelGraph) -> None:
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
                f"graph {graph.name!r} cannot run on onnxruntime: {'; '.join(problems)}"
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
                model.SerializeToString(), options, providers=["CPUExecutionProvider"]
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
        if len(self._input_names) != len(graph.input_values):
            # onnxruntime drops inputs no node reads; feed only those it kept.
            kept = set(self._input_names)
            self._positions = [i for i, v in enumerate(graph.input_values) if v.name in kept]
        else:
            self._positions = None
        self._run = self.session.run

    def run_arrays(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        if self._positions is not None:
            arrays = [arrays[i] for i in self._positions]
        feeds = dict(zip(self._input_names, arrays))
        return [np.asarray(o) for o in self._run(self._output_names, feeds)]
