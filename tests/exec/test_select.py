"""The automatic engine choice: a stable rule from timings (kiln.exec.select.pick), and what
the chosen plan records about the choice."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.exec.jax_engine import contracts
from kiln.exec.select import (
    OPTIONAL_ENGINES,
    TIE_MARGIN,
    WIN_MARGIN,
    candidates,
    choose,
    installed,
    pick,
    rounding_differs,
)
from kiln.ops.registry import all_ops
from kiln.optim import DefaultsOptions


def test_an_engine_must_win_clearly_to_replace_numpy() -> None:
    assert pick({"numpy": 1.0, "jax": WIN_MARGIN * 1.01}) == "numpy"
    assert pick({"numpy": 1.0, "jax": WIN_MARGIN * 0.99}) == "jax"
    assert pick({"numpy": 1.0}) == "numpy"
    assert pick({"numpy": 1.0, "jax": float("inf")}) == "numpy"


def test_tied_engines_go_by_the_fixed_order_not_by_noise() -> None:
    first, second = OPTIONAL_ENGINES
    # whichever of two tied engines measures faster, the same one is picked
    for a, b in [(0.30, 0.30 * TIE_MARGIN * 0.99), (0.30 * TIE_MARGIN * 0.99, 0.30)]:
        assert pick({"numpy": 1.0, first: a, second: b}) == first
    # a clear difference between engines still decides
    assert pick({"numpy": 1.0, first: 0.5, second: 0.1}) == second


def test_noise_within_the_margins_does_not_change_the_pick() -> None:
    rng = np.random.default_rng(0)
    base = {"numpy": 1.0, "jax": 0.30, "onnxruntime": 0.31}
    picks = {pick({k: v * rng.uniform(0.95, 1.05) for k, v in base.items()}) for _ in range(200)}
    assert picks == {"onnxruntime"}


def test_small_graphs_stay_on_numpy_without_measuring() -> None:
    graph = kiln.trace(lambda x: x + 1, np.ones(8, np.float32)).graph
    plan = choose(graph)
    assert plan.engine == "numpy" and "seconds" not in plan.selection


def test_large_graph_records_candidates_and_choice() -> None:
    pytest.importorskip("jax")
    x = np.random.default_rng(0).standard_normal((1000, 1000)).astype(np.float32)
    graph = kiln.trace(lambda x: np.tanh(x) * 2 + x, x).graph
    graph.optimize(defaults=DefaultsOptions(allow_reassociation=True))  # else NumPy's bits
    plan = choose(graph)
    selection = plan.selection
    assert plan.engine == selection["chosen"]
    assert "numpy" in selection["seconds"] and "jax" in selection["seconds"]
    assert selection["chosen"] == pick(selection["seconds"])
    np.testing.assert_allclose(plan.run_arrays([x])[0], np.tanh(x) * 2 + x, rtol=1e-6)


# -- NumPy's bits (SPEC 5b): the automatic choice never changes a result ------------------


def _graph(fn, x, reassociate=False):
    graph = kiln.trace(fn, x).graph
    graph.optimize(defaults=DefaultsOptions(allow_reassociation=reassociate))
    return graph


_X = np.random.default_rng(3).standard_normal((1000, 1000)).astype(np.float32)


@pytest.mark.parametrize(
    "fn, op",
    [
        (lambda x: np.tanh(x) * 2, "Tanh"),  # each engine's own tanh
        (lambda x: x - x.sum(axis=1, keepdims=True), "ReduceSum"),  # the engine's order
        (lambda x: x @ x, "MatMul"),
        (lambda x: np.exp(x) / 3, "Exp"),
    ],
)
def test_engines_that_round_differently_are_not_candidates(fn, op) -> None:
    graph = _graph(fn, _X)
    for engine in OPTIONAL_ENGINES:
        assert op in (rounding_differs(graph, engine) or ""), engine
    plan = choose(graph)
    assert plan.engine == "numpy"
    refused = plan.selection.get("refused", {})
    assert set(refused) == {e for e in OPTIONAL_ENGINES if installed(e)}
    assert all("not NumPy's bits" in why and op in why for why in refused.values())
    np.testing.assert_array_equal(plan.run_arrays([_X])[0], fn(_X))


def test_reassociation_opts_into_engines_that_round_differently() -> None:
    graph = _graph(lambda x: np.tanh(x) * 2, _X, reassociate=True)
    assert graph.reassociation_allowed and graph.copy().reassociation_allowed
    engines, refused = candidates(graph)
    assert set(engines) == {e for e in OPTIONAL_ENGINES if installed(e)} and not refused


def test_correctly_rounded_graphs_stay_candidates() -> None:
    graph = _graph(lambda x: x / (abs(x) + 1.0) - x, _X)
    assert rounding_differs(graph, "onnxruntime") is None
    # XLA's CPU runtime flushes subnormal results to zero: any float arithmetic can make one
    assert "(Add) can underflow to a subnormal" in rounding_differs(graph, "jax")
    picks = _graph(lambda x: np.maximum(np.abs(x), np.sqrt(np.abs(x))) * 1, _X)
    assert all(rounding_differs(picks, e) is None for e in OPTIONAL_ENGINES)


def test_xla_flushing_a_subnormal_result_keeps_jax_out() -> None:
    pytest.importorskip("jax")
    x = np.float32([1e-10, -3e38, 2.0])  # 1e-40 and -3.3e-39 are subnormal: NumPy keeps them
    for fn in (lambda x: x * np.float32(1e-30), lambda x: 1 / x):
        graph = _graph(fn, x)
        assert "can underflow to a subnormal number" in rounding_differs(graph, "jax")
        with pytest.raises(kiln.UnsupportedOperationError, match="flushes to zero"):
            graph.finalize("jax")
        graph.finalize()
        np.testing.assert_array_equal(graph.run([x])[0], fn(x))
    relaxed = _graph(lambda x: x * np.float32(1e-30), x, reassociate=True)
    relaxed.finalize("jax")  # accepted with the engine's rounding: 0 for 1e-40
    assert relaxed.run([x])[0][0] == 0


def test_xla_multiply_add_contraction_keeps_jax_out() -> None:
    # XLA on the CPU fuses a*x + b*x into fma(a, x, b*x): NumPy gives 0 where the products
    # cancel, XLA the rounding error of b*x, orders of magnitude off (openxla/xla#41579).
    pytest.importorskip("jax")
    a, b = np.float32([1e20]), np.float32([-1e20])
    x = np.full((1000, 1000), 1e10, np.float32)
    fn = lambda x, a, b: a * x + b * x  # noqa: E731
    graph = kiln.trace(fn, x, a, b).graph
    graph.optimize()
    assert "fused multiply-add" in rounding_differs(graph, "jax")
    assert rounding_differs(graph, "onnxruntime") is None
    graph.finalize()
    np.testing.assert_array_equal(graph.run([x, a, b])[0], fn(x, a, b))  # zeros
    negated = _graph(lambda x: 1.0 - x * 3.0, _X)  # through a subtraction, too
    assert "fused multiply-add" in rounding_differs(negated, "jax")
    from kiln.optim.fuse_elementwise import fuse_elementwise_regions

    fused, _ = fuse_elementwise_regions(kiln.trace(lambda x: x * 2.0 + 1.0, _X).graph, 1)
    assert [n.op for n in fused.nodes] == ["kiln.FusedElementwise"]
    assert "fused multiply-add" in rounding_differs(fused, "jax")  # inside one fused node
    separate = _graph(lambda x: (x + 1.0) * 3.0, _X)  # an add feeding a multiply: no fma
    assert contracts(separate) is None
    # forced, jax refuses it too (an overflow NumPy turns into nan stays inf in an fma),
    # unless the graph opted into reassociation
    with pytest.raises(kiln.UnsupportedOperationError, match="fused multiply-add.*node 'mul"):
        negated.finalize("jax")
    relaxed = _graph(lambda x: 1.0 - x * 3.0, _X, reassociate=True)
    relaxed.finalize("jax")
    np.testing.assert_allclose(relaxed.run([_X])[0], 1.0 - _X * 3.0, rtol=1e-6, atol=1e-6)


def test_bit_exact_records_are_the_correctly_rounded_operators() -> None:
    exact = [op for op in all_ops() if op.bit_exact is not False]
    assert {"Add", "Div", "Sqrt", "Max", "Where"} <= {op.name for op in exact}
    # library functions, summation orders, and max reductions (the sign of a zero maximum
    # depends on the order an engine meets the zeros in: fuzz 33:1408)
    inexact = {"Exp", "Tanh", "ReduceSum", "MatMul", "Pow", "Mod", "ReduceMax", "MaxPool"}
    assert not inexact & {op.name for op in exact}


def test_forced_jax_refuses_a_max_reduction_of_floats() -> None:
    # fuzz 33:1408: max over windows of signed zeros; NumPy's order keeps -0.0, XLA gives 0.0
    pytest.importorskip("jax")
    b = np.array([[-3.66, 2.0], [1.85, -1.0], [2.37, -3.43]], np.float32)
    graph = kiln.trace(lambda b: np.remainder(b, b).max(axis=0), b).graph
    with pytest.raises(kiln.UnsupportedOperationError, match="ReduceMax.*sign of a zero"):
        graph.finalize("jax")
