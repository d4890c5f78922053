"""Consistent fall back (issue 11, item 9): a NumPy call kiln does not capture exactly serves
its structure eagerly with one CaptureWarning naming the call and the user's line, or, with
``fullgraph=True``, raises CaptureError; the common ones (``initial=``, ``where=``, ``dtype=``,
one-argument ``np.where``, ``norm`` orders, ``copy``) are captured. Never a raw kiln error for
code NumPy runs; an invalid call raises NumPy's error type."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import kiln
from kiln.errors import CaptureError, CaptureWarning

from ..numerics import assert_close

_RNG = np.random.default_rng(11)
X = _RNG.normal(size=(3, 4)).astype(np.float32)
XI = _RNG.integers(-5, 6, size=(3, 4)).astype(np.int8)
V = _RNG.normal(size=(6,))


def _run(fn, x):
    """Compile ``fn``, call it three times; the results, the CaptureWarnings, whether a graph
    serves the structure."""
    f = kiln.compile(fn)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results = [f(x) for _ in range(3)]
    captured = [str(w.message) for w in caught if issubclass(w.category, CaptureWarning)]
    kinds = [e.kind for e in f.history]
    return results, captured, "abandoned" not in kinds and "failed" not in kinds


# Captured exactly: eager NumPy == calls 1, 2, 3 with no warning, and fullgraph=True works.
CAPTURED = {
    "sum_initial": (lambda a: np.sum(a, initial=3.0) * 2, X),
    "sum_where": (lambda a: np.sum(a, axis=1, where=a > 0), X),
    "sum_where_initial_int8": (lambda a: np.sum(a, axis=0, where=a > 0, initial=100), XI),
    "sum_where_broadcast": (lambda a: np.sum(a, axis=0, where=np.array([1, 0, 1, 1], bool)), X),
    "prod_where": (lambda a: np.prod(a, axis=1, where=a != 0), XI),
    "max_where_initial": (lambda a: np.max(a, axis=1, where=a < 0, initial=-10), X),
    "min_initial": (lambda a: np.min(a, initial=-0.5), X),
    "max_initial_int": (lambda a: np.max(a, axis=0, initial=3), XI),
    "any_where": (lambda a: np.any(a > 1, axis=0, where=a < 0), X),
    "all_where": (lambda a: np.all(a > -1, axis=1, where=a > 0), X),
    "mean_where": (lambda a: np.mean(a, axis=1, where=a > 0), X),
    "mean_where_int": (lambda a: np.mean(a, where=a > 0), XI),
    "add_reduce_where_initial": (lambda a: np.add.reduce(a, axis=1, where=a > 0, initial=1.0), X),
    "maximum_reduce_initial": (lambda a: np.maximum.reduce(a, axis=0, initial=0.0), X),
    "add_dtype": (lambda a: np.add(a, 1, dtype=np.float64), XI),
    "multiply_dtype": (lambda a: np.multiply(a, a, dtype=np.float32), XI),
    "sqrt_dtype": (lambda a: np.sqrt(np.abs(a), dtype=np.float64), X),
    "ufunc_default_keywords": (lambda a: np.add(a, 1, casting="same_kind", order="K"), X),
    "where_one_argument": (lambda a: np.where(a > 0)[1] * 2, X),
    "nonzero": (lambda a: np.nonzero(a)[0] + 1, XI),
    "norm_inf": (lambda a: np.linalg.norm(a, ord=np.inf), V),
    "norm_minus_inf": (lambda a: np.linalg.norm(a, ord=-np.inf), V),
    "norm_0": (lambda a: np.linalg.norm(a, ord=0), XI[0]),
    "norm_3": (lambda a: np.linalg.norm(a, ord=3), V),
    "norm_rows_half": (lambda a: np.linalg.norm(a, ord=0.5, axis=1, keepdims=True), X),
    "norm_matrix_1": (lambda a: np.linalg.norm(a, ord=1), X),
    "norm_matrix_inf_axes": (lambda a: np.linalg.norm(a, ord=np.inf, axis=(1, 0)), X),
    "norm_matrix_minus_1_keepdims": (
        lambda a: np.linalg.norm(a[None], ord=-1, axis=(2, 1), keepdims=True),
        X,
    ),
    "copy": (lambda a: a.copy() + 1, X),
    "copy_order": (lambda a: a.copy(order="F") * 2, XI),
    "np_copy": (lambda a: np.copy(a) - 1, X),
    # out= on a ufunc is a recorded write (np.empty is a recorded array during a capture)
    "ufunc_out_empty": (lambda a: np.exp(a, out=np.empty((3, 4), np.float32)), X),
    "matmul_out": (lambda a: np.matmul(a, a.T, out=np.zeros((3, 3), np.float32)), X),
    "reduction_out_array": (lambda a: np.sum(a, axis=0, out=np.empty(4, np.float32)) + 1, X),
    "concatenate_out_array": (
        lambda a: np.concatenate([a, a], out=np.zeros((6, 4), np.float32)) * 2,
        X,
    ),
    "ufunc_out_zeros_int": (lambda a: np.add(a, a, out=np.zeros((3, 4), np.int8)) * 2, XI),
}


@pytest.mark.parametrize("name", sorted(CAPTURED))
def test_captured_exactly(name) -> None:
    fn, x = CAPTURED[name]
    expected = fn(x)
    results, warned, captured = _run(fn, x)
    assert warned == [] and captured, warned
    for got in results:
        assert_close(got, expected, what=name)
    assert_close(kiln.compile(fn, fullgraph=True)(x), expected, what=f"{name} fullgraph")


# Not captured: calls 1-3 give NumPy's result, one CaptureWarning naming the call and the line,
# and fullgraph=True raises CaptureError naming them.
FALLBACK = {
    "unique": (lambda a: np.unique(a) * 2, XI, "np.unique"),
    "fft": (lambda a: np.abs(np.fft.fft(a)), V, "np.fft.fft"),
    "sort": (lambda a: np.sort(a, axis=1) + 1, X, "np.sort"),
    "argsort": (lambda a: np.argsort(a) + 1, V, "np.argsort"),
    "take_clip": (lambda a: np.take(a, [0, 20], mode="clip") + 1, X, "np.take"),
    "norm_nuc": (lambda a: np.linalg.norm(a, ord="nuc") + 1, X, "np.linalg.norm"),
    "norm_matrix_2": (lambda a: np.linalg.norm(a, ord=2) + 1, X, "np.linalg.norm"),
    "ufunc_where": (
        lambda a: np.add(a, 1, where=a > 0, out=np.zeros((3, 4), np.float32)),
        X,
        "np.add",
    ),
    "ufunc_comparison_dtype": (lambda a: np.less(a, 0.5, dtype=bool), X, "np.less"),
    "logical_reduce_initial": (
        lambda a: np.logical_or.reduce(a > 0, initial=True),
        X,
        "np.logical_or",
    ),
    "cumprod": (lambda a: np.cumprod(a, axis=1), XI, "np.cumprod"),
    # ndarray methods and attributes kiln's Tensor lacks: NumPy's, on the host values
    "method_diagonal": (lambda a: a.diagonal() * 2, X, "ndarray.diagonal"),
    "method_view": (lambda a: a.view() + 1, X, "ndarray.view"),
    "attribute_strides": (lambda a: a * a.strides[0], X, "ndarray.strides"),
}


@pytest.mark.parametrize("name", sorted(FALLBACK))
def test_falls_back_with_one_warning(name) -> None:
    fn, x, call = FALLBACK[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # NumPy's own warnings, e.g. a casting one
        expected = fn(x)
    results, warned, captured = _run(fn, x)
    assert not captured
    assert len(warned) == 1, warned
    assert call in warned[0] and "test_fallback.py:" in warned[0], warned[0]
    for got in results:
        assert_close(got, expected, what=name)
    with pytest.raises(CaptureError, match=rf"{call}.*test_fallback.py:\d+"):
        kiln.compile(fn, fullgraph=True)(x)


@pytest.mark.parametrize("fullgraph", [False, True])
def test_invalid_call_raises_numpys_error(fullgraph) -> None:
    # NumPy refuses these too: the user's error propagates with NumPy's type.
    with pytest.raises(ValueError, match="initial"):
        kiln.compile(lambda a: np.max(a, where=a > 0), fullgraph=fullgraph)(X)
    with pytest.raises(TypeError):
        kiln.compile(lambda a: np.sum(a, bogus=1), fullgraph=fullgraph)(X)
    with pytest.raises(TypeError):  # a float cannot be cast to int32 by same_kind
        kiln.compile(lambda a: np.add(a, 1.5, dtype=np.int32), fullgraph=fullgraph)(XI)
    with pytest.raises(TypeError, match="same_kind"):
        kiln.compile(lambda a: np.negative(a, dtype=np.uint8), fullgraph=fullgraph)(XI)
    with pytest.raises(ValueError, match="both or neither"):
        kiln.compile(lambda a: np.where(a > 0, a), fullgraph=fullgraph)(X)


def test_ufunc_out_into_a_computed_array_is_recorded() -> None:
    # Writing a ufunc's result into an array computed from the inputs is a recorded write:
    # the graph serves later calls, with NumPy's values (the returned array is the out one).
    def fn(a):
        buf = a * 0
        result = np.exp(a, out=buf)
        return buf + 1, result is buf

    for x in (X, X[::-1] * 2):
        expected, aliased = fn(x)
        assert aliased
        for got in (kiln.compile(fn)(x), kiln.compile(fn, fullgraph=True)(x)):
            assert_close(got[0], expected)
            assert got[1] is True
    results, warned, captured = _run(lambda a: fn(a)[0], X)
    assert warned == [] and captured, warned
    for got in results:
        assert_close(got, fn(X)[0])


def test_out_into_a_computed_array_by_a_non_ufunc_is_recorded() -> None:
    # out= on a NumPy function kiln implements (a reduction) is a recorded write too: kiln's
    # result without out=, written into the out tensor after NumPy's own call checked it.
    def fn(a):
        buf = a[0] * 0
        result = np.sum(a, axis=0, out=buf)
        return buf, result is buf

    expected = np.sum(X, axis=0)
    got, aliased = kiln.compile(fn, fullgraph=True)(X)
    assert_close(got, expected)
    assert aliased
    results, warned, captured = _run(lambda a: fn(a)[0], X)
    assert warned == [] and captured, warned
    for got in results:
        assert_close(got, expected)


def test_fallback_reason_is_in_the_history() -> None:
    f = kiln.compile(lambda a: np.take(a, [0, 20], mode="clip"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CaptureWarning)
        f(X)
    (event,) = [e for e in f.history if e.kind == "abandoned"]
    assert "np.take(..., mode=)" in event.message and "mode='clip'" in event.message
