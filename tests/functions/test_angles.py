"""``np.radians``/``deg2rad``/``degrees``/``rad2deg`` and ``np.hypot`` on kiln tensors:
bit-identical to NumPy (NumPy's constants, glibc's hypot algorithm), every dtype NumPy
resolves (integers and bool compute in float16/32/64 as NumPy picks), non-finite values, and
captured by ``kiln.trace`` and ``kiln.compile`` (no fall back)."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.errors import CaptureError

from .paths import assert_same, check_onnxruntime, check_paths

_RNG = np.random.default_rng(11)
_SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-310, 5e-324, 1.7e308, -180.0, 360.0])


def _values(dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    if dtype == "bool":
        return _RNG.random(shape) < 0.5
    if np.dtype(dtype).kind in "iu":
        info = np.iinfo(dtype)
        return _RNG.integers(max(info.min, -1000), min(info.max, 1000), shape).astype(dtype)
    return (_RNG.uniform(-720, 720, shape)).astype(dtype)


@pytest.mark.parametrize("ufunc", [np.radians, np.deg2rad, np.degrees, np.rad2deg])
@pytest.mark.parametrize(
    "dtype", ["float64", "float32", "float16", "int8", "uint8", "int16", "int64", "bool"]
)
def test_angle_conversions_are_bit_identical(ufunc, dtype) -> None:
    x = _values(dtype, (1000,))
    got = ufunc(kiln.asarray(x))
    assert isinstance(got, kiln.Tensor)
    assert_same(got, ufunc(x), f"{ufunc.__name__}({dtype})")


@pytest.mark.parametrize("ufunc", [np.radians, np.degrees])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_angle_conversions_of_special_values(ufunc, dtype) -> None:
    with np.errstate(all="ignore"):
        x = _SPECIAL.astype(dtype)
        assert_same(ufunc(kiln.asarray(x)), ufunc(x))


@pytest.mark.parametrize("shape", [(0,), (1,), (), (3, 4)])
def test_angle_conversions_capture(shape) -> None:
    x = _values("float64", shape)
    check_paths(lambda a: (np.radians(a), np.degrees(a) * 2, np.deg2rad(a), np.rad2deg(a)), x)
    assert kiln.radians(kiln.asarray(x)).dtype == np.float64


def test_haversine_captures_whole() -> None:
    def haversine(lat1, lon1, lat2, lon2):
        lat1, lon1, lat2, lon2 = map(np.radians, (lat1, lon1, lat2, lon2))
        a = (
            np.sin((lat2 - lat1) / 2) ** 2
            + np.cos(lat1) * np.cos(lat2) * np.sin((lon2 - lon1) / 2) ** 2
        )
        return 6371.0 * 2 * np.arcsin(np.sqrt(a))

    lat = _RNG.uniform(-90, 90, (2, 50))
    lon = _RNG.uniform(-180, 180, (2, 50))
    check_paths(haversine, lat[0], lon[0], lat[1], lon[1])


def _hypot_operands(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Ordinary, huge, tiny and subnormal magnitudes, far apart and close together."""
    exps = _RNG.integers(-1074, 1024, (2, n))
    mags = np.ldexp(_RNG.uniform(0.5, 1.0, (2, n)), exps)
    mags[:, : n // 4] = _RNG.standard_normal((2, n // 4)) * 10  # the common case
    mags[1, n // 4 : n // 2] = mags[0, n // 4 : n // 2] * _RNG.uniform(0.5, 2, n // 4)
    signs = _RNG.choice([-1.0, 1.0], (2, n))
    return mags[0] * signs[0], mags[1] * signs[1]


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16"])
def test_hypot_is_bit_identical(dtype) -> None:
    with np.errstate(all="ignore"):
        x, y = (v.astype(dtype) for v in _hypot_operands(20000))
        want = np.hypot(x, y)
        got = np.hypot(kiln.asarray(x), kiln.asarray(y))
    assert_same(got, want, f"hypot({dtype})")


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16"])
def test_hypots_onnx_form_is_bit_identical(dtype) -> None:
    """kiln.Hypot runs NumPy's loop; its ONNX form (what engines and exported models run)
    must give the same bits: exported, loaded back and run node by node on NumPy."""
    with np.errstate(all="ignore"):
        x, y = (v.astype(dtype) for v in _hypot_operands(20000))
        x[:10], y[:10] = _SPECIAL.astype(dtype), _SPECIAL[::-1].astype(dtype)
        want = np.hypot(x, y)
        traced = kiln.trace(np.hypot, x, y)
        assert [n.op for n in traced.graph.nodes] == ["kiln.Hypot"]
        graph = kiln.io.load(kiln.io.to_onnx(traced.graph))
        assert "kiln.Hypot" not in {n.op for n in graph.nodes}
        graph.finalize("numpy")
        got = graph.run({v.name: a for v, a in zip(graph.inputs, (x, y))})[0]
    assert_same(np.asarray(got), want, f"hypot's ONNX form ({dtype})")


def test_hypot_special_values_and_integers() -> None:
    a, b = np.meshgrid(_SPECIAL, _SPECIAL)
    with np.errstate(all="ignore"):
        assert_same(np.hypot(kiln.asarray(a), kiln.asarray(b)), np.hypot(a, b))
    for dtype in ("int8", "int32", "uint16", "bool"):
        x = _values(dtype, (50,))
        assert_same(kiln.hypot(kiln.asarray(x), 3), np.hypot(x, 3), dtype)
    assert_same(kiln.hypot(kiln.asarray(np.float32(3)), 4.0), np.hypot(np.float32(3), 4.0))


def test_hypot_captures() -> None:
    x, y = _hypot_operands(400)
    check_paths(lambda a, b: np.hypot(a, b[None, :]), x.reshape(20, 20), y[:20])
    with np.errstate(over="ignore"):
        x32, y32 = x.astype(np.float32), y.astype(np.float32)
    check_paths(lambda a, b: np.hypot(a, b), x32, y32)


def test_fullgraph_does_not_raise_for_radians() -> None:
    f = kiln.compile(lambda a: np.radians(a) + np.hypot(a, 1.0), fullgraph=True)
    x = _values("float64", (8,))
    try:
        got = f(x)
    except CaptureError as exc:  # pragma: no cover - the failure this test exists for
        pytest.fail(f"fell back: {exc}")
    assert_same(got, np.radians(x) + np.hypot(x, 1.0))


def test_angles_and_hypot_run_on_onnxruntime() -> None:
    x, y = _hypot_operands(400)
    with np.errstate(over="ignore"):  # degrees of the largest operands overflow, as in NumPy
        check_onnxruntime(lambda a, b: (np.hypot(a, b), np.radians(a), np.degrees(b)), x, y)
