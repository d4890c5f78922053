"""ONNX import of hostile and broken files: what onnxruntime refuses, kiln refuses with a
KilnError naming the value at fault; and loading never computes (or allocates) what a tiny
file only declares (Range(0, 4e8), ConstantOfShape([1e8]), a (10**6, 10**6) initializer)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import kiln
from kiln.errors import (
    ArgumentTypeError,
    GraphValidationError,
    InputMismatchError,
    KilnError,
    UnsupportedOperationError,
)
from kiln.ops.folding import FOLDING_LIMITS, fold
from kiln.ops.registry import TensorType, get_op

from ..numerics import assert_close

onnx = pytest.importorskip("onnx")
helper = onnx.helper
TP = onnx.TensorProto


def _model(nodes, inputs, outputs, initializers=(), opset=21, value_info=()):
    graph = helper.make_graph(
        nodes, "m", inputs, outputs, list(initializers), value_info=list(value_info)
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model


def _info(name, dims, elem=TP.FLOAT):
    return helper.make_tensor_value_info(name, elem, dims)


def _relu(**kwargs):
    node = helper.make_node("Relu", ["x"], ["y"])
    return _model([node], [_info("x", [3])], [_info("y", [3])], **kwargs)


def _add_w(w):
    node = helper.make_node("Add", ["x", "w"], ["y"])
    return _model([node], [_info("x", [3])], [_info("y", [3])], [w])


def _ort_refuses(model_bytes: bytes) -> bool:
    """Whether onnxruntime refuses to load the model (the reference kiln matches)."""
    ort = pytest.importorskip("onnxruntime")
    options = ort.SessionOptions()
    options.log_severity_level = 4
    try:
        ort.InferenceSession(model_bytes, options, providers=["CPUExecutionProvider"])
    except Exception:
        return True
    return False


# -- refused with a KilnError naming the thing ----------------------------------------------


def test_negative_initializer_dim_is_refused_naming_the_initializer() -> None:
    w = helper.make_tensor("w", TP.FLOAT, [3], [1.0, 2.0, 3.0])
    w.dims[0] = -3
    model = _add_w(w)
    with pytest.raises(GraphValidationError, match=r"initializer 'w'.*\[-3\].*negative"):
        kiln.io.load(model)
    assert _ort_refuses(model.SerializeToString())


def test_huge_declared_initializer_is_refused_without_allocating() -> None:
    w = TP(name="w", data_type=TP.FLOAT, dims=[10**6, 10**6])  # 4 TB declared, 0 bytes stored
    with pytest.raises(GraphValidationError, match=r"initializer 'w'.*1000000000000 float32"):
        kiln.io.load(_add_w(w))
    w.raw_data = b"\0" * 12  # three floats stored
    with pytest.raises(GraphValidationError, match=r"initializer 'w'.*12 byte"):
        kiln.io.load(_add_w(w))
    assert _ort_refuses(_add_w(w).SerializeToString())


def test_initializer_data_must_fill_its_shape_exactly() -> None:
    w = helper.make_tensor("w", TP.FLOAT, [3], [1.0, 2.0, 3.0])
    w.dims[0] = 4
    with pytest.raises(GraphValidationError, match=r"initializer 'w'.*\[4\].*3 value"):
        kiln.io.load(_add_w(w))


def test_tensor_attribute_is_checked_as_initializers_are() -> None:
    value = TP(name="v", data_type=TP.INT64, dims=[10**9])
    node = helper.make_node("Constant", [], ["y"], value=value)
    model = _model([node], [], [_info("y", None, TP.INT64)])
    with pytest.raises(GraphValidationError, match=r"Constant.*attribute 'value'.*1000000000"):
        kiln.io.load(model)


def test_opset_beyond_what_kiln_knows_is_refused() -> None:
    model = _relu(opset=99)
    with pytest.raises(UnsupportedOperationError, match=r"opset 99.*1 to 28"):
        kiln.io.load(model)
    assert _ort_refuses(model.SerializeToString())
    graph = kiln.io.load(_relu(opset=kiln.io.onnx_import.MAX_OPSET))  # the newest known loads
    assert [n.op for n in graph.nodes] == ["Relu"]


def test_output_declared_with_the_wrong_type_is_refused() -> None:
    node = helper.make_node("Relu", ["x"], ["y"])
    model = _model([node], [_info("x", [3])], [_info("y", [3], TP.INT64)])
    with pytest.raises(GraphValidationError, match=r"graph output 'y'.*int64.*float32"):
        kiln.io.load(model)
    assert _ort_refuses(model.SerializeToString())


def test_value_info_declared_with_the_wrong_type_is_refused() -> None:
    nodes = [helper.make_node("Relu", ["x"], ["h"]), helper.make_node("Relu", ["h"], ["y"])]
    model = _model(
        nodes, [_info("x", [3])], [_info("y", [3])], value_info=[_info("h", [3], TP.INT32)]
    )
    with pytest.raises(GraphValidationError, match=r"value 'h'.*int32.*float32"):
        kiln.io.load(model)
    assert _ort_refuses(model.SerializeToString())


def test_declared_shapes_stay_lenient_as_in_onnxruntime() -> None:
    # onnxruntime warns and keeps the inferred shape; so does kiln (an undefined element
    # type, 0, leaves the type to inference too).
    node = helper.make_node("Relu", ["x"], ["y"])
    model = _model([node], [_info("x", [3])], [_info("y", [4])])
    assert kiln.io.load(model).outputs[0].shape == (3,)
    model = _model([node], [_info("x", [3])], [_info("y", [3], TP.UNDEFINED)])
    assert kiln.io.load(model).outputs[0].dtype == np.float32


def test_input_and_initializer_of_one_name_must_agree() -> None:
    w = onnx.numpy_helper.from_array(np.ones(4, np.float32), "x")
    node = helper.make_node("Relu", ["x"], ["y"])
    model = _model([node], [_info("x", [3])], [_info("y", None)], [w])
    with pytest.raises(GraphValidationError, match=r"initializer 'x' is float32\(4,\).*\(3,\)"):
        kiln.io.load(model)
    assert _ort_refuses(model.SerializeToString())
    # An old-style model listing its initializers as inputs, with a matching (or symbolic)
    # declaration, still loads: the initializer is a constant.
    for dims in ([4], ["N"]):
        model = _model([node], [_info("x", dims)], [_info("y", None)], [w])
        graph = kiln.io.load(model)
        assert graph.input_names == [] and [c.value.name for c in graph.constants] == ["x"]


def test_bytes_that_are_not_onnx_say_so() -> None:
    for data in (b"hello, this is not a model", b"", b"\x08\x07"):
        with pytest.raises(GraphValidationError, match="the bytes given: not an ONNX model"):
            kiln.io.load(data)
    assert _ort_refuses(b"hello, this is not a model")


def test_a_file_that_is_not_onnx_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "notes.onnx"
    path.write_text("just some text\n")
    with pytest.raises(GraphValidationError, match=r"notes\.onnx.*not an ONNX model"):
        kiln.io.load(path)


def test_a_model_of_another_domain_only_still_says_which_opset_is_missing() -> None:
    model = helper.make_model(
        helper.make_graph([], "m", [_info("x", [2])], [_info("x", [2])]),
        opset_imports=[helper.make_opsetid("com.example", 1)],
    )
    with pytest.raises(UnsupportedOperationError, match="default ONNX domain"):
        kiln.io.load(model)


def test_load_of_something_else_is_a_type_error() -> None:
    with pytest.raises(ArgumentTypeError, match="'source' must be a file path"):
        kiln.io.load(123)  # type: ignore[arg-type]


@pytest.mark.parametrize("location", ["../outside.bin", "/etc/hostname"])
def test_external_data_outside_the_model_folder_is_refused(tmp_path: Path, location) -> None:
    w = helper.make_tensor("w", TP.FLOAT, [3], [1.0, 2.0, 3.0])
    model = _add_w(w)
    tensor = model.graph.initializer[0]
    tensor.ClearField("float_data")
    tensor.data_location = TP.EXTERNAL
    entry = tensor.external_data.add()
    entry.key, entry.value = "location", location
    (tmp_path / "outside.bin").write_bytes(np.ones(3, np.float32).tobytes())
    folder = tmp_path / "model"
    folder.mkdir()
    path = folder / "m.onnx"
    path.write_bytes(model.SerializeToString())
    with pytest.raises(GraphValidationError, match=r"external data.*inside the model's .*folder"):
        kiln.io.load(path)


def test_external_data_inside_the_model_folder_loads(tmp_path: Path) -> None:
    w = onnx.numpy_helper.from_array(np.array([1.0, 2.0, 3.0], np.float32), "w")
    model = _add_w(w)
    path = tmp_path / "m.onnx"
    onnx.save_model(
        model, str(path), save_as_external_data=True, location="w.bin", size_threshold=0
    )
    graph = kiln.io.load(path)
    graph.finalize()
    x = np.array([1.0, -1.0, 0.5], np.float32)
    assert_close(graph.run([x])[0], x + np.array([1.0, 2.0, 3.0], np.float32))


def test_split_num_outputs_must_match_the_declared_outputs() -> None:
    node = helper.make_node("Split", ["x"], ["a", "b"], axis=0, num_outputs=10**9)
    model = _model([node], [_info("x", [4])], [_info("a", None), _info("b", None)], opset=18)
    with pytest.raises(GraphValidationError, match=r"num_outputs is 1000000000.*2 output"):
        kiln.io.load(model)


# -- constant_inputs that contradict the model ----------------------------------------------


def _add_c():
    node = helper.make_node("Add", ["x", "c"], ["y"])
    return _model([node], [_info("x", [3]), _info("c", [3])], [_info("y", None)])


def test_constant_inputs_must_fit_the_declared_shape_and_dtype() -> None:
    with pytest.raises(InputMismatchError, match=r"constant_inputs\['c'\] has size 4 on axis 0"):
        kiln.io.load(_add_c(), constant_inputs={"c": np.ones(4, np.float32)})
    with pytest.raises(InputMismatchError, match=r"constant_inputs\['c'\] is float64\[3\]"):
        kiln.io.load(_add_c(), constant_inputs={"c": np.ones(3)})
    with pytest.raises(InputMismatchError, match=r"names \['q'\].*inputs are \['c', 'x'\]"):
        kiln.io.load(_add_c(), constant_inputs={"q": np.ones(3, np.float32)})
    with pytest.raises(InputMismatchError, match=r"constant_inputs\['c'\] \(str\)"):
        kiln.io.load(_add_c(), constant_inputs={"c": "abc"})


def test_constant_inputs_as_python_lists_take_the_declared_dtype() -> None:
    graph = kiln.io.load(_add_c(), constant_inputs={"c": [1, 2, 3]})
    graph.finalize()
    x = np.array([0.5, 0.25, -1.0], np.float32)
    (y,) = graph.run([x])
    assert_close(y, x + np.array([1, 2, 3], np.float32))


def test_every_refusal_is_a_kiln_error() -> None:
    w = TP(name="w", data_type=TP.FLOAT, dims=[7])
    for source in (_add_w(w), _relu(opset=99), b"garbage bytes"):
        with pytest.raises(KilnError):
            kiln.io.load(source)


# -- nothing a file only declares is computed at load time ----------------------------------


def test_folding_checks_sizes_before_computing() -> None:
    # fold(..., limit) without shapes takes them from the operator's infer: a Range of 4e8
    # values is never run, whatever the caller.
    bounds = [np.array(0, np.int64), np.array(4 * 10**8, np.int64), np.array(1, np.int64)]
    assert fold(get_op("Range"), bounds, {"stash_type": 1}, limit=1 << 16) is None
    (small,) = fold(
        get_op("Range"), [bounds[0], np.array(5), bounds[2]], {"stash_type": 1}, limit=8
    )
    assert small.tolist() == [0, 1, 2, 3, 4]
    big = np.array([10**8], np.int64)
    assert fold(get_op("ConstantOfShape"), [big], {"value": None}, limit=1 << 16) is None


def test_range_expand_tile_types_carry_contents_only_when_small() -> None:
    i64 = np.dtype(np.int64)
    scalar = [TensorType(i64, (), (v,)) for v in (0, 4 * 10**8, 1)]
    (out,) = get_op("Range").infer(scalar, {"stash_type": 1})
    assert out.shape == (4 * 10**8,) and out.value is None
    scalar[1] = TensorType(i64, (), (5,))
    (out,) = get_op("Range").infer(scalar, {"stash_type": 1})
    assert out.value == (0, 1, 2, 3, 4)
    seven = TensorType(i64, (1,), (7,))
    huge = TensorType(i64, (1,), (10**9,))
    (out,) = get_op("Expand").infer([seven, huge], {})
    assert out.shape == (10**9,) and out.value is None
    (out,) = get_op("Tile").infer([seven, huge], {})
    assert out.shape == (10**9,) and out.value is None
    limit = FOLDING_LIMITS.known_ints
    (out,) = get_op("Tile").infer([seven, TensorType(i64, (1,), (limit,))], {})
    assert out.value == (7,) * limit


_BOMBS = textwrap.dedent(
    """
    import json, resource, sys
    import numpy as np
    import onnx
    from onnx import TensorProto as TP, helper, numpy_helper
    import kiln

    def model(nodes, inits, out_type=TP.INT64):
        out = helper.make_tensor_value_info("y", out_type, None)
        graph = helper.make_graph(nodes, "bomb", [], [out], inits)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])

    def i64(name, value):
        return numpy_helper.from_array(np.array(value, np.int64), name)

    one = helper.make_tensor("one", TP.INT64, [1], [1])
    bombs = {
        "range": model([helper.make_node("Range", ["s", "l", "d"], ["y"])],
                       [i64("s", 0), i64("l", 4 * 10**8), i64("d", 1)]),
        "constant_of_shape": model(
            [helper.make_node("ConstantOfShape", ["s"], ["y"], value=one)],
            [i64("s", [10**8])]),
        "expand": model([helper.make_node("Expand", ["v", "s"], ["y"])],
                        [i64("v", [7]), i64("s", [10**9])]),
        "tile": model([helper.make_node("Tile", ["v", "s"], ["y"])],
                      [i64("v", [7]), i64("s", [10**9])]),
    }
    # A regression fails here with MemoryError instead of taking the machine down.
    with open("/proc/self/status") as f:
        vm = next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmSize:"))
    resource.setrlimit(resource.RLIMIT_AS, (vm + (1 << 30), resource.RLIM_INFINITY))
    growth = {}
    for name, m in bombs.items():
        data = m.SerializeToString()
        assert len(data) < 200, len(data)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        graph = kiln.io.load(data)
        assert graph.outputs[0].shape[0] in (4 * 10**8, 10**8, 10**9), graph.outputs
        growth[name] = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024
    print(json.dumps(growth))
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc and RLIMIT_AS")
def test_loading_tiny_models_that_declare_huge_values_stays_small() -> None:
    src = str(Path(kiln.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", _BOMBS], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    growth_mb = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(growth_mb) == {"range", "constant_of_shape", "expand", "tile"}
    for name, mb in growth_mb.items():
        assert mb < 64, f"loading the {name} model grew the process by {mb} MB"
