"""kiln -> ONNX -> kiln keeps the graph: same ops, names, types, attributes and constants."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.ops.registry import all_ops
from kiln.symbolic import symbol

from ..numerics import assert_close
from .graphs import one_node_graph, same_graph

pytest.importorskip("onnx")

CASES = [
    pytest.param(op, sample, id=f"{op.qualified_name}-{i}-{sample.name}")
    for op in all_ops()
    if not op.domain
    for i, sample in enumerate(list(op.samples())[:3])
]


@pytest.mark.parametrize("op, sample", CASES)
def test_one_node_graph_round_trips(op, sample) -> None:
    graph, fed = one_node_graph(op, sample)
    back = kiln.io.load(kiln.io.to_onnx(graph))
    back.verify()
    same_graph(graph, back)
    graph.finalize()
    back.finalize()
    for got, want in zip(back.run(fed), graph.run(fed)):
        assert_close(got, want)


def _mlp(x, w1, b1, w2):
    h = kiln.nn.relu(x @ w1 + b1)
    return kiln.nn.softmax(h @ w2, axis=-1)


def test_traced_model_round_trips_through_a_file(tmp_path) -> None:
    rng = np.random.default_rng(0)
    w1 = kiln.asarray(rng.standard_normal((4, 8)).astype(np.float32))
    b1 = kiln.asarray(rng.standard_normal(8).astype(np.float32))
    w2 = kiln.asarray(rng.standard_normal((8, 3)).astype(np.float32))
    spec = kiln.TensorSpec(("batch", 4), kiln.float32, "x")
    graph = kiln.trace(lambda x: _mlp(x, w1, b1, w2), signature=[spec]).graph
    path = tmp_path / "mlp.onnx"
    graph.save(path)
    back = kiln.io.load(path)
    same_graph(graph, back)
    assert back.inputs[0].shape == (symbol("batch"), 4)
    back.finalize()
    graph.finalize()
    for n in (1, 6):
        x = rng.standard_normal((n, 4)).astype(np.float32)
        assert_close(back.run([x])[0], graph.run([x])[0])


def test_round_trip_of_optimized_graph_with_symbolic_shape_arithmetic() -> None:
    spec = kiln.TensorSpec(("B", 6), kiln.float32, "x")
    graph = kiln.trace(lambda x: x.reshape(x.shape[0] * 2, -1).sum(axis=0), signature=[spec]).graph
    graph.optimize()
    back = kiln.io.load(graph.to_onnx())
    same_graph(graph, back)
    back.finalize()
    x = np.arange(18, dtype=np.float32).reshape(3, 6)
    assert_close(back.run([x])[0], x.reshape(6, -1).sum(axis=0))


def test_bytes_and_model_proto_sources() -> None:
    graph = kiln.trace(lambda x: np.abs(x), np.ones(2, np.float32)).graph
    model = kiln.io.to_onnx(graph)
    same_graph(graph, kiln.io.load(model))
    same_graph(graph, kiln.io.load(model.SerializeToString()))
