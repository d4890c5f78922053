"""The replay path: the quick path (kiln.capture.replay.quick_path) serves exactly the calls
that fit the current capture, and hands every other call to the full path unchanged."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import kiln
from kiln.capture.replay import MISS
from kiln.errors import RecaptureWarning

from ..numerics import assert_close


class Counted:
    """A target that counts its Python calls."""

    def __init__(self, fn):
        self.fn = fn
        self.calls = 0

    def __call__(self, *args):
        self.calls += 1
        return self.fn(*args)


def five(x, y):
    return ((x + y) * x - y) * 0.5 + x


def test_the_quick_path_serves_a_matching_call_and_counts_it():
    f = kiln.compile(five)
    x, y = np.linspace(-1, 1, 8, dtype=np.float32), np.linspace(1, 2, 8, dtype=np.float32)
    f(x, y)
    quick = f._quick
    assert quick is not None
    out = quick((x, y))
    assert type(out) is np.ndarray and out.dtype == np.float32 and out.flags.writeable
    np.testing.assert_array_equal(out, five(x, y))
    assert not np.shares_memory(out, x) and not np.shares_memory(out, y)
    f(x, y)  # call 3 (the quick one above was call 2)
    f(x[:4], y[:4])  # a drift: its event names call 4
    assert f.history[-1].call == 4


@pytest.mark.parametrize(
    "args",
    [
        (np.zeros(8, np.float64), np.zeros(8, np.float32)),  # another dtype
        (np.zeros(9, np.float32), np.zeros(9, np.float32)),  # another shape
        (np.zeros((8, 1), np.float32), np.zeros(8, np.float32)),  # another rank
        (np.zeros(8, np.float32),),  # fewer arguments
        (np.zeros(8, np.float32), np.zeros(8, np.float32), np.zeros(8, np.float32)),
        (np.ma.zeros(8, np.float32), np.zeros(8, np.float32)),  # a subclass
        (kiln.Tensor(np.zeros(8, np.float32)), np.zeros(8, np.float32)),  # a kiln tensor
        (np.zeros(8, np.float32), 2.0),  # a Python scalar
        (np.zeros(8, np.float32).astype(">f4"), np.zeros(8, np.float32)),  # big-endian
    ],
)
def test_the_quick_path_misses_every_call_that_does_not_fit(args):
    f = kiln.compile(five, dynamic=False)
    x = np.ones(8, np.float32)
    f(x, x)
    assert f._quick is not None
    assert f._quick(args) is MISS


def test_a_dtype_change_of_a_static_capture_is_captured_not_served():
    target = Counted(five)
    f = kiln.compile(target)
    x = np.linspace(-1, 1, 8, dtype=np.float32)
    f(x, x)
    f(x, x)
    assert target.calls == 1
    x64 = x.astype(np.float64)
    out = f(x64, x64)
    assert out.dtype == np.float64 and target.calls == 2
    np.testing.assert_array_equal(out, five(x64, x64))
    np.testing.assert_array_equal(f(x, x), five(x, x))  # back to the float32 capture
    assert target.calls == 2


def test_a_dynamic_capture_serves_new_sizes_through_its_input_check():
    target = Counted(lambda x: x - x.sum(0) / x.shape[0])
    f = kiln.compile(target)
    for n in (4, 5, 6, 7):  # the drift at 5 makes axis 0 dynamic
        x = np.arange(n * 3, dtype=np.float64).reshape(n, 3)
        np.testing.assert_array_equal(f(x), x - x.sum(0) / x.shape[0])
    assert target.calls == 2
    assert f._quick is not None
    assert f._quick((np.zeros((4, 2)),)) is MISS  # axis 1 is static
    assert_close(f(np.ones((3, 2))), np.zeros((3, 2)))  # and the full path re-captures


def test_a_closure_array_is_read_afresh_on_the_quick_path():
    w = np.ones(3)
    f = kiln.compile(lambda x: x * w)
    x = np.arange(3.0)
    f(x)
    f(x)
    w *= 2  # written in place
    np.testing.assert_array_equal(f(x), x * 2)
    w = np.ones((2, 3))  # rebound: another shape, a re-capture
    np.testing.assert_array_equal(f(x), x * w)
    assert f.history[-1].kind == "implicit input"


def test_returning_an_argument_hands_it_back_and_still_reads_and_draws():
    w = np.ones(3)

    def keep(x, y):
        _ = y * w  # reads a closure array, computes nothing returned
        return x

    f = kiln.compile(keep)
    for _ in range(3):
        x, y = np.arange(3.0), np.ones(3)
        assert f(x, y) is x
    w = np.ones((2, 3))  # rebound to another shape: still noticed (a re-capture)
    x = np.arange(3.0)
    assert f(x, np.ones(3)) is x and f.history[-1].kind == "implicit input"

    def noisy(x):
        np.random.rand(2)  # advances the global stream, as the replay must too
        return x

    g = kiln.compile(noisy)
    np.random.seed(7)
    for _ in range(3):
        x = np.zeros(2)
        assert g(x) is x
    after = np.random.rand()
    np.random.seed(7)
    for _ in range(3):
        noisy(np.zeros(2))
    assert after == np.random.rand()


def test_a_write_into_an_input_is_copied_back_on_the_quick_path():
    def step(state, v):
        state[0] += v[0]
        return state.sum()

    f = kiln.compile(step)
    for _ in range(3):
        s, v = np.arange(3.0), np.ones(3)
        expected = s.copy()
        expected[0] += 1
        assert f(s, v) == expected.sum()
        np.testing.assert_array_equal(s, expected)
    base, eager = np.arange(4.0), np.arange(4.0)
    assert f(base[:3], base[1:]) == step(eager[:3], eager[1:])  # aliased: served eagerly
    np.testing.assert_array_equal(base, eager)


def test_falling_back_stops_the_quick_path():
    target = Counted(lambda x: x + 1)
    f = kiln.compile(target, dynamic=False)
    with pytest.warns(RecaptureWarning):
        for n in range(1, 12):
            f(np.zeros(n))
    assert f.state is kiln.State.Fallback and f._quick is None
    calls = target.calls
    f(np.zeros(1))
    assert target.calls == calls + 1


def test_take_graph_stops_the_quick_path():
    target = Counted(lambda x: x + 1)
    f = kiln.compile(target)
    f(np.zeros(2))
    f.take_graph()
    assert f._quick is None
    f(np.zeros(2))
    assert target.calls == 2


def test_the_least_recently_used_capture_is_dropped_first_on_the_quick_path():
    from kiln.capture.compiled import MAX_ENTRIES

    target = Counted(lambda x: x + 1)
    f = kiln.compile(target, dynamic=False)
    arrays = [np.zeros(n) for n in range(1, MAX_ENTRIES + 2)]
    for a in arrays[:MAX_ENTRIES]:
        f(a)
    f(arrays[0])  # served on the full path: now the current capture
    for _ in range(3):
        f(arrays[0])  # quick
    f(arrays[MAX_ENTRIES])  # one more drops the least recently used: size 2, not size 1
    calls = target.calls
    f(arrays[0])
    assert target.calls == calls


def test_threads_share_the_quick_path():
    f = kiln.compile(five)
    x, y = np.linspace(-1, 1, 64), np.linspace(1, 2, 64)
    expected = five(x, y)
    f(x, y)
    errors = []

    def work():
        for _ in range(200):
            if not np.array_equal(f(x, y), expected):
                errors.append("mismatch")

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
