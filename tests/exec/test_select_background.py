"""Tiered engine selection (issue 13 item 2): ``kiln.compile`` serves on the NumPy plan at once,
the other engines are checked (exactness, issue 10 item 1) and timed by one background worker,
and a faster exact engine is swapped into the replay; concurrent calls always get NumPy's
answer; forced engines and explicit ``finalize()`` stay synchronous.

The background job is held at a gate (a wrapped :func:`kiln.exec.select.choose`) where a test
needs to see the pending state, and timings are replaced where a test needs a given choice:
no test depends on the machine's speed.
"""

from __future__ import annotations

import gc
import threading
import warnings

import numpy as np
import pytest

import kiln
import kiln.exec.select as select
from kiln.errors import CaptureWarning
from kiln.exec.select import COMPILE_BUDGET_RUNS, choose, compile_is_worth_it, describe
from kiln.runtime import SELECTION_ENV, selection_reference

WAIT = 600  # seconds: the worker may still be busy with earlier tests' selections


@pytest.fixture(autouse=True)
def _background(monkeypatch):
    monkeypatch.delenv(SELECTION_ENV, raising=False)


def _fn(x):  # bit-exact on every engine: correctly rounded steps, no multiply-add for XLA
    return x / (abs(x) + 1.0) - x


def _want(x):
    return x / (np.abs(x) + np.float32(1.0)) - x


def _big(seed=0):
    return np.random.default_rng(seed).standard_normal((1000, 1000)).astype(np.float32)


class Gate:
    """Holds the background selection until :meth:`release` (the wrapped ``choose``)."""

    def __init__(self, monkeypatch):
        self.open = threading.Event()
        self.real = select.choose
        monkeypatch.setattr(select, "choose", self._choose)

    def _choose(self, *args, **kwargs):
        assert self.open.wait(WAIT)
        return self.real(*args, **kwargs)

    def release(self):
        self.open.set()


def _timings(monkeypatch, **seconds):
    """Measurements replaced: each engine's best time, as given."""
    monkeypatch.setattr(select, "_best_seconds", lambda runs: {k: seconds[k] for k in runs})


def test_first_call_does_not_wait_and_explain_says_pending(monkeypatch):
    gate = Gate(monkeypatch)
    f = kiln.compile(_fn)
    x = _big()
    np.testing.assert_array_equal(f(x), _want(x))  # served although the selection is held
    program = f.current_graph.program
    assert program.engine == "numpy" and program.pending
    assert "engine: numpy (" in kiln.explain(f) and "pending)" in kiln.explain(f)
    assert not f.wait_for_engines(timeout=0.01)
    np.testing.assert_array_equal(f(x), _want(x))  # replays on NumPy meanwhile
    gate.release()
    assert f.wait_for_engines(timeout=WAIT)
    assert not program.pending and "pending" not in kiln.explain(f)
    np.testing.assert_array_equal(f(x), _want(x))


def test_a_faster_exact_engine_is_swapped_into_the_replay(monkeypatch):
    pytest.importorskip("onnxruntime")
    _timings(monkeypatch, numpy=1.0, jax=0.5, onnxruntime=0.1)
    f = kiln.compile(_fn)
    x = _big()
    f(x)
    assert f.wait_for_engines(timeout=WAIT)
    program = f.current_graph.program
    assert program.engine == "onnxruntime"
    replay = f._current.replay
    assert replay.run_unchecked == program.plan.run_arrays  # the replay runs that plan
    explained = kiln.explain(f)
    assert "onnxruntime: 10.0x faster than numpy, exact on synthetic inputs" in explained
    assert "and the capture inputs" in explained
    y = f(x)
    np.testing.assert_array_equal(y, _want(x))  # NumPy's bits
    assert type(y) is np.ndarray and y.dtype == np.float32 and y.shape == x.shape


def test_the_swapped_replay_reads_implicit_inputs_and_writes_back(monkeypatch):
    pytest.importorskip("onnxruntime")
    _timings(monkeypatch, numpy=1.0, jax=0.5, onnxruntime=0.1)
    w = _big(1)

    def scaled(x):
        return x / w + 1.0  # w: a closure array, read afresh by every call

    def bump(x):
        x += 1.0  # a write into the caller's array
        return x * 2.0

    f, g = kiln.compile(scaled), kiln.compile(bump)
    x = _big()
    f(x)
    g(x.copy())
    assert f.wait_for_engines(timeout=WAIT) and g.wait_for_engines(timeout=WAIT)
    assert f.current_graph.program.engine == "onnxruntime"
    w[...] = 2.0
    np.testing.assert_array_equal(f(x), x / np.float32(2.0) + np.float32(1.0))
    mine, theirs = x.copy(), x.copy()
    want = bump(theirs)
    assert select.same_answer(g(mine), want) is None
    assert select.same_answer(mine, theirs) is None


