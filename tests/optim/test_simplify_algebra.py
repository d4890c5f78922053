"""simplify_algebra: structure and numerics before/after, near-misses left alone."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.optim import DefaultsOptions, simplify_algebra
from kiln.optim.simplify_algebra import exact_cast
from kiln.tensor import call

from ..numerics import assert_close
from .graphs import ops, run, traced

f32 = np.float32
RNG = np.random.default_rng(0)
RELAXED = DefaultsOptions(allow_reassociation=True)


def simplified(fn, *inputs, options=None, **trace_kwargs):
    """Trace ``fn``, simplify, verify, check numerics on ``inputs``; return (ops, count)."""
    g = traced(fn, *inputs, **trace_kwargs)
    out, n = simplify_algebra(g, options)
    out.verify()
    assert out.output_names == g.output_names
    for want, got in zip(run(g, *inputs), run(out, *inputs)):
        assert_close(got, want)
    again, m = simplify_algebra(out, options)
    assert m == 0 and again is out
    return ops(out), n


X = RNG.standard_normal((3, 4)).astype(f32)
CASES = [
    (lambda x: np.exp(x) * 1, ["Exp"]),
    (lambda x: 1 * np.exp(x), ["Exp"]),
    (lambda x: np.exp(x) + (-0.0), ["Exp"]),  # x + 0.0 is not x at -0.0: see below
    (lambda x: -0.0 + np.exp(x), ["Exp"]),
    (lambda x: np.exp(x) - 0, ["Exp"]),
    (lambda x: np.exp(x) - 0.0, ["Exp"]),
    (lambda x: np.exp(x) / 1, ["Exp"]),
    (lambda x: np.exp(x) ** 1, ["Exp"]),
    (lambda x: np.power(x, 2), ["Mul"]),  # NumPy's power squares exactly
    # -(-x) is a new array: dense even when the input x is a strided view (exp rounds by
    # layout on some machines, a later sum adds in memory order), so x is read densely.
    (lambda x: np.exp(np.negative(-x)), ["kiln.Contiguous", "Exp"]),
    (lambda x: np.exp(x).T.T, ["Exp"]),
    (lambda x: np.exp(x).reshape(4, 3).reshape(2, 6), ["Exp", "Reshape"]),
    (lambda x: np.exp(x).reshape(3, 4), ["Exp"]),
    (lambda x: call("Cast", np.exp(x), to=1), ["Exp"]),  # float32 to float32
    (lambda x: np.exp(x).astype(np.float64).astype(np.float16), ["Exp", "Cast"]),
    (lambda x: np.exp(x).astype(np.float64).astype(np.float32), ["Exp"]),
    (lambda x: np.expand_dims(np.exp(x), 0).squeeze(0), ["Exp"]),
    (lambda x: call("Expand", np.exp(x), kiln.asarray(np.array([3, 4]))), ["Exp"]),
    (
        lambda x: np.transpose(np.exp(x)[None], (1, 0, 2)).transpose(2, 1, 0),
        ["Exp", "Unsqueeze", "Transpose"],
    ),
]


@pytest.mark.parametrize("fn, expected", CASES)
def test_rules_simplify(fn, expected):
    got, n = simplified(fn, X)
    assert n >= 1 and got == expected


@pytest.mark.parametrize(
    "fn, expected",
    [
        (lambda x: x * 1, ["kiln.Contiguous"]),  # a new array of x's values, dense as NumPy's
        # The output is the input again: read densely, as a copy of it (kiln.Contiguous).
        (lambda x: x.reshape(-1, 4).reshape(x.shape[0], 4), ["kiln.Contiguous"]),
        (lambda x: np.expand_dims(np.exp(x), 0).squeeze(0) ** 2, ["Exp", "Mul"]),
    ],
)
def test_rules_simplify_with_a_dynamic_axis(fn, expected):
    got, n = simplified(fn, X, dynamic_axes={"x": [0]})
    assert got == expected
    g, _ = simplify_algebra(traced(fn, X, dynamic_axes={"x": [0]}))
    bigger = RNG.standard_normal((5, 4)).astype(f32)
    assert_close(run(g, bigger)[0], run(traced(fn, bigger), bigger)[0])


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: x * np.ones((2, 3, 4), f32),  # the 1 broadcasts x to a bigger shape
        lambda x: x + np.zeros((2, 1, 1), f32),
        lambda x: x * 2,
        lambda x: x**2.5,
        lambda x: np.power(x, 0.5),  # only with allow_reassociation
        lambda x: np.power(x, 3),  # (x * x) * x rounds twice: only with allow_reassociation
        lambda x: x + 0.0,  # -0.0 + 0.0 is +0.0: only with allow_reassociation
        lambda x: 0.0 + x,
        lambda x: x - (-0.0),  # -0.0 - -0.0 is +0.0
        lambda x: x.astype(np.float16).astype(np.float32),  # the first cast rounds
        lambda x: x.T,
        lambda x: x.reshape(4, 3),
        lambda x: (x * 2) * 3,  # reordering float math: only with allow_reassociation
        lambda x: -x,
    ],
)
def test_near_misses_are_left_alone(fn):
    g = traced(fn, X)
    assert simplify_algebra(g) == (g, 0)


def test_integer_powers_and_casts_follow_their_dtypes():
    i = np.arange(-3, 3, dtype=np.int64)
    got, n = simplified(lambda v: np.power(v, 2), i)
    assert got == ["Mul"]
    got, n = simplified(lambda v: np.power(v, 3), i)  # integer multiplication wraps as pow
    assert got == ["Mul", "Mul"]
    got, n = simplified(lambda v: (v + 0, v - 0, 0 + v), i)
    assert got == ["Identity"] * 3
    # An integer base to a float exponent is computed in float64: not a multiplication.
    g = traced(lambda v: call("Pow", v, kiln.asarray(np.float32(2))), i)
    assert simplify_algebra(g)[1] == 0
    got, _ = simplified(lambda v: v.astype(np.int64).astype(np.float64), i.astype(np.int32))
    assert got == ["Cast"]  # int32 -> int64 is exact
    g = traced(lambda v: v.astype(np.float64).astype(np.int32), i)
    assert simplify_algebra(g)[1] == 0  # int64 -> float64 rounds large values


def test_exact_casts():
    assert exact_cast(np.dtype("int16"), np.dtype("float32"))
    assert exact_cast(np.dtype("bool"), np.dtype("int8"))
    assert exact_cast(np.dtype("uint8"), np.dtype("float16"))
    assert not exact_cast(np.dtype("int32"), np.dtype("float32"))
    assert not exact_cast(np.dtype("float16"), np.dtype("bfloat16"))
    assert not exact_cast(np.dtype("int8"), np.dtype("uint8"))
    assert not exact_cast(np.dtype("float32"), np.dtype("int64"))


def test_reassociation_only_when_allowed():
    got, _ = simplified(lambda x: (x * 2) * 3 + 0.5 + 0.25, X, options=RELAXED)
    assert got == ["Mul", "Add"]
    got, _ = simplified(lambda x: np.maximum(x, 0) ** 0.5, np.abs(X), options=RELAXED)
    assert got == ["Max", "Sqrt"]
    i = np.arange(6, dtype=np.int32)
    got, _ = simplified(lambda v: (v + 2) + 3, i)  # integer addition is associative
    assert got == ["Add"]


def test_float_zero_identities_only_when_relaxed():
    got, _ = simplified(lambda x: np.power(x, 3), X, options=RELAXED)
    assert got == ["Mul", "Mul"]
    got, _ = simplified(lambda x: np.exp(x) + 0.0, X, options=RELAXED)
    assert got == ["Exp"]


# Edge values every identity must keep bit for bit: signed zeros, infinities, NaN, extremes.
EDGES = np.array(
    [[0.0, -0.0, 1.0, -1.0], [np.inf, -np.inf, np.nan, 3e38], [-3e38, 1e-45, -1e-45, 0.5]],
    dtype=f32,
)


@pytest.mark.parametrize("fn, expected", CASES)
def test_identities_are_exact_on_ieee_edge_values(fn, expected):
    """Each rewrite keeps NumPy's values exactly: signed zeros, inf and NaN included."""
    g = traced(fn, EDGES)
    out, _ = simplify_algebra(g)
    with np.errstate(all="ignore"):
        try:
            want = np.asarray(fn(EDGES.copy()))  # NumPy itself
        except AttributeError:  # kiln's own operators (call("Cast", ...)): eager kiln
            want = np.asarray(fn(kiln.asarray(EDGES)))
    for before, after in zip(run(g, EDGES), run(out, EDGES)):
        for got in (before, after):
            assert got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_array_equal(got, want)
            np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


