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
]


@pytest.fixture(scope="module")
def cases() -> dict:
    notes: list[str] = []
    return {c.name: c for c in conformance.collect(None, ["node"], notes)}


@pytest.mark.parametrize("name", SAMPLE)
def test_backend_node_case(cases, name) -> None:
    case = cases.get(name)
    if case is None:
        pytest.skip(f"{name} is not in this onnx version's suite")
    result = conformance.run_case(case, set(conformance.supported_operators()), timeout=20)
    assert result.cause is None, f"{name}: {result.cause}: {result.detail}"
