"""``kiln.io.save_triton``: the repository tree, a ``config.pbtxt`` that Triton's own schema
(``model_config_pb2`` from ``tritonclient``, parsed strictly by protobuf's ``text_format``)
accepts field by field, and a ``model.onnx`` that onnxruntime runs at batch sizes other than the
traced one with NumPy's answers."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.errors import ArgumentError, ArgumentTypeError, UnsupportedOperationError
from kiln.io.triton import TRITON_DTYPES, triton_config

from ..numerics import assert_close

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
model_config_pb2 = pytest.importorskip(
    "tritonclient.grpc.model_config_pb2", reason="tritonclient[grpc] is not installed"
)
from google.protobuf import text_format  # noqa: E402

DataType = model_config_pb2.DataType
KIND_CPU = model_config_pb2.ModelInstanceGroup.Kind.KIND_CPU


def parse_config(model_dir) -> model_config_pb2.ModelConfig:
    """The written config.pbtxt, parsed by Triton's schema (unknown fields are errors)."""
    return text_format.Parse(
        (model_dir / "config.pbtxt").read_text(), model_config_pb2.ModelConfig()
    )


def run_model(path, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds)))


def io_names(model_dir, version: int = 1) -> tuple[list[str], list[str]]:
    model = onnx.load(str(model_dir / str(version) / "model.onnx"))
    return [v.name for v in model.graph.input], [v.name for v in model.graph.output]


def mlp(x):
    return np.tanh(x @ np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)) * 2


def traced_mlp():
    return kiln.trace(mlp, np.ones((4, 3), np.float32), dynamic_axes={"x": {0: "batch"}})


def test_batched_model_config_and_tree(tmp_path):
    model_dir = kiln.io.save_triton(
        traced_mlp().graph, tmp_path, "mlp", version=3, max_batch_size=16, instances=2
    )
    assert model_dir == tmp_path / "mlp"
    files = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    assert files == ["mlp", "mlp/3", "mlp/3/model.onnx", "mlp/config.pbtxt"]
    config = parse_config(model_dir)
    assert config.name == "mlp"
    assert config.platform == "onnxruntime_onnx"
    assert config.backend == "onnxruntime"
    assert config.max_batch_size == 16
    assert [(i.name, i.data_type, list(i.dims)) for i in config.input] == [
        ("x", DataType.TYPE_FP32, [3])
    ]
    assert [(o.name, o.data_type, list(o.dims)) for o in config.output] == [
        ("output", DataType.TYPE_FP32, [4])
    ]
    assert not any(v.HasField("reshape") for v in [*config.input, *config.output])
    assert config.HasField("dynamic_batching")
    assert [(g.count, g.kind) for g in config.instance_group] == [(2, KIND_CPU)]
    assert io_names(model_dir, 3) == (["x"], ["output"])


def test_written_model_runs_at_other_batch_sizes(tmp_path):
    model_dir = kiln.io.save_triton(traced_mlp(), tmp_path, "mlp", max_batch_size=8)
    rng = np.random.default_rng(0)
    for batch in (1, 7):  # traced at 4
        x = rng.standard_normal((batch, 3)).astype(np.float32)
        got = run_model(model_dir / "1" / "model.onnx", {"x": x})
        assert_close(got["output"], mlp(x), what=f"batch {batch}")


def test_unbatched_config_keeps_full_dims_with_dynamic_as_minus_one(tmp_path):
    model_dir = kiln.io.save_triton(traced_mlp().graph, tmp_path, "mlp")  # max_batch_size=0
    config = parse_config(model_dir)
    assert config.max_batch_size == 0
    assert [list(i.dims) for i in config.input] == [[-1, 3]]
    assert [list(o.dims) for o in config.output] == [[-1, 4]]
    assert not config.HasField("dynamic_batching")  # Triton batches nothing at 0
    assert [(g.count, g.kind) for g in config.instance_group] == [(1, KIND_CPU)]


