"""Batch inference on the engines people already run: Ray Data, Spark and Dask.

:class:`BatchRunner` wraps a model (an ONNX file, ONNX bytes or a :class:`ModelGraph`) as a
picklable callable. What travels to a worker is only the model's source (the path, or the
ONNX bytes); each worker loads and finalizes the graph once, at its first batch, and reuses
it for every later batch. Three call shapes cover the three engines:

* ``runner(batch)``: a dict of NumPy arrays by column name (Ray Data's ``batch_format="numpy"``)
  to a dict with the graph's outputs by output name, the other columns passed through.
* ``runner.predict(*arrays)``: the arrays in the graph's input order to one array (a
  single-output graph) or a dict by output name: what Dask's ``map_blocks`` calls with its
  blocks, and the ``predict`` function Spark's ``predict_batch_udf`` wants.
* ``runner.make_predict_fn``: the zero-argument ``make_predict_fn`` Spark calls on each
  executor; it returns ``runner.predict``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ..errors import ArgumentTypeError, InputMismatchError
from ..ir.graph import ModelGraph
from .onnx_export import to_onnx
from .onnx_import import load

__all__ = ["BatchRunner"]

ModelSource = str | bytes | ModelGraph  # a path, serialized ONNX, or a graph (in process)


class BatchRunner:
    """A model as a picklable batch function for Ray Data, Spark and Dask.

    Args:
        model: An ONNX file (a ``str`` or ``os.PathLike``; it must be readable at that path
            on every worker), the bytes of an ONNX model, or a :class:`ModelGraph` (or what
            :func:`kiln.trace` returns). The graph runs as given: call ``graph.optimize()``
            before saving or passing it to run the optimized graph.
        engine: The engine that runs the graph (``"numpy"``, ``"onnxruntime"``, ...); None
            lets each worker choose one for the graph, as :meth:`ModelGraph.finalize` does.

    Calling the runner with a dict of arrays runs the graph on the columns named after its
    inputs and returns a new dict holding every other column unchanged (ids and the like
    survive) and one entry per graph output, by output name; an output replaces a column of
    the same name. The input columns are not passed through. A graph recorded from a
    function that writes into an input has one more output per such input,
    ``mutated.<input>``, holding that input's final contents; it is returned like any other
    output.

    Pickling a runner carries only the model's source (the path, the ONNX bytes, or a
    :class:`ModelGraph` written as ONNX bytes) and the engine name, never the loaded graph:
    each process loads and finalizes its own copy at its first call, once.

    Example:
        >>> import kiln, numpy as np, pickle
        >>> g = kiln.trace(lambda x: np.tanh(x) * 2, np.ones((4, 3), np.float32),
        ...                dynamic_axes={"x": [0]}).graph
        >>> runner = pickle.loads(pickle.dumps(kiln.io.BatchRunner(g)))
        >>> out = runner({"x": np.zeros((2, 3), np.float32), "id": np.arange(2)})
        >>> sorted(out), out["output"].shape
        (['id', 'output'], (2, 3))
        >>> runner.predict(np.zeros((5, 3), np.float32)).shape
        (5, 3)
    """

    def __init__(
        self, model: str | os.PathLike[str] | bytes | ModelGraph, *, engine: str | None = None
    ) -> None:
        self._source: ModelSource = _source_of(model)
        self._engine = engine
        self._onnx_bytes: bytes | None = None  # a ModelGraph source, as written for pickling
        self._graph: ModelGraph | None = None  # this process's finalized copy
        self._lock = threading.Lock()

    # -- the call shapes ------------------------------------------------------------------

    def __call__(self, batch: Mapping[str, Any]) -> dict[str, Any]:
        """Run the graph on ``batch``'s input columns; return the other columns unchanged
        and the outputs by output name."""
        graph = self._graph if self._graph is not None else self._load()
        if not isinstance(batch, Mapping):
            raise ArgumentTypeError(
                f"{self!r} takes a dict of arrays by column name (Ray Data: "
                f"batch_format='numpy'), got {type(batch).__name__}; for bare arrays in input "
                f"order use runner.predict(...)"
            )
        names = graph.input_names
        missing = [n for n in names if n not in batch]
        if missing:
            raise InputMismatchError(
                f"{self!r}: the batch has no column for the model's input(s) {missing} "
                f"(inputs {names}); its keys are {list(batch)}. Rename the columns to the "
                f"input names (Ray Data: ds.rename_columns({{...}}))"
            )
        outputs = graph.run({n: batch[n] for n in names})
        result = {k: v for k, v in batch.items() if k not in names}
        result.update(zip(graph.output_names, (t.numpy() for t in outputs)))
        return result

    def predict(self, *arrays: Any) -> np.ndarray | dict[str, np.ndarray]:
        """Run the graph on ``arrays``, one per input in the graph's input order. Returns the
        output array for a single-output graph, else a dict by output name.

        This is the block function for Dask (``x.map_blocks(runner.predict, ...)``) and the
        ``predict`` function for Spark's ``predict_batch_udf`` (one array per input column).
        """
        graph = self._graph if self._graph is not None else self._load()
        names = graph.input_names
        if len(arrays) != len(names):
            raise InputMismatchError(
                f"{self!r}: predict() takes one array per model input, in the order {names}; "
                f"got {len(arrays)} array(s)"
            )
        outputs = [t.numpy() for t in graph.run(list(arrays))]
        if len(outputs) == 1:
            return outputs[0]
        return dict(zip(graph.output_names, outputs))

    def make_predict_fn(self) -> Callable[..., np.ndarray | dict[str, np.ndarray]]:
        """Spark's ``make_predict_fn``: returns :meth:`predict` (Spark calls this on each
        executor, after unpickling the runner; the graph loads at the first batch).

        Example (with pyspark):
            ``predict_batch_udf(runner.make_predict_fn, return_type=ArrayType(FloatType()),
            batch_size=128, input_tensor_shapes=[[16]])``
        """
        return self.predict

    # -- the graph ------------------------------------------------------------------------

    @property
    def graph(self) -> ModelGraph:
        """This process's graph, loaded and finalized on first use (names, specs, engine)."""
        return self._graph if self._graph is not None else self._load()

    @property
    def engine(self) -> str | None:
        """The engine asked for (None: each process chooses)."""
        return self._engine

    def _load(self) -> ModelGraph:
        with self._lock:  # threads of one process (Dask's threaded scheduler) load once
            if self._graph is None:
                source = self._source
                graph = source.copy() if isinstance(source, ModelGraph) else load(source)
                graph.finalize(self._engine)
                self._graph = graph
            return self._graph

    # -- pickling: the source only --------------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        source = self._source
        if isinstance(source, ModelGraph):
            if self._onnx_bytes is None:
                self._onnx_bytes = to_onnx(source).SerializeToString()
            source = self._onnx_bytes
        return {"source": source, "engine": self._engine}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._source = state["source"]
        self._engine = state["engine"]
        self._onnx_bytes = None
        self._graph = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        source = self._source
        if isinstance(source, str):
            what = repr(source)
        elif isinstance(source, bytes):
            what = f"<ONNX bytes, {len(source)} B>"
        else:
            what = f"<graph {source.name!r}>"
        engine = f", engine={self._engine!r}" if self._engine is not None else ""
        return f"BatchRunner({what}{engine})"


def _source_of(model: object) -> ModelSource:
    """What a runner keeps of ``model``: a path as ``str``, bytes, or a private graph copy."""
    if isinstance(model, (str, os.PathLike)):
        return os.fspath(model)  # type: ignore[return-value]
    if isinstance(model, (bytes, bytearray, memoryview)):
        return bytes(model)
    graph = getattr(model, "graph", model)  # kiln.trace's TracedGraph holds one
    if isinstance(graph, ModelGraph):
        return graph.copy()
    raise ArgumentTypeError(
        f"BatchRunner(model): expected a path to an ONNX file, the bytes of an ONNX model, or "
        f"a ModelGraph; got {type(model).__name__}"
    )
