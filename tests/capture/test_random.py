"""Random draws in a compiled function are drawn afresh at every call, from the same stream, in
the same order and with the same values as eager NumPy (SPEC section 5): legacy ``np.random``
functions and ``Generator``/``RandomState`` objects passed in or reached."""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest
from numpy.random import randn as imported_randn

import kiln
from kiln.capture.compiled import State
from kiln.errors import CaptureError, CaptureWarning

CALLS = 5


def same_as_eager(fn, make_args, reseed, calls=CALLS, **options):
    """Run ``fn`` compiled and eagerly from the same random state; compare every call."""
    f = kiln.compile(fn, **options)
    reseed()
    got = [f(*make_args()) for _ in range(calls)]
    reseed()
    want = [fn(*make_args()) for _ in range(calls)]
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)
    return f, got


def test_a_dropout_mask_from_legacy_np_random_changes_every_call_like_numpy():
    def dropout(x):
        mask = np.random.rand(*x.shape) > 0.5
        return x * mask / 0.5

    x = np.ones((4, 8))
    f, got = same_as_eager(dropout, lambda: (x,), lambda: np.random.seed(3), fullgraph=True)
    assert f.state is State.Compiled and f.recapture_count == 0
    assert not np.array_equal(got[1], got[2])  # replays draw afresh
    assert "random.rand" in f.current_graph.input_names


@pytest.mark.parametrize(
    "draw",
    [
        lambda: np.random.randn(3, 2),
        lambda: np.random.normal(1.0, 2.0, size=(3, 2)),
        lambda: np.random.uniform(-1, 1, (3, 2)),
        lambda: np.random.random((3, 2)),
        lambda: np.random.randint(0, 7, size=(3, 2)),
        lambda: np.random.standard_normal(size=(3, 2)),
        lambda: np.random.choice(5, size=(3, 2)),
        lambda: imported_randn(3, 2),
    ],
    ids=[
        "randn",
        "normal",
        "uniform",
        "random",
        "randint",
        "standard_normal",
        "choice",
        "from-import",
    ],
)
def test_legacy_draws_replay_the_eager_stream(draw):
    def fn(x):
        return x * 2 + draw()

    x = np.ones((3, 2))
    f, _ = same_as_eager(fn, lambda: (x,), lambda: np.random.seed(11))
    assert f.state is State.Compiled


def test_draws_keep_their_order_and_an_unused_draw_still_advances_the_stream():
    def fn(x):
        a = np.random.rand(3)
        np.random.rand(2)  # drawn and dropped: eager NumPy still advances the stream
        b = np.random.randn(3)
        return x + a - b * np.random.rand()

    x = np.zeros(3)
    f, _ = same_as_eager(fn, lambda: (x,), lambda: np.random.seed(0))
    assert f.recapture_count == 0


def test_a_generator_passed_as_an_argument_draws_from_its_stream():
    def fn(x, rng):
        return x + rng.normal(0.0, 1.0, size=x.shape) * rng.random() + rng.integers(0, 9, 3).sum()

    x = np.ones(3)
    gens = {}

    def reseed():
        gens["rng"] = np.random.default_rng(42)

    f, _ = same_as_eager(fn, lambda: (x, gens["rng"]), reseed)
    assert f.state is State.Compiled


def test_generators_in_closures_globals_and_attributes_draw_afresh():
    holder = {}

    class Noisy:
        def __init__(self, seed):
            self.rng = np.random.default_rng(seed)

        def __call__(self, x):
            return x + self.rng.standard_normal(x.shape)

    def reseed():
        holder["model"] = Noisy(7)

    x = np.ones((2, 2))
    reseed()
    model = holder["model"]
    f = kiln.compile(model.__call__)
    got = [f(x) for _ in range(CALLS)]
    twin = Noisy(7)
    want = [twin(x) for _ in range(CALLS)]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    assert f.recapture_count == 0

    rng = np.random.default_rng(1)
    closure = kiln.compile(lambda x: x * rng.uniform(0, 1, size=x.shape))
    got = [closure(x) for _ in range(CALLS)]
    twin_rng = np.random.default_rng(1)
    want = [x * twin_rng.uniform(0, 1, size=x.shape) for _ in range(CALLS)]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_a_legacy_random_state_reached_from_a_closure():
    state = np.random.RandomState(5)
    f = kiln.compile(lambda x: x + state.randn(*x.shape))
    x = np.zeros(4)
    got = [f(x) for _ in range(CALLS)]
    twin = np.random.RandomState(5)
    for g in got:
        np.testing.assert_array_equal(g, x + twin.randn(4))


@pytest.mark.parametrize(
    "body, what",
    [
        (lambda x: x + np.random.default_rng().random(x.shape), "default_rng"),
        (lambda x: x + np.random.normal(x, 1.0), "normal() with array or tensor arguments"),
    ],
    ids=["generator-made-inside", "tensor-parameter"],
)
def test_draws_a_replay_cannot_repeat_serve_eagerly_with_a_warning(body, what):
    f = kiln.compile(body)
    x = np.zeros(3)
    with pytest.warns(CaptureWarning, match=re.escape(what)):
        f(x)
    first, second = f(x), f(x)
    assert not np.array_equal(first, second)  # eager: fresh values each call
    assert f.state is State.Fallback
    g = kiln.compile(body, fullgraph=True)
    with pytest.raises(CaptureError, match=re.escape(what)):
        g(x)


def test_np_random_is_restored_after_the_capture():
    real = np.random.rand
    f = kiln.compile(lambda x: x + np.random.rand(2))
    f(np.zeros(2))
    assert np.random.rand is real


def test_kiln_trace_keeps_a_draw_as_a_constant():
    traced = kiln.trace(lambda x: x + np.random.rand(3), np.zeros(3))
    assert traced.graph.input_names == ["x"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced.finalize()
    a = np.asarray(traced(np.zeros(3)))
    b = np.asarray(traced(np.zeros(3)))
    np.testing.assert_array_equal(a, b)  # a snapshot


@pytest.mark.parametrize("dynamic", [None, True, False])
def test_a_call_whose_shapes_drift_draws_once_like_numpy(dynamic):
    # The replay reads its draws after the call's own arrays pass the input check: a drifted
    # call (then served by a re-capture) must not have drawn first.
    def fn(x):
        return x + np.random.rand(3)

    sizes = [(2, 3), (2, 3), (4, 3), (4, 3), (5, 3), (2, 3), (1, 1, 3), (6, 3)]
    calls = iter(range(2 * len(sizes)))

    def make_args():
        return (np.ones(sizes[next(calls) % len(sizes)]),)

    same_as_eager(fn, make_args, lambda: np.random.seed(5), calls=len(sizes), dynamic=dynamic)