def test_the_choice_is_the_same_given_the_same_measurements(monkeypatch):
    pytest.importorskip("jax")
    pytest.importorskip("onnxruntime")
    # onnxruntime and jax tied within TIE_MARGIN: the fixed order decides, every time
    _timings(monkeypatch, numpy=1.0, jax=0.30, onnxruntime=0.31)
    lines = set()
    for seed in range(3):
        f = kiln.compile(_fn)
        f(_big(seed))
        assert f.wait_for_engines(timeout=WAIT)
        lines.add(kiln.explain(f).splitlines()[-1])
    assert len(lines) == 1 and "engine: onnxruntime: 3.2x faster" in lines.pop()


def test_concurrent_calls_across_the_swap_give_numpys_answer(monkeypatch):
    pytest.importorskip("onnxruntime")
    _timings(monkeypatch, numpy=1.0, jax=0.5, onnxruntime=0.1)
    gate = Gate(monkeypatch)
    f = kiln.compile(_fn)
    x = _big()
    want = _want(x)
    f(x)
    errors: list[str] = []
    stop = threading.Event()

    def caller():
        while not stop.is_set():
            y = f(x)
            if select.same_answer(y, want) is not None:
                errors.append("a wrong result")

    threads = [threading.Thread(target=caller) for _ in range(4)]
    for t in threads:
        t.start()
    gate.release()
    assert f.wait_for_engines(timeout=WAIT)
    for _ in range(3):
        f(x)
    stop.set()
    for t in threads:
        t.join()
    assert not errors
    assert f.current_graph.program.engine == "onnxruntime"


def test_a_failing_background_selection_keeps_numpy_and_says_why(monkeypatch):
    def boom(*args, **kwargs):
        raise KeyError(1234)

    monkeypatch.setattr(select, "choose", boom)
    f = kiln.compile(_fn)
    x = _big()
    with warnings.catch_warnings():
        warnings.simplefilter("error", CaptureWarning)
        np.testing.assert_array_equal(f(x), _want(x))
        assert f.wait_for_engines(timeout=WAIT)
        np.testing.assert_array_equal(f(x), _want(x))
    assert f.state is kiln.State.Compiled
    assert "engine: numpy (selection failed: KeyError: 1234)" in kiln.explain(f)


def test_selection_checks_the_capture_inputs_as_they_were(monkeypatch):
    pytest.importorskip("onnxruntime")
    _timings(monkeypatch, numpy=1.0, jax=0.5, onnxruntime=0.1)
    gate = Gate(monkeypatch)
    f = kiln.compile(_fn)
    x = _big()
    want = _want(x)
    np.testing.assert_array_equal(f(x), want)
    x[...] = 7.0  # the caller refills its buffer before the selection runs
    gate.release()
    assert f.wait_for_engines(timeout=WAIT)
    selection = f.current_graph.program.plan.selection
    assert "onnxruntime" not in selection["refused"], selection["refused"]
    assert selection["chosen"] == "onnxruntime"


def test_selection_still_refuses_an_engine_that_differs_on_the_capture_inputs(monkeypatch):
    # issue 10 item 1, through the background path: ReduceMax skipping NaN (onnxruntime
    # refuses the node; XLA's reduction drops the NaN of the capture input)
    pytest.importorskip("jax")
    _timings(monkeypatch, numpy=1.0, jax=0.1, onnxruntime=0.1)
    x = _big()
    x[3, 5] = np.nan
    f = kiln.compile(lambda x: np.tanh(x * 2).max(axis=1))
    f(x)
    assert f.wait_for_engines(timeout=WAIT)
    selection = f.current_graph.program.plan.selection
    assert selection["chosen"] == "numpy" and set(selection["refused"]) >= {"onnxruntime"}
    got = f(x)
    assert np.isnan(got[3]) and np.array_equal(np.isnan(got), np.isnan(np.tanh(x * 2).max(1)))


