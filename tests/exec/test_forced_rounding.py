"""A forced engine keeps NumPy's bits too (SPEC 5b): ``finalize("jax")`` or
``finalize("onnxruntime")`` refuses the first node the engine may round otherwise, naming it,
unless the graph opted out of NumPy's bits (``DefaultsOptions(allow_reassociation=True)``),
an opt-out a saved model keeps. An ulp does not stay an ulp: XLA's float32 ``exp2`` became 32
ulps after a ``sinh`` (fuzz 36:1217)."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.errors import UnsupportedOperationError
from kiln.optim import DefaultsOptions

pytest.importorskip("jax")
pytest.importorskip("onnxruntime")

ENGINES = ["jax", "onnxruntime"]
RELAXED = DefaultsOptions(allow_reassociation=True)
X = np.linspace(-3.0, 3.0, 12, dtype=np.float32).reshape(3, 4)


def sinh_of_exp2(x):  # fuzz 36:1217
    return np.sinh(np.exp2(x * 3))


@pytest.mark.parametrize("engine", ENGINES)
def test_a_rounding_node_is_refused_by_name(engine):
    traced = kiln.trace(sinh_of_exp2, X)
    traced.optimize()
    with pytest.raises(UnsupportedOperationError) as info:
        traced.finalize(engine=engine)
    message = str(info.value)
    assert f"cannot run on {engine} with NumPy's bits" in message
    assert "(kiln.Exp2) rounds as the engine's library" in message  # the first such node
    assert "allow_reassociation=True" in message  # and how to accept the engine's rounding


@pytest.mark.parametrize("engine", ENGINES)
def test_the_opt_out_runs_it_with_the_engines_rounding(engine):
    traced = kiln.trace(sinh_of_exp2, X)
    traced.optimize(defaults=RELAXED)
    traced.finalize(engine=engine)
    with np.errstate(over="ignore"):
        want = sinh_of_exp2(X)
    np.testing.assert_allclose(np.asarray(traced(X)), want, rtol=1e-5)


EXACT = {  # correctly rounded; on jax, nothing that can underflow (XLA flushes subnormals)
    "onnxruntime": lambda x: np.sqrt(np.abs(x)) / (x - 0.5) + np.floor(x * 2),
    "jax": lambda x: np.floor(np.sqrt(np.abs(x)) * 3.0) / 0.25,
}


@pytest.mark.parametrize("engine", ENGINES)
def test_bit_exact_graphs_run_forced_and_give_numpys_bits(engine):
    fn = EXACT[engine]
    traced = kiln.trace(fn, X)
    traced.optimize()
    traced.finalize(engine=engine)
    np.testing.assert_array_equal(np.asarray(traced(X)), fn(X))


def _loop(body_op):
    """A Loop whose body computes ``body_op(acc)``, from an ONNX model."""
    from onnx import TensorProto, helper

    body = helper.make_graph(
        [
            helper.make_node(body_op, ["acc_in"], ["acc_out"]),
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, [3]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, [3]),
        ],
    )
    graph = helper.make_graph(
        [helper.make_node("Loop", ["n", "", "x"], ["y"], body=body)],
        "loop",
        [
            helper.make_tensor_value_info("n", TensorProto.INT64, []),
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [3]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    return kiln.io.load(model)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_control_flow_node_is_as_exact_as_its_body(engine):
    feed = {"n": np.array(3, np.int64), "x": np.array([0.5, -1.0, 2.0], np.float32)}
    exact = _loop("Abs")
    exact.finalize(engine)
    np.testing.assert_array_equal(np.asarray(exact.run(feed)[0]), np.abs(feed["x"]))
    rounding = _loop("Tanh")
    with pytest.raises(UnsupportedOperationError, match=r"\(Loop, body\): node .*\(Tanh\)"):
        rounding.finalize(engine)


def test_the_opt_out_travels_with_a_saved_model(tmp_path):
    graph = kiln.trace(sinh_of_exp2, X).graph
    assert not kiln.io.load(kiln.io.to_onnx(graph)).reassociation_allowed
    graph.optimize(defaults=RELAXED)
    path = tmp_path / "model.onnx"
    graph.save(path)
    loaded = kiln.io.load(path)
    assert loaded.reassociation_allowed
    loaded.finalize("onnxruntime")
    runner = kiln.io.BatchRunner(graph, engine="onnxruntime")  # (ONNX bytes to each worker)
    (name,) = graph.input_names
    out = runner({name: X})
    with np.errstate(over="ignore"):
        np.testing.assert_allclose(next(iter(out.values())), sinh_of_exp2(X), rtol=1e-5)
