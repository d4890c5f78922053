"""ONNX models whose shape-deciding inputs are computed at run time: they load without
``constant_inputs=``, run with sizes never seen when they were built, and export with those
sizes as symbolic ``dim_param``s (onnxruntime runs the export)."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import kiln
from kiln.errors import UnsupportedOperationError
from kiln.symbolic import is_fresh

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402


def _model(nodes, inputs, outputs, initializers=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _flatten_batch_model(through_float: bool) -> onnx.ModelProto:
    """What ``torch.onnx.export`` writes for ``x.view(x.size(0), -1)`` without constant folding
    and with a dynamic batch: Shape -> Gather(0) -> Unsqueeze -> Concat([-1]) -> Reshape.
    ``through_float`` sends the batch size through a float Cast and back, which no value
    propagation follows: the target shape is then only known when the graph runs."""
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "zero"], ["batch"], axis=0),
    ]
    batch = "batch"
    if through_float:
        nodes += [
            helper.make_node("Cast", ["batch"], ["batch_f"], to=TensorProto.FLOAT),
            helper.make_node("Cast", ["batch_f"], ["batch_i"], to=TensorProto.INT64),
        ]
        batch = "batch_i"
    nodes += [
        helper.make_node("Unsqueeze", [batch, "axes0"], ["batch1"]),
        helper.make_node("Concat", ["batch1", "minus_one"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["flat"]),
        helper.make_node("Tanh", ["flat"], ["y"]),
    ]
    inits = [
        helper.make_tensor("zero", TensorProto.INT64, [], [0]),
        helper.make_tensor("axes0", TensorProto.INT64, [1], [0]),
        helper.make_tensor("minus_one", TensorProto.INT64, [1], [-1]),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 12])
    return _model(nodes, [x], [y], inits)


@pytest.mark.parametrize("engine", [None, "numpy", "onnxruntime", "jax"], ids=str)
@pytest.mark.parametrize("through_float", [False, True], ids=["shape-values", "run-time"])
def test_batch_flatten_from_shape_runs_at_unseen_batch_sizes(through_float, engine) -> None:
    """Every engine runs it: jax too, as the target is computed from input *shapes*, which
    are static while it traces."""
    if engine is not None and importlib.util.find_spec(engine) is None:
        pytest.skip(f"{engine} is not installed")
    graph = kiln.io.load(_flatten_batch_model(through_float))
    graph.verify()
    (out,) = graph.output_values
    assert out.shape[1] == 12 if not through_float else is_fresh(out.shape[1])
    graph.reassociation_allowed = True  # (jax's and onnxruntime's tanh: accepted)
    graph.finalize(engine)
    for batch in (1, 5, 7):  # 2 at export; 0 is ambiguous with -1 (NumPy and torch refuse)
        x = np.random.default_rng(batch).standard_normal((batch, 3, 4)).astype(np.float32)
        (got,) = graph.run({"x": x})
        want = np.tanh(x.reshape(batch, -1))
        assert np.asarray(got).shape == want.shape and np.asarray(got).dtype == want.dtype
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6, atol=0)


def _runtime_model() -> onnx.ModelProto:
    """Reshape to a target fed as an input, then a sum over axes fed as an input."""
    nodes = [
        helper.make_node("Reshape", ["x", "shape"], ["r"]),
        helper.make_node("ReduceSum", ["r", "axes"], ["y"], keepdims=0),
    ]
    inputs = [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4]),
        helper.make_tensor_value_info("shape", TensorProto.INT64, [3]),
        helper.make_tensor_value_info("axes", TensorProto.INT64, [1]),
    ]
    return _model(nodes, inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])


def test_runtime_sizes_export_as_dim_params_and_run_in_onnxruntime() -> None:
    ort = pytest.importorskip("onnxruntime")
    graph = kiln.io.load(_runtime_model())
    exported = graph.to_onnx()
    (y,) = exported.graph.output
    dims = y.type.tensor_type.shape.dim
    assert len(dims) == 2 and all(d.dim_param and not d.HasField("dim_value") for d in dims)
    session = ort.InferenceSession(exported.SerializeToString(), providers=["CPUExecutionProvider"])
    again = kiln.io.load(exported)  # the dim_params come back as sizes known at run time
    again.finalize("numpy")
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    for target, axis in (((4, 3, 2), 1), ((1, 1, 24), 0), ((6, 2, -1), 2)):
        feed = {"x": x, "shape": np.array(target, np.int64), "axes": np.array([axis], np.int64)}
        want = np.sum(x.reshape(target), axis=axis)
        (from_ort,) = session.run(None, feed)
        (from_kiln,) = again.run(feed)
        for got in (from_ort, np.asarray(from_kiln)):
            assert got.shape == want.shape and got.dtype == want.dtype
            np.testing.assert_array_equal(got, want)


def test_constant_inputs_still_fold_the_shape() -> None:
    """``constant_inputs=`` stays an optimization: the sizes become static."""
    graph = kiln.io.load(
        _runtime_model(),
        constant_inputs={"shape": np.array([4, 3, 2], np.int64), "axes": np.array([1], np.int64)},
    )
    assert graph.output_values[0].shape == (4, 2)
    graph.finalize()
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    (got,) = graph.run({"x": x})
    np.testing.assert_array_equal(np.asarray(got), x.reshape(4, 3, 2).sum(axis=1))


def test_axes_of_unknown_length_are_refused_naming_the_node() -> None:
    """Squeeze axes whose number is decided at run time (NonZero's count): the output rank is
    unknown, so the import refuses, naming the node and what to pass."""
    nodes = [
        helper.make_node("NonZero", ["mask"], ["nz"]),
        helper.make_node("Reshape", ["nz", "minus_one"], ["axes"]),
        helper.make_node("Squeeze", ["x", "axes"], ["y"], name="drop"),
    ]
    inputs = [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 1]),
        helper.make_tensor_value_info("mask", TensorProto.BOOL, [3]),
    ]
    inits = [helper.make_tensor("minus_one", TensorProto.INT64, [1], [-1])]
    model = _model(
        nodes, inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits
    )
    with pytest.raises(UnsupportedOperationError, match=r"'drop'.*'axes'.*constant_inputs="):
        kiln.io.load(model)
