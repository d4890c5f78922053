"""``CpuPlan.donating``: a run that writes an input's new contents (a compiled function's
write-back) straight into that input's buffer, where that is safe, and gives NumPy's answer
either way."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import kiln
from kiln.exec.cpu import CpuPlan

RNG = np.random.default_rng(5)


def standardize(x):  # ufuncs: the last one writes out=x
    x -= x.mean(axis=0)
    x /= x.std(axis=0)


def sgd_rows(w, idx, g):  # a ScatterND into w itself
    w[idx] -= 0.1 * g


def stencil(u):  # a SliceUpdate of u whose value reads views of u
    u[1:-1] = u[1:-1] + 0.1 * (u[2:] - 2 * u[1:-1] + u[:-2])


def overlapping(a):  # the value is a view of the written input (NumPy buffers the overlap)
    a[1:] = a[:-1]


def clean_signal(x):  # mask writes: Where steps, written in x's buffer
    x[np.isnan(x)] = 0.0
    np.copyto(x, x[::-1] * 0.5, where=x > 1.0)  # values read x itself (reversed)
    x[x < -1.0] = -1.0
    return x.std()


def read_before(x):  # every read of x's old contents comes first: donated
    y = x * 1.5
    x += 1
    return y.sum() + x[0]


def read_after(x):  # x's old contents are read after the write: no donation
    z = x.copy()
    x += 1
    return z * 2


def raises_after(x, k):  # a later step can raise (an integer to a negative power)
    x += 1
    return k**k


def returns_the_input(x):  # the new contents are a result too: donated, the result a copy
    x *= 2
    return x


def softmax_rows(x):  # one Softmax node, which takes out= (the caller's array)
    x -= x.max(axis=1, keepdims=True)
    np.exp(x, out=x)
    x /= x.sum(axis=1, keepdims=True)


def log_softmax_columns(x):  # one LogSoftmax node over axis 0
    x -= x.max(axis=0, keepdims=True)
    x -= np.log(np.exp(x).sum(axis=0, keepdims=True))


CASES: list[tuple[Callable[..., Any], Callable[[], tuple], bool]] = [
    (standardize, lambda: (RNG.standard_normal((40, 3)),), True),
    (sgd_rows, lambda: (RNG.standard_normal((9, 3)), np.array([1, -2, 1]), np.ones((3, 3))), True),
    (stencil, lambda: (RNG.standard_normal(12),), True),
    (overlapping, lambda: (np.arange(8, dtype=np.int64),), True),
    (
        clean_signal,
        lambda: (np.where(RNG.random(30) < 0.2, np.nan, RNG.standard_normal(30)),),
        True,
    ),
    (read_before, lambda: (RNG.standard_normal(6).astype(np.float32),), True),
    (read_after, lambda: (RNG.standard_normal(6).astype(np.float32),), False),
    (raises_after, lambda: (np.arange(4.0), np.arange(1, 4, dtype=np.int64)), False),
    (returns_the_input, lambda: (np.arange(5, dtype=np.int32),), True),
    (softmax_rows, lambda: ((RNG.standard_normal((7, 9)) * 30).astype(np.float32),), True),
    (log_softmax_columns, lambda: (RNG.standard_normal((7, 9)) * 30,), True),
]


def _captured(fn: Callable[..., Any], make: Callable[[], tuple]) -> kiln.io.ModelGraph:
    compiled = kiln.compile(fn)
    compiled(*make())
    return compiled.take_graph()


@pytest.mark.parametrize("fn, make, donates", CASES, ids=lambda c: getattr(c, "__name__", ""))
def test_donating_run_writes_the_input_as_numpy_does(fn, make, donates):
    graph = _captured(fn, make)
    plan = CpuPlan(graph)
    donate = {
        k: graph.input_names.index(name.split(".", 1)[1])
        for k, name in enumerate(graph.output_names)
        if name.startswith("mutated.")
    }
    assert donate
    run = plan.donating(donate)
    assert (run is not None) == donates, plan.source
    if run is None:
        return
    args = make()
    want_args = [np.array(a, copy=True) for a in args]
    with np.errstate(all="ignore"):
        want = fn(*want_args)
    given = [np.array(a, copy=True) for a in args]
    pure = plan.run_arrays([np.array(a, copy=True) for a in args])
    outs = run(given)
    for k, position in donate.items():
        assert outs[k] is given[position]  # written in place: nothing left to copy back
        np.testing.assert_array_equal(given[position], want_args[position])
        np.testing.assert_array_equal(pure[k], want_args[position])
    results = [o for k, o in enumerate(outs) if k not in donate]
    if want is not None:
        np.testing.assert_array_equal(results[0], want)
        assert not any(np.shares_memory(results[0], a) for a in given)


def test_no_donation_asked_is_the_pure_run():
    graph = _captured(standardize, CASES[0][1])
    assert CpuPlan(graph).donating({}) is None


def clip_into(signal, gain, out):  # the new contents are returned too (through Identity)
    np.multiply(signal, gain, out=out)
    return np.clip(out, -1.0, 1.0, out=out)


def test_donated_contents_returned_too_are_a_copy():
    make = lambda: (RNG.standard_normal((6, 2)), np.array([0.5, 3.0]), np.zeros((6, 2)))  # noqa: E731
    graph = _captured(clip_into, make)
    plan = CpuPlan(graph)
    k = graph.output_names.index("mutated.out")
    run = plan.donating({k: graph.input_names.index("out")})
    assert run is not None, plan.source
    signal, gain, out = make()
    result, written = run([signal, gain, out])
    assert written is out and not np.shares_memory(result, out)
    np.testing.assert_array_equal(result, np.clip(signal * gain, -1, 1))
    np.testing.assert_array_equal(out, result)


def test_an_unread_output_is_handed_out_as_none_without_a_copy():
    """The result that is the caller's own array (``return np.clip(..., out=out)``): the
    compiled call hands the caller's array back, so the run need not copy that output."""
    make = lambda: (RNG.standard_normal((6, 2)), np.array([0.5, 3.0]), np.zeros((6, 2)))  # noqa: E731
    graph = _captured(clip_into, make)
    plan = CpuPlan(graph)
    k = graph.output_names.index("mutated.out")
    run = plan.donating({k: graph.input_names.index("out")}, unread=[1 - k])
    assert run is not None
    signal, gain, out = make()
    outs = run([signal, gain, out])
    assert outs[1 - k] is None and outs[k] is out
    np.testing.assert_array_equal(out, np.clip(signal * gain, -1, 1))


def test_unread_outputs_alone_make_a_run_without_donation():
    graph = _captured(read_after, lambda: (RNG.standard_normal(6).astype(np.float32),))
    plan = CpuPlan(graph)
    assert plan.donating({}) is None
    run = plan.donating({}, unread=[0])
    assert run is not None
    x = RNG.standard_normal(6).astype(np.float32)
    outs = run([x])
    assert outs[0] is None
    np.testing.assert_array_equal(outs[1], x + 1)
