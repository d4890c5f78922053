"""Eager plans (``kiln.tensor.eager_plan``) and the eager door's cache keys: a front door's
operator calls are recorded once per signature (dtypes, shapes, Python values) and replayed;
a replay must give exactly what the front door gives and what NumPy gives (values bitwise,
dtype, shape, memory sharing), for every dtype, scalar and argument pattern that reaches the
same front door in turn."""

from __future__ import annotations

import sys
import threading
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import kiln

ktensor = sys.modules["kiln.tensor"]  # the module (``kiln.tensor`` is also a function)

# The ops of benchmarks/eager_ops.py, written once for ``lib`` (numpy or kiln); m is 8x8.
OPS: dict[str, Callable[..., Any]] = {
    "a + b": lambda lib, a, b, m: a + b,
    "a * 2.0": lambda lib, a, b, m: a * 2.0,
    "2 - a": lambda lib, a, b, m: 2 - a,
    "a.sum()": lambda lib, a, b, m: a.sum(),
    "a.sum(axis=0)": lambda lib, a, b, m: a.sum(axis=0),
    "sum(a, axis=0)": lambda lib, a, b, m: lib.sum(a, axis=0),
    "a.mean(axis=0)": lambda lib, a, b, m: a.mean(axis=0),
    "exp(a)": lambda lib, a, b, m: lib.exp(a),
    "a[1:3]": lambda lib, a, b, m: a[1:3],
    "a[::-2]": lambda lib, a, b, m: a[::-2],
    "a.reshape(2, 4)": lambda lib, a, b, m: a.reshape(2, 4),
    "a @ m": lambda lib, a, b, m: a @ m,
    "where(a > 0, a, 0)": lambda lib, a, b, m: lib.where(a > 0, a, 0),
    "a < b": lambda lib, a, b, m: a < b,
    "-a": lambda lib, a, b, m: -a,
}

# The same front doors in turn on these dtypes: a cache keyed too loosely would hand one
# dtype's kernel or constants to the next.
DTYPES = ["float32", "float64", "int8", "int64", "uint8", "bool"]