def test_a_dropped_capture_skips_its_pending_selection(monkeypatch):
    gate = Gate(monkeypatch)
    busy = kiln.compile(lambda x: x * 5.0)
    busy(_big(1))  # its selection holds the worker at the gate
    f = kiln.compile(_fn)
    f(_big())  # queued behind it
    program = f.current_graph.program
    f.reset()  # the capture is dropped before its turn
    gc.collect()
    gate.release()
    assert program.wait_selected(timeout=WAIT) and busy.wait_for_engines(timeout=WAIT)
    assert "its capture was dropped" in program.describe_engine()
    assert "seconds" not in program.plan.selection


def test_a_taken_graph_keeps_its_pending_selection(monkeypatch):
    pytest.importorskip("onnxruntime")
    _timings(monkeypatch, numpy=1.0, jax=0.5, onnxruntime=0.1)
    gate = Gate(monkeypatch)
    f = kiln.compile(_fn)
    x = _big()
    f(x)
    graph = f.take_graph()
    gc.collect()
    gate.release()
    assert graph.program.wait_selected(timeout=WAIT)
    assert graph.program.engine == "onnxruntime"
    assert select.same_answer(np.asarray(graph.run([x])[0]), _want(x)) is None


def test_compiles_out_of_proportion_to_the_run_time_are_skipped(monkeypatch):
    assert compile_is_worth_it("jax", 10, 0.01) is None
    why = compile_is_worth_it("jax", 35_000, 0.004)
    assert why is not None and f"{COMPILE_BUDGET_RUNS} NumPy runs" in why
    # a graph whose NumPy run is quick for its node count: no candidate is even built
    monkeypatch.setattr(select, "COMPILE_BUDGET_RUNS", 1e-6)
    monkeypatch.setattr(select, "_candidate", lambda *a: pytest.fail("a candidate was built"))
    graph = kiln.trace(_fn, _big()).graph
    plan = choose(graph)
    assert plan.engine == "numpy"
    installed = {e for e in select.OPTIONAL_ENGINES if select.installed(e)}
    refused = set(plan.selection.get("refused", ()))  # (jax: XLA flushes subnormals)
    assert set(plan.selection["skipped"]) == installed - refused
    assert all("expected compile" in why for why in plan.selection["skipped"].values())


def test_sync_environment_selects_during_the_first_call(monkeypatch):
    pytest.importorskip("onnxruntime")
    monkeypatch.setenv(SELECTION_ENV, "sync")
    _timings(monkeypatch, numpy=1.0, jax=0.5, onnxruntime=0.1)
    f = kiln.compile(_fn)
    f(_big())
    program = f.current_graph.program
    assert program.engine == "onnxruntime" and not program.pending  # decided before call 1 returned


def test_explicit_finalize_and_forced_engines_stay_synchronous(monkeypatch):
    pytest.importorskip("onnxruntime")
    _timings(monkeypatch, numpy=1.0, jax=0.5, onnxruntime=0.1)
    x = _big()
    graph = kiln.trace(_fn, x).graph
    graph.finalize()  # automatic, but asked for by hand: decided now
    assert graph.program.engine == "onnxruntime" and not graph.program.pending
    forced = kiln.trace(_fn, x).graph
    with selection_reference([x], [_want(x)], background=True):
        forced.finalize("numpy")  # a named engine is never tiered
    assert forced.program.engine == "numpy" and not forced.program.pending
    assert forced.program.describe_engine() == "numpy (requested)"


def test_tiny_graphs_are_not_queued():
    f = kiln.compile(_fn)
    f(np.ones(4, np.float32))
    program = f.current_graph.program
    assert not program.pending and program.wait_selected(timeout=0)
    assert "too little work to measure" in kiln.explain(f)


def test_one_worker_thread_for_the_process():
    for seed in range(3):
        f = kiln.compile(lambda x, s=seed: x * float(s + 2))
        f(_big(seed))
        assert f.wait_for_engines(timeout=WAIT)
    workers = [t for t in threading.enumerate() if t.name == "kiln-engine-selection"]
    assert len(workers) == 1 and workers[0].daemon


def test_describe_names_the_engine_and_the_reason():
    assert describe({"chosen": "numpy"}, pending=("onnxruntime", "jax")) == (
        "numpy (onnxruntime, jax pending)"
    )
    text = describe(
        {
            "chosen": "numpy",
            "seconds": {"numpy": 1.0, "jax": 2.0},
            "skipped": {"onnxruntime": "expected compile 9 s"},
        }
    )
    assert text.startswith("numpy: no engine clearly faster (jax 0.50x; 1.25x needed)")
    assert "onnxruntime skipped: expected compile 9 s" in text
