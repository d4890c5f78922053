"""Concurrent calls of one compiled function: the re-capture budget and the one-capture-per-key
rule are exact (SPEC 5). A call whose key is being captured by another thread is served eagerly,
without capturing and without waiting.

The interleavings are forced with barriers and events, not sleeps: a barrier inside the target
holds every thread inside its call until all of them have decided what to do.
"""

from __future__ import annotations

import threading
import warnings

import numpy as np

import kiln
from kiln import State
from kiln.capture.policy import RECAPTURE_BUDGET
from kiln.errors import RecaptureWarning

from ..numerics import assert_close

TIMEOUT = 30  # seconds: only reached if the code under test deadlocks


def run_threads(fn, n):
    """Run ``fn(i)`` on ``n`` threads; re-raise the first error."""
    errors = []

    def work(i):
        try:
            fn(i)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT)
    assert not any(t.is_alive() for t in threads), "a thread is stuck"
    if errors:
        raise errors[0]


class Gated:
    """A target whose calls, while the gate is set, wait at a barrier of ``parties`` threads:
    every thread is inside the target (capturing or eager) before any call returns."""

    def __init__(self, fn, parties):
        self.fn = fn
        self.__name__ = "gated"
        self.__wrapped__ = fn
        self.barrier = threading.Barrier(parties, timeout=TIMEOUT)
        self.gate = False
        self.calls = 0
        self.lock = threading.Lock()

    def __call__(self, *args):
        with self.lock:
            self.calls += 1
        if self.gate:
            self.barrier.wait()
        return self.fn(*args)


def double(x):
    return x * 2.0


def test_the_recapture_budget_is_exact_under_concurrent_recaptures():
    n = 12
    target = Gated(double, n)
    f = kiln.compile(target, dynamic=False)  # every new shape is a new key: a re-capture
    f(np.ones(1))
    target.gate = True
    inputs = [np.arange(i + 2, dtype=np.float64) for i in range(n)]
    results = [None] * n

    def call(i):
        results[i] = f(inputs[i])

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run_threads(call, n)
    for x, got in zip(inputs, results):
        assert_close(got, x * 2.0)
    assert f.recapture_count == RECAPTURE_BUDGET  # 11-14 before the fix
    assert f.cache_info().captures == 1 + RECAPTURE_BUDGET
    assert len(f.captures) == 1 + RECAPTURE_BUDGET
    assert f.state is State.Fallback
    budget = [w for w in caught if issubclass(w.category, RecaptureWarning)]
    assert len(budget) == 1
    assert [e.kind for e in f.history].count("budget") == 1


def test_one_capture_per_key_when_eight_threads_call_a_new_key_at_once():
    n = 8
    target = Gated(double, n)
    f = kiln.compile(target)
    target.gate = True
    x = np.linspace(0, 1, 5)
    results = [None] * n

    def call(i):
        results[i] = f(x + i)

    run_threads(call, n)
    for i, got in enumerate(results):
        assert_close(got, (x + i) * 2.0)
    # One thread captured; the other seven were served eagerly while it did.
    assert target.calls == n and f.cache_info().captures == 1 and f.recapture_count == 0
    assert [e.kind for e in f.history] == ["first"]
    target.gate = False
    assert_close(f(x), x * 2.0)
    assert target.calls == n and f.state is State.Compiled  # a replay


def test_a_call_that_missed_while_its_key_was_captured_replays_the_new_capture():
    # Thread B misses, then thread A captures the key before B decides: B must replay A's
    # capture, not capture the key a second time.
    target = Gated(double, 1)
    f = kiln.compile(target)
    x = np.linspace(0, 1, 4)
    b_missed, a_done = threading.Event(), threading.Event()
    miss = f._miss

    def held_miss(call, signature):
        if threading.current_thread().name == "B":
            b_missed.set()
            assert a_done.wait(TIMEOUT)
        return miss(call, signature)

    f._miss = held_miss
    results = {}

    def b():
        results["b"] = f(x + 1.0)

    thread_b = threading.Thread(target=b, name="B")
    thread_b.start()
    assert b_missed.wait(TIMEOUT)
    results["a"] = f(x)  # thread A (this one) captures the key
    a_done.set()
    thread_b.join(TIMEOUT)
    assert_close(results["a"], x * 2.0)
    assert_close(results["b"], (x + 1.0) * 2.0)
    assert target.calls == 1 and f.cache_info().captures == 1


def test_a_drift_recaptured_by_another_thread_is_not_recaptured_again():
    target = Gated(double, 1)
    f = kiln.compile(target)
    f(np.ones(3))
    b_missed, a_done = threading.Event(), threading.Event()
    replay_missed = f._replay_missed

    def held(call, capture, miss, signature):
        if threading.current_thread().name == "B":
            b_missed.set()
            assert a_done.wait(TIMEOUT)
        return replay_missed(call, capture, miss, signature)

    f._replay_missed = held
    results = {}

    def b():
        results["b"] = f(np.full(6, 2.0))

    thread_b = threading.Thread(target=b, name="B")
    thread_b.start()
    assert b_missed.wait(TIMEOUT)
    results["a"] = f(np.full(5, 3.0))  # drifts too: re-captures with the axis dynamic
    a_done.set()
    thread_b.join(TIMEOUT)
    assert_close(results["a"], np.full(5, 6.0))
    assert_close(results["b"], np.full(6, 4.0))
    # B replayed A's dynamic capture: one re-capture, two target calls in all.
    assert f.recapture_count == 1 and target.calls == 2
    assert [e.kind for e in f.captures] == ["first", "shape drift"]


def test_eight_threads_replay_one_capture_and_keep_their_results():
    f = kiln.compile(lambda x, y: np.tanh(x * 2.0 + y) - y)
    x0 = np.ones((3, 4), np.float32)
    f(x0, x0)
    results = {}

    def call(i):
        rng = np.random.default_rng(i)
        outs = []
        for _ in range(50):
            x = rng.standard_normal((3, 4)).astype(np.float32)
            outs.append((x, f(x, x)))
        results[i] = outs

    run_threads(call, 8)
    for outs in results.values():
        for x, got in outs:
            assert_close(got, np.tanh(x * 2.0 + x) - x)
    assert f.cache_info().captures == 1 and f.state is State.Compiled
