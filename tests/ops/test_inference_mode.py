"""Dropout and BatchNormalization in imported ONNX models: inference mode runs, training mode
is refused (kiln is an inference runtime), whether the mode is an attribute, a graph input fed
at run time, or (before opset 14) the number of outputs a node asks for."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.errors import OpArgumentError, UnsupportedOperationError

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as TP  # noqa: E402
from onnx import helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

TRAINING_REFUSAL = "input 'training_mode' is True; expected False"


def _dropout_model(n_outputs: int) -> onnx.ModelProto:
    outputs = ["y", "mask"][:n_outputs]
    node = helper.make_node("Dropout", ["x", "r", "t"], outputs)
    graph = helper.make_graph(
        [node],
        "dropout",
        [
            helper.make_tensor_value_info("x", TP.FLOAT, [3, 4]),
            helper.make_tensor_value_info("r", TP.FLOAT, []),
            helper.make_tensor_value_info("t", TP.BOOL, []),
        ],
        [
            helper.make_tensor_value_info("y", TP.FLOAT, [3, 4]),
            helper.make_tensor_value_info("mask", TP.BOOL, [3, 4]),
        ][:n_outputs],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])


@pytest.mark.parametrize("n_outputs", [1, 2])
@pytest.mark.parametrize("engine", ["numpy", "reference", None])
def test_dropout_training_mode_fed_false_at_run_time(n_outputs: int, engine) -> None:
    model = _dropout_model(n_outputs)
    graph = kiln.io.load(model)
    graph.finalize(engine)
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    feed = {"x": x, "r": np.asarray(0.5, np.float32), "t": np.asarray(False)}
    got = [np.asarray(t) for t in graph.run(feed)]
    want = ReferenceEvaluator(model).run(None, feed)
    assert len(got) == n_outputs
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)
    # True at run time: refused with the message of a constant training_mode=True
    with pytest.raises(OpArgumentError, match=TRAINING_REFUSAL):
        graph.run({**feed, "t": np.asarray(True)})


def test_dropout_training_mode_input_keeps_onnxruntime_off() -> None:
    # onnxruntime would drop elements at random where kiln refuses training mode
    graph = kiln.io.load(_dropout_model(1))
    with pytest.raises(UnsupportedOperationError, match="training_mode input not known"):
        graph.finalize("onnxruntime")


def _batch_norm_model(opset: int, outputs: list[str], **attrs) -> onnx.ModelProto:
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "mean", "var"], outputs, **attrs)
    inputs = [helper.make_tensor_value_info("x", TP.FLOAT, [2, 3, 4])] + [
        helper.make_tensor_value_info(n, TP.FLOAT, [3]) for n in ("s", "b", "mean", "var")
    ]
    outs = [helper.make_tensor_value_info("y", TP.FLOAT, [2, 3, 4])] + [
        helper.make_tensor_value_info(n, TP.FLOAT, [3]) for n in outputs[1:] if n
    ]
    graph = helper.make_graph([node], "bn", inputs, outs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _bn_feed() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    return {
        "x": rng.standard_normal((2, 3, 4)).astype(np.float32),
        "s": rng.uniform(0.5, 2, 3).astype(np.float32),
        "b": rng.uniform(-1, 1, 3).astype(np.float32),
        "mean": rng.uniform(-0.5, 0.5, 3).astype(np.float32),
        "var": rng.uniform(0.5, 3, 3).astype(np.float32),
    }


def _bn_inference(feed: dict[str, np.ndarray]) -> np.ndarray:
    m, v, s, b = (feed[k].reshape(1, 3, 1).astype(np.float64) for k in ("mean", "var", "s", "b"))
    y = (feed["x"].astype(np.float64) - m) / np.sqrt(v + 1e-5) * s + b
    return y.astype(np.float32)


@pytest.mark.parametrize(
    ("opset", "outputs", "attrs"),
    [
        (15, ["y", "running_mean", "running_var"], {"training_mode": 0}),
        (14, ["y", "running_mean", "running_var"], {}),
        (15, ["y", "", "running_var"], {}),
        (6, ["y", "running_mean", "running_var"], {"is_test": 1}),
    ],
)
def test_batch_norm_running_statistics_outputs_in_inference_mode(opset, outputs, attrs) -> None:
    # Inference leaves the running statistics as they are: the outputs are the inputs.
    graph = kiln.io.load(_batch_norm_model(opset, outputs, **attrs))
    graph.finalize("numpy")
    feed = _bn_feed()
    got = [np.asarray(t) for t in graph.run(feed)]
    assert len(got) == 1 + sum(1 for n in outputs[1:] if n)
    np.testing.assert_allclose(got[0], _bn_inference(feed), rtol=1e-6, atol=1e-6)
    stats = [feed["mean"] if n == "running_mean" else feed["var"] for n in outputs[1:] if n]
    for g, w in zip(got[1:], stats):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)


def test_batch_norm_extra_outputs_round_trip_through_onnxruntime() -> None:
    pytest.importorskip("onnxruntime")
    graph = kiln.io.load(_batch_norm_model(15, ["y", "running_mean", "running_var"]))
    graph.reassociation_allowed = True  # (onnxruntime's normalization rounds its own way)
    graph.finalize("onnxruntime")
    feed = _bn_feed()
    got = [np.asarray(t) for t in graph.run(feed)]
    np.testing.assert_allclose(got[0], _bn_inference(feed), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got[1], feed["mean"])
    np.testing.assert_array_equal(got[2], feed["var"])


@pytest.mark.parametrize(
    ("opset", "outputs", "attrs", "message"),
    [
        (15, ["y"], {"training_mode": 1}, "training_mode=1 is not supported"),
        (15, ["y", "rm", "rv"], {"training_mode": 1}, "training_mode=1 is not supported"),
        (9, ["y", "rm", "rv", "sm", "sv"], {}, "training mode .opset 9 reads"),
        (9, ["y", "rm", "rv"], {}, "training mode .opset 9 reads"),
        (6, ["y", "rm", "rv"], {"is_test": 0}, "training mode .opset 6 reads"),
        (6, ["y", "rm", "rv", "sm", "sv"], {"is_test": 1}, "saved_mean/saved_var"),
    ],
)
def test_batch_norm_training_mode_stays_refused(opset, outputs, attrs, message) -> None:
    with pytest.raises(UnsupportedOperationError, match=message) as info:
        kiln.io.load(_batch_norm_model(opset, outputs, **attrs))
    if "saved" not in message:
        assert "kiln is an inference runtime: running statistics are inputs" in str(info.value)