def _operands(dtype: str, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = (rng.standard_normal(8) * 4).astype(dtype)
    b = (rng.standard_normal(8) * 4).astype(dtype)
    m = (rng.standard_normal((8, 8)) * 2).astype(dtype)
    return a, b, m


def _numpy(fn: Callable[..., Any], *arrays: np.ndarray) -> Any:
    with np.errstate(all="ignore"):
        try:
            return np.asarray(fn(np, *arrays))
        except Exception as exc:  # noqa: BLE001 - the error kiln must raise too
            return exc


def _kiln(fn: Callable[..., Any], *arrays: np.ndarray) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # kernels stay quiet, replayed or not
        try:
            return fn(kiln, *[kiln.asarray(x) for x in arrays])
        except Exception as exc:  # noqa: BLE001
            return exc


def _same(got: Any, expected: Any) -> None:
    if isinstance(expected, Exception):
        assert isinstance(got, Exception), f"expected {expected!r}, got a result"
        assert isinstance(got, type(expected)) or isinstance(expected, type(got))
        return
    assert not isinstance(got, Exception), got
    assert isinstance(got, kiln.Tensor)
    got = np.asarray(got)
    assert got.dtype == expected.dtype
    assert got.shape == expected.shape
    assert got.tobytes() == expected.tobytes()  # bitwise: -0.0, NaN, wrapping integers


@pytest.mark.parametrize("name", list(OPS))
def test_replays_equal_numpy_across_dtypes(name: str) -> None:
    fn = OPS[name]
    for round_ in range(3):  # first: recorded; then replayed, also after other dtypes
        for k, dtype in enumerate(DTYPES):
            arrays = _operands(dtype, seed=10 * round_ + k)
            _same(_kiln(fn, *arrays), _numpy(fn, *arrays))


@pytest.mark.parametrize("dtype", ["float32", "float64", "int8", "uint8", "int64"])
def test_python_scalars_are_weak_and_keyed_by_value(dtype: str) -> None:
    a = np.array([1, 2, 3, 100], dtype=dtype)
    t = kiln.asarray(a)
    scalars: list[Any] = [2, 3, 2.5, -1.0, 2, 2.5, 300, True, -3, 300]
    for _ in range(2):
        for s in scalars:
            for fn in (lambda x, s=s: x * s, lambda x, s=s: s - x, lambda x, s=s: x < s):
                _same(_kiln(lambda lib, x, fn=fn: fn(x), a), _numpy(lambda lib, x, fn=fn: fn(x), a))
    assert t.dtype == a.dtype


def test_float_zeros_and_nan_scalars_are_told_apart() -> None:
    a = np.array([1.0, -1.0, np.inf, 0.0], dtype=np.float32)
    for _ in range(2):
        for s in (0.0, -0.0, float("nan"), 0.0, -0.0):
            for fn in (lambda x, s=s: x * s, lambda x, s=s: x + s):
                _same(_kiln(lambda lib, x, fn=fn: fn(x), a), _numpy(lambda lib, x, fn=fn: fn(x), a))


def test_scalar_zero_d_array_and_numpy_scalar_promote_as_numpy() -> None:
    # NEP 50: a Python float is weak, a 0-d array and a NumPy scalar are not.
    a = np.array([1.5, -2.0], dtype=np.float32)
    operands: list[Any] = [2.0, np.float64(2.0), 2.0, np.array(2.0), 2.0]
    for _ in range(2):
        for s in operands:
            expected = a * s
            got = kiln.asarray(a) * (kiln.asarray(s) if isinstance(s, np.ndarray) else s)
            _same(got, np.asarray(expected))


def test_the_same_array_twice_is_its_own_signature() -> None:
    x = np.array([1.0, 2.0, -3.0])
    y = np.array([4.0, 5.0, 6.0])
    tx, ty = kiln.asarray(x), kiln.asarray(y)
    for _ in range(2):
        _same(tx * tx, x * x)
        _same(tx * ty, x * y)
        _same(ty * tx, y * x)
        _same(kiln.where(tx > 0, tx, ty), np.where(x > 0, x, y))
        _same(kiln.where(tx > 0, ty, tx), np.where(x > 0, y, x))


# (op, whether NumPy's result is a view of the input)
ALIASING: list[tuple[str, Callable[[Any], Any], bool]] = [
    ("x + 0.0", lambda x: x + 0.0, False),
    ("x * 1", lambda x: x * 1, False),
    ("astype same", lambda x: x.astype(x.dtype), False),
    ("copy", lambda x: x.copy(), False),
    ("flatten", lambda x: x.flatten(), False),
    ("sum axis ()", lambda x: x.sum(axis=()), False),
    ("clip", lambda x: x.clip(-10.0, 10.0), False),
    ("slice", lambda x: x[1:], True),
    ("reshape", lambda x: x.reshape(2, 3), True),
    ("transpose", lambda x: x.reshape(2, 3).T, True),
    ("ravel", lambda x: x.ravel(), True),
]


@pytest.mark.parametrize(("name", "op", "view"), ALIASING, ids=[c[0] for c in ALIASING])
def test_replayed_results_alias_as_numpys(name: str, op: Callable, view: bool) -> None:
    base = np.arange(6.0) - 2.5
    for _ in range(3):
        x = base.copy()
        t = kiln.asarray(x.copy())
        got, want = op(t), op(x)
        assert np.shares_memory(np.asarray(got), np.asarray(t)) == view
        assert np.shares_memory(want, x) == view
        np.asarray(got)[...] = 7.0  # writes reach the input exactly when NumPy's do
        want[...] = 7.0
        _same(t, x)


def test_a_replayed_result_never_shares_a_plans_constants() -> None:
    a = kiln.asarray(np.array([-1.0, 2.0, -3.0]))
    for _ in range(3):
        r = kiln.where(a > 0, a, 0)
        assert r.tolist() == [0.0, 2.0, 0.0]
        np.asarray(r)[...] = 99.0  # a write into a result must not reach the next call's
        s = a * 2.0
        assert s.tolist() == [-2.0, 4.0, -6.0]
        np.asarray(s)[...] = 99.0


def test_a_front_door_that_reads_contents_is_not_planned() -> None:
    # ``x ** e`` reads a small integer exponent's values (negative ones raise, as NumPy);
    # a plan recorded for [2, 3] must not serve [-1, 2].
    x = kiln.asarray(np.array([2, 3], dtype=np.int64))
    for _ in range(2):
        assert (x ** kiln.asarray(np.array([2, 3]))).tolist() == [4, 27]
    with pytest.raises(ValueError):
        x ** kiln.asarray(np.array([-1, 2]))
    # An index tensor's values choose the elements: never a plan's constant.
    for idx in ([0, 1], [1, 0], [1, 1]):
        assert x[kiln.asarray(np.array(idx))].tolist() == np.array([2, 3])[idx].tolist()


def test_errors_on_a_planned_signature_are_the_front_doors() -> None:
    a = kiln.asarray(np.array([1, 2], dtype=np.int8))
    for _ in range(2):
        assert (a + 100).tolist() == [101, 102]
        with pytest.raises(OverflowError):
            a + 300
    m = kiln.asarray(np.ones((2, 3)))
    for _ in range(2):
        assert (m @ kiln.asarray(np.ones(3))).tolist() == [3.0, 3.0]
    with pytest.raises(ValueError):
        m @ kiln.asarray(np.ones(2))


def test_reduction_keys_leave_out_the_datas_contents() -> None:
    # ReduceSum's infer never reads the data: a small float tensor's contents must not join
    # the eager key (one entry serves every value). Its axes' contents join it where the
    # result's shape depends on them (a 2-D input), and where they choose the faster call
    # (``np.add.reduce`` with the axes bound, OpDef.fast_kernel) even though the shape does
    # not (a 1-D input: every axis gives a scalar).
    from kiln.tensor import call

    ktensor._eager.clear()
    for axis in (0, -1, 0, -1):
        axes = kiln.asarray(np.array([axis]))
        for k in range(4):
            x = np.arange(6.0) * k - 1.5  # 1-D float: its type carries its contents
            got = call("ReduceSum", kiln.asarray(x), axes, keepdims=0)
            _same(got, x.sum(axis=axis))
    assert len(ktensor._eager) == 3  # the key, and one per axes' contents (never the data's)
    ktensor._eager.clear()
    m = np.arange(6.0).reshape(2, 3)
    for axis in (0, 1, 0, 1):
        got = call("ReduceSum", kiln.asarray(m), kiln.asarray(np.array([axis])), keepdims=0)
        _same(got, m.sum(axis=axis))
    assert len(ktensor._eager) == 3  # the key, and one per axes' contents
    with pytest.raises(ValueError):
        call("ReduceSum", kiln.asarray(np.arange(6.0)), kiln.asarray(np.array([3])), keepdims=0)


def test_capture_records_planned_front_doors() -> None:
    a = kiln.asarray(np.array([1.0, -2.0, 3.0]))

    def f(x: Any) -> Any:
        return kiln.where(x > 0, x * 2.0, 0)[1:].sum()

    for _ in range(2):
        eager = f(a)  # plans filled
    traced = kiln.trace(f, a)
    ops = {node.op for node in traced.graph.nodes}
    assert {"Greater", "Mul", "Where", "Slice", "ReduceSum"} <= ops
    compiled = kiln.compile(f)
    for _ in range(3):
        _same(compiled(a), np.asarray(eager))


def test_the_cache_off_runs_the_front_door() -> None:
    a = kiln.asarray(np.array([1.0, 2.0]))
    saved = ktensor.EAGER_CACHE
    ktensor.EAGER_CACHE = False
    try:
        for _ in range(2):
            assert (a * 3.0).tolist() == [3.0, 6.0]
    finally:
        ktensor.EAGER_CACHE = saved


def test_threads_replay_their_own_arguments() -> None:
    results: dict[int, list[list[float]]] = {}

    def work(k: int) -> None:
        t = kiln.asarray(np.full(4, float(k)))
        results[k] = [((t + t) * 2.0)[1:3].tolist() for _ in range(200)]

    threads = [threading.Thread(target=work, args=(k,)) for k in range(1, 5)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for k, got in results.items():
        assert all(r == [4.0 * k, 4.0 * k] for r in got)


# The mechanism's own guards, on front doors written here for them.


def test_a_front_door_reading_a_small_tensors_contents_is_not_planned() -> None:
    from kiln.tensor import call, eager_plan

    @eager_plan(2)
    def scale_by(x: Any, n: Any) -> Any:
        k = n.type.value[0]  # the contents a small integer tensor's type carries
        return call("Mul", x, kiln.asarray(np.array([float(k)])))

    @eager_plan(2)
    def scale_by_item(x: Any, n: Any) -> Any:
        return call("Mul", x, kiln.asarray(np.array([float(n.item())])))  # a host read

    x = kiln.asarray(np.array([1.0, 2.0]))
    for fn in (scale_by, scale_by_item):
        for k in (2, 3, 2, 5):
            assert fn(x, kiln.asarray(np.array([k]))).tolist() == [1.0 * k, 2.0 * k]


def test_an_argument_whose_contents_choose_the_kernel_is_not_planned() -> None:
    from kiln.tensor import call, eager_plan

    @eager_plan(2)
    def reshape_to(x: Any, shape: Any) -> Any:
        return call("Reshape", x, shape)  # Reshape's infer reads its target's contents

    x = kiln.asarray(np.arange(6.0))
    for shape in ([2, 3], [3, 2], [2, 3], [6, 1]):
        got = reshape_to(x, kiln.asarray(np.array(shape)))
        _same(got, np.arange(6.0).reshape(shape))


def test_a_view_of_a_constant_is_never_handed_out_twice() -> None:
    from kiln.tensor import call, eager_plan

    @eager_plan(1)
    def first_row(x: Any) -> Any:
        table = kiln.asarray(np.arange(6.0).reshape(2, 3))  # a constant of the front door
        starts, ends = kiln.asarray(np.array([0])), kiln.asarray(np.array([1]))
        return call("Slice", table, starts, ends)  # a view of it

    x = kiln.asarray(np.zeros(1))
    for _ in range(3):
        row = first_row(x)
        assert row.tolist() == [[0.0, 1.0, 2.0]]
        np.asarray(row)[...] = 9.0  # writes into this call's table only


def test_replayed_kernels_stay_quiet_whatever_the_callers_error_state() -> None:
    a = kiln.asarray(np.array([1.0, -1.0, 0.0]))
    z = kiln.asarray(np.zeros(3))
    for state in ("warn", "raise", "warn"):
        with np.errstate(all=state), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(3):
                got = np.asarray(a / z)
                assert np.isinf(got[:2]).all() and np.isnan(got[2])
                assert np.isinf(np.asarray(kiln.exp(a * 1000.0))[0])
        assert not caught, [str(w.message) for w in caught]


def test_an_array_the_front_door_made_from_a_result_is_no_constant() -> None:
    from kiln.tensor import Tensor, call, eager_plan

    @eager_plan(1)
    def double_first(x: Any) -> Any:
        y = call("Mul", x, kiln.asarray(np.array(2.0)))
        first = Tensor._wrap(y._data[:1])  # a view of a result, made outside the ops (no read)
        return call("Add", y, first)

    for k in (1.0, 2.0, 3.0):
        x = np.array([k, 10.0])
        assert double_first(kiln.asarray(x)).tolist() == (2 * x + 2 * x[0]).tolist()


# Every planned operator and method, replayed on new values, against the same front door run
# with the cache off (which never plans): the replay must be the front door's answer.
METHOD_CALLS: list[tuple[str, Callable[[Any, Any], Any]]] = [
    ("== != < <= > >=", lambda x, y: [x == y, x != y, x < y, x <= y, x > y, x >= y]),
    ("+ - * / // % **", lambda x, y: [x + y, x - y, x * y, x / y, x // y, x % y, x**2]),
    ("reflected", lambda x, y: [2 + x, 2 - x, 3 * x, 1 / x, 7 // x, 5 % x, 2**x]),
    ("& | ^ ~", lambda x, y: [x & y, x | y, x ^ y, ~x] if x.dtype.kind in "biu" else []),
    ("unary", lambda x, y: [-x, +x, abs(x)] if x.dtype != bool else [abs(x)]),
    ("@ dot", lambda x, y: [x.reshape(2, 3) @ y.reshape(3, 2), x.dot(y)]),
    ("index", lambda x, y: [x[1:4], x[::-1], x[None, 2:], x[..., 0], x[[0, 2]], x[2]]),
    ("shape", lambda x, y: [x.reshape(3, 2).T, x.reshape((2, 3)).transpose(1, 0), x.flatten()]),
    (
        "shape 2",
        lambda x, y: [x.reshape(1, 6).squeeze(), x.ravel(), x.reshape(2, 3).swapaxes(0, 1)],
    ),
    ("sum mean prod", lambda x, y: [x.sum(), x.sum(axis=0), x.mean(), x.prod(keepdims=True)]),
    ("max min arg", lambda x, y: [x.max(), x.min(axis=0), x.argmax(), x.argmin(axis=0)]),
    ("var std", lambda x, y: [x.var(), x.std(ddof=1)] if x.dtype != bool else []),
    ("any all cumsum", lambda x, y: [x.any(), x.all(axis=0), x.cumsum()]),
    ("astype copy clip round", lambda x, y: [x.astype("float32"), x.copy(), x.clip(0, 3)]),
    ("round", lambda x, y: [x.round(1)] if x.dtype != bool else []),
    ("functions", lambda x, y: [kiln.add(x, y), kiln.maximum(x, 1), kiln.where(x > y, x, y)]),
    ("functions 2", lambda x, y: [kiln.exp(x), kiln.sqrt(abs(x)), kiln.less(x, 2)]),
    (
        "ufunc functions",
        lambda x, y: [
            np.abs(x),
            np.negative(x) if x.dtype != bool else np.positive(x),
            np.floor_divide(x, y),
            np.remainder(x, 3),
            np.power(x, 2),
            np.sign(x),
            np.square(x),
            np.floor(x),
            np.log1p(abs(x)),
            np.isnan(x),
            np.logical_and(x, y),
            np.clip(x, 0, 3),
            np.round(x, 1),
        ],
    ),
    (
        "integer ufunc functions",
        lambda x, y: [np.bitwise_and(x, y), np.invert(x)] if x.dtype.kind in "biu" else [],
    ),
    (
        "join functions",
        lambda x, y: [
            np.concatenate([x, y]),
            np.concatenate((x, x)),
            np.concatenate([x.reshape(2, 3), y.reshape(2, 3)], axis=None),
            np.stack([x, y], axis=1),
            np.hstack([x, y]),
            np.vstack((y, x)),
        ],
    ),
    (
        "shape functions",
        lambda x, y: [
            np.reshape(x, (2, 3)),
            np.transpose(x.reshape(2, 3)),
            np.swapaxes(x.reshape(2, 3), 0, 1),
            np.moveaxis(x.reshape(1, 2, 3), 0, -1),
            np.squeeze(x.reshape(1, 6), axis=0),
            np.expand_dims(x, (0, -1)),
            np.flip(x),
            np.broadcast_to(x, (2, 6)),
            np.ravel(x.reshape(3, 2)),
        ],
    ),
    (
        "linalg functions",
        lambda x, y: [
            np.matmul(x.reshape(2, 3), y.reshape(3, 2)),
            np.dot(x, y),
            np.vdot(x, y),
            np.inner(x, y),
            np.outer(x, y),
        ],
    ),
    (
        "reduce functions",
        lambda x, y: [
            np.sum(x, axis=0),
            kiln.sum(x.reshape(2, 3), axis=(0, 1), keepdims=True),
            np.mean(x.reshape(3, 2), axis=-1),
            np.argmax(x),
            np.cumsum(x.reshape(2, 3), axis=1),
            np.prod(x, dtype=np.int64),
        ],
    ),
]


def _values(dtype: str, k: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(k)
    x = rng.integers(1, 5, 6) * (1 if dtype in ("uint8", "bool") else rng.choice([-1, 1], 6))
    y = rng.integers(1, 5, 6)
    return x.astype(dtype), y.astype(dtype)


def _outcome(fn: Callable[[Any, Any], Any], x: np.ndarray, y: np.ndarray) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return [
                (np.asarray(r).dtype, np.asarray(r).shape, np.asarray(r).tobytes())
                for r in fn(kiln.asarray(x), kiln.asarray(y))
            ]
        except Exception as exc:  # noqa: BLE001 - the front door's error, compared by type
            return type(exc)


@pytest.mark.parametrize(("name", "fn"), METHOD_CALLS, ids=[c[0] for c in METHOD_CALLS])
def test_planned_methods_replay_the_front_doors_answer(name: str, fn: Callable) -> None:
    for k in range(3):
        for dtype in ("float64", "float32", "int64", "int8", "uint8", "bool"):
            x, y = _values(dtype, k)
            planned = _outcome(fn, x, y)
            ktensor.EAGER_CACHE = False
            try:
                full = _outcome(fn, x, y)
            finally:
                ktensor.EAGER_CACHE = True
            assert planned == full, (dtype, k)


# Reductions with keywords (``t.sum(axis=0)``, ``np.sum(t, axis=(0, -1), keepdims=True)``):
# planned per signature, each replaying the NumPy engine's direct call (``ufunc.reduce`` with
# the axes bound, ``x.argmax(axis)``, ``x.cumsum(axis, dtype)``); NumPy's answer bit for bit,
# and NumPy's error type where NumPy refuses.
REDUCTION_CALLS: list[tuple[str, Callable[[Any, Any], Any]]] = [
    ("sum axis", lambda lib, x: x.sum(axis=0)),
    ("sum -1 keepdims", lambda lib, x: x.sum(axis=-1, keepdims=True)),
    ("sum tuple", lambda lib, x: x.sum(axis=(0, -1))),
    ("sum tuple reversed", lambda lib, x: x.sum(axis=(-1, 0), keepdims=True)),
    ("sum empty tuple", lambda lib, x: x.sum(axis=())),
    ("sum dtype", lambda lib, x: x.sum(axis=1, dtype=np.float32)),
    ("sum dtype int8", lambda lib, x: x.sum(0, np.int8)),
    ("sum positional", lambda lib, x: x.sum(1)),
    ("np.sum", lambda lib, x: np.sum(x, axis=0)),
    ("lib.sum keepdims", lambda lib, x: lib.sum(x, axis=1, keepdims=True)),
    ("mean", lambda lib, x: x.mean(axis=0)),
    ("mean all", lambda lib, x: x.mean()),
    ("mean keepdims", lambda lib, x: np.mean(x, axis=(0, 1), keepdims=True)),
    ("mean float32", lambda lib, x: x.mean(axis=1, dtype=np.float32)),
    ("prod", lambda lib, x: x.prod(axis=-1)),
    ("max min", lambda lib, x: [x.max(axis=0), x.min(axis=-1, keepdims=True)]),
    ("np.max", lambda lib, x: np.max(x, axis=1)),
    ("argmax", lambda lib, x: [x.argmax(axis=1), x.argmin(axis=0), x.argmax()]),
    ("np.argmax keepdims", lambda lib, x: np.argmax(x, axis=-1, keepdims=True)),
    ("any all", lambda lib, x: [x.any(axis=0), np.all(x, axis=1, keepdims=True)]),
    ("cumsum", lambda lib, x: [x.cumsum(axis=0), x.cumsum(axis=-1), np.cumsum(x, axis=1)]),
    ("var std", lambda lib, x: [x.var(axis=0), x.std(axis=1, ddof=1)]),
    ("axis out of range", lambda lib, x: x.sum(axis=2)),
    ("duplicate axis", lambda lib, x: x.sum(axis=(0, 0))),
    ("argmax out of range", lambda lib, x: x.argmax(axis=-3)),
    ("cumsum out of range", lambda lib, x: x.cumsum(axis=5)),
]


def _numpy_outcome(fn: Callable[..., Any], x: np.ndarray) -> Any:
    with np.errstate(all="ignore"):
        try:
            result = fn(np, x)
        except Exception as exc:  # noqa: BLE001 - the error type kiln must raise too
            return type(exc)
    results = result if isinstance(result, list) else [result]
    return [(np.asarray(r).dtype, np.asarray(r).shape, np.asarray(r).tobytes()) for r in results]


def _kiln_outcome(fn: Callable[..., Any], x: np.ndarray) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # kernels stay quiet, replayed or not
        try:
            result = fn(kiln, kiln.asarray(x))
        except Exception as exc:  # noqa: BLE001
            return type(exc)
    results = result if isinstance(result, list) else [result]
    assert all(isinstance(r, kiln.Tensor) for r in results)
    return [(np.asarray(r).dtype, np.asarray(r).shape, np.asarray(r).tobytes()) for r in results]


@pytest.mark.parametrize(("name", "fn"), REDUCTION_CALLS, ids=[c[0] for c in REDUCTION_CALLS])
def test_reductions_with_keywords_replay_numpy(name: str, fn: Callable) -> None:
    shapes = [(3, 4), (2, 5), (3, 4)]  # the first shape again: replayed after another
    for k in range(3):  # recorded, then replayed on new values
        for shape in shapes:
            for dtype in ("float64", "float32", "float16", "int64", "int8", "uint8", "bool"):
                rng = np.random.default_rng(k)
                x = (rng.standard_normal(shape) * 50).astype(dtype)
                if dtype == "float64" and k == 1:
                    x[0, 1] = np.nan
                expected = _numpy_outcome(fn, x)
                got = _kiln_outcome(fn, x)
                if isinstance(expected, type):
                    assert isinstance(got, type) and issubclass(got, expected), (dtype, shape)
                else:
                    assert got == expected, (dtype, shape, k)


FAST_CASES: list[tuple[str, tuple[int, ...], Any, dict[str, int]]] = [
    ("ReduceMean", (3, 4), (1,), {"keepdims": 0}),
    ("ReduceMean", (3, 4), (-1, 0), {"keepdims": 1}),
    ("ReduceMean", (5,), (0,), {"keepdims": 0}),
    ("ReduceMean", (2, 3), None, {"keepdims": 0}),
    ("ReduceMean", (0, 3), (0,), {"keepdims": 0}),  # an empty mean: NaN
    ("ReduceMean", (2, 3), (), {"keepdims": 1, "noop_with_empty_axes": 1}),
    ("ArgMax", (3, 4), None, {"axis": 1, "keepdims": 0}),
    ("ArgMax", (3, 4), None, {"axis": -2, "keepdims": 1}),
    ("ArgMin", (6,), None, {"axis": 0, "keepdims": 0}),
    ("ArgMin", (0, 3), None, {"axis": 1, "keepdims": 1}),
    ("ArgMax", (3, 4), None, {"axis": 1, "keepdims": 0, "select_last_index": 1}),
    ("CumSum", (3, 4), 1, {}),
    ("CumSum", (3, 4), -2, {}),
    ("CumSum", (7,), 0, {}),
    ("CumSum", (2, 0), -1, {}),
    ("CumSum", (3, 4), 1, {"exclusive": 1}),
    ("CumSum", (3, 4), 0, {"reverse": 1}),
]


@pytest.mark.parametrize(("op", "shape", "axes", "attrs"), FAST_CASES)
@pytest.mark.parametrize(
    "dtype", ["float16", "float32", "float64", "complex64", "int32", "int64", "uint8", "bool"]
)
def test_fast_reduction_calls_equal_the_kernel(op, shape, axes, attrs, dtype) -> None:
    """The direct calls the eager door and the NumPy engine choose for ReduceMean, ArgMax /
    ArgMin and CumSum (``OpDef.fast_kernel``) equal the registry kernel bit for bit."""
    from kiln.ops.dispatch import eager_kernel, run_kernel, run_quiet
    from kiln.ops.registry import TensorType, get_op

    opdef = get_op(op)
    dt = np.dtype(dtype)
    rng = np.random.default_rng(5)
    x = (rng.standard_normal(shape) * 1e3).astype(dt)
    if dt.kind == "f" and x.size > 2:
        x.flat[2] = np.nan
    arrays: list[Any] = [x]
    types: list[Any] = [TensorType(dt, shape)]
    if axes is not None:
        a = np.asarray(axes, dtype=np.int64).reshape(-1 if op != "CumSum" else ())
        arrays.append(a)
        types.append(TensorType(a.dtype, a.shape, tuple(int(v) for v in a.reshape(-1))))
    bound = opdef.bind_attrs(attrs)
    try:
        outs = opdef.infer(types, bound)
    except Exception:  # noqa: BLE001 - a dtype the operator does not take
        pytest.skip(f"{op} does not take {dtype}")
    (want,) = run_kernel(opdef, arrays, bound)
    fast = opdef.fast_kernel(types, outs, bound)
    if op == "ReduceMean" and dt.kind not in "fc":
        assert fast is None  # integer means truncate: the registry kernel
    elif attrs.get("select_last_index") or attrs.get("exclusive") or attrs.get("reverse"):
        assert fast is None
    else:
        assert fast is not None
    (got,) = run_quiet(eager_kernel(opdef, types, outs, bound), arrays)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert got.tobytes() == want.tobytes()


def test_a_sequence_of_tensors_is_keyed_by_each_tensor_and_repeats() -> None:
    # np.concatenate([t, t]) and np.concatenate([t, u]) have the same dtypes and shapes; the
    # first reads one array twice, so replaying its plan on [t, u] would hand back t's values.
    t = kiln.asarray(np.array([1.0, 2.0]))
    u = kiln.asarray(np.array([3.0, 4.0]))
    for _ in range(2):
        assert np.concatenate([t, t]).tolist() == [1.0, 2.0, 1.0, 2.0]
        assert np.concatenate([t, u]).tolist() == [1.0, 2.0, 3.0, 4.0]
        assert np.concatenate((u, t)).tolist() == [3.0, 4.0, 1.0, 2.0]
        assert kiln.stack([u, u, t]).tolist() == [[3.0, 4.0], [3.0, 4.0], [1.0, 2.0]]
    # A list mixing tensors and arrays, or holding a recorded tensor, is not planned: the
    # front door runs (and gives NumPy's answer).
    for _ in range(2):
        got = np.concatenate([t, np.array([5.0])])
        assert np.asarray(got).tolist() == [1.0, 2.0, 5.0]