def test_static_graph_unbatched(tmp_path):
    graph = kiln.trace(mlp, np.ones((4, 3), np.float32)).graph
    config = parse_config(kiln.io.save_triton(graph, tmp_path, "static"))
    assert [list(i.dims) for i in config.input] == [[4, 3]]
    assert [list(o.dims) for o in config.output] == [[4, 4]]


def test_dynamic_batching_off(tmp_path):
    config = parse_config(
        kiln.io.save_triton(
            traced_mlp().graph, tmp_path, "m", max_batch_size=4, dynamic_batching=False
        )
    )
    assert config.max_batch_size == 4 and not config.HasField("dynamic_batching")


def mixed(x, y, n, m):
    return x * 2, y.sum(1), n + 1, m & (n > 0)


def test_multi_input_multi_output_dtypes(tmp_path):
    batch = {0: "batch"}
    tg = kiln.trace(
        mixed,
        np.ones((4, 3), np.float32),
        np.ones((4, 3), np.float64),
        np.ones(4, np.int64),
        np.ones(4, bool),
        dynamic_axes={"x": batch, "y": batch, "n": batch, "m": batch},
    )
    model_dir = kiln.io.save_triton(tg.graph, tmp_path, "mixed", max_batch_size=32)
    config = parse_config(model_dir)
    inputs, outputs = io_names(model_dir)
    assert [i.name for i in config.input] == inputs == ["x", "y", "n", "m"]
    assert [o.name for o in config.output] == outputs == tg.graph.output_names
    assert [i.data_type for i in config.input] == [
        DataType.TYPE_FP32,
        DataType.TYPE_FP64,
        DataType.TYPE_INT64,
        DataType.TYPE_BOOL,
    ]
    assert [o.data_type for o in config.output] == [
        DataType.TYPE_FP32,
        DataType.TYPE_FP64,
        DataType.TYPE_INT64,
        DataType.TYPE_BOOL,
    ]
    # a [batch] tensor has no dims left once the batch axis is out: Triton's form is [1]
    # reshaped to no axes
    assert [list(i.dims) for i in config.input] == [[3], [3], [1], [1]]
    assert [i.HasField("reshape") and list(i.reshape.shape) == [] for i in config.input] == [
        False,
        False,
        True,
        True,
    ]
    assert [list(o.dims) for o in config.output] == [[3], [1], [1], [1]]
    assert [o.HasField("reshape") for o in config.output] == [False, True, True, True]

    rng = np.random.default_rng(1)
    feeds = {
        "x": rng.standard_normal((5, 3)).astype(np.float32),
        "y": rng.standard_normal((5, 3)),
        "n": rng.integers(-3, 3, 5),
        "m": rng.integers(0, 2, 5).astype(bool),
    }
    got = run_model(model_dir / "1" / "model.onnx", feeds)
    expected = mixed(*feeds.values())
    for name, want in zip(outputs, expected):
        assert_close(got[name], want, what=name)


def test_scalar_input_unbatched_is_one_reshaped(tmp_path):
    tg = kiln.trace(lambda x, s: x * s, np.ones((2, 3), np.float32), np.ones((), np.float32))
    config = parse_config(kiln.io.save_triton(tg, tmp_path, "scale"))
    scalar = config.input[1]
    assert (scalar.name, list(scalar.dims), list(scalar.reshape.shape)) == ("s", [1], [])
    assert scalar.HasField("reshape")


def test_static_leading_axis_is_refused_when_batching(tmp_path):
    graph = kiln.trace(mlp, np.ones((4, 3), np.float32)).graph
    with pytest.raises(ArgumentError, match=r"axis 0 of input 'x' .* static \(size 4\)"):
        kiln.io.save_triton(graph, tmp_path, "mlp", max_batch_size=8)
    assert not (tmp_path / "mlp").exists()  # nothing written for a refused graph


