"""ONNX export: every registry operator's samples as one-node models, checked by onnx.checker
and run in onnxruntime against kiln's own result."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.errors import UnsupportedOperationError
from kiln.ops.dispatch import run_kernel
from kiln.ops.registry import all_ops
from kiln.symbolic import symbol

from ..numerics import assert_close
from .graphs import one_node_graph

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

# onnxruntime's CPU provider lacks kernels for these operators at some dtypes (float16,
# bfloat16, integer Sum, bool ScatterElements with min/max, ...) or rejects a valid model in
# its own shape inference (Einsum with broadcast ellipses). A sample of one of them that ORT
# refuses with NOT_IMPLEMENTED or a type error is skipped; any other failure is a bug.
ORT_GAPS = frozenset(
    {
        "Abs",
        "Acos",
        "Acosh",
        "Asin",
        "Asinh",
        "Atan",
        "Atanh",
        "Attention",
        "AveragePool",
        "Cast",
        "Conv",
        "ConvTranspose",
        "Cosh",
        "CumSum",
        "Einsum",
        "Elu",
        "Erf",
        "Exp",
        "Floor",
        "Gelu",
        "Gemm",
        "GlobalAveragePool",
        "GlobalMaxPool",
        "HardSigmoid",
        "HardSwish",
        "InstanceNormalization",
        "LayerNormalization",
        "LeakyRelu",
        "Log",
        "MatMul",
        "Mean",
        "Mish",
        "Mul",
        "NonZero",
        "Pow",
        "Relu",
        "Round",
        "ScatterElements",
        "ScatterND",
        "Selu",
        "Sigmoid",
        "Sin",
        "Sinh",
        "Softplus",
        "Softsign",
        "Sqrt",
        "Sum",
        "Tan",
        "Tanh",
        "Where",
    }
)
_ORT_REFUSALS = ("NOT_IMPLEMENTED", "Type Error", "not supported", "ShapeInferenceError")
MAX_SAMPLES = 8  # per operator, to keep the file fast

CASES = [
    pytest.param(op, sample, id=f"{op.qualified_name}-{i}-{sample.name}")
    for op in all_ops()
    if not op.domain
    for i, sample in enumerate(list(op.samples())[:MAX_SAMPLES])
]


def _has_bfloat16(arrays) -> bool:
    return any(a is not None and a.dtype == kiln.bfloat16 for a in arrays)


@pytest.mark.parametrize("op, sample", CASES)
def test_sample_exports_and_runs_in_onnxruntime(op, sample) -> None:
    graph, fed = one_node_graph(op, sample)
    model = kiln.io.to_onnx(graph)
    onnx.checker.check_model(model, full_check=False)
    assert [n.op_type for n in model.graph.node] == [op.name]
    bound = op.bind_attrs(sample.attrs)
    expected = run_kernel(op, [None if x is None else np.asarray(x) for x in sample.inputs], bound)
    if _has_bfloat16(list(fed) + list(expected)):
        pytest.skip("onnxruntime's CPU provider has no bfloat16 kernels for most operators")
    try:
        session = ort.InferenceSession(
            model.SerializeToString(), providers=["CPUExecutionProvider"]
        )
        got = session.run(None, dict(zip(graph.input_names, fed)))
    except Exception as exc:
        if op.name in ORT_GAPS and any(r in str(exc) for r in _ORT_REFUSALS):
            pytest.skip(f"onnxruntime lacks {op.name} here: {str(exc)[:120]}")
        raise
    assert len(got) == len(expected)
    if op.name == "ReduceMean" and any(x is not None and x.size == 0 for x in sample.inputs):
        pytest.skip("onnxruntime returns 0 for the mean of nothing; ONNX (0/0) and kiln give nan")
    for i, (g, e) in enumerate(zip(got, expected)):
        rtol = 1e-2 if e.dtype == np.float16 else 1e-4
        assert_close(g, e, rtol=rtol, atol=rtol, what=f"{op.name} output {i}")


def test_opset_is_21_unless_an_operator_needs_23() -> None:
    g = kiln.trace(lambda x: np.tanh(x), np.ones(2, np.float32)).graph
    assert kiln.io.to_onnx(g).opset_import[0].version == 21
    q = np.ones((1, 2, 3, 4), np.float32)
    g = kiln.trace(lambda q: kiln.nn.scaled_dot_product_attention(q, q, q), q).graph
    ops = {n.op for n in g.nodes}
    model = kiln.io.to_onnx(g)
    assert model.opset_import[0].version == (23 if "Attention" in ops else 21)


def test_symbolic_dims_become_dim_params_and_names_are_kept() -> None:
    spec = kiln.TensorSpec(("batch", 3), kiln.float32, "x")
    g = kiln.trace(lambda x: (x * 2).sum(axis=-1), signature=[spec]).graph
    model = g.to_onnx()
    dims = model.graph.input[0].type.tensor_type.shape.dim
    assert dims[0].dim_param == "batch" and dims[1].dim_value == 3
    out_dims = model.graph.output[0].type.tensor_type.shape.dim
    assert out_dims[0].dim_param == "batch"
    assert [i.name for i in model.graph.input] == g.input_names
    assert [o.name for o in model.graph.output] == g.output_names
    assert [n.name for n in model.graph.node] == [n.name for n in g.nodes]
    assert {t.name for t in model.graph.initializer} == {c.value.name for c in g.constants}
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for batch in (1, 5):
        x = np.arange(batch * 3, dtype=np.float32).reshape(batch, 3)
        np.testing.assert_allclose(session.run(None, {"x": x})[0], (x * 2).sum(-1))


def test_attributes_none_omitted_and_cast_to_is_an_int() -> None:
    x = np.ones((2, 3), np.float32)
    g = kiln.trace(lambda x: x.astype(np.int32).T, x).graph
    model = kiln.io.to_onnx(g)
    nodes = {n.op_type: n for n in model.graph.node}
    (to,) = [a for a in nodes["Cast"].attribute if a.name == "to"]
    assert to.type == onnx.AttributeProto.INT and to.i == onnx.TensorProto.INT32
    assert "round_mode" not in {a.name for a in nodes["Cast"].attribute}  # not in opset 21
    for node in model.graph.node:
        for a in node.attribute:
            assert a.type != onnx.AttributeProto.UNDEFINED


def test_save_writes_a_file_that_loads(tmp_path) -> None:
    g = kiln.trace(lambda x: np.exp(x) + 1, np.ones(3, np.float32)).graph
    path = tmp_path / "m.onnx"
    g.save(path)
    onnx.checker.check_model(str(path))
    kiln.io.save(g, str(path))
    assert [n.op for n in kiln.io.load(path).nodes] == ["Exp", "Add"]


@pytest.fixture
def scratch_registry():
    """Operators registered by a test are removed afterwards, so the registry-wide tests
    (every operator has samples, ...) never see them."""
    from kiln.ops import registry

    before = set(registry._REGISTRY)
    yield
    for name in set(registry._REGISTRY) - before:
        del registry._REGISTRY[name]


def test_kiln_domain_op_without_expand_is_a_clear_error(scratch_registry) -> None:
    from kiln.ir.graph import ModelGraph, Node, Value
    from kiln.ops.registry import Input, OpDef, TensorType, get_op, register

    name = "kiln.TestOnlyNoExpand"
    try:
        get_op(name)
    except Exception:
        register(
            OpDef(
                name="TestOnlyNoExpand",
                doc="a test operator",
                inputs=(Input("x"),),
                outputs=("y",),
                infer=lambda types, attrs: [types[0]],
                kernel=lambda x: x,
                domain="kiln",
            )
        )
    t = TensorType(np.dtype(np.float32), (symbol("N"),))
    x, y = Value("x", t), Value("y", t)
    g = ModelGraph("g", [x], [y], [Node(name, (x,), (y,), {}, "fused")])
    with pytest.raises(UnsupportedOperationError, match="TestOnlyNoExpand.*expand"):
        kiln.io.to_onnx(g)


def test_kiln_domain_op_is_exported_through_expand(scratch_registry) -> None:
    from kiln.ir.graph import ModelGraph, Node, Value
    from kiln.ops.registry import Input, OpDef, TensorType, get_op, register

    def expand(builder, inputs, attrs, outputs):
        (x,) = inputs
        (mid,) = builder.add("Relu", [x])
        builder.add("Neg", [mid], outputs=outputs)

    name = "kiln.TestOnlyNegRelu"
    try:
        get_op(name)
    except Exception:
        register(
            OpDef(
                name="TestOnlyNegRelu",
                doc="a test operator: -relu(x)",
                inputs=(Input("x"),),
                outputs=("y",),
                infer=lambda types, attrs: [types[0]],
                kernel=lambda x: -np.maximum(x, 0),
                domain="kiln",
                expand=expand,
            )
        )
    t = TensorType(np.dtype(np.float32), (3,))
    x, y = Value("x", t), Value("y", t)
    g = ModelGraph("g", [x], [y], [Node(name, (x,), (y,), {}, "fused")])
    model = kiln.io.to_onnx(g)
    assert [n.op_type for n in model.graph.node] == ["Relu", "Neg"]
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    xs = np.array([-1.0, 0.5, 2.0], np.float32)
    np.testing.assert_allclose(session.run(None, {"x": xs})[0], -np.maximum(xs, 0))