def test_x_plus_zero_keeps_the_sign_of_zero():
    """Issue 10: ``x + 0.0`` replayed as ``x`` gave -0.0 where NumPy gives +0.0."""
    x = np.array([-0.0, 0.0, 1.0], dtype=f32)
    cf = kiln.compile(lambda v: v + 0.0)
    cf(x)
    got = np.asarray(cf(x))
    np.testing.assert_array_equal(np.signbit(got), np.signbit(x + 0.0))
    assert not np.signbit(got[0])


def test_reshape_with_minus_one_that_can_meet_size_zero_is_kept():
    # NumPy refuses reshape(0, -1) of an empty array; with a dynamic size the reshape-same
    # rule must not remove the node that raises it (fuzz 1:1956).
    def f(c):
        return c.reshape(c.shape[0], -1)

    g = kiln.trace(f, np.ones((5, 3)), dynamic_axes={"c": [0]}).graph
    g.optimize()
    assert [n.op for n in g.nodes].count("Reshape") == 1
    g.finalize()
    np.testing.assert_array_equal(g.run([np.ones((4, 3))])[0], np.ones((4, 3)))
    with pytest.raises(ValueError):
        np.zeros((0, 3)).reshape(0, -1)
    with pytest.raises(ValueError):
        g.run([np.zeros((0, 3))])
    static = kiln.trace(f, np.ones((5, 3))).graph
    static.optimize()
    assert "Reshape" not in [n.op for n in static.nodes]
