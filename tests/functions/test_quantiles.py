"""``np.median``, ``np.percentile`` and ``np.quantile`` (method "linear") on kiln tensors:
bit-identical to NumPy (its positions and its ``_lerp``), every dtype, axes as ints, negative
ints and tuples, ``keepdims``, scalar and array ``q``, NaN lanes, empty lanes; recorded with
one sort (``TopK``) by ``kiln.trace`` and ``kiln.compile`` (no fall back)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import kiln
from kiln.errors import UnsupportedOperationError

from .paths import assert_same, check_onnxruntime, check_paths

_RNG = np.random.default_rng(3)
_DTYPES = ["float64", "float32", "float16", "int8", "uint8", "int64", "bool"]


def _values(shape: tuple[int, ...], dtype: str, nan: bool = False) -> np.ndarray:
    if dtype == "bool":
        return _RNG.random(shape) < 0.5
    with np.errstate(invalid="ignore"):
        x = (_RNG.standard_normal(shape) * 60).astype(dtype)
    if nan and x.size > 3 and x.dtype.kind == "f":
        x.reshape(-1)[_RNG.integers(0, x.size, 2)] = np.nan
    return x


def _axes(ndim: int) -> list:
    return [None, *range(-ndim, ndim), *([(0, -1)] if ndim > 1 else [])]


def _compare(fn, x: np.ndarray, what: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # NumPy's mean of an empty lane
        want = fn(x)
        got = fn(kiln.asarray(x))
    assert isinstance(got, kiln.Tensor), what
    assert_same(got, want, what)


@pytest.mark.parametrize("dtype", _DTYPES)
@pytest.mark.parametrize("shape", [(7,), (6,), (1,), (4, 5), (3, 4, 6), (5, 0), ()])
def test_median_matches_numpy(shape, dtype) -> None:
    x = _values(shape, dtype, nan=True)
    for axis in _axes(len(shape)):
        for keepdims in (False, True):
            _compare(
                lambda a, axis=axis, keepdims=keepdims: np.median(a, axis=axis, keepdims=keepdims),
                x,
                f"axis={axis}, keepdims={keepdims}",
            )


def test_median_of_nothing_is_nan_and_inf_lanes() -> None:
    _compare(lambda a: np.median(a, axis=0), np.zeros((0, 3)), "empty lanes")
    _compare(lambda a: np.median(a), np.zeros(0, np.int32), "empty")
    x = np.array([[np.inf, -np.inf, 1.0, 2.0], [np.inf, np.inf, 0.0, 1.0]])
    _compare(lambda a: np.median(a, axis=1), x, "infinities")


_PERCENTS = [50, 75.0, [75, 25], np.float64(30), [0, 100], np.array([[10.0, 90.0], [33.3, 66.6]])]


@pytest.mark.parametrize("dtype", _DTYPES)
@pytest.mark.parametrize("shape", [(7,), (2,), (4, 5), (3, 4, 6), (5, 0)])
def test_percentile_matches_numpy(shape, dtype) -> None:
    # NaN only where NumPy's result dtype does not depend on the values (a float32 input with
    # a NaN and a float64 q gives float32 for a 0-d result, float64 otherwise).
    x = _values(shape, dtype, nan=dtype == "float64")
    for axis in _axes(len(shape)):
        for keepdims in (False, True):
            for q in _PERCENTS:

                def fn(a, q=q, axis=axis, keepdims=keepdims):
                    return np.percentile(a, q, axis=axis, keepdims=keepdims)

                try:
                    want_error = None
                    fn(x)
                except (TypeError, IndexError) as exc:  # bool subtract, an empty lane
                    want_error = type(exc)
                if want_error is not None:
                    with pytest.raises(want_error):
                        fn(kiln.asarray(x))
                    continue
                _compare(fn, x, f"q={q}, axis={axis}, keepdims={keepdims}")


@pytest.mark.parametrize("dtype", ["float64", "float32", "int16"])
def test_quantile_matches_numpy(dtype) -> None:
    x = _values((6, 5), dtype)
    for q in [0.5, 1, [0, 1], np.array([0.25, 0.5], dtype=np.float32), 0.3, np.float32(0.7)]:
        for axis in (None, 0, -1):
            _compare(
                lambda a, q=q, axis=axis: np.quantile(a, q, axis=axis), x, f"q={q}, axis={axis}"
            )


def test_interpolation_edges_follow_numpy() -> None:
    # NumPy's _lerp: inf - inf in an interpolation is NaN; int8 differences wrap.
    _compare(lambda a: np.percentile(a, [50, 100]), np.array([1.0, np.inf]), "inf")
    _compare(lambda a: np.percentile(a, 30), np.array([100, -100], np.int8), "int8 wrap")


def test_invalid_and_unsupported_quantiles() -> None:
    t = kiln.asarray(_values((5,), "float64"))
    with pytest.raises(ValueError, match="range"):
        np.percentile(t, 101)
    with pytest.raises(ValueError, match="range"):
        kiln.quantile(t, -0.1)
    with pytest.raises(UnsupportedOperationError, match="method"):
        kiln.percentile(t, 50, method="nearest")
    with pytest.raises(UnsupportedOperationError, match="q given as a tensor"):
        kiln.quantile(t, t)
    # through NumPy's protocol an unsupported method is NumPy's answer (a fall back)
    assert_same(
        np.percentile(t, 50, method="nearest"), np.percentile(np.asarray(t), 50, method="nearest")
    )


def test_robust_scale_captures_with_one_sort() -> None:
    def robust_scale(x):
        med = np.median(x, axis=0)
        q75, q25 = np.percentile(x, [75, 25], axis=0)
        return (x - med) / (q75 - q25)

    x = _values((41, 6), "float64")
    check_paths(robust_scale, x)
    check_onnxruntime(robust_scale, x)
    graph = kiln.trace(robust_scale, x).graph
    graph.optimize()
    assert [n.op for n in graph.nodes].count("TopK") == 1
    check_paths(lambda a: np.median(a, axis=(0, 2), keepdims=True), _values((3, 4, 5), "int16"))
    check_paths(lambda a: np.quantile(a, [0.1, 0.9], axis=1), _values((4, 7), "float32", nan=True))


@pytest.mark.parametrize("dtype", ["float64", "float32", "int16"])
def test_one_graph_serves_every_lane_length(dtype) -> None:
    def robust(a):
        return (
            np.median(a, axis=0),
            np.percentile(a, [75, 25, 0, 100, 33.3], axis=0),
            np.percentile(a, 30.0, axis=0),
            np.quantile(a, 0.75, axis=0, keepdims=True),
        )

    f = kiln.compile(robust, fullgraph=True)
    for n in (5, 6, 8, 9, 1, 2, 13, 64):
        x = _values((n, 3), dtype, nan=n > 3)
        assert_same(f(x), robust(x), f"n={n}")
    assert len(f.captures) == 2  # the first call, then one graph with a dynamic axis


def test_quantiles_given_as_tensors_fall_back() -> None:
    q = np.array([0.1, 0.9])
    f = kiln.compile(lambda a: np.quantile(a, q, axis=0))  # q: an implicit input
    x = _values((5, 3), "float64")
    with pytest.warns(kiln.errors.CaptureWarning, match="q given as a tensor"):
        assert_same(f(x), np.quantile(x, q, axis=0))
    q[0] = 0.5  # read afresh: never baked
    assert_same(f(x), np.quantile(x, q, axis=0))


def test_trace_against_a_signature_serves_every_length() -> None:
    def stats(x):
        gy, gx = np.gradient(x, 0.5)
        return (
            np.median(x, axis=0),
            np.percentile(x, [75, 25.5], axis=0),
            np.roll(x, 2, axis=0),
            gy,
            gx,
            np.quantile(x, 0.3, axis=0),
        )

    traced = kiln.trace(stats, signature=[kiln.TensorSpec(("n", 3), np.float64)])
    traced.optimize()
    assert [node.op for node in traced.graph.nodes].count("TopK") == 1
    traced.finalize("numpy")
    for n in (3, 4, 5, 10, 11):
        x = _values((n, 3), "float64", nan=True)
        assert_same(tuple(traced.run([x])), stats(x), f"n={n}")
    with pytest.raises(kiln.errors.InputMismatchError, match="n > 2"):
        traced.run([_values((2, 3), "float64")])
