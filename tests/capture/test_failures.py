"""A kiln failure never loses the call (SPEC 5): when kiln fails after the target ran
(recording, optimizing, finalizing, choosing an engine, planning), the call returns the eager
result, the structure serves eagerly from then on, and one warning names the cause. The target's
own exceptions still propagate unchanged."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import kiln
import kiln.exec.select
import kiln.optim
import kiln.optim.pipeline
import kiln.runtime
from kiln import State
from kiln.capture import recorder
from kiln.errors import CaptureWarning, GraphValidationError
from kiln.ir.graph import ModelGraph
from kiln.optim import Transform

from ..numerics import assert_close
from .counting import Counted


def square_twice(b):
    v = (b - 1.5) ** 2
    return v * 1, v


def expected(b):
    v = (b - 1.5) ** 2
    return v * 1, v


def check(result, b):
    for got, want in zip(result, expected(b)):
        assert_close(got, want)


def test_the_reported_program_captures_and_replays():
    # issue 10 item 6: the optimizer left this graph out of topological order, and every call
    # failed with a bare KeyError.
    target = Counted(square_twice)
    f = kiln.compile(target)
    b = np.array([0.0, 1.5, -2.0, 4.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(3):
            check(f(b), b)
    assert f.state is State.Compiled and target.calls == 1
    f.current_graph.verify()


def _boom(*args, **kwargs):
    raise KeyError(1234)


def _broken_pipeline(*args, **kwargs):
    return [Transform("explode", _boom)]


# Each stage after the target ran, and how a test makes it fail.
STAGES = {
    "optimizing": lambda mp: mp.setattr(kiln.optim.pipeline, "default_pipeline", _broken_pipeline),
    "finalizing": lambda mp: mp.setattr(ModelGraph, "finalize", _boom),
    # the synchronous selection (a background one that fails keeps NumPy serving:
    # tests/exec/test_select_background.py)
    "engine selection": lambda mp: (
        mp.setenv("KILN_ENGINE_SELECTION", "sync"),
        mp.setattr(kiln.exec.select, "choose", _boom),
    ),
    "planning": lambda mp: mp.setattr(kiln.runtime, "build_plan", _boom),
    "preparing the replay": lambda mp: mp.setattr(recorder, "_flat_container", _boom),
}


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_a_kiln_failure_returns_the_eager_result_and_serves_that_structure_eagerly(
    stage, monkeypatch
):
    STAGES[stage](monkeypatch)
    target = Counted(square_twice)
    f = kiln.compile(target)
    b = np.array([0.5, 1.5, 3.0])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check(f(b), b)  # call 1: the eager result, not an exception
        for seed in range(3):  # later calls of the structure: eager, no new warning
            b2 = np.random.default_rng(seed).standard_normal(3)
            check(f(b2), b2)
    warned = [w for w in caught if issubclass(w.category, CaptureWarning)]
    assert len(warned) == 1, [str(w.message) for w in caught]
    message = str(warned[0].message)
    assert "KeyError" in message and "1234" in message and "b: float64" in message
    assert warned[0].filename == __file__  # it points at the user's call
    assert target.calls == 4 and f.state is State.Fallback
    failed = [e for e in f.history if e.kind == "failed"]
    assert len(failed) == 1 and failed[0].call == 1 and "KeyError" in failed[0].message
    assert "failed" in kiln.explain(f, file=False)
    assert [e.kind for e in f.captures] == ["first"]


def test_only_the_failed_structure_serves_eagerly(monkeypatch):
    target = Counted(lambda x: x * 2.0)
    f = kiln.compile(target)
    x1 = np.arange(3, dtype=np.float32)
    f(x1)
    monkeypatch.setattr(kiln.runtime, "build_plan", _boom)
    x2 = np.arange(6, dtype=np.float64).reshape(2, 3)  # a new structure: its capture fails
    with pytest.warns(CaptureWarning, match="KeyError"):
        assert_close(f(x2), x2 * 2.0)
    monkeypatch.undo()
    calls = target.calls
    assert_close(f(x1), x1 * 2.0)  # the first structure still replays
    assert target.calls == calls
    assert_close(f(x2), x2 * 2.0)  # the failed one runs the target
    assert target.calls == calls + 1
    f.reset()  # reset() forgets the failure: the structure captures again
    f(x2)
    f(x2)
    assert f.state is State.Compiled and target.calls == calls + 2


def test_target_exceptions_still_propagate_after_a_kiln_failure(monkeypatch):
    class Boom(Exception):
        pass

    def target(x, fail):
        if fail:
            raise Boom("the user's error")
        return x + 1.0

    monkeypatch.setattr(kiln.runtime, "build_plan", _boom)
    f = kiln.compile(target)
    with pytest.raises(Boom, match="the user's error"):
        f(np.ones(2), True)
    assert f.state is State.Pending and f.history == [] and f.cache_info().captures == 0
    with pytest.warns(CaptureWarning):
        assert_close(f(np.ones(2), False), np.full(2, 2.0))
    with pytest.raises(Boom, match="the user's error"):
        f(np.ones(2), True)


def test_a_pass_that_breaks_the_graph_is_named(monkeypatch):
    def reverse_nodes(graph, options):
        return graph.with_body(list(reversed(graph.nodes))), 1

    broken = Transform("reverse_nodes", reverse_nodes)
    monkeypatch.setattr(kiln.optim.pipeline, "default_pipeline", lambda *a, **k: [broken])
    f = kiln.compile(lambda x: np.exp(x + 1.0) * 2.0)
    x = np.linspace(-1, 1, 5)
    with pytest.warns(CaptureWarning, match="optimizer pass reverse_nodes left an invalid graph"):
        assert_close(f(x), np.exp(x + 1.0) * 2.0)
    g = kiln.trace(lambda x: np.exp(x + 1.0) * 2.0, x).graph
    with pytest.raises(GraphValidationError, match="reverse_nodes"):
        g.optimize([broken])


def test_a_failed_specialization_runs_the_generic_graph(monkeypatch):
    monkeypatch.setattr(kiln.optim, "specialize_graph", _boom)
    target = Counted(lambda x: np.tanh(x).reshape(-1))
    f = kiln.compile(target, dynamic=True, specialize=True)
    x = np.linspace(-1, 1, 6).reshape(2, 3)
    assert_close(f(x), np.tanh(x).reshape(-1))  # the capture (served eagerly)
    with pytest.warns(CaptureWarning, match="generic graph"):
        assert_close(f(x), np.tanh(x).reshape(-1))
    y = np.linspace(-1, 1, 12).reshape(4, 3)
    with pytest.warns(CaptureWarning, match="generic graph"):
        assert_close(f(y), np.tanh(y).reshape(-1))
    assert target.calls == 1 and f.state is State.Compiled
