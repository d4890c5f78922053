"""``np.atleast_1d/2d/3d``, ``np.roll``, ``np.diag`` and ``np.diagonal`` on kiln tensors:
NumPy's shapes, dtypes and values for every dtype, empty and size-1 axes, negative axes and
shifts, shift/axis tuples; recorded as slices, ``Concat`` and ``Pad`` by ``kiln.trace`` and
``kiln.compile`` (no fall back), and exported to ONNX."""

from __future__ import annotations

import numpy as np
import pytest

import kiln

from .paths import assert_same, check_onnxruntime, check_paths

_RNG = np.random.default_rng(5)
_DTYPES = ["float64", "float32", "int8", "uint16", "int64", "bool"]


def _values(shape: tuple[int, ...], dtype: str = "float64") -> np.ndarray:
    if dtype == "bool":
        return _RNG.random(shape) < 0.5
    return (_RNG.standard_normal(shape) * 20).astype(dtype)


@pytest.mark.parametrize("fn", [np.atleast_1d, np.atleast_2d, np.atleast_3d])
@pytest.mark.parametrize("shape", [(), (0,), (3,), (2, 3), (2, 3, 4), (1, 2, 3, 4)])
def test_atleast_nd(fn, shape) -> None:
    x = _values(shape, "int16")
    got = fn(kiln.asarray(x))
    assert isinstance(got, kiln.Tensor)
    assert_same(got, fn(x))
    many = fn(kiln.asarray(x), kiln.asarray(np.float32(2)))
    assert isinstance(many, tuple) and len(many) == 2
    assert_same(many, fn(x, np.float32(2)))
    if len(shape) >= int(fn.__name__[-2]):
        t = kiln.asarray(x)
        assert fn(t) is t  # NumPy returns the array itself


def test_atleast_1d_captures_rosenbrock_gradient() -> None:
    def rosenbrock(x):
        xm, xl, xr = x[1:-1], x[:-2], x[2:]
        grad_mid = 200 * (xm - xl**2) - 400 * (xr - xm**2) * xm - 2 * (1 - xm)
        grad_first = -400 * x[0] * (x[1] - x[0] ** 2) - 2 * (1 - x[0])
        grad_last = 200 * (x[-1] - x[-2] ** 2)
        return np.concatenate([np.atleast_1d(grad_first), grad_mid, np.atleast_1d(grad_last)])

    check_paths(rosenbrock, _values((30,)))
    check_paths(lambda x: np.atleast_3d(x[0], x), _values((4, 5)))


_ROLLS = [
    (1, None),
    (-7, None),
    (0, None),
    ((1, 2), None),
    (2, 0),
    (-1, -1),
    (13, 1),
    ((1, 2), (0, 0)),
    ((1, -1), (0, -1)),
    (3, (0, 1)),
    ((2, 5), (-1, 0)),
]


@pytest.mark.parametrize("dtype", _DTYPES)
@pytest.mark.parametrize("shape", [(5,), (1,), (0,), (3, 4), (0, 3), (2, 3, 4)])
def test_roll_matches_numpy(shape, dtype) -> None:
    x = _values(shape, dtype)
    for shift, axis in _ROLLS:
        try:
            want = np.roll(x, shift, axis)
        except (ValueError, IndexError) as exc:  # an axis the shape does not have
            with pytest.raises(type(exc)):
                np.roll(kiln.asarray(x), shift, axis)
            continue
        got = np.roll(kiln.asarray(x), shift, axis)
        assert isinstance(got, kiln.Tensor)
        assert_same(got, want, f"roll({shape}, {shift}, {axis})")


def test_roll_of_a_scalar_and_bad_arguments() -> None:
    assert_same(np.roll(kiln.asarray(np.float32(3)), 2), np.roll(np.float32(3), 2))
    with pytest.raises(ValueError, match="1D sequences"):
        np.roll(kiln.asarray(_values((3, 3))), [[1]], axis=[0])
    t = kiln.asarray(_values((4,)))
    assert np.roll(t, 0) is not t  # a new array, as NumPy's