def test_output_without_batch_axis_is_refused(tmp_path):
    total = kiln.trace(lambda x: x.sum(0), np.ones((4, 3)), dynamic_axes={"x": [0]})
    with pytest.raises(ArgumentError, match=r"axis 0 of output 'output' .* static \(size 3\)"):
        kiln.io.save_triton(total, tmp_path, "m", max_batch_size=8)
    scalar = kiln.trace(lambda x: x.sum(), np.ones((4, 3)), dynamic_axes={"x": [0]})
    with pytest.raises(ArgumentError, match=r"output 'output' .* is a scalar"):
        kiln.io.save_triton(scalar, tmp_path, "m", max_batch_size=8)
    doubled = kiln.trace(lambda x: np.concatenate([x, x]), np.ones((4, 3)), dynamic_axes={"x": [0]})
    with pytest.raises(ArgumentError, match=r"output 'output' .* has size 2\*s0"):
        kiln.io.save_triton(doubled, tmp_path, "m", max_batch_size=8)
    # without batching, all three are fine
    for tg in (total, scalar, doubled):
        kiln.io.save_triton(tg, tmp_path, "m")


def pinned_rows(x):
    total = x[0] * 0
    for i in range(x.shape[0]):  # range needs an int: the size is pinned by a guard
        total = total + x[i]
    return total + x


def test_size_pinned_by_a_shape_guard_is_static_in_the_config(tmp_path):
    tg = kiln.trace(pinned_rows, np.ones((4, 3), np.float32), dynamic_axes={"x": [0]})
    assert tg.graph.shape_guards  # the loop recorded a guard
    config = parse_config(kiln.io.save_triton(tg, tmp_path, "rows"))
    assert [list(i.dims) for i in config.input] == [[4, 3]]
    with pytest.raises(ArgumentError, match="shape guard of the graph pins it"):
        kiln.io.save_triton(tg, tmp_path, "rows", max_batch_size=8)


def more_than_two_rows(x):
    if x.shape[0] > 2:
        return x + 1
    return x - 1


def test_guarded_graph_lists_exactly_the_models_outputs(tmp_path):
    tg = kiln.trace(more_than_two_rows, np.ones((4, 3), np.float32), dynamic_axes={"x": [0]})
    model_dir = kiln.io.save_triton(tg, tmp_path, "guarded", max_batch_size=8)
    config = parse_config(model_dir)
    inputs, outputs = io_names(model_dir)
    assert [i.name for i in config.input] == inputs == ["x"]
    assert [o.name for o in config.output] == outputs == ["output"]
    x = np.arange(18, dtype=np.float32).reshape(6, 3)
    assert_close(run_model(model_dir / "1" / "model.onnx", {"x": x})["output"], x + 1)


def writes_its_input(x):
    x[0] = 0.0
    return x * 2


def test_mutated_input_outputs_keep_the_models_names(tmp_path):
    tg = kiln.trace(writes_its_input, np.ones((4, 3), np.float32), dynamic_axes={"x": [0]})
    model_dir = kiln.io.save_triton(tg, tmp_path, "writer", max_batch_size=8)
    config = parse_config(model_dir)
    _, outputs = io_names(model_dir)
    assert [o.name for o in config.output] == outputs == ["output", "mutated.x"]
    x = np.arange(15, dtype=np.float32).reshape(5, 3)
    got = run_model(model_dir / "1" / "model.onnx", {"x": x})
    expected = x.copy()
    writes_its_input(expected)
    assert_close(got["mutated.x"], expected)
    assert_close(got["output"], expected * 2)


def test_names_are_written_as_the_onnx_model_has_them(tmp_path):
    helper = onnx.helper
    name = 'in "put":0\\x'
    body = helper.make_graph(
        [helper.make_node("Relu", [name], ["out/relu"])],
        "odd",
        [helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, ["N", 2])],
        [helper.make_tensor_value_info("out/relu", onnx.TensorProto.FLOAT, ["N", 2])],
    )
    model = helper.make_model(body, opset_imports=[helper.make_opsetid("", 21)])
    model_dir = kiln.io.save_triton(kiln.io.load(model), tmp_path, "odd", max_batch_size=2)
    config = parse_config(model_dir)
    assert [i.name for i in config.input] == [name]
    assert [o.name for o in config.output] == ["out/relu"]
    assert io_names(model_dir) == ([name], ["out/relu"])


