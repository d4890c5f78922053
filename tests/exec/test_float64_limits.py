"""Float64 nodes an engine computes differently from NumPy stay off it (SPEC 5b, issue 10):
XLA's and onnxruntime's float64 exp/tanh/pow/... differ from NumPy's by ulps that a later
operation magnifies (``python tools/fuzz.py --show 1:666``: exp2 of a float64 matmul, 355 ulp
after one ulp in; ``1:2982``, ``1:3273``). The records say so (``OpDef.engine_limits`` via
``float64_differs``), even where the graph accepts an engine's rounding
(``DefaultsOptions(allow_reassociation=True)``, without which a forced engine refuses any
node that is not bit-exact); float32 then runs there, and the exact float64 operations always
do."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.errors import UnsupportedOperationError
from kiln.exec import ort_engine
from kiln.ir import GraphBuilder
from kiln.ops.registry import TensorType, get_op
from kiln.optim import DefaultsOptions

pytest.importorskip("jax")
pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

X = np.linspace(0.1, 3.0, 12).reshape(3, 4)
RELAXED = DefaultsOptions(allow_reassociation=True)  # the engine's rounding is accepted

REFUSED = [  # (function, engine, operator named in the refusal)
    (np.exp, "jax", "Exp"),
    (np.exp, "onnxruntime", "Exp"),
    (np.tanh, "jax", "Tanh"),
    (np.tanh, "onnxruntime", "Tanh"),
    (np.sin, "onnxruntime", "Sin"),
    (np.log, "onnxruntime", "Log"),
    (np.arctanh, "jax", "Atanh"),
    (lambda x: x**x, "jax", "Pow"),
    (lambda x: x**x, "onnxruntime", "Pow"),
    (np.exp2, "jax", "kiln.Exp2"),
    (np.log2, "jax", "kiln.Log2"),
]


@pytest.mark.parametrize(("fn", "engine", "op"), REFUSED)
def test_float64_transcendental_is_refused_naming_the_node(fn, engine, op) -> None:
    traced = kiln.trace(fn, X)
    traced.optimize(defaults=RELAXED)
    with pytest.raises(UnsupportedOperationError, match=rf"{op} on float64 \({engine} differs"):
        traced.finalize(engine=engine)


@pytest.mark.parametrize(("fn", "engine", "op"), REFUSED)
def test_the_same_node_on_float32_still_runs_there(fn, engine, op) -> None:
    x = X.astype(np.float32) / 4
    traced = kiln.trace(fn, x)
    traced.optimize(defaults=RELAXED)
    traced.finalize(engine=engine)
    with np.errstate(all="ignore"):
        want = fn(x)
    np.testing.assert_allclose(np.asarray(traced(x)), want, rtol=8 * np.finfo(np.float32).eps)


EXACT = {  # correctly rounded operations; on jax, none that can underflow (XLA flushes)
    "onnxruntime": lambda x: np.sqrt(x) / (x + 1.5) - x,
    "jax": lambda x: np.floor(np.sqrt(x) * 4.0) / 0.5,
}


@pytest.mark.parametrize("engine", ["jax", "onnxruntime"])
def test_exact_float64_operations_still_run_bit_for_bit(engine) -> None:
    fn = EXACT[engine]
    traced = kiln.trace(fn, X)
    traced.optimize()
    traced.finalize(engine=engine)
    np.testing.assert_array_equal(np.asarray(traced(X)), fn(X))


def test_the_automatic_choice_keeps_a_float64_transcendental_on_numpy() -> None:
    from kiln.exec.select import choose

    x = np.random.default_rng(0).standard_normal((1000, 1000))
    plan = choose(kiln.trace(lambda x: np.tanh(x) * 2 + x, x).graph)
    assert plan.engine == "numpy"
    assert set(plan.selection["refused"]) == {"jax", "onnxruntime"}


def test_onnxruntime_checks_the_nodes_a_fused_node_expands_into() -> None:
    b = GraphBuilder()
    x = b.add_input("x", TensorType(np.dtype(np.float64), (3,)))
    (y,) = b.add("kiln.FusedElementwise", [x], {"program": ("Tanh(v0)", "Add(v1, v0)")})
    problems = ort_engine.unsupported_nodes(b.graph("g", [y]))
    assert len(problems) == 1 and "Tanh on float64" in problems[0]
    assert not get_op("kiln.FusedElementwise").engine_limits  # the record itself has none