def test_roll_captures_game_of_life_and_heat() -> None:
    def life(board):
        for _ in range(2):
            n = sum(
                np.roll(np.roll(board, dy, axis=0), dx, axis=1)
                for dy in (-1, 0, 1)
                for dx in (-1, 0, 1)
                if (dy, dx) != (0, 0)
            )
            board = ((n == 3) | ((board == 1) & (n == 2))).astype(np.int8)
        return board

    def heat(u):
        for _ in range(3):
            u = u + 0.2 * (np.roll(u, 1) - 2 * u + np.roll(u, -1))
        return u

    check_paths(life, (_RNG.random((7, 6)) < 0.4).astype(np.int8))
    check_paths(heat, _values((9,)))
    check_paths(lambda a: np.roll(a, (1, -2), (0, 1)), _values((3, 4), "uint16"))


def test_roll_on_a_dynamic_axis_recaptures_nothing() -> None:
    f = kiln.compile(lambda u: np.roll(u, 2) - np.roll(u, -1), fullgraph=True)
    for n in (6, 7, 9, 12):
        u = _values((n,))
        assert_same(f(u), np.roll(u, 2) - np.roll(u, -1), f"n={n}")
    assert len(f.captures) <= 2  # the first capture, then one with a dynamic axis


@pytest.mark.parametrize("dtype", _DTYPES)
@pytest.mark.parametrize("shape", [(5,), (1,), (0,), (3, 4), (4, 3), (1, 1), (0, 3), (3, 0)])
def test_diag_matches_numpy(shape, dtype) -> None:
    x = _values(shape, dtype)
    for k in range(-6, 7):
        got = np.diag(kiln.asarray(x), k)
        assert_same(got, np.diag(x, k), f"diag({shape}, {k})")
    with pytest.raises(ValueError, match="1- or 2-d"):
        np.diag(kiln.asarray(_values((2, 2, 2))))


@pytest.mark.parametrize("offset", [-5, -1, 0, 2, 6])
@pytest.mark.parametrize("axes", [(0, 1), (1, 0), (-1, -2), (1, 3), (3, 1), (0, 2)])
def test_diagonal_matches_numpy(offset, axes) -> None:
    x = _values((2, 3, 4, 5))
    assert_same(np.diagonal(kiln.asarray(x), offset, *axes), np.diagonal(x, offset, *axes))


def test_diag_captures_covariance_and_exports() -> None:
    def covariance(x):
        xc = x - x.mean(axis=0)
        cov = xc.T @ xc / (x.shape[0] - 1)
        sd = np.sqrt(np.diag(cov))
        return cov, cov / np.outer(sd, sd)

    check_paths(covariance, _values((20, 5)))
    check_paths(lambda v: np.diag(v, -2) + np.diag(np.diag(v, 1)).sum(), _values((4,), "int64"))
    check_paths(lambda v: np.diag(v, 1), _values((0,)))


def test_layout_functions_run_on_onnxruntime() -> None:
    def fn(a):
        return np.roll(a, (1, -2), (0, 1)), np.diag(np.diag(a, 1)), np.atleast_3d(a)

    check_onnxruntime(fn, _values((4, 5)))


def test_diagonal_is_read_only_and_roll_diag_are_fresh() -> None:
    for fn in (np.diagonal, np.diag):
        with pytest.raises(ValueError, match="read-only"):
            fn(kiln.asarray(np.zeros((3, 3))))[0] = 5  # as NumPy's read-only view
    x = np.zeros(3)
    t = kiln.asarray(x)
    built = np.diag(t)
    built[0, 1] = 3  # a new array, as NumPy's
    rolled = np.roll(t, 1)
    rolled[0] = 7
    assert_same(t, np.zeros(3))
    assert_same(built, np.array([[0.0, 3.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]))
