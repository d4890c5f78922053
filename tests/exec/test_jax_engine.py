"""The jax engine and subnormal numbers (SPEC 5b, issue 10): XLA's CPU runtime flushes them to
zero, so a plan refuses a subnormal constant, checks its float inputs on every run, and runs a
call with a subnormal input on NumPy (chosen automatically) or refuses it naming the input
(forced). Reproducers: ``python tools/fuzz.py --show 1:417`` (``a // a``), ``1:2209``."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.errors import UnsupportedOperationError
from kiln.exec.cpu import CpuPlan
from kiln.exec.jax_engine import JaxPlan, has_subnormal
from kiln.exec.select import same_answer
from kiln.optim import DefaultsOptions

pytest.importorskip("jax")

# The graphs below hold nodes XLA rounds its own way (float // and %, exp): accepted, as
# these tests are about subnormals and NaN constants.
RELAXED = DefaultsOptions(allow_reassociation=True)

CASES = [
    lambda a: a // a,  # 1:417: 1e-40 // 1e-40 is 1, XLA reads 0 // 0 (NaN)
    lambda a: np.where(a > 0, np.sign(a[::-1]), 1e30) * -np.inf,  # 1:2209
    lambda a: a.astype(np.float64) * 1e300,  # a float32 subnormal is normal in float64
]


def _numpy(fn, *args):
    with np.errstate(all="ignore"):
        return fn(*args)


def _same(got, want) -> None:
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape
    why = same_answer(got, want, bitwise=False)  # forced: XLA's exp rounds as its own
    assert why is None, why
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


def test_has_subnormal_reads_the_bits() -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    f32, f64 = np.finfo(np.float32), np.finfo(np.float64)
    assert has_subnormal(np.float32([1.0, 1e-40])) and has_subnormal(np.float32([-1e-45]))
    assert has_subnormal(np.float64([5e-324])) and has_subnormal(np.array(1e-40, np.float32))
    assert has_subnormal(np.array([1e-40], ">f4"))  # big-endian input
    assert has_subnormal(np.array([1e-39], ml_dtypes.bfloat16))
    edges = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0]
    assert not has_subnormal(np.float32([*edges, f32.tiny, -f32.tiny, f32.max]))
    assert not has_subnormal(np.float64([*edges, f64.tiny, -f64.tiny, f64.max]))
    assert not has_subnormal(np.float16([6e-8]))  # computed in float32 by XLA: kept
    assert not has_subnormal(np.zeros(0, np.float32)) and not has_subnormal(np.arange(3))


@pytest.mark.parametrize("fn", CASES)
def test_forced_jax_refuses_a_call_with_a_subnormal_input_naming_it(fn) -> None:
    normal = np.array([2.5, -3.0, 1.0], np.float32)
    traced = kiln.trace(fn, normal)
    traced.optimize([], defaults=RELAXED)
    traced.finalize(engine="jax")
    _same(traced(normal), _numpy(fn, normal))  # a call without subnormals runs on jax
    tiny = np.array([1e-40, -1e-40, -1.0], np.float32)
    with pytest.raises(UnsupportedOperationError, match="input 'a' holds a subnormal"):
        traced(tiny)
    _same(traced(normal), _numpy(fn, normal))  # and the plan still runs later calls


@pytest.mark.parametrize("fn", CASES)
def test_automatically_chosen_jax_runs_a_subnormal_call_on_numpy(fn) -> None:
    # what kiln.exec.select.choose builds when jax wins: the plan with a NumPy fallback
    normal = np.array([2.5, -3.0, 1.0], np.float32)
    graph = kiln.trace(fn, normal).graph
    graph.optimize([], defaults=RELAXED)
    plan = JaxPlan(graph, fallback=CpuPlan(graph))
    for a in (np.array([1e-40, -1e-40, -1.0], np.float32), normal):
        _same(plan.run_arrays([a])[0], _numpy(fn, a))


def test_a_subnormal_constant_keeps_the_graph_off_jax() -> None:
    traced = kiln.trace(lambda a: a * np.float32(1e-40), np.ones(3, np.float32))
    with pytest.raises(UnsupportedOperationError, match="constant 'const' holds a subnormal"):
        traced.finalize(engine="jax")
    traced.finalize()  # NumPy's plan keeps it
    _same(traced(np.ones(3, np.float32)), np.ones(3, np.float32) * np.float32(1e-40))


def test_float64_subnormal_input_is_checked_too() -> None:
    a = np.array([5e-324, 1.0, -2.0])
    traced = kiln.trace(lambda a: a / a, a)
    traced.optimize([], defaults=RELAXED)
    traced.finalize(engine="jax")
    with pytest.raises(UnsupportedOperationError, match="subnormal"):
        traced(a)
    graph = traced.graph
    _same(JaxPlan(graph, fallback=CpuPlan(graph)).run_arrays([a])[0], a / a)


# -- a NaN constant (fuzz 29:1482) ------------------------------------------------------------
# XLA's CPU compiler miscompiles exp of an operand built from a NaN it can see (0 or garbage,
# even behind an optimization barrier); the plan passes such constants at run time.


@pytest.mark.parametrize(
    "fn",
    [
        lambda a: np.sinh(a - np.nan),  # 29:1482
        lambda a: np.exp(a * np.float32(np.nan)),
        lambda a: np.cosh(np.where(a > 0, a, np.nan)),
        lambda a: np.exp(a - np.float32([np.nan, 1.0, 2.0, np.nan])),
    ],
)
def test_a_nan_constant_reaches_exp_as_numpy_computes_it(fn) -> None:
    a = np.array([-2.02, 1e-30, -1.12, -3.75], np.float32)
    traced = kiln.trace(fn, a)
    traced.optimize(defaults=RELAXED)
    traced.finalize(engine="jax")
    _same(traced(a).numpy(), _numpy(fn, a))


# -- subnormal results (fuzz 37:4824) ---------------------------------------------------------


def test_nodes_that_can_underflow_are_named() -> None:
    from kiln.exec.jax_engine import flushes

    x = np.ones(4, np.float32)

    def why(fn, *args):
        return flushes(kiln.trace(fn, *(args or (x,))).graph)

    assert "(Reciprocal) can underflow" in why(np.reciprocal)  # 1 / -3e38 is subnormal
    assert "(Sub) can underflow" in why(lambda x: x - x[::-1])
    assert "(Cast) can underflow" in why(lambda x: x.astype(np.float32), x.astype(np.float64))
    assert "(Mul) can underflow" in why(lambda x: x * np.float32(0.5))
    assert "(Div) can underflow" in why(lambda x: x / np.float32(2.0))
    # scaling up, picking, moving, whole numbers, square roots, widening: never subnormal
    for fn in (
        lambda x: x * np.float32(2.0) / np.float32(0.5),
        lambda x: np.maximum(np.abs(x), np.floor(x)).reshape(2, 2).T,
        lambda x: np.sqrt(np.abs(x)).astype(np.float64),
        lambda x: np.where(x > 0, -x, x.astype(np.int32).astype(np.float32)),
    ):
        assert why(fn) is None, why(fn)
