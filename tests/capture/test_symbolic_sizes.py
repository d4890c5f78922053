"""Sizes that behave like ints (issue 11 item 7): a dynamic axis used in arithmetic, as a
Python number, in comparisons and in NumPy calls gives NumPy's answer on every call."""

from __future__ import annotations

import types
import warnings

import numpy as np
import pytest

import kiln
from kiln.symbolic import broadcast_dim, specialize, symbol

KERNELS = {
    "divide": lambda x: x / x.shape[0],
    "mean": lambda x: x.sum(0) / x.shape[0],
    "center": lambda x: x - x.sum(0) / x.shape[0],
    "tanh_times": lambda x: np.tanh(x) * x.shape[0],
    "size_times_tensor": lambda x: (x.shape[0] - 1) * x,
    "ufunc_of_size": lambda x: x / np.sqrt(x.shape[0]),
    "true_division": lambda x: x * (x.shape[0] / 2),
    "len": lambda x: x * len(x),
    "arange": lambda x: x + np.arange(x.shape[0]).reshape(-1, 1),
    "range": lambda x: sum(x[i] for i in range(x.shape[0])),
    "greater": lambda x: x * 2 if x.shape[0] > 6 else x * 3,
    "equal_one": lambda x: x * 2 if x.shape[0] == 1 else x,
    "int": lambda x: x * int(x.shape[0]),
    "float": lambda x: x * float(x.shape[0]),
    "squeeze": lambda x: np.squeeze(x[:, :1]),
    "array_split": lambda x: np.array_split(x, 3),
    "slice_half": lambda x: x[x.shape[0] // 2 :],
    "reshape_product": lambda x: (x + 0).reshape(x.shape[0] * x.shape[1], -1),
    "float_arithmetic": lambda x: x * (x.shape[0] - 0.5) + (2.5 * x.shape[0]),
    "numpy_int_arithmetic": lambda x: x * (x.shape[0] + np.int64(1)),
    "size_over_tensor": lambda x: x.shape[0] / (x + 1),
    "numpy_scalar_reflected": lambda x: x * (np.float32(0.5) * x.shape[0]),
    "numpy_scalar_division": lambda x: x + x.shape[0] / np.float32(2),
    # kiln's own code needing a concrete int specializes the size too
    "split_points": lambda x: np.split(x, [x.shape[0] // 2])[1],
    "tile": lambda x: np.tile(x, (x.shape[1], 1)),
    "pad": lambda x: np.pad(x, ((0, x.shape[0]), (0, 0))),
}


def _check(got, want):
    if isinstance(want, (list, tuple)):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            _check(g, w)
        return
    got = np.asarray(got)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)


@pytest.mark.parametrize("dynamic", [None, True], ids=["drift", "dynamic"])
@pytest.mark.parametrize("name", sorted(KERNELS))
def test_sizes_behave_like_ints(name, dynamic):
    fn = KERNELS[name]
    cf = kiln.compile(fn, dynamic=dynamic)
    rng = np.random.default_rng(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback warning: everything is captured
        for n in (4, 5, 7, 1, 4, 8, 5):
            x = rng.random((n, 3), dtype=np.float32)
            _check(cf(x), fn(x))
    assert cf.state == kiln.State.Compiled


def test_size_is_a_weak_int():
    # NumPy: float32 / Python int stays float32; int8 * int stays int8.
    cf = kiln.compile(lambda x: (x / x.shape[0], x.astype(np.int8) * x.shape[1]), dynamic=True)
    for n in (3, 6):
        x = np.ones((n, 2), np.float32)
        a, b = cf(x)
        assert a.dtype == np.float32 and b.dtype == np.int8
        np.testing.assert_array_equal(a, x / n)
        np.testing.assert_array_equal(b, np.full((n, 2), 2, np.int8))


def test_division_by_size_is_recorded_not_specialized():
    cf = kiln.compile(lambda x: x - x.sum(0) / x.shape[0], dynamic=True)
    for n in (2, 3, 4, 5, 6, 7, 9, 10, 11, 12):
        x = np.arange(n * 2, dtype=np.float64).reshape(n, 2)
        _check(cf(x), x - x.sum(0) / n)
    assert cf.recapture_count == 0


def test_len_specializes_with_a_guard():
    cf = kiln.compile(lambda x: x * len(x), dynamic=True)
    _check(cf(np.ones((3, 2))), np.full((3, 2), 3.0))
    _check(cf(np.ones((5, 2))), np.full((5, 2), 5.0))  # the guard len == 3 re-captures
    assert cf.recapture_count == 1


def test_squeeze_guard_follows_the_size():
    cf = kiln.compile(lambda x: np.squeeze(x), dynamic=True)
    for n in (1, 3, 1):
        x = np.arange(n * 2.0).reshape(n, 2, 1)
        _check(cf(x), np.squeeze(x))


def test_squeeze_axis_of_a_dynamic_size_other_than_one_raises_like_numpy():
    cf = kiln.compile(lambda x: np.squeeze(x, axis=0), dynamic=True)
    with pytest.raises(ValueError):
        cf(np.ones((3, 2)))


def test_array_split_of_a_dynamic_axis_is_recorded():
    cf = kiln.compile(lambda x: np.array_split(x, 3), dynamic=True)
    for n in (7, 8, 9, 1, 0, 2):
        x = np.arange(n, dtype=np.float64)
        _check(cf(x), np.array_split(x, 3))
    assert cf.recapture_count == 0


def test_size_outside_a_capture_has_no_value():
    b = symbol("B")
    with pytest.raises(TypeError, match="no value"):
        specialize(b, "int(B)")
    with pytest.raises(TypeError):
        int(b)
    with pytest.raises(TypeError):
        b / 2


def test_broadcast_absorbs_a_size_already_broadcast():
    b, c = symbol("B"), symbol("C")
    bc = broadcast_dim(b, c)
    assert broadcast_dim(bc, c) == bc
    assert broadcast_dim(c, bc) == bc
    assert broadcast_dim(bc, broadcast_dim(c, b)) == bc


FUZZ_PROGRAMS = {  # tools/fuzz.py 1:2695 and 1:2787 under dynamic=True
    "slice_start_from_broadcast": (
        lambda a, b: np.square(np.remainder(a, b).any(axis=-1))[np.remainder(a, b).shape[0] // 2 :],
        ((2, 1), (2, 1)),
        ((0, 1), (0, 1)),
    ),
    "reshape_from_broadcast": (
        lambda a, b: (a >= b).reshape((a >= b).shape[0] * (a >= b).shape[-1], -1),
        ((2, 2), (2, 2)),
        ((1, 2), (1, 2)),
    ),
}


@pytest.mark.parametrize("name", sorted(FUZZ_PROGRAMS))
def test_shape_inputs_computed_at_run_time(name):
    fn, shapes, drift = FUZZ_PROGRAMS[name]
    cf = kiln.compile(fn, dynamic=True)
    rng = np.random.default_rng(1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # captured, not served eagerly
        for call_shapes in (shapes, shapes, drift):
            args = [rng.standard_normal(s) for s in call_shapes]
            _check(cf(*args), fn(*args))
    assert cf.state == kiln.State.Compiled


def test_shape_inputs_computed_at_run_time_infer_fresh_sizes():
    from kiln.ops.registry import TensorType, get_op
    from kiln.symbolic import is_fresh

    f32, i64 = np.dtype(np.float32), np.dtype(np.int64)
    (out,) = get_op("Reshape").infer(
        [TensorType(f32, (2, 3)), TensorType(i64, (2,))], {"allowzero": 0}
    )
    assert len(out.shape) == 2 and all(is_fresh(d) for d in out.shape)
    (flat,) = get_op("Reshape").infer(
        [TensorType(f32, (2, 3)), TensorType(i64, (1,))], {"allowzero": 0}
    )
    assert flat.shape == (6,)
    starts = TensorType(i64, (1,), (0,))
    (part,) = get_op("Slice").infer([TensorType(f32, (3, 4)), starts, TensorType(i64, (1,))], {})
    assert is_fresh(part.shape[0]) and part.shape[1] == 4


def test_index_by_a_size_out_of_bounds_raises_index_error_like_numpy():
    # tools/fuzz.py 1:3267: a[a.shape[0] - 1] with a drifted to size 0
    def fn(a):
        return a[a.shape[0] - 1]

    for dynamic in (None, True):
        cf = kiln.compile(fn, dynamic=dynamic)
        for n in (4, 4, 3):
            x = np.arange(n * 3.0).reshape(n, 3)
            _check(cf(x), fn(x))
        with pytest.raises(IndexError):
            fn(np.zeros((0, 3)))
        with pytest.raises(IndexError):
            cf(np.zeros((0, 3)))


def test_static_index_on_a_dynamic_axis_wraps_and_checks_bounds():
    def fn(a):
        return a[-2] + a[1]

    cf = kiln.compile(fn, dynamic=True)
    for n in (4, 2, 6):
        x = np.arange(n * 2.0).reshape(n, 2)
        _check(cf(x), fn(x))
    with pytest.raises(IndexError):
        cf(np.zeros((1, 2)))


W = np.linspace(1.0, 2.0, 3)


@pytest.mark.parametrize(
    "fn",
    [lambda x: x + W * x.shape[0], lambda x: x / np.sqrt(x.shape[0])],
    ids=["array_times_size", "sqrt_of_size"],
)
def test_numpy_ufuncs_of_a_size_are_recorded(fn):
    cf = kiln.compile(fn, dynamic=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for n in (2, 3, 5, 7, 9, 11, 13, 15, 17, 19):
            x = np.ones((n, 3))
            _check(cf(x), fn(x))
    assert cf.recapture_count == 0


def test_numpy_functions_taking_numbers_specialize_the_size():
    def fn(x):
        return x * np.linspace(0.0, 1.0, x.shape[0])[:, None] + np.arange(len(x))[:, None]

    cf = kiln.compile(fn, dynamic=True)
    for n in (3, 3, 4):
        x = np.ones((n, 2))
        _check(cf(x), fn(x))
    assert cf.recapture_count == 1  # the guard s0 == 3 re-captured for 4
    x = np.ones((4, 2))
    _check(cf(x), fn(x))
    assert cf.recapture_count == 1


def test_an_unused_reshape_that_numpy_refuses_on_an_empty_array_still_raises():
    # fuzz 7:1081: the reshape's result is dead, but at size 0 NumPy raises on its -1
    def f(a):
        a.reshape(a.shape[0] * a.shape[-1], -1)
        return a.sum(axis=0)

    cf = kiln.compile(f, dynamic=True)
    a = np.arange(6, dtype=np.float32).reshape(3, 2)
    _check(cf(a), f(a))
    _check(cf(a), f(a))
    with pytest.raises(ValueError, match="cannot reshape"):
        f(np.zeros((0, 2), np.float32))
    with pytest.raises(ValueError, match="cannot reshape"):
        cf(np.zeros((0, 2), np.float32))


def test_a_size_compared_in_a_module_named_like_numpy_is_the_users():
    # A user module called numpy_kernels (or numpy_utils) is not NumPy: its comparison of a
    # dynamic size records a guard (it raised TypeError before)
    module = types.ModuleType("numpy_kernels_user")
    exec(  # noqa: S102 - a function whose globals are that module's
        "def f(x):\n    return x[:2] * 2 if x.shape[0] > 6 else x * 3\n", module.__dict__
    )
    cf = kiln.compile(module.f, dynamic=True)
    for n in (8, 8, 3, 9):
        x = np.arange(n, dtype=np.float64)
        _check(cf(x), module.f(x))


def test_a_data_dependent_count_taken_as_an_int_recaptures_when_it_changes():
    """Fuzz 23:2369: ``range(len(np.where(x)[0]))`` specializes a count only the graph knows
    (a value guard checked after the run); a later call with fewer elements made the plan raise
    before the check. A run that raises in a graph with value guards is a guard miss: the call
    is served eagerly (NumPy's answer, or NumPy's error) and captured again."""

    def f(a):
        picked = np.where(np.ceil(a))[0]
        return np.array([(picked[i] / a).sum() for i in range(len(picked))])

    cf = kiln.compile(f, dynamic=True)
    calls = [
        np.array([[True, True, False]]),
        np.array([[True, True, False]]),
        np.zeros((0, 3), np.bool_),
        np.array([[True, False, False], [False, True, True]]),
    ]
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for a in calls:
            got, want = cf(a), f(a)
            np.testing.assert_array_equal(got, want, strict=True)


def test_a_dead_matmul_whose_sizes_stop_agreeing_still_raises():
    """Fuzz 23:2497, 24:591: an unused ``a @ b`` over two dynamic contracted sizes was removed
    as dead code, so a drift where they differ returned a result NumPy refuses."""

    def f(a, b):
        unused = a @ b  # noqa: F841 - NumPy checks the sizes even so
        return np.log2(np.abs(a) + 1)

    cf = kiln.compile(f, dynamic=True)
    a, b = np.ones((2, 2), np.float32), np.ones((2, 2))
    np.testing.assert_array_equal(cf(a, b), f(a, b), strict=True)
    np.testing.assert_array_equal(cf(a, b), f(a, b), strict=True)
    a2, b2 = np.ones((6, 2), np.float32), np.ones((6, 2))
    with pytest.raises(ValueError, match="matmul"):
        f(a2, b2)
    with pytest.raises(ValueError, match="matmul"):
        cf(a2, b2)
    a3, b3 = np.ones((3, 4), np.float32), np.ones((4, 4))  # sizes that agree: no error
    np.testing.assert_array_equal(cf(a3, b3), f(a3, b3), strict=True)


def test_a_size_pinned_by_another_pin_is_guarded_too():
    """Fuzz 26:2329: ``t0 - a`` broadcasts two dynamic sizes (``s1`` against ``s0``) and one
    against 2; pinning ``s1`` to 2 left ``2`` against ``s0``, which inference took as 2
    without a guard, so the dead subtraction vanished and a drift NumPy refuses returned."""

    def f(a):
        t0 = np.stack([a, a], axis=2)
        unused = t0 - a  # noqa: F841 - NumPy checks the broadcast even so
        return np.expand_dims(a, -1)

    cf = kiln.compile(f, dynamic=True)
    a = np.arange(4.0).reshape(2, 2)
    np.testing.assert_array_equal(cf(a), f(a), strict=True)
    np.testing.assert_array_equal(cf(a), f(a), strict=True)
    a2 = np.arange(6.0).reshape(3, 2)
    with pytest.raises(ValueError, match="broadcast"):
        f(a2)
    with pytest.raises(ValueError, match="broadcast"):
        cf(a2)
    assert any(
        "once other sizes were pinned" in line for line in kiln.explain(cf, file=False).splitlines()
    )


def test_a_reshaped_size_broadcast_against_a_pinned_one_settles():
    """Fuzz 49:1736: a reshape's computed size (fresh, renamed by every specialization)
    broadcast against a static size was pinned again and again: the first call never ended.
    Only the inputs' sizes are pinned; the run's broadcast checks a fresh one."""

    def f(a):
        t1 = a >= a.reshape(-1, 5)
        t2 = t1.reshape(t1.shape[0], -1)
        return np.remainder(t1, t2), t2

    cf = kiln.compile(f, dynamic=True)
    for rows in (4, 4, 3, 6):
        a = np.arange(rows * 5).reshape(rows, 5) % 3 == 0
        for got, want in zip(cf(a), f(a)):
            np.testing.assert_array_equal(got, want, strict=True)
    assert cf.state == kiln.State.Compiled and not cf.cache_info().recaptures


def test_a_dead_stack_of_arrays_whose_sizes_stop_agreeing_still_raises():
    """Fuzz 59:3465: ``np.stack([b.mean(axis=-1), a])`` joins sizes ``s1`` and ``s0``; its
    result is unused, and dead-code elimination removed it, so a drift where they differ
    returned a result instead of NumPy's error."""

    def f(a, b):
        unused = np.stack([b.mean(axis=-1), a / 1], axis=0)  # noqa: F841 - NumPy checks
        return b * 2

    cf = kiln.compile(f, dynamic=True)
    a, b = np.ones(5, bool), np.ones((5, 5))
    np.testing.assert_array_equal(cf(a, b), f(a, b), strict=True)
    np.testing.assert_array_equal(cf(a, b), f(a, b), strict=True)
    a2 = np.ones(6, bool)
    with pytest.raises(ValueError):
        f(a2, b)
    with pytest.raises(ValueError):
        cf(a2, b)
    b3 = np.ones((6, 3))  # sizes that agree again: no error
    np.testing.assert_array_equal(cf(a2, b3), f(a2, b3), strict=True)


def test_a_dead_product_whose_batch_sizes_may_not_broadcast_still_runs():
    """Fuzz 52:1907: ``np.matmul(t0, a)`` broadcasts ``t0``'s batch axes ``(s0, 2)`` against
    ``a``'s ``(s0,)`` (``2`` against ``s0``); its result is unused, and dead-code elimination
    removed it, so a size NumPy refuses returned a result instead of NumPy's error."""

    def f(a):
        t0 = np.stack([a, a], axis=3)
        unused = np.matmul(t0, a)  # noqa: F841 - NumPy checks the broadcast even so
        return a.reshape(-1)

    cf = kiln.compile(f, dynamic=True)
    a = np.arange(6, dtype=np.float32).reshape(1, 2, 3)
    np.testing.assert_array_equal(cf(a), f(a), strict=True)
    np.testing.assert_array_equal(cf(a), f(a), strict=True)
    a2 = np.arange(18, dtype=np.float32).reshape(3, 2, 3)
    with pytest.raises(ValueError, match="broadcast"):
        f(a2)
    with pytest.raises(ValueError, match="broadcast"):
        cf(a2)
    a3 = np.arange(24, dtype=np.float32).reshape(2, 2, 6)  # 2 against 2: NumPy's answer
    np.testing.assert_array_equal(cf(a3), f(a3), strict=True)


def test_a_size_of_one_broadcast_against_a_static_size_is_pinned_to_one():
    """Fuzz 27:3770: with one row, ``t0 // a`` broadcasts ``a``'s dynamic size (1 in this call)
    against 2; the capture pinned it to 2, so the graph took inputs of size 2 while its
    recording (``len(t0)`` rows) held for size 1, and returned one row for two."""

    def f(a):
        t0 = np.stack([a, a], axis=-1)
        t1 = t0 // a
        return np.array([(t0[i] * t1).sum() for i in range(len(t0))])

    cf = kiln.compile(f, dynamic=True)
    a = np.array([-2.25], np.float32)
    np.testing.assert_array_equal(cf(a), f(a), strict=True)
    np.testing.assert_array_equal(cf(a), f(a), strict=True)
    for a2 in (np.array([1.5, 3.5], np.float32), np.array([0.5], np.float32)):
        np.testing.assert_array_equal(cf(a2), f(a2), strict=True)
    assert "broadcast from size 1 in this call" in kiln.explain(cf, file=False)
