"""A representative sample of the ONNX backend node cases, run as the conformance harness
(``tools/onnx_conformance.py``) runs them: load, finalize, run, compare."""

from __future__ import annotations

import importlib.util
import pathlib
import sys

import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnx.backend.test.case.node")

_TOOL = pathlib.Path(__file__).resolve().parents[2] / "tools" / "onnx_conformance.py"
_spec = importlib.util.spec_from_file_location("onnx_conformance", _TOOL)
conformance = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("onnx_conformance", conformance)  # dataclasses look their module up
_spec.loader.exec_module(conformance)

SAMPLE = [
    "test_add_bcast",
    "test_matmul_2d",
    "test_gemm_all_attributes",
    "test_basic_conv_with_padding",
    "test_conv_with_strides_and_asymmetric_padding",
    "test_maxpool_2d_pads",
    "test_averagepool_2d_strides",
    "test_globalaveragepool",
    "test_batchnorm_example",
    "test_relu",
    "test_softmax_axis_1",
    "test_logsoftmax_axis_0",
    "test_reduce_mean_keepdims_example",
    "test_reduce_sum_do_not_keepdims_example",
    "test_reshape_negative_dim",
    "test_transpose_all_permutations_3",
    "test_concat_2d_axis_0",
    "test_slice_neg_steps",
    "test_gather_0",
    "test_unsqueeze_axis_0",
    "test_cast_FLOAT_to_DOUBLE",
    "test_where_example",
    "test_layer_normalization_2d_axis0",
    "test_gelu_tanh_1",
    "test_resize_upsample_scales_nearest",
    "test_split_equal_parts_1d_opset18",
    "test_top_k",
    "test_cumsum_2d_axis_1",
    "test_expand_dim_changed",
    "test_einsum_batch_matmul",
    "test_clip_default_min",
    "test_tile",
    "test_argmax_default_axis_example",
    "test_erf",
    "test_constant_pad",
    "test_squeeze",
    "test_constantofshape_int_zeros",
    "test_split_variable_parts_1d_opset18",
    "test_dropout_default_mask_ratio",
    "test_castlike_FLOAT_to_BFLOAT16_expanded",
]


@pytest.fixture(scope="module")
def cases() -> dict:
    notes: list[str] = []
    return {c.name: c for c in conformance.collect(None, ["node"], notes)}


@pytest.mark.parametrize("name", SAMPLE)
def test_backend_node_case(cases, name) -> None:
    # as the suite feeds it: every graph input (a Reshape shape, Slice starts, TopK's K, ...)
    # fed when the graph runs, no constant_inputs=
    case = cases.get(name)
    if case is None:
        pytest.skip(f"{name} is not in this onnx version's suite")
    result = conformance.run_case(case, set(conformance.supported_operators()), timeout=20)
    assert result.cause is None, f"{name}: {result.cause}: {result.detail}"
    assert result.bound_cause is None and result.bound_inputs == ()
    assert result.measured


def test_constant_inputs_mode_binds_the_shape_deciding_inputs(cases) -> None:
    case = cases["test_reshape_negative_dim"]
    cause, detail, bound = conformance._run_mode(case, 20, True, "numpy")
    assert (cause, detail, bound) == (None, "", ("shape",))
    # a case without shape-deciding inputs binds nothing (its mode a result stands)
    assert conformance._run_mode(cases["test_relu"], 20, True, "numpy") == (None, "", ())


@pytest.mark.parametrize(
    ("name", "lacking"),
    [
        ("test_cast_FLOAT_to_FLOAT8E4M3FN", "FLOAT8E4M3FN"),
        ("test_cast_INT4_to_FLOAT", "INT4"),
        ("test_castlike_FLOAT_to_UINT2", "UINT2"),
        ("test_equal_string", "STRING"),
        ("test_cast_FLOAT_to_FLOAT16", ""),
        ("test_relu", ""),
    ],
)
def test_cases_with_element_types_kiln_lacks_are_left_out(cases, name, lacking) -> None:
    case = cases.get(name)
    if case is None:
        pytest.skip(f"{name} is not in this onnx version's suite")
    assert conformance.lacking_type(case.model, case.op) == lacking


def test_string_counts_where_cast_is_the_operator_under_test() -> None:
    onnx = conformance.onnx
    helper, tp = onnx.helper, onnx.TensorProto
    node = helper.make_node("Cast", ["x"], ["y"], to=tp.STRING)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", tp.FLOAT, [2])],
        [helper.make_tensor_value_info("y", tp.STRING, [2])],
    )
    model = helper.make_model(graph)
    assert conformance.lacking_type(model, "Cast") == ""
    assert conformance.lacking_type(model, "Identity") == "STRING"


def test_report_leads_with_the_suites_feeding_mode(cases) -> None:
    names = ["test_relu", "test_cast_FLOAT_to_FLOAT8E4M3FN", "test_reshape_negative_dim"]
    report = conformance.Report()
    supported = set(conformance.supported_operators())
    for name in names:
        report.results.append(conformance.run_case(cases[name], supported, timeout=20))
    summary = conformance.summarize(report)
    assert summary["measured"] == (2, 2, 2)  # the float8 case is left out
    assert summary["node"] == (2, 2, 3)
    text = conformance.render(report, 1.0)
    assert "**As the suite feeds them**" in text and "2 of 2 (100.0%)" in text
    assert text.index("as the suite feeds them") < text.index("with constant_inputs=")
    assert "| Relu | 1 | 1 | 1 |  |" in text and "| Reshape | 1 | 1 | 1 |  |" in text
    assert "FLOAT8E4M3FN (1)" in text


def test_progress_line(capsys) -> None:
    progress = conformance._Progress(2033, enabled=True)
    progress.show(512, "test_xxx")
    progress.done()
    assert capsys.readouterr().err.startswith("\r[ 512/2033] test_xxx")
    quiet = conformance._Progress(3, enabled=False)
    quiet.show(1, "test_yyy")
    assert capsys.readouterr().err == ""
