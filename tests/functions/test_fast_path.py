"""The eager fast path (``kiln.tensor`` call cache, cached ufunc dtype resolution): it must never
change a result. Each case runs with the cache off (every call validated in full), then twice with
it on (the first call fills the cache, the second hits it), and all three must match NumPy
exactly: values (bitwise, so -0.0 and NaN count), dtype and shape; errors must be the same."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import kiln
from kiln.errors import KilnError

ktensor = sys.modules["kiln.tensor"]  # the module (``kiln.tensor`` is also a function)


def f32(*values: float) -> np.ndarray:
    return np.array(values, dtype=np.float32)


A = np.array([0.5, -0.0, np.nan, np.inf, -2.0, 3.0, 0.0, -1.5], dtype=np.float32)
B = np.array([1.0, 0.0, 2.0, -np.inf, 0.0, -0.0, np.nan, 4.0], dtype=np.float32)
I8 = np.array([127, -128, 5, -3], dtype=np.int8)
U8 = np.array([0, 1, 255, 7], dtype=np.uint8)
I64 = np.array([1, -2, 2**62, 9], dtype=np.int64)
M = np.arange(16, dtype=np.float32).reshape(4, 4) - 7.5
COL = np.array([[1.0], [-0.0], [3.0]], dtype=np.float64)

# (name, function of (lib, *operands), operands): lib is numpy or kiln; arrays become tensors.
CASES: list[tuple[str, Callable[..., Any], tuple[Any, ...]]] = [
    ("add", lambda lib, a, b: a + b, (A, B)),
    ("mul_py_float", lambda lib, a: a * 2.0, (A,)),
    ("py_float_rsub", lambda lib, a: 1.0 - a, (A,)),
    ("exp", lambda lib, a: lib.exp(a), (A,)),
    ("maximum_nan_zero", lambda lib, a, b: lib.maximum(a, b), (A, B)),
    ("maximum_py_int", lambda lib, a: lib.maximum(a, 0), (A,)),
    ("minimum_signed_zero", lambda lib, a: lib.minimum(a, -0.0), (A,)),
    ("divide_by_zero", lambda lib, a, b: a / b, (A, B)),
    ("int8_wraps", lambda lib, a: a + 1, (I8,)),
    ("int8_times_py_float", lambda lib, a: a * 2.5, (I8,)),
    ("int8_plus_int64", lambda lib, a, b: a + b, (I8, I64)),
    ("int64_plus_py_int", lambda lib, a: a + 5, (I64,)),
    ("int64_overflow_wraps", lambda lib, a: a * 4, (I64,)),
    ("uint8_minus", lambda lib, a: a - 3, (U8,)),
    ("bool_and_py_bool", lambda lib, a: (a > 0) + True, (A,)),
    ("bool_times_bool", lambda lib, a, b: (a > 0) * (b > 0), (A, B)),
    ("broadcast", lambda lib, c, a: c * a[:4], (COL, A)),
    ("numpy_operand", lambda lib, a: lib.add(a, np.float32(1.5)), (A,)),
    ("sum", lambda lib, a: a.sum(), (A,)),
    ("sum_axis0", lambda lib, m: m.sum(axis=0), (M,)),
    ("sum_axis1", lambda lib, m: m.sum(axis=1), (M,)),
    ("sum_int8", lambda lib, a: a.sum(), (I8,)),
    ("matmul", lambda lib, m: m @ m, (M,)),
    ("reshape_2_8", lambda lib, m: m.reshape(2, 8), (M,)),
    ("reshape_8_2", lambda lib, m: m.reshape(8, 2), (M,)),
    ("transpose", lambda lib, m: m.T + 0.0, (M,)),
    ("take", lambda lib, a: lib.take(a, np.array([3, 0, -1])), (A,)),
    ("take_other", lambda lib, a: lib.take(a, np.array([1, 2, 7])), (A,)),
    ("where", lambda lib, a, b: lib.where(a > b, a, b), (A, B)),
    ("clip", lambda lib, a: lib.clip(a, -1.0, 1.0), (A,)),
]

ERRORS: list[tuple[str, Callable[..., Any], tuple[Any, ...]]] = [
    ("broadcast_mismatch", lambda lib, a, b: a + b[:3], (A, B)),
    ("int8_py_int_overflow", lambda lib, a: a + 300, (I8,)),
    ("uint8_negative_py_int", lambda lib, a: a + (-1), (U8,)),
    ("bool_subtract", lambda lib, a: (a > 0) - (a > 1), (A,)),
    ("matmul_mismatch", lambda lib, m, a: m @ a[:3], (M, A)),
    ("reshape_bad", lambda lib, m: m.reshape(3, 5), (M,)),
    ("take_out_of_range", lambda lib, a: lib.take(a, np.array([1, 2, 8])), (A,)),
    ("sum_bad_axis", lambda lib, m: m.sum(axis=2), (M,)),
]


def _run(fn: Callable[..., Any], operands: tuple[Any, ...], cached: bool) -> Any:
    saved = ktensor.EAGER_CACHE
    ktensor.EAGER_CACHE = cached
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # kernels must stay quiet (x / 0 is inf, no warning)
            return fn(kiln, *[kiln.asarray(x) for x in operands])
    finally:
        ktensor.EAGER_CACHE = saved


def _same(got: Any, expected: np.ndarray) -> None:
    got = np.asarray(got)
    assert got.dtype == expected.dtype
    assert got.shape == expected.shape
    assert got.tobytes() == expected.tobytes()  # bitwise: -0.0, NaN payloads, wrapping ints


@pytest.mark.parametrize(("name", "fn", "operands"), CASES, ids=[c[0] for c in CASES])
def test_cached_eager_equals_full_path_and_numpy(name: str, fn: Any, operands: Any) -> None:
    with np.errstate(all="ignore"):
        expected = np.asarray(fn(np, *operands))
    _same(_run(fn, operands, cached=False), expected)
    _same(_run(fn, operands, cached=True), expected)  # fills the cache
    _same(_run(fn, operands, cached=True), expected)  # hits it


def test_cache_keys_on_contents_where_infer_reads_them() -> None:
    # Reshape's target and a reduction's axes have the same dtype and shape for different
    # calls; the cache must still tell them apart.
    m = kiln.asarray(M)
    assert m.reshape(2, 8).shape == (2, 8)
    assert m.reshape(8, 2).shape == (8, 2)
    assert m.reshape(2, 8).shape == (2, 8)
    np.testing.assert_array_equal(np.asarray(m.sum(axis=0)), M.sum(axis=0))
    np.testing.assert_array_equal(np.asarray(m.sum(axis=1)), M.sum(axis=1))


def _error(fn: Any, operands: Any, cached: bool) -> BaseException:
    with pytest.raises(Exception) as info:  # noqa: PT011 - compared below
        _run(fn, operands, cached)
    return info.value


@pytest.mark.parametrize(("name", "fn", "operands"), ERRORS, ids=[e[0] for e in ERRORS])
def test_errors_are_the_full_paths(name: str, fn: Any, operands: Any) -> None:
    full = _error(fn, operands, cached=False)
    for _ in range(2):
        got = _error(fn, operands, cached=True)
        assert type(got) is type(full)
        assert str(got) == str(full)
    with pytest.raises(Exception):  # noqa: B017, PT011 - NumPy raises too
        fn(np, *operands)


def test_error_on_a_cached_key_is_the_operators() -> None:
    # take with in-range indices fills the key (float32[8], int64[3]); out-of-range indices
    # of the same dtype and shape then hit it: the kernel fails and the full path explains.
    a = kiln.asarray(A)
    kiln.take(a, np.array([0, 1, 2]))
    full = _error(lambda lib, x: lib.take(x, np.array([1, 2, 9])), (A,), cached=False)
    got = _error(lambda lib, x: lib.take(x, np.array([1, 2, 9])), (A,), cached=True)
    assert type(got) is type(full)
    assert str(got) == str(full)
    assert isinstance(got, (KilnError, IndexError))


def test_second_call_hits_the_cache() -> None:
    ktensor._eager.clear()
    a = kiln.asarray(f32(1, 2, 3))
    _ = a + a
    filled = dict(ktensor._eager)
    assert len(filled) == 1
    _ = a + a
    assert ktensor._eager == filled  # the same entry served the second call


# Operators whose kernel may hand back its input unchanged (a multiply by one, a same-dtype
# cast, a no-op reshape, an identity) or a broadcast view must still give a fresh, writable
# array, as NumPy does; a view operator gives a view, as NumPy does.
_F = f32(1, -2, 3)
_U = np.array([1, 0, 255], dtype=np.uint8)
_I = np.array([-3, 0, 7], dtype=np.int32)


FRESH = [
    pytest.param(lambda a: a * 1.0, _F, id="mul-one"),
    pytest.param(lambda a: a + 0, _I, id="add-zero"),
    pytest.param(lambda a: a.copy(), _F, id="copy"),
    pytest.param(lambda a: np.copy(a), _I, id="np-copy"),
    pytest.param(lambda a: +a, _F, id="positive"),
    pytest.param(lambda a: a.flatten(), _F, id="flatten"),
    pytest.param(lambda a: a.clip(-10, 10), _F, id="clip-wide"),
    pytest.param(lambda a: a.sum(axis=()), _F, id="sum-axis-empty"),
    pytest.param(lambda a: a[[0, 1, 2]], _F, id="fancy-index"),
    pytest.param(lambda a: a[a > 0], _F, id="mask"),
    pytest.param(lambda a: np.abs(a), _F, id="abs-float"),
    pytest.param(lambda a: np.pad(a, 0), _F, id="pad-zero"),
    pytest.param(lambda a: np.maximum(a, -5.0), _F, id="maximum"),
    pytest.param(lambda a: np.minimum(a, a), _I, id="minimum"),
    pytest.param(lambda a: np.clip(a, None, 2.5), _F, id="clip-one-bound"),
    pytest.param(
        lambda a: a.astype(a.dtype),
        _F,
        id="astype-same",
    ),
    pytest.param(
        lambda a: np.abs(a),
        _U,
        id="abs-uint",
    ),
    pytest.param(
        lambda a: np.floor(a),
        _I,
        id="floor-int",
    ),
    pytest.param(
        lambda a: np.concatenate([a]),
        _F,
        id="concatenate-one",
    ),
    pytest.param(
        lambda a: np.tile(a, 1),
        _F,
        id="tile-one",
    ),
    pytest.param(
        lambda a: np.stack([a])[0],
        _I,
        id="stack-one",
    ),
    pytest.param(
        lambda a: np.pad(a[0], 1),
        _F,
        id="pad-0d",
    ),
]
VIEWS: list[tuple[str, Callable[[Any], Any]]] = [
    ("slice", lambda a: a[1:]),
    ("full-slice", lambda a: a[:]),
    ("transpose", lambda a: a.T),
    ("reshape-same", lambda a: a.reshape(3)),
    ("reshape", lambda a: a.reshape(3, 1)),
    ("newaxis", lambda a: a[None]),
]


@pytest.mark.parametrize(("op", "x"), FRESH)
def test_results_are_fresh_and_writable(op: Callable[[Any], Any], x: np.ndarray) -> None:
    a = kiln.asarray(x.copy())
    for _ in range(2):  # fills, then hits, the cache
        y, want = op(a), op(x)
        _same(y, want)
        assert isinstance(y, kiln.Tensor) and y is not a
        assert np.asarray(y).flags.writeable == want.flags.writeable
        assert not np.shares_memory(np.asarray(y), np.asarray(a))  # as NumPy: a new array
        assert not np.shares_memory(want, x)
        y[...] = 7  # writing the result leaves the input alone
        _same(a, x)


@pytest.mark.parametrize("op", [f[1] for f in VIEWS], ids=[f[0] for f in VIEWS])
def test_view_results_alias_their_input_as_numpy(op: Callable[[Any], Any]) -> None:
    x = f32(1, 2, 3)
    a = kiln.asarray(x.copy())
    for _ in range(2):
        y, want = op(a), op(x)
        _same(y, want)
        assert np.shares_memory(np.asarray(y), np.asarray(a)) and np.shares_memory(want, x)
        assert np.asarray(y).flags.writeable == want.flags.writeable
        y[...] = y * 2
        want[...] = want * 2
        _same(a, x)  # the write reached the base, as NumPy's


def test_capture_bypasses_the_cache() -> None:
    # The eager cache is warm for these keys; a trace must still record every operator.
    a = kiln.asarray(A)
    b = kiln.asarray(B)

    def f(x: Any, y: Any) -> Any:
        return kiln.maximum(x * 2.0 + y, 0).sum(axis=0)

    eager = f(a, b)
    f(a, b)
    traced = kiln.trace(f, a, b)
    ops = [node.op for node in traced.graph.nodes]
    assert {"Mul", "Add", "Max", "ReduceSum"} <= set(ops)
    compiled = kiln.compile(f)
    for _ in range(3):
        _same(compiled(a, b), np.asarray(eager))


@pytest.mark.parametrize("alphas", [(0.0, -0.0), (-0.0, 0.0), (float("nan"), 0.5)])
def test_attribute_values_that_compare_equal_are_told_apart(alphas: tuple[float, ...]) -> None:
    # -0.0 == 0.0 (and NaN != NaN) as dict keys; LeakyRelu(-1, alpha) shows the difference.
    from kiln.tensor import call

    x = kiln.asarray(f32(-1.0, 2.0))
    for _ in range(2):
        for alpha in alphas:
            expected = np.where(f32(-1.0, 2.0) < 0, f32(-1.0, 2.0) * np.float32(alpha), 2.0)
            _same(call("LeakyRelu", x, alpha=alpha), expected.astype(np.float32))
