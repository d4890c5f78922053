"""The automatic engine choice: a stable rule from timings (kiln.exec.select.pick), and what
the chosen plan records about the choice."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.exec.select import OPTIONAL_ENGINES, TIE_MARGIN, WIN_MARGIN, choose, pick


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
    plan = choose(graph)
    selection = plan.selection
    assert plan.engine == selection["chosen"]
    assert "numpy" in selection["seconds"] and "jax" in selection["seconds"]
    assert selection["chosen"] == pick(selection["seconds"])
    np.testing.assert_allclose(plan.run_arrays([x])[0], np.tanh(x) * 2 + x, rtol=1e-6)
