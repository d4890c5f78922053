"""Engines never change an answer (SPEC 5b, issue 10 items 1 and 7).

Each case of the issue is reproduced on the automatic engine choice (``kiln.compile``: call 2
must equal NumPy, NaN positions included) and on each forced engine (the node is computed
exactly, or the engine refuses naming the node). Cases that used to kill the process run in a
child process, so a regression fails the test instead of the suite.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

import kiln
from kiln.errors import EngineError, KilnError, UnsupportedOperationError
from kiln.exec.select import choose, same_answer
from kiln.optim import DefaultsOptions
from kiln.tensor import dispatch

# A forced engine refuses a node that is not bit-exact unless the graph accepts the engine's
# rounding: the tests of an engine's semantics beyond rounding (NaN, inf, signed zeros,
# crashes) accept it.
RELAXED = DefaultsOptions(allow_reassociation=True)

jax = pytest.importorskip("jax")
pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")


def _numpy(fn, *args):
    with np.errstate(all="ignore"):
        return fn(*args)


def _assert_same(got, want, what=""):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, what
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=what)
    # a forced engine may round as its library does; NaN, infinities, zeros' signs are NumPy's
    why = same_answer(got, want, bitwise=False)
    assert why is None, f"{what}: {why}"


def _big_with_nan() -> np.ndarray:
    x = np.random.default_rng(0).standard_normal((1000, 1000)).astype(np.float32)
    x[3, 5] = np.nan
    return x


# The cases: (function, inputs) on which an engine differed from NumPy.
CASES = {
    "max_nan": (lambda x: np.tanh(x * 2).max(axis=1), (_big_with_nan(),)),
    "argmax_nan": (lambda x: np.tanh(x * 2).argmax(axis=1), (_big_with_nan(),)),
    "log_exp": (lambda x: np.log(np.exp(x)), (np.full((1000, 1000), 200, np.float32),)),
    "gt_times_x": (lambda x: (x > 5) * x, (np.full((1000, 1000), np.nan, np.float32),)),
    "int_floordiv_zero": (
        lambda x, y: x // y + x,
        (np.ones((1000, 1000), np.int64), np.zeros((1000, 1000), np.int64)),
    ),
    "cumsum_1e6": (
        lambda x: np.cumsum(x),
        (np.random.default_rng(1).random(1_000_000).astype(np.float32),),
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_automatic_choice_gives_numpys_answer(case: str) -> None:
    fn, args = CASES[case]
    want = _numpy(fn, *args)
    cf = kiln.compile(fn)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        first = cf(*args)
        assert cf.wait_for_engines(timeout=600)  # the engine chosen in the background serves
        second = cf(*args)
    _assert_same(first, want, f"{case}, call 1")
    _assert_same(second, want, f"{case}, call 2 (replay)")


@pytest.mark.parametrize("engine", ["jax", "onnxruntime"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_forced_engine_is_exact_or_refuses_naming_the_node(case: str, engine: str) -> None:
    fn, args = CASES[case]
    small = tuple(a[:4] if a.ndim == 1 else a[:4, :8] for a in args)
    graph = kiln.trace(fn, *small).graph
    try:
        graph.finalize(engine)
    except UnsupportedOperationError as exc:
        assert "node '" in str(exc) and "engine='numpy'" in str(exc), str(exc)
        return
    got = [np.asarray(t) for t in graph.run(list(small))]
    _assert_same(got[0], _numpy(fn, *small), f"{case} on {engine}")


ONES = np.ones((2, 3), np.float32)


@pytest.mark.parametrize(
    ("engine", "fn", "args", "op", "why"),
    [
        (
            "onnxruntime",
            lambda x: x.max(axis=1),
            (np.ones((2, 3), np.float32),),
            "ReduceMax",
            "NaN",
        ),
        (
            "onnxruntime",
            lambda x: x.argmin(axis=0),
            (np.ones((2, 3), np.float32),),
            "ArgMin",
            "NaN",
        ),
        ("onnxruntime", lambda a, b: a // b, (np.ones(3, np.int32),) * 2, "Div", "zero divisor"),
        ("jax", lambda x: np.cumsum(x), (np.ones(8, np.float32),), "CumSum", "floating-point"),
        # fuzz 25:112: onnxruntime's int64 product of int32 values saturates, its sums round
        (
            "onnxruntime",
            lambda a: a.prod(axis=1),
            (np.ones((2, 3), np.int32),),
            "ReduceProd",
            "integer",
        ),
        (
            "onnxruntime",
            lambda a: a.sum(axis=0),
            (np.ones((2, 3), np.int64),),
            "ReduceSum",
            "integer",
        ),
    ],
)
def test_refusal_names_node_op_and_reason(engine, fn, args, op, why) -> None:
    graph = kiln.trace(fn, *args).graph
    with pytest.raises(UnsupportedOperationError, match=f"node '[^']+': {op} .*{why}"):
        graph.finalize(engine)


EDGE = np.array(
    [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 3e38, 5.0, 6.0, -2.5, 200.0, 0.5],
    np.float32,
)


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: np.log(np.exp(x)),  # XLA: log(exp(x)) -> x
        lambda x: (x > 5) * x,  # XLA: convert(pred) * x -> select (0 at NaN, +0 for -0)
        lambda x: x + 0.0,  # -0.0 + 0.0 is +0.0
        lambda x: x / 3.0,  # not x * (1 / 3)
        lambda x: np.sign(x),  # sign(-0.0) is +0.0
        lambda x: np.maximum(x, x[::-1]),
        lambda x: np.minimum(x, 0.5),
    ],
)
def test_jax_lowerings_match_numpy_on_edge_values(fn) -> None:
    graph = kiln.trace(fn, EDGE).graph
    graph.optimize([], defaults=RELAXED)  # (log and exp are XLA's)
    graph.finalize("jax")
    _assert_same(graph.run([EDGE])[0], _numpy(fn, EDGE))


def test_jax_integer_division_and_remainder_by_zero_give_numpys_zero() -> None:
    a = np.array([7, -7, 0, 5, -(2**31), 3], np.int32)
    b = np.array([0, 2, 0, -1, -1, 0], np.int32)
    for fn in (lambda a, b: a // b, lambda a, b: a % b):
        graph = kiln.trace(fn, a, b).graph
        graph.finalize("jax")
        np.testing.assert_array_equal(np.asarray(graph.run([a, b])[0]), _numpy(fn, a, b))
    # ONNX Mod with fmod=1 (C's remainder): x % 0 is 0 too
    graph = kiln.trace(lambda a, b: dispatch("Mod", [a, b], {"fmod": 1}), a, b).graph
    graph.finalize("jax")
    want = np.where(b == 0, 0, _numpy(np.fmod, a, b)).astype(np.int32)
    np.testing.assert_array_equal(np.asarray(graph.run([a, b])[0]), want)


def _child(code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a child Python: a crash there (SIGFPE) fails the test, not the suite."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_integer_division_by_a_zero_difference_does_not_kill_the_process() -> None:
    # Used to die with SIGFPE: XLA rewrote n - n to 0 and constant-folded 7 // 0.
    done = _child(
        """
        import warnings, numpy as np, kiln
        from kiln.optim import DefaultsOptions
        warnings.simplefilter("ignore")
        fn = lambda x, n: np.tanh(x) * (7 // (n - n))
        x = np.random.default_rng(0).standard_normal((1000, 1000)).astype(np.float32)
        n = np.ones((1000, 1000), np.int64)
        cf = kiln.compile(fn)
        with np.errstate(all="ignore"):
            want = fn(x, n)
        for _ in range(2):
            assert np.array_equal(np.asarray(cf(x, n)), want)
        g = kiln.trace(fn, x[:4, :4], n[:4, :4]).graph
        g.optimize(defaults=DefaultsOptions(allow_reassociation=True))  # (XLA's tanh)
        g.finalize("jax")
        got = np.asarray(g.run([x[:4, :4], n[:4, :4]])[0])
        assert np.allclose(got, want[:4, :4], rtol=1e-6, atol=0)
        print("ok")
        """
    )
    assert done.returncode == 0 and "ok" in done.stdout, (done.returncode, done.stderr[-2000:])


def test_einsum_with_an_empty_batch_does_not_kill_the_process() -> None:
    # Used to die with SIGFPE inside onnxruntime.
    done = _child(
        """
        import numpy as np, kiln
        from kiln.errors import UnsupportedOperationError
        from kiln.optim import DefaultsOptions
        relaxed = DefaultsOptions(allow_reassociation=True)  # (onnxruntime's sums)
        fn = lambda a, b: np.einsum("...ij,...kj->...ik", a, b)
        a, b = np.ones((0, 3, 4), np.float32), np.ones((0, 5, 4), np.float32)
        a2, b2 = np.ones((2, 3, 4), np.float32), np.ones((2, 5, 4), np.float32)
        cf = kiln.compile(fn, dynamic=True)
        assert cf(a2, b2).shape == (2, 3, 5) and cf(a, b).shape == (0, 3, 5)
        static = kiln.trace(fn, a, b).graph
        static.optimize([], defaults=relaxed)
        try:
            static.finalize("onnxruntime")
            raise SystemExit("an empty Einsum was handed to onnxruntime")
        except UnsupportedOperationError as exc:
            assert "Einsum" in str(exc) and "empty" in str(exc)
        specs = [kiln.TensorSpec(("B", 3, 4), "float32"), kiln.TensorSpec(("B", 5, 4), "float32")]
        dynamic = kiln.trace(fn, signature=specs).graph
        dynamic.optimize([], defaults=relaxed)
        dynamic.finalize("onnxruntime")
        assert dynamic.run([a, b])[0].shape == (0, 3, 5)
        assert np.array_equal(np.asarray(dynamic.run([a2, b2])[0]), fn(a2, b2))
        print("ok")
        """
    )
    assert done.returncode == 0 and "ok" in done.stdout, (done.returncode, done.stderr[-2000:])


def test_onnxruntime_failure_is_an_engine_error_naming_the_node(monkeypatch) -> None:
    from kiln.exec import ort_engine

    # Hand onnxruntime an integer division its record keeps off it, to see its failure.
    monkeypatch.setattr(ort_engine, "unsupported_nodes", lambda graph: [])
    a, b = np.ones(3, np.int32), np.zeros(3, np.int32)
    graph = kiln.trace(lambda a, b: a // b, a, b).graph
    graph.finalize("onnxruntime")
    with pytest.raises(EngineError, match="at node '[^']+' \\((Div|Mod)\\)") as info:
        graph.run([a, b])
    assert isinstance(info.value, KilnError) and isinstance(info.value, RuntimeError)
    # chosen automatically, the same failure runs the call on NumPy instead
    plan = ort_engine.OrtPlan(graph, fallback=kiln.exec.CpuPlan(graph))
    np.testing.assert_array_equal(plan.run_arrays([a, b])[0], _numpy(lambda a, b: a // b, a, b))


def test_selection_drops_an_engine_that_differs_on_the_reference() -> None:
    x = np.random.default_rng(0).standard_normal((1000, 1000)).astype(np.float32)
    graph = kiln.trace(lambda x: np.tanh(x) * 2, x).graph
    graph.reassociation_allowed = True  # else neither engine is a candidate (tanh's rounding)
    wrong = np.tanh(x) * 2
    wrong[0, 0] = np.nan
    plan = choose(graph, reference=([x], [wrong]))
    assert plan.engine == "numpy"
    refused = plan.selection["refused"]
    assert set(refused) == {"jax", "onnxruntime"}
    assert all("capture inputs" in why and "NaN" in why for why in refused.values()), refused


@pytest.mark.parametrize("bitwise", [True, False])
def test_same_answer_rules(bitwise: bool) -> None:
    f32 = np.float32

    def same(got, want):
        return same_answer(got, want, bitwise) is None

    assert same(f32([1, np.nan, -np.inf, -0.0]), f32([1, np.nan, -np.inf, -0.0]))
    assert same(f32([1.0000001]), f32([1.0])) is not bitwise  # one ulp: bit for bit, not equal
    assert not same(f32([0.0]), f32([np.nan]))  # a dropped NaN
    assert not same(f32([201.0]), f32([np.inf]))  # an overflow lost
    assert not same(f32([0.0]), f32([-0.0]))  # the sign of zero
    assert not same(f32([1.01]), f32([1.0]))  # a 1% drift
    assert not same(np.int64([-1]), np.int64([0]))
    assert not same(np.float64([1.0]), f32([1.0]))  # dtype


# -- cases found by the differential fuzzer (tools/fuzz.py --show 1:INDEX) ----------------

_F32 = np.float32
FUZZ_CASES = {
    # 0.0 % a: floor-mod lowers to Where(a < 0, -0.0, 0.0); onnxruntime's Where drops -0.0
    "1:628_remainder_zero_sign": (
        lambda a: 0.0 % a,
        (np.array([1e-300, -1.78, 0.0, -0.0], np.float64),),
    ),
    # 6 ** 36 wraps to 0 in int32 as repeated multiplication; onnxruntime gives -2**31
    "1:3732_int_pow_overflow": (lambda a: np.power(a, np.dot(a, a)), (np.array([6], np.int32),)),
    # np.maximum(0.0, -0.0) is -0.0 (the second operand); XLA and onnxruntime give +0.0
    "1:3553_maximum_zero_sign": (
        lambda a: np.maximum(a, -0.0)[None],
        (np.array([True, False, False]),),
    ),
    "maximum_minimum_zeros_broadcast": (
        lambda a, b: (np.maximum(a, b), np.minimum(b, a), np.maximum(a, 0.0), np.minimum(-0.0, a)),
        (
            np.array([0.0, -0.0, np.nan, 1.0, -0.0, 0.0, -np.inf], _F32),
            np.array([[-0.0], [0.0]], _F32),
        ),
    ),
    "maximum_zeros_float16": (
        lambda a, b: (np.maximum(a, b), np.minimum(a, b)),
        (
            np.array([0.0, -0.0, np.nan, 1.0], np.float16),
            np.array([-0.0, 0.0, 1.0, np.nan], np.float16),
        ),
    ),
    "clip_zero_sign": (
        lambda a: np.clip(a, -0.0, 0.0),
        (np.array([0.0, -0.0, np.nan, 1.0, -1.0], np.float64),),
    ),
    "where_keeps_negative_zero": (
        lambda c, x: np.where(c, x, 1.0),
        (np.array([True, False, True]), np.array([-0.0, -0.0, 2.0])),
    ),
}


@pytest.mark.parametrize("engine", ["numpy", "jax", "onnxruntime"])
@pytest.mark.parametrize("case", sorted(FUZZ_CASES))
def test_fuzzer_cases_are_exact_or_refused_naming_the_node(case: str, engine: str) -> None:
    fn, args = FUZZ_CASES[case]
    traced = kiln.trace(fn, *args)
    traced.optimize()
    try:
        traced.finalize(engine=engine)
    except UnsupportedOperationError as exc:
        assert engine != "numpy"
        assert "node '" in str(exc) and "engine='numpy'" in str(exc), str(exc)
        return
    got = traced(*args)
    want = _numpy(fn, *args)
    got, want = (got, want) if isinstance(want, tuple) else ((got,), (want,))
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        g = np.asarray(g)
        _assert_same(g, w, f"{case} on {engine}, output {i}")
        np.testing.assert_array_equal(np.signbit(g), np.signbit(w), err_msg=f"{case} {i}")


@pytest.mark.parametrize(
    ("engine", "fn", "args", "op", "why"),
    [
        ("onnxruntime", lambda a: a**a, (np.array([2, 3], np.int32),), "Pow", "integers"),
        ("jax", lambda a: a**a, (np.array([2, 3], np.int32),), "Pow", "integers"),
        ("onnxruntime", lambda a, b: np.maximum(a, b), (ONES, ONES[0]), "Max", "zero"),
        ("onnxruntime", lambda a: np.clip(a, 0.0, 1.0), (ONES,), "Clip", "zero"),
        ("onnxruntime", lambda c, a: np.where(c, a, 0.0), (ONES > 0, ONES), "Where", "-0.0"),
    ],
)
def test_zero_sign_and_integer_power_refusals_name_the_node(engine, fn, args, op, why) -> None:
    graph = kiln.trace(fn, *args).graph
    with pytest.raises(UnsupportedOperationError, match=f"node '[^']+': {op} .*{why}"):
        graph.finalize(engine)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_jax_maximum_minimum_relu_follow_numpy_on_zeros_and_nan(dtype) -> None:
    # NumPy returns the second operand of equal values (float16: the first); XLA gives +0.0.
    a = np.array([0.0, -0.0, np.nan, 1.0, -0.0, 0.0, np.inf, -1.0], dtype)
    b = np.array([-0.0, 0.0, 1.0, np.nan, -0.0, 0.0, -np.inf, -1.0], dtype)
    fns = [
        lambda a, b: np.maximum(a, b),
        lambda a, b: np.minimum(a, b),
        lambda a, b: np.maximum(b, a[3]),
        lambda a, b: np.minimum(a[0], b),
        lambda a, b: np.clip(a, b[0], b[1]),
    ]
    for i, fn in enumerate(fns):
        graph = kiln.trace(fn, a, b).graph
        graph.finalize("jax")
        got, want = np.asarray(graph.run([a, b])[0]), _numpy(fn, a, b)
        _assert_same(got, want, f"function {i}")
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want), err_msg=f"function {i}")
    graph = kiln.trace(kiln.nn.relu, a).graph
    graph.finalize("jax")
    got, want = np.asarray(graph.run([a])[0]), np.maximum(a, dtype(0))  # Relu's kernel
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    _assert_same(got, want, "relu")


def test_integer_power_to_a_negative_exponent_raises_on_every_path() -> None:
    # tools/fuzz.py --show 1:1794 / 1:1175: NumPy raises for any negative element.
    a, later = np.array([0, 5], np.int32), np.array([3, -2, -1, -1, -5, 6], np.int32)
    for fn in (lambda a: a**a, lambda a: np.power(np.int32(2), a)):
        traced = kiln.trace(fn, a)
        traced.finalize(engine="numpy")
        np.testing.assert_array_equal(np.asarray(traced(a)), fn(a))
        with pytest.raises(ValueError, match="Integers to negative integer powers"):
            fn(later)
        with pytest.raises(ValueError, match="Integers to negative integer powers"):
            traced(later[:2])
        cf = kiln.compile(fn)
        cf(a), cf(a)
        with pytest.raises(ValueError, match="Integers to negative integer powers"):
            cf(later)


def test_float64_remainder_is_exact_given_numpys_operands() -> None:
    # tools/fuzz.py --show 1:4929: np.exp(25.0) is one ulp below libm's (which XLA and
    # onnxruntime match), and % -2.5 of 7.2e10 turns that ulp into 1.5e-5. The Mod lowering
    # itself is exact: fed NumPy's exp values, each engine gives NumPy's remainder.
    t = np.exp(np.array([25.0, 16.0, 4.0, 1e-3]))
    fn = lambda t: t % -2.5  # noqa: E731
    for engine in ("jax", "onnxruntime"):
        traced = kiln.trace(fn, t)
        traced.optimize()
        try:
            traced.finalize(engine=engine)
        except UnsupportedOperationError:
            continue
        _assert_same(np.asarray(traced(t)), _numpy(fn, t), engine)


@pytest.mark.xfail(strict=True, reason="XLA on the CPU flushes subnormal numbers to zero")
@pytest.mark.parametrize(
    "fn",
    [
        lambda a: a // a,  # tools/fuzz.py --show 1:417: 1e-40 // 1e-40 is 1, 0 // 0 is NaN
        lambda a: np.where(a > 0, np.sign(a[::-1]), 1e30) * -np.inf,  # --show 1:2209
    ],
)
def test_jax_subnormal_inputs_known_deviation(fn) -> None:
    a = np.array([1e-40, -1e-40, -1.0], np.float32)
    traced = kiln.trace(fn, a)
    traced.finalize(engine="jax")
    _assert_same(np.asarray(traced(a)), _numpy(fn, a))


def test_onnxruntime_keeps_zero_plus_negative_zero() -> None:
    """onnxruntime's NoopElimination would drop ``0 + x`` (fuzz 22:933): -0.0 stayed -0.0."""

    def f(a, b):
        return sum(b[i] * a for i in range(len(b)))  # 0 + (False * -0.45) + ...

    a = np.array([[3.72, -0.45], [-0.57, -3.48]])
    b = np.zeros((2, 1), np.bool_)
    traced = kiln.trace(f, a, b)
    traced.optimize()
    traced.finalize(engine="onnxruntime")
    got = np.asarray(traced(a, b))
    want = f(a, b)
    np.testing.assert_array_equal(got, want, strict=True)
    assert not np.signbit(got).any() and not np.signbit(want).any()


def test_onnxruntime_mean_of_an_empty_tensor_is_numpys_nan_or_refused() -> None:
    """Fuzz 27:3670: onnxruntime's ReduceMean of an empty tensor is 0 (NumPy: nan). A size the
    inputs decide routes an empty call to the NumPy plan; a size the values decide is refused."""

    def mean(x):
        return x.mean(axis=0)

    graph = kiln.trace(mean, np.ones((4, 3)), dynamic_axes={0: [0]}).graph
    graph.optimize([], defaults=RELAXED)  # (onnxruntime's sum)
    graph.finalize("onnxruntime")
    with np.errstate(all="ignore"):
        got = graph.run([np.ones((0, 3))])[0].numpy()
        np.testing.assert_array_equal(got, np.ones((0, 3)).mean(axis=0))
    np.testing.assert_array_equal(graph.run([np.ones((2, 3))])[0].numpy(), np.ones(3))

    def count_mean(c):
        return np.where(c)[0].mean(axis=0)

    data_dependent = kiln.trace(count_mean, np.ones(3, bool)).graph
    data_dependent.optimize([], defaults=RELAXED)
    with pytest.raises(UnsupportedOperationError, match="ReduceMean|empty"):
        data_dependent.finalize("onnxruntime")


def test_onnxruntime_keeps_a_reciprocal_and_a_product_apart() -> None:
    """Fuzz 37:4379: onnxruntime's DivMulFusion rewrote ``(1 / x) * y`` into ``y / x``, which
    rounds once where NumPy rounds twice (an ulp); kiln turns that rewrite off."""
    pytest.importorskip("onnxruntime")
    a = np.array([-1.29, -0.18, 3.99, -1.73, 3.67, 3.75], np.float32)
    c = np.array([-1.0, 1.18, -2.15, 2.8, 1.53, -1.35], np.float32)

    def fn(a, c):
        return 0 + c * (1 / (a * np.float32(1e30)))

    traced = kiln.trace(fn, a, c)
    traced.optimize()
    traced.finalize(engine="onnxruntime")
    np.testing.assert_array_equal(np.asarray(traced(a, c)).view(np.int32), fn(a, c).view(np.int32))
