"""ONNX import: older-opset forms, typing from the model, and errors that say what is wrong."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.errors import UnsupportedOperationError
from kiln.symbolic import SymDim, symbol

from ..numerics import assert_close

onnx = pytest.importorskip("onnx")
helper = onnx.helper
TP = onnx.TensorProto


def _model(nodes, inputs, outputs, opset, initializers=(), value_info=()):
    graph = helper.make_graph(
        nodes, "m", inputs, outputs, list(initializers), value_info=value_info
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _info(name, dims, elem=TP.FLOAT):
    return helper.make_tensor_value_info(name, elem, dims)


def _run(model, *arrays):
    graph = kiln.io.load(model)
    graph.verify()
    graph.finalize()
    return graph, [np.asarray(t) for t in graph.run(list(arrays))]


def _ints(name, values):
    return onnx.numpy_helper.from_array(np.asarray(values, np.int64), name)


X = np.arange(24, dtype=np.float32).reshape(2, 3, 4) / 7 - 1


@pytest.mark.parametrize("opset", [11, 13, 18])
def test_reduce_axes_attribute_or_input(opset) -> None:
    if opset < 18:
        node = helper.make_node("ReduceMean", ["x"], ["y"], axes=[1], keepdims=0)
        inits = []
    else:
        node = helper.make_node("ReduceMean", ["x", "axes"], ["y"], keepdims=0)
        inits = [_ints("axes", [1])]
    graph, (y,) = _run(_model([node], [_info("x", [2, 3, 4])], [_info("y", None)], opset, inits), X)
    assert_close(y, X.mean(axis=1))
    assert graph.nodes[0].op == "ReduceMean" and len(graph.nodes[0].inputs) == 2


@pytest.mark.parametrize("opset", [11, 13])
def test_squeeze_unsqueeze_axes_forms(opset) -> None:
    if opset < 13:
        nodes = [
            helper.make_node("Unsqueeze", ["x"], ["u"], axes=[0, 4]),
            helper.make_node("Squeeze", ["u"], ["y"], axes=[0]),
        ]
        inits = []
    else:
        nodes = [
            helper.make_node("Unsqueeze", ["x", "a04"], ["u"]),
            helper.make_node("Squeeze", ["u", "a0"], ["y"]),
        ]
        inits = [_ints("a04", [0, 4]), _ints("a0", [0])]
    model = _model(nodes, [_info("x", [2, 3, 4])], [_info("y", None)], opset, inits)
    _, (y,) = _run(model, X)
    assert y.shape == (2, 3, 4, 1)


@pytest.mark.parametrize("opset", [11, 13, 18])
def test_split_sizes_forms(opset) -> None:
    if opset < 13:
        node = helper.make_node("Split", ["x"], ["a", "b"], axis=2, split=[1, 3])
        inits = []
    else:
        node = helper.make_node("Split", ["x", "s"], ["a", "b"], axis=2)
        inits = [_ints("s", [1, 3])]
    outs = [_info("a", None), _info("b", None)]
    _, (a, b) = _run(_model([node], [_info("x", [2, 3, 4])], outs, opset, inits), X)
    assert_close(a, X[..., :1])
    assert_close(b, X[..., 1:])


def test_split_equal_parts_before_opset_18() -> None:
    node = helper.make_node("Split", ["x"], ["a", "b"], axis=-1)
    outs = [_info("a", None), _info("b", None)]
    _, (a, b) = _run(_model([node], [_info("x", [2, 3, 4])], outs, 13), X)
    assert a.shape == b.shape == (2, 3, 2)


def test_clip_bounds_as_attributes_before_opset_11() -> None:
    node = helper.make_node("Clip", ["x"], ["y"], min=-0.5, max=0.25)
    _, (y,) = _run(_model([node], [_info("x", [2, 3, 4])], [_info("y", None)], 9), X)
    assert_close(y, np.clip(X, -0.5, 0.25))


def test_pad_as_attribute_before_opset_11() -> None:
    node = helper.make_node("Pad", ["x"], ["y"], pads=[0, 0, 1, 0, 0, 2], value=3.0)
    _, (y,) = _run(_model([node], [_info("x", [2, 3, 4])], [_info("y", None)], 10), X)
    assert_close(y, np.pad(X, [(0, 0), (0, 0), (1, 2)], constant_values=3.0))


def test_slice_as_attributes_before_opset_10() -> None:
    node = helper.make_node("Slice", ["x"], ["y"], starts=[1], ends=[3], axes=[2])
    _, (y,) = _run(_model([node], [_info("x", [2, 3, 4])], [_info("y", None)], 9), X)
    assert_close(y, X[:, :, 1:3])


def test_upsample_becomes_resize() -> None:
    x = np.arange(4, dtype=np.float32).reshape(1, 1, 2, 2)
    scales = onnx.numpy_helper.from_array(np.array([1, 1, 2, 3], np.float32), "scales")
    node = helper.make_node("Upsample", ["x", "scales"], ["y"], mode="nearest")
    model = _model([node], [_info("x", [1, 1, 2, 2])], [_info("y", None)], 9, [scales])
    graph, (y,) = _run(model, x)
    assert graph.nodes[0].op == "Resize"
    assert_close(y, x.repeat(2, axis=2).repeat(3, axis=3))


def test_resize_10_is_asymmetric() -> None:
    x = np.arange(4, dtype=np.float32).reshape(1, 1, 2, 2)
    scales = onnx.numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
    node = helper.make_node("Resize", ["x", "scales"], ["y"], mode="nearest")
    model = _model([node], [_info("x", [1, 1, 2, 2])], [_info("y", None)], 10, [scales])
    _, (y,) = _run(model, x)
    assert_close(y, x.repeat(2, axis=2).repeat(2, axis=3))


def test_softmax_before_13_flattens_from_axis() -> None:
    node = helper.make_node("Softmax", ["x"], ["y"], axis=1)
    _, (y,) = _run(_model([node], [_info("x", [2, 3, 4])], [_info("y", None)], 11), X)
    flat = X.reshape(2, 12).astype(np.float64)
    e = np.exp(flat - flat.max(axis=1, keepdims=True))
    assert_close(
        y,
        (e / e.sum(axis=1, keepdims=True)).reshape(2, 3, 4).astype(np.float32),
        rtol=1e-5,
        atol=1e-6,
    )


def test_legacy_broadcast_with_axis() -> None:
    b = np.array([1.0, 2.0, 3.0], np.float32)
    node = helper.make_node("Add", ["x", "b"], ["y"], broadcast=1, axis=1)
    model = _model([node], [_info("x", [2, 3, 4]), _info("b", [3])], [_info("y", None)], 6)
    _, (y,) = _run(model, X, b)
    assert_close(y, X + b[:, None])


def test_dim_param_and_unknown_dims_become_symbols() -> None:
    node = helper.make_node("Relu", ["x"], ["y"])
    x_info = _info("x", ["batch", None, 4])
    graph = kiln.io.load(_model([node], [x_info], [_info("y", None)], 21))
    shape = graph.inputs[0].shape
    assert shape[0] == symbol("batch")
    assert isinstance(shape[1], SymDim) and shape[1] != symbol("batch")
    assert shape[2] == 4
    assert graph.outputs[0].shape == shape
    graph.finalize()
    for rows in (1, 3):
        x = np.ones((2, rows, 4), np.float32)
        assert graph.run([x])[0].shape == (2, rows, 4)


def test_initializers_listed_as_inputs_are_constants() -> None:
    w = onnx.numpy_helper.from_array(np.full((4,), 2.0, np.float32), "w")
    node = helper.make_node("Mul", ["x", "w"], ["y"])
    model = _model([node], [_info("x", [2, 3, 4]), _info("w", [4])], [_info("y", None)], 13, [w])
    graph, (y,) = _run(model, X)
    assert graph.input_names == ["x"]
    assert [c.value.name for c in graph.constants] == ["w"]
    assert_close(y, X * 2)


def test_constant_inputs_bind_shape_deciding_inputs() -> None:
    node = helper.make_node("Reshape", ["x", "shape"], ["y"])
    model = _model(
        [node], [_info("x", [2, 3, 4]), _info("shape", [2], TP.INT64)], [_info("y", None)], 21
    )
    # Without constant_inputs the target shape is read when the graph runs.
    dynamic = kiln.io.load(model)
    dynamic.finalize()
    assert dynamic.run([X, np.array([-1, 2], np.int64)])[0].shape == (12, 2)
    graph = kiln.io.load(model, constant_inputs={"shape": np.array([6, -1], np.int64)})
    graph.finalize()
    assert graph.input_names == ["x"]
    assert graph.run([X])[0].shape == (6, 4)


def test_unsupported_operator_names_node_op_and_what_is_supported() -> None:
    node = helper.make_node("Col2Im", ["x", "shape", "block"], ["y"], name="fold1")
    inputs = [_info("x", [1, 4, 4]), _info("shape", [2], TP.INT64), _info("block", [2], TP.INT64)]
    model = _model([node], inputs, [_info("y", None)], 18)
    with pytest.raises(UnsupportedOperationError) as info:
        kiln.io.load(model)
    text = str(info.value)
    assert "fold1" in text and "Col2Im" in text and "supported operators" in text
    assert "MatMul" in text


def test_unsupported_domain_and_opset() -> None:
    node = helper.make_node("Foo", ["x"], ["y"], domain="com.example")
    graph = helper.make_graph([node], "m", [_info("x", [2])], [_info("y", None)])
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.example", 1)],
    )
    with pytest.raises(UnsupportedOperationError, match="domain 'com.example' is not supported"):
        kiln.io.load(model)
    model = helper.make_model(
        helper.make_graph([], "m", [_info("x", [2])], [_info("x", [2])]),
        opset_imports=[helper.make_opsetid("com.example", 1)],
    )
    with pytest.raises(UnsupportedOperationError, match="opset"):
        kiln.io.load(model)


def test_invalid_attribute_error_names_the_node() -> None:
    node = helper.make_node("Relu", ["x"], ["y"], name="act", alpha=0.1)
    model = _model([node], [_info("x", [2])], [_info("y", None)], 13)
    with pytest.raises(UnsupportedOperationError, match="act.*Relu.*alpha"):
        kiln.io.load(model)


def test_unsupported_element_type() -> None:
    node = helper.make_node("Identity", ["x"], ["y"])
    model = _model([node], [_info("x", [2], TP.STRING)], [_info("y", None, TP.STRING)], 13)
    with pytest.raises(UnsupportedOperationError, match="STRING is not supported"):
        kiln.io.load(model)


def test_values_known_from_shape_arithmetic_reach_reshape() -> None:
    # Reshape(x, Where(Equal(Shape(x)[0], 2), [6, -1], [-1, 6])): the importer knows the
    # target shape because every input of the shape arithmetic is known when typing.
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["d0"], axis=0),
        helper.make_node("Equal", ["d0", "two"], ["c"]),
        helper.make_node("Where", ["c", "t1", "t2"], ["shape"]),
        helper.make_node("Reshape", ["x", "shape"], ["y"]),
    ]
    inits = [_ints("zero", 0), _ints("two", 2), _ints("t1", [6, -1]), _ints("t2", [-1, 6])]
    model = _model(nodes, [_info("x", [2, 3, 4])], [_info("y", None)], 21, inits)
    _, (y,) = _run(model, X)
    assert y.shape == (6, 4)
