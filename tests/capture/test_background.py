"""Big captures are optimized and planned in the background (issue 13, the first-call budget):
the first call returns once the function has run; the next call that needs the graph waits for
it and runs the graph, never the Python function again; everything a call gives (values, the
caller's mutated arrays, warnings, the history) is as for a capture planned on the first call.
``DefaultsOptions(background_nodes=0)`` sends every capture there, so small functions test it."""

from __future__ import annotations

import os
import sys
import threading
import warnings

import numpy as np
import pytest

import kiln
import kiln.runtime
from kiln import State
from kiln.capture import recorder
from kiln.capture.background import PendingCapture
from kiln.capture.replay import Capture
from kiln.errors import CaptureWarning
from kiln.optim import DefaultsOptions

from .counting import Counted

BACKGROUND = DefaultsOptions(background_nodes=0)
RNG = np.random.default_rng(13)


def chain(x):
    y = x
    for k in range(20):
        y = y * 0.999 + np.sin(y) * 0.001 - (k % 3) * 1e-4
    return y


def _held(monkeypatch):
    """Hold every background planning until the returned event is set."""
    release = threading.Event()
    finished = recorder._finished

    def slow(*args, **kwargs):
        release.wait(30)
        return finished(*args, **kwargs)

    monkeypatch.setattr(recorder, "_finished", slow)
    return release


def test_the_first_call_returns_before_the_graph_is_planned(monkeypatch):
    release = _held(monkeypatch)
    target = Counted(chain)
    f = kiln.compile(target, defaults=BACKGROUND)
    x = RNG.standard_normal(8)
    np.testing.assert_array_equal(f(x), chain(x))  # returned while the planning is held
    assert f.state is State.Compiled and target.calls == 1
    release.set()
    for _ in range(3):
        x = RNG.standard_normal(8)
        np.testing.assert_array_equal(f(x), chain(x))
    assert target.calls == 1  # the graph served them: the function never ran again
    assert [e.kind for e in f.history] == ["first"]


def test_a_big_trace_goes_to_the_background_by_default():
    assert DefaultsOptions().background_nodes == 10_000
    target = Counted(chain)
    f = kiln.compile(target, defaults=DefaultsOptions(background_nodes=50))  # ~100 nodes
    x = RNG.standard_normal(8)
    f(x)
    assert f._current.pending is not None
    np.testing.assert_array_equal(f(x), chain(x))
    assert f._current.pending is None and f._current.replay is not None and target.calls == 1


def test_a_small_trace_is_planned_on_the_first_call():
    f = kiln.compile(chain, defaults=DefaultsOptions(background_nodes=10**6))
    f(RNG.standard_normal(8))
    assert f._current.pending is None and f._current.replay is not None


def accumulate_into(x, out):
    for i in range(x.shape[0]):
        out[i] += x[i] * 2.0
    return out


def test_writes_into_inputs_and_returned_inputs_after_background_planning():
    f = kiln.compile(accumulate_into, defaults=BACKGROUND)
    for _ in range(3):
        x, out = RNG.standard_normal((6, 3)), RNG.standard_normal((6, 3))
        want = accumulate_into(x, out.copy())
        got = f(x, out)
        assert got is out  # NumPy returns the caller's array: so does every call
        np.testing.assert_array_equal(out, want)


def test_the_caller_may_change_its_arrays_while_the_graph_is_planned(monkeypatch):
    release = _held(monkeypatch)
    f = kiln.compile(chain, defaults=BACKGROUND)
    x = RNG.standard_normal(8)
    f(x)
    x[:] = np.nan  # the saved reference (engine selection's check) is a copy
    release.set()
    f.wait_for_engines()
    y = RNG.standard_normal(8)
    np.testing.assert_array_equal(f(y), chain(y))


def test_graph_accessors_wait_for_the_planning(monkeypatch):
    release = _held(monkeypatch)
    f = kiln.compile(chain, defaults=BACKGROUND)
    f(RNG.standard_normal(8))
    assert f.wait_for_engines(timeout=0.05) is False  # still held
    release.set()
    graph = f.current_graph
    assert graph is not None and graph.is_finalized
    assert f.wait_for_engines(timeout=60)
    taken = f.take_graph()
    assert taken is graph and f.state is State.Fallback


def test_concurrent_calls_all_wait_for_one_planning(monkeypatch):
    release = _held(monkeypatch)
    target = Counted(chain)
    f = kiln.compile(target, defaults=BACKGROUND)
    f(RNG.standard_normal(8))
    inputs = [RNG.standard_normal(8) for _ in range(6)]
    results: list = [None] * len(inputs)

    def call(i):
        results[i] = f(inputs[i])

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(inputs))]
    for t in threads:
        t.start()
    release.set()
    for t in threads:
        t.join(60)
    for x, got in zip(inputs, results):
        np.testing.assert_array_equal(got, chain(x))
    assert target.calls == 1


def test_a_failure_in_the_background_serves_eagerly_with_one_warning(monkeypatch):
    def boom(*args, **kwargs):
        raise RuntimeError("planner exploded")

    monkeypatch.setattr(kiln.runtime, "build_plan", boom)
    target = Counted(chain)
    f = kiln.compile(target, defaults=BACKGROUND)
    x = RNG.standard_normal(8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing on the first call: it has not failed yet
        np.testing.assert_array_equal(f(x), chain(x))
    with pytest.warns(CaptureWarning, match="planner exploded") as caught:
        np.testing.assert_array_equal(f(x), chain(x))
        np.testing.assert_array_equal(f(x), chain(x))
    assert len([w for w in caught if "kiln failed" in str(w.message)]) == 1
    assert target.calls == 3  # served eagerly
    assert [e.kind for e in f.history] == ["first", "failed"]
    assert f.history[1].call == 2 and f.state is State.Fallback


def test_an_exception_escaping_the_work_becomes_a_failure():
    failed = []

    def work():
        raise MemoryError("no room")

    def fail(why):
        failed.append(why)
        return Capture(None, failure=why)  # type: ignore[arg-type]

    done = PendingCapture(work, fail).result()
    assert done.failure is not None and "MemoryError: no room" in done.failure


def test_reset_while_planning_captures_again(monkeypatch):
    release = _held(monkeypatch)
    target = Counted(chain)
    f = kiln.compile(target, defaults=BACKGROUND)
    f(RNG.standard_normal(8))
    f.reset()
    release.set()
    x = RNG.standard_normal(8)
    np.testing.assert_array_equal(f(x), chain(x))  # a first call again: captures anew
    assert target.calls == 2
    np.testing.assert_array_equal(f(x), chain(x))
    assert target.calls == 2


@pytest.mark.skipif(not hasattr(os, "fork") or sys.platform == "darwin", reason="needs fork")
def test_a_child_forked_while_planning_serves_eagerly():
    release = threading.Event()
    pending = PendingCapture(
        lambda: (release.wait(30), Capture(None))[1],  # type: ignore[arg-type]
        lambda why: Capture(None, failure=why),  # type: ignore[arg-type]
    )
    read, write = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads running
        pid = os.fork()
    if pid == 0:  # the child: the planning thread is gone
        try:
            failure = pending.result().failure or ""
            os.write(write, b"interrupted" if "forked" in failure else b"other")
        finally:
            os._exit(0)
    os.close(write)
    got = os.read(read, 64)
    os.waitpid(pid, 0)
    release.set()
    assert got == b"interrupted"
    assert pending.result().failure is None  # the parent's thread finished it