def test_dtype_triton_has_no_type_for_is_refused():
    helper = onnx.helper
    body = helper.make_graph(
        [helper.make_node("Identity", ["z"], ["w"])],
        "complex",
        [helper.make_tensor_value_info("z", onnx.TensorProto.COMPLEX64, [2])],
        [helper.make_tensor_value_info("w", onnx.TensorProto.COMPLEX64, [2])],
    )
    model = helper.make_model(body, opset_imports=[helper.make_opsetid("", 21)])
    with pytest.raises(UnsupportedOperationError, match="input 'z' has dtype complex64"):
        triton_config(model, "complex")


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "a\\b", "/abs"])
def test_bad_names_are_refused(tmp_path, name):
    with pytest.raises(ArgumentError, match="not a model name Triton can load"):
        kiln.io.save_triton(traced_mlp(), tmp_path, name)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"version": 0}, ArgumentError, "version=0 is below 1"),
        ({"max_batch_size": -1}, ArgumentError, "max_batch_size=-1 is below 0"),
        ({"instances": 0}, ArgumentError, "instances=0 is below 1"),
        ({"version": "1"}, ArgumentTypeError, "version must be an int"),
        ({"instances": True}, ArgumentTypeError, "instances must be an int"),
    ],
)
def test_bad_arguments_are_refused(tmp_path, kwargs, error, match):
    with pytest.raises(error, match=match):
        kiln.io.save_triton(traced_mlp(), tmp_path, "m", **kwargs)


def test_not_a_graph_is_refused(tmp_path):
    with pytest.raises(ArgumentTypeError, match="got str"):
        kiln.io.save_triton("model.onnx", tmp_path, "m")


def test_saving_again_replaces_that_version_and_keeps_others(tmp_path):
    kiln.io.save_triton(traced_mlp(), tmp_path, "m", max_batch_size=4)
    tripled = kiln.trace(lambda x: x * 3, np.ones((4, 3), np.float32), dynamic_axes={"x": [0]})
    kiln.io.save_triton(tripled, tmp_path, "m", version=2, max_batch_size=4)
    kiln.io.save_triton(tripled, tmp_path, "m", max_batch_size=4)  # over version 1
    x = np.ones((2, 3), np.float32)
    for version in ("1", "2"):
        got = run_model(tmp_path / "m" / version / "model.onnx", {"x": x})["output"]
        assert_close(got, x * 3, what=f"version {version}")
    assert [list(o.dims) for o in parse_config(tmp_path / "m").output] == [[3]]
    leftovers = [p.name for p in tmp_path.rglob(".*")]
    assert leftovers == []  # the temporary files were renamed into place


@pytest.mark.parametrize("dtype_name", sorted(TRITON_DTYPES))
def test_every_kiln_dtype_maps_to_its_triton_type(tmp_path, dtype_name):
    dtype = kiln.dtypes.as_dtype(dtype_name)
    x = (np.arange(6) % 2).astype(dtype).reshape(2, 3)
    tg = kiln.trace(lambda x: x.T, x, dynamic_axes={"x": [0]})
    model_dir = kiln.io.save_triton(tg, tmp_path, "t")
    config = parse_config(model_dir)
    expected = DataType.Value(TRITON_DTYPES[dtype_name])
    assert [v.data_type for v in [*config.input, *config.output]] == [expected, expected]
    assert [list(v.dims) for v in [*config.input, *config.output]] == [[-1, 3], [3, -1]]
    if dtype_name == "bfloat16":
        return  # onnxruntime's Python API cannot feed ml_dtypes' bfloat16 arrays
    wider = (np.arange(15) % 2).astype(dtype).reshape(5, 3)
    assert_close(run_model(model_dir / "1" / "model.onnx", {"x": wider})["output"], wider.T)
