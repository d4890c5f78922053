"""``np.gradient`` on kiln tensors: bit-identical to NumPy for scalar spacings (Python,
NumPy float32/float64, int), per-axis coordinates (uniform and not), ``edge_order`` 1 and 2,
``axis`` as an int, a negative int or a tuple, every dtype (integers give float64, bool
raises as in NumPy); one result or a tuple as NumPy returns; captured by ``kiln.trace`` and
``kiln.compile`` (no fall back)."""

from __future__ import annotations

import numpy as np
import pytest

import kiln

from .paths import assert_same, check_onnxruntime, check_paths

_RNG = np.random.default_rng(8)


def _values(shape: tuple[int, ...], dtype: str) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return (_RNG.standard_normal(shape) * 40).astype(dtype)


_SPACINGS = [(), (0.1,), (np.float64(0.3),), (np.float32(0.3),), (2,)]


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16", "int8", "uint8", "int64"])
@pytest.mark.parametrize("shape", [(7,), (2,), (3,), (4, 5), (3, 4, 6)])
@pytest.mark.parametrize("edge_order", [1, 2])
def test_gradient_matches_numpy(shape, dtype, edge_order) -> None:
    x = _values(shape, dtype)
    coords = [
        tuple(np.cumsum(_RNG.random(d)) + 1 for d in shape),
        tuple(np.arange(d) * 2 for d in shape),
    ]
    for spacing in _SPACINGS + coords:
        for axis in (None, -1, tuple(range(len(shape)))[::-1]):
            args = spacing
            if len(spacing) > 1 and axis is not None:
                picked = axis if isinstance(axis, tuple) else (axis,)
                args = tuple(spacing[a] for a in picked)
            try:
                want = np.gradient(x, *args, axis=axis, edge_order=edge_order)
            except ValueError as exc:  # too few elements for edge_order
                with pytest.raises(type(exc), match="too small"):
                    np.gradient(kiln.asarray(x), *args, axis=axis, edge_order=edge_order)
                continue
            got = np.gradient(kiln.asarray(x), *args, axis=axis, edge_order=edge_order)
            assert_same(got, want, f"spacing={args}, axis={axis}")


def test_gradient_errors_are_numpys() -> None:
    t = kiln.asarray(_values((4, 3), "float64"))
    with pytest.raises(TypeError):
        np.gradient(kiln.asarray(np.array([True, False, True])))  # bool subtract
    with pytest.raises(TypeError, match="invalid number of arguments"):
        np.gradient(t, 1.0, 2.0, 3.0)
    with pytest.raises(ValueError, match="edge_order"):
        np.gradient(t, edge_order=3)
    with pytest.raises(ValueError, match="must match"):
        np.gradient(t, np.arange(5.0), np.arange(3.0))
    assert_same(np.gradient(kiln.asarray(np.float64(2.0))), np.gradient(np.float64(2.0)))


def test_gradient_captures() -> None:
    def gradient_2d(f):
        gy, gx = np.gradient(f, 0.1)
        return np.hypot(gx, gy)

    check_paths(gradient_2d, _values((9, 7), "float64"))
    check_onnxruntime(gradient_2d, _values((9, 7), "float64"))
    check_paths(lambda f: np.gradient(f, axis=-1, edge_order=2), _values((3, 8), "float32"))
    coords = np.cumsum(_RNG.random(6)) + 1
    check_paths(lambda f: np.gradient(f, coords, 0.5), _values((6, 4), "float64"))


def test_gradient_with_a_changing_float_spacing() -> None:
    f = kiln.compile(lambda a, h: np.gradient(a, h), fullgraph=True)
    x = _values((10,), "float32")
    for h in (0.1, 0.25, 0.3):
        assert_same(f(x, h), np.gradient(x, h), f"h={h}")
    assert f.recapture_count <= 1  # h becomes a 0-d graph input once


def test_one_graph_serves_every_length() -> None:
    def grads(f):
        gy, gx = np.gradient(f, 0.5)
        return gy, gx, np.gradient(f, axis=0, edge_order=2)

    f = kiln.compile(grads, fullgraph=True)
    for n in (4, 5, 7, 3, 12):
        x = _values((n, 6), "float64")
        assert_same(f(x), grads(x), f"n={n}")
    assert len(f.captures) == 2  # the first call, then one graph with a dynamic axis
