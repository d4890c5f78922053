"""The NumPy protocols' one fall back path (kiln.functions.numpy_protocol) on eager kiln
tensors, and the front-door keywords that replaced fall backs: reductions' ``where=`` and
``initial=``, ufuncs' ``dtype=``, one-argument ``where``, ``norm`` orders, ``copy``."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.errors import UnsupportedOperationError

from ..numerics import assert_close

_RNG = np.random.default_rng(9)
X = _RNG.normal(size=(3, 4)).astype(np.float32)
XI = _RNG.integers(-4, 5, size=(3, 4)).astype(np.int16)


@pytest.mark.parametrize(
    "fn",
    [
        lambda a: np.unique(a),
        lambda a: np.sort(a, axis=0),
        lambda a: np.take(a, [0, 99], mode="wrap"),
        lambda a: np.linalg.norm(a.astype(np.float64), ord="nuc"),
        lambda a: np.logical_or.reduce(a > 0, axis=1, initial=False),
        lambda a: np.less(a, 1, dtype=bool),
        lambda a: np.cumprod(a, axis=1),
    ],
)
def test_eager_fallback_gives_numpys_result_as_tensors(fn) -> None:
    got = fn(kiln.asarray(XI))
    assert isinstance(got, kiln.Tensor)
    assert_close(got, fn(XI))


def test_fallback_keeps_tuples_of_tensors() -> None:
    values, counts = np.unique(kiln.asarray(XI), return_counts=True)
    want_values, want_counts = np.unique(XI, return_counts=True)
    assert isinstance(values, kiln.Tensor) and isinstance(counts, kiln.Tensor)
    assert_close(values, want_values)
    assert_close(counts, want_counts)


def test_invalid_calls_raise_numpys_error_type() -> None:
    t = kiln.asarray(X)
    with pytest.raises(TypeError):
        np.sum(t, bogus=1)  # NumPy: unexpected keyword
    with pytest.raises(np.exceptions.AxisError):
        np.sum(t, axis=5)
    with pytest.raises(ValueError, match="initial"):
        np.min(t, where=np.ones((3, 4), bool))  # a mask without initial
    with pytest.raises(TypeError, match="same_kind"):
        np.add(kiln.asarray(XI), 1, dtype=np.uint8)  # NumPy cannot cast int16 -> uint8


def test_trace_refuses_what_it_cannot_record() -> None:
    with pytest.raises(UnsupportedOperationError, match=r"np.unique"):
        kiln.trace(lambda a: np.unique(a), kiln.asarray(XI))
    with pytest.raises(UnsupportedOperationError, match=r"mode='clip'"):
        kiln.trace(lambda a: np.take(a, [0], mode="clip"), kiln.asarray(XI))


@pytest.mark.parametrize("dtype", ["float32", "int16", "bool"])
@pytest.mark.parametrize(
    "name, kwargs",
    [
        ("sum", {"where": "mask"}),
        ("sum", {"axis": 1, "where": "mask", "initial": 5}),
        ("prod", {"axis": 0, "where": "mask"}),
        ("prod", {"initial": 2}),
        ("max", {"axis": 1, "where": "mask", "initial": -3}),
        ("min", {"axis": (0, 1), "initial": 0, "keepdims": True}),
        ("any", {"axis": 0, "where": "mask"}),
        ("all", {"axis": 1, "where": "mask"}),
        ("mean", {"axis": 1, "where": "mask"}),
        ("mean", {"where": "row"}),
    ],
)
def test_reduction_keywords(name, kwargs, dtype) -> None:
    x = (X * 3).astype(dtype)
    masks = {"mask": X > 0, "row": np.array([True, False, True, True])}
    kwargs = {k: masks.get(v, v) if isinstance(v, str) else v for k, v in kwargs.items()}
    with np.errstate(all="ignore"):
        want = getattr(np, name)(x, **kwargs)
    assert_close(getattr(kiln, name)(kiln.asarray(x), **kwargs), want, what=f"{name}{kwargs}")
    assert_close(getattr(np, name)(kiln.asarray(x), **kwargs), want, what=f"np.{name}{kwargs}")


def test_reduction_initial_over_an_empty_axis_is_the_initial_value() -> None:
    empty = np.zeros((0, 3), np.float32)
    got = kiln.max(kiln.asarray(empty), axis=0, initial=1.0)
    assert_close(got, np.max(empty, 0, initial=1.0))
    assert_close(np.max(kiln.asarray(empty), axis=0, initial=1.0), np.max(empty, 0, initial=1.0))


@pytest.mark.parametrize("ufunc", [np.add, np.multiply, np.subtract, np.maximum, np.divide])
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64])
def test_ufunc_dtype(ufunc, dtype) -> None:
    a, b = XI, XI.astype(np.int8)
    if ufunc is np.divide and dtype is np.int64:
        pytest.skip("NumPy has no int64 true_divide loop")
    got = ufunc(kiln.asarray(a), kiln.asarray(b), dtype=dtype)
    assert isinstance(got, kiln.Tensor)
    with np.errstate(all="ignore"):
        assert_close(got, ufunc(a, b, dtype=dtype))


def test_where_with_one_argument_is_nonzero() -> None:
    got = np.where(kiln.asarray(XI > 0))
    assert len(got) == 2
    for g, w in zip(got, np.where(XI > 0), strict=True):
        assert_close(g, w)


@pytest.mark.parametrize("ord", [np.inf, -np.inf, 0, 1, 2, 3, 0.5, -1])
def test_vector_norm_orders(ord) -> None:
    for x in (X, XI):
        want = np.linalg.norm(x, ord=ord, axis=1)
        assert_close(kiln.norm(kiln.asarray(x), ord=ord, axis=1), want, what=f"ord={ord}")


@pytest.mark.parametrize("ord", [1, -1, np.inf, -np.inf])
@pytest.mark.parametrize("axis", [None, (1, 0), (0, 1)])
@pytest.mark.parametrize("keepdims", [False, True])
def test_matrix_norm_orders(ord, axis, keepdims) -> None:
    want = np.linalg.norm(X, ord=ord, axis=axis, keepdims=keepdims)
    assert_close(kiln.norm(kiln.asarray(X), ord=ord, axis=axis, keepdims=keepdims), want)


def test_copy() -> None:
    t = kiln.asarray(XI)
    for c in (t.copy(), t.copy(order="F"), np.copy(t), np.copy(t, order="C")):
        assert isinstance(c, kiln.Tensor) and c is not t
        assert_close(c, XI)
    with pytest.raises(ValueError, match="order must be one of"):
        t.copy(order="X")
