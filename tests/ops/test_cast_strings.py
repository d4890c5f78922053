"""Cast and CastLike to and from ONNX string tensors (NumPy object arrays of str), in imported
ONNX models, against onnx's reference evaluator where it defines the answer."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import kiln
from kiln.errors import OpArgumentError, UnsupportedOperationError

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as TP  # noqa: E402
from onnx import helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402


def _cast_model(source: int, target: int, shape: list[int]) -> onnx.ModelProto:
    node = helper.make_node("Cast", ["x"], ["y"], to=target)
    graph = helper.make_graph(
        [node],
        "cast",
        [helper.make_tensor_value_info("x", source, shape)],
        [helper.make_tensor_value_info("y", target, shape)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def _run(model: onnx.ModelProto, feed: dict, engine: str = "numpy") -> np.ndarray:
    graph = kiln.io.load(model)
    graph.finalize(engine)
    return np.asarray(graph.run(feed)[0])


def _strings(rows: list) -> np.ndarray:
    return np.array(rows, dtype=object)


NUMBERS_TO_TEXT = [
    (TP.FLOAT, np.array([[0.47892547, np.nan, np.inf], [-np.inf, 1e-5, 3.0]], np.float32)),
    (TP.DOUBLE, np.array([[0.1, 1 / 3, 1e300], [-0.0, 2.0, 5e-324]])),
    (TP.FLOAT16, np.array([[0.1, 0.2, 65504.0], [1.0, -2.5, np.nan]], np.float16)),
    (TP.INT32, np.array([[1, -2, 3], [2**31 - 1, 0, -(2**31)]], np.int32)),
    (TP.UINT64, np.array([[0, 2**64 - 1, 7], [1, 2, 3]], np.uint64)),
    (TP.BOOL, np.array([[True, False, True], [False, False, True]])),
]


@pytest.mark.parametrize(("source", "x"), NUMBERS_TO_TEXT, ids=lambda v: str(v)[:12])
@pytest.mark.parametrize("engine", ["numpy", "reference"])
def test_cast_numbers_to_strings_as_onnx_reference(source: int, x: np.ndarray, engine) -> None:
    model = _cast_model(source, TP.STRING, [2, 3])
    got = _run(model, {"x": x}, engine)
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    assert got.dtype == np.dtype(object) and got.shape == want.shape
    assert all(isinstance(v, str) for v in got.reshape(-1))
    assert got.tolist() == want.tolist()


def test_cast_float_to_string_as_the_backend_case_expects() -> None:
    # onnx's former test_cast_FLOAT_to_STRING: the expected text is str() of each float32
    x = np.random.default_rng(3).random((3, 4)).astype(np.float32)
    got = _run(_cast_model(TP.FLOAT, TP.STRING, [3, 4]), {"x": x})
    assert got.tolist() == np.array([str(v) for v in x.flatten()], object).reshape(3, 4).tolist()


def test_cast_bfloat16_to_strings_writes_the_shortest_text() -> None:
    x = np.array([0.1, 3.0, 1e-5, np.nan, -np.inf, -0.0], np.float32).astype(ml_dtypes.bfloat16)
    got = _run(_cast_model(TP.BFLOAT16, TP.STRING, [6]), {"x": x})
    assert got.tolist() == ["0.1", "3.0", "1e-05", "nan", "-inf", "-0.0"]
    # each text reads back to the same bfloat16
    back = np.array([float(t) for t in got], np.float32).astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(back.view(np.uint16)[:3], x.view(np.uint16)[:3])


TEXT = _strings([["0.47892547", "NaN", "INF"], ["+INF", "-inf", "1E8"], [" 3.14 ", "1e-5", "-0"]])


@pytest.mark.filterwarnings("ignore:overflow encountered")  # the reference's 1E8 as float16
@pytest.mark.parametrize("target", [TP.FLOAT, TP.DOUBLE, TP.FLOAT16])
def test_cast_strings_to_floats_as_onnx_reference(target: int) -> None:
    model = _cast_model(TP.STRING, target, [3, 3])
    got = _run(model, {"x": TEXT})
    want = ReferenceEvaluator(model).run(None, {"x": TEXT})[0]
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)  # NaN where NaN; signed zero kept
    assert np.signbit(got[2, 2])


def test_cast_strings_to_integers_truncates_decimal_text() -> None:
    x = _strings(["15", "-3", "100.5", "-7.9", "9223372036854775807", " 42 "])
    got = _run(_cast_model(TP.STRING, TP.INT64, [6]), {"x": x})
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, [15, -3, 100, -7, 2**63 - 1, 42])


def test_cast_strings_to_bool() -> None:
    x = _strings(["true", "False", "0", "1", "2.5", "0.0", "TRUE"])
    got = _run(_cast_model(TP.STRING, TP.BOOL, [7]), {"x": x})
    np.testing.assert_array_equal(got, [True, False, False, True, True, False, True])


def test_string_inputs_may_be_numpy_str_arrays_and_bytes() -> None:
    model = _cast_model(TP.STRING, TP.FLOAT, [3])
    for x in (np.array(["1.5", "-2", "inf"]), np.array([b"1.5", b"-2", b"inf"], dtype=object)):
        got = _run(model, {"x": x})
        np.testing.assert_array_equal(got, np.array([1.5, -2.0, np.inf], np.float32))


def test_string_round_trip() -> None:
    # Cast(Cast(x, STRING), FLOAT) reads back what it wrote (the shortest text round-trips)
    nodes = [
        helper.make_node("Cast", ["x"], ["s"], to=TP.STRING),
        helper.make_node("Cast", ["s"], ["y"], to=TP.FLOAT),
    ]
    graph = helper.make_graph(
        nodes,
        "round_trip",
        [helper.make_tensor_value_info("x", TP.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TP.FLOAT, [4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    x = np.array([0.1, 1 / 3, -7.25, 3.4028235e38], np.float32)
    got = _run(model, {"x": x})
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, x)


def test_string_constants_are_refused_cleanly() -> None:
    node = helper.make_node("Cast", ["c"], ["y"], to=TP.FLOAT)
    c = helper.make_tensor("c", TP.STRING, [2], [b"1", b"0.5"])
    graph = helper.make_graph(
        [node], "g", [], [helper.make_tensor_value_info("y", TP.FLOAT, [2])], initializer=[c]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    with pytest.raises(UnsupportedOperationError, match="constant 'c' is a string tensor"):
        kiln.io.load(model)


def test_cast_like_to_and_from_strings() -> None:
    node = helper.make_node("CastLike", ["x", "like"], ["y"])
    graph = helper.make_graph(
        [node],
        "cast_like",
        [
            helper.make_tensor_value_info("x", TP.FLOAT, [2]),
            helper.make_tensor_value_info("like", TP.STRING, [1]),
        ],
        [helper.make_tensor_value_info("y", TP.STRING, [2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    x = np.array([2.5, np.nan], np.float32)
    got = _run(model, {"x": x, "like": _strings(["a"])})
    assert got.tolist() == ["2.5", "nan"]


def test_text_that_is_not_a_number_is_refused_naming_the_element() -> None:
    graph = kiln.io.load(_cast_model(TP.STRING, TP.FLOAT, [3]))
    graph.finalize("numpy")
    with pytest.raises(OpArgumentError, match=r"element 1 .*'Hello'.*not a number"):
        graph.run({"x": _strings(["1", "Hello", "2"])})


def test_string_tensors_go_only_into_cast() -> None:
    node = helper.make_node("Identity", ["x"], ["y"])
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TP.STRING, [2])],
        [helper.make_tensor_value_info("y", TP.STRING, [2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(UnsupportedOperationError, match="'x' is a string tensor.*Identity"):
        kiln.io.load(model)


@pytest.mark.parametrize("engine", ["jax", "onnxruntime"])
def test_string_casts_stay_off_other_engines(engine: str) -> None:
    graph = kiln.io.load(_cast_model(TP.FLOAT, TP.STRING, [2]))
    try:
        graph.finalize(engine)
    except UnsupportedOperationError as exc:
        assert "string" in str(exc) or "object" in str(exc)
    else:  # pragma: no cover - a refusal is what every engine but NumPy gives
        pytest.fail(f"{engine} accepted a Cast to strings")


def test_string_graph_exports_with_string_types() -> None:
    graph = kiln.io.load(_cast_model(TP.FLOAT, TP.STRING, [2]))
    model = kiln.io.to_onnx(graph)
    assert model.graph.output[0].type.tensor_type.elem_type == TP.STRING
    back = kiln.io.load(model)
    back.finalize("numpy")
    got = np.asarray(back.run({"x": np.array([1.5, -0.25], np.float32)})[0])
    assert got.tolist() == ["1.5", "-0.25"]
