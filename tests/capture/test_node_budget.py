"""The node budget of a capture (``DefaultsOptions.max_nodes``, issue 13): a call recording
more nodes than the budget is not captured; its structure serves eagerly with one warning."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import kiln
from kiln import State
from kiln.errors import CaptureError, CaptureWarning
from kiln.optim import DefaultsOptions

from ..numerics import assert_close

f32 = np.float32


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(f32)


class Counted:
    """A target that counts its Python calls."""

    def __init__(self, fn):
        self.fn = fn
        self.calls = 0
        self.__name__ = fn.__name__

    def __call__(self, *args):
        self.calls += 1
        return self.fn(*args)


def rows(x, w, b):
    """An unrolled loop filling a preallocated array row by row (several nodes a row)."""
    out = np.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = np.tanh(x[i] * w) + b
    return out


def scale_rows(x):
    """Writes into its own input, row by row, then reads it: the caller's array must end up
    as NumPy leaves it, also for the rows written after the capture was abandoned."""
    for i in range(x.shape[0]):
        x[i] *= i + 1.0
    return x.sum(axis=1)


def scale_later(x):
    """Spends the budget before its only write into its input."""
    s = x.sum(axis=1)
    for _ in range(30):
        s = s * 0.5 + 1.0
    x[1:] *= 2.0
    return s


def test_a_trace_over_the_budget_serves_eagerly_with_one_warning():
    x, w, b = rand(40, 8), rand(8, seed=1), rand(8, seed=2)
    target = Counted(rows)
    f = kiln.compile(target, defaults=DefaultsOptions(max_nodes=50))
    with pytest.warns(CaptureWarning) as record:
        first = f(x, w, b)
    budget = [r for r in record if "50 nodes" in str(r.message)]
    assert len(record) == 1 and len(budget) == 1, [str(r.message) for r in record]
    assert "max_nodes" in str(budget[0].message)  # says how to raise it
    assert_close(first, rows(x, w, b), rtol=0, atol=0)
    assert first.dtype == f32 and first.shape == (40, 8) and isinstance(first, np.ndarray)
    assert f.state is State.Fallback and f.cache_info().captures == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once: later calls say nothing
        for seed in range(3):
            x2 = rand(40, 8, seed=10 + seed)
            assert_close(f(x2, w, b), rows(x2, w, b), rtol=0, atol=0)
    assert target.calls == 4  # every call ran the target eagerly ...
    assert f.cache_info().captures == 1 and f.recapture_count == 0  # ... none re-captured
    assert any(e.kind == "abandoned" for e in f.history)


@pytest.mark.parametrize("byte_order", ["<", ">"])  # ">": written on a native copy
@pytest.mark.parametrize("fn", [scale_rows, scale_later])
def test_writes_into_an_input_past_the_budget_reach_the_callers_array(fn, byte_order):
    x = rand(30, 4).astype(byte_order + "f4")
    expected_x = x.copy()
    expected = fn(expected_x)
    f = kiln.compile(fn, defaults=DefaultsOptions(max_nodes=20))
    with pytest.warns(CaptureWarning, match="node budget"):
        result = f(x)
    assert_close(result, expected, rtol=0, atol=0)
    assert_close(x, expected_x, rtol=0, atol=0)  # every row scaled, in the caller's array


STATE = np.zeros(4)


def step_state(x):
    """Spends the budget, then writes into a global array it never receives."""
    s = x.sum()
    for _ in range(30):
        s = s * 0.5 + 1.0
    STATE[1:] += x[1:]
    return s


def test_writes_into_a_global_past_the_budget_reach_it():
    STATE[:] = 0.0
    x = np.arange(4.0)
    f = kiln.compile(step_state, defaults=DefaultsOptions(max_nodes=10))
    with pytest.warns(CaptureWarning, match="node budget"):
        first = f(x)
    assert_close(STATE, np.array([0.0, 1.0, 2.0, 3.0]), rtol=0, atol=0)
    second = f(x)  # served eagerly: NumPy's write again
    assert_close(STATE, np.array([0.0, 2.0, 4.0, 6.0]), rtol=0, atol=0)
    expected = x.sum()
    for _ in range(30):
        expected = expected * 0.5 + 1.0
    assert float(first) == float(second) == expected


def test_a_trace_within_the_budget_is_captured():
    x, w, b = rand(10, 8), rand(8, seed=1), rand(8, seed=2)
    target = Counted(rows)
    f = kiln.compile(target, defaults=DefaultsOptions(max_nodes=1000))
    with warnings.catch_warnings():
        warnings.simplefilter("error", CaptureWarning)
        f(x, w, b)
        assert_close(f(x, w, b), rows(x, w, b), rtol=1e-6, atol=1e-6)
    assert f.state is State.Compiled and target.calls == 1


def test_fullgraph_raises_naming_the_budget():
    f = kiln.compile(rows, fullgraph=True, defaults=DefaultsOptions(max_nodes=10))
    with pytest.raises(CaptureError, match="max_nodes"):
        f(rand(20, 8), rand(8, seed=1), rand(8, seed=2))


def test_the_default_budget():
    assert DefaultsOptions().max_nodes == 200_000
