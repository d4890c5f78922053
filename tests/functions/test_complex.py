"""Complex numbers through the front doors: NumPy 2 promotion of Python complex scalars,
arithmetic, np.abs/angle/conj/real/imag, math, matmul, reductions, creation, where and
comparisons, astype; eager, kiln.trace and kiln.compile, against NumPy bit for bit."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import kiln
from kiln.errors import CaptureError, OpTypeError

COMPLEX = (np.complex64, np.complex128)


def _special(dtype: Any) -> np.ndarray:
    parts = [0.0, -0.0, 1.5, -2.0, np.inf, -np.inf, np.nan]
    return np.asarray([complex(a, b) for a in parts for b in parts], dtype=dtype)


def _assert_same(got: Any, want: Any) -> None:
    """Equal dtype, shape and bits (signed zeros count; any NaN matches a NaN)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    if want.dtype.kind == "c":
        _assert_same(got.real, want.real)
        _assert_same(got.imag, want.imag)
        return
    if want.dtype.kind == "f":
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        keep = ~np.isnan(want)
        np.testing.assert_array_equal(np.signbit(got[keep]), np.signbit(want[keep]))
        np.testing.assert_array_equal(got[keep], want[keep])
    else:
        np.testing.assert_array_equal(got, want)


def _check_all_modes(fn: Callable[..., Any], *args: np.ndarray) -> None:
    """``fn`` on kiln tensors eagerly, through kiln.trace and through kiln.compile (three
    calls: capture, then replays), each against NumPy's result."""
    with np.errstate(all="ignore"):
        want = fn(*args)
        eager = fn(*[kiln.tensor(a) for a in args])
        traced = kiln.trace(fn, *args)
        traced.graph.finalize(engine="numpy")
        through_trace = traced(*args)
        compiled = kiln.compile(fn, fullgraph=True)
        calls = [compiled(*args) for _ in range(3)]
    wants = want if isinstance(want, tuple) else (want,)
    for got in (eager, through_trace, *calls):
        gots = got if isinstance(got, tuple) else (got,)
        assert len(gots) == len(wants)
        for g, w in zip(gots, wants):
            _assert_same(g, w)


# -- promotion of Python complex scalars (NEP 50: weak) ------------------------------------


@pytest.mark.parametrize(
    ("dtype", "expected"),
    [
        (np.float32, np.complex64),
        (np.float16, np.complex64),
        (np.float64, np.complex128),
        (np.int32, np.complex128),
        (np.int8, np.complex128),
        (np.uint8, np.complex128),
        (np.bool_, np.complex128),
        (np.complex64, np.complex64),
    ],
)
def test_python_complex_scalar_is_weak(dtype: Any, expected: Any) -> None:
    x = np.asarray([0, 1, 2], dtype=dtype)

    def fn(v):
        return v * 1j, 1j * v, v + (2 - 1j), v / 2j, (1 + 1j) - v

    assert fn(x)[0].dtype == expected  # NumPy's answer, which kiln must match
    _check_all_modes(fn, x)


def test_complex_scalar_of_float32_array_at_size_zero_and_one() -> None:
    for shape in ((0,), (1,), ()):
        x = np.ones(shape, np.float32)
        _check_all_modes(lambda v: (v * 1j + 1, np.abs(v - 2j)), x)


def test_numpy_complex_scalar_is_strong() -> None:
    x = np.asarray([1.0, 2.0], np.float32)
    _check_all_modes(lambda v: v * np.complex128(1j), x)


# -- arithmetic and math over special values -----------------------------------------------


@pytest.mark.parametrize("dtype", COMPLEX, ids=lambda d: d.__name__)
def test_arithmetic_with_signed_zeros_infinities_and_nan(dtype: Any) -> None:
    a = _special(dtype)
    b = a[::-1].copy()

    def fn(x, y):
        return x + y, x - y, x * y, x / y, -x, +x, x**2, x**-1, x**0.5, np.reciprocal(x)

    _check_all_modes(fn, a, b)


@pytest.mark.parametrize("dtype", COMPLEX, ids=lambda d: d.__name__)
def test_power_with_complex_and_real_exponents(dtype: Any) -> None:
    x = np.asarray([1 + 2j, -3 + 0.5j, 2.0, 0.5j], dtype)
    _check_all_modes(lambda v: (v**3, v**2.5, np.power(v, v), v ** (1 + 1j)), x)


@pytest.mark.parametrize("dtype", COMPLEX, ids=lambda d: d.__name__)
def test_parts_magnitude_angle_and_conjugate(dtype: Any) -> None:
    z = _special(dtype)

    def fn(x):
        return (
            np.abs(x),
            abs(x),
            np.angle(x),
            np.angle(x, deg=True),
            np.conj(x),
            np.conjugate(x),
            x.conj(),
            np.real(x),
            np.imag(x),
            x.real,
            x.imag,
        )

    _check_all_modes(fn, z)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int8])
def test_parts_and_angle_of_real_input(dtype: Any) -> None:
    x = np.asarray([1, -2, 0, 3], dtype)
    _check_all_modes(lambda v: (np.real(v), np.imag(v), np.conj(v), np.angle(v)), x)
    signed = np.asarray([-0.0, 0.0, np.nan, -np.inf], np.float64)
    _check_all_modes(np.angle, signed)


@pytest.mark.parametrize("dtype", COMPLEX, ids=lambda d: d.__name__)
@pytest.mark.parametrize(
    "name", ["exp", "log", "sqrt", "sin", "cos", "tan", "tanh", "sinh", "cosh", "arctan"]
)
def test_math_functions(dtype: Any, name: str) -> None:
    fn = getattr(np, name)
    z = np.concatenate([_special(dtype), np.asarray([0.3 - 0.7j, -1.2 + 4j], dtype)])
    _check_all_modes(fn, z)


# -- matmul, reductions ----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", COMPLEX, ids=lambda d: d.__name__)
def test_matmul_dot_and_mixed_real_operands(dtype: Any) -> None:
    rng = np.random.default_rng(0)
    a = (rng.standard_normal((4, 3)) + 1j * rng.standard_normal((4, 3))).astype(dtype)
    b = rng.standard_normal((3, 2))  # float64: promotes complex64 to complex128, as NumPy

    def fn(x, y):
        return x @ y, np.matmul(x, y), np.dot(x, y), x @ x.T.conj(), x[0] @ x[1]

    _check_all_modes(fn, a, b)


@pytest.mark.parametrize("dtype", COMPLEX, ids=lambda d: d.__name__)
def test_sum_prod_mean(dtype: Any) -> None:
    rng = np.random.default_rng(1)
    z = (rng.standard_normal((3, 5)) + 1j * rng.standard_normal((3, 5))).astype(dtype)

    def fn(x):
        return x.sum(), np.sum(x, axis=0), np.prod(x, axis=1), x.mean(), np.mean(x, axis=1)

    _check_all_modes(fn, z)
    _check_all_modes(lambda x: (x.sum(), x.prod(), x.sum(axis=0)), z[:0])


def test_mean_of_an_empty_complex_axis_is_nan() -> None:
    z = np.zeros((0, 3), np.complex64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        _check_all_modes(lambda x: np.mean(x, axis=0), z)


# -- creation, where, comparisons, astype ----------------------------------------------------


@pytest.mark.parametrize("dtype", COMPLEX, ids=lambda d: d.__name__)
def test_creation_where_and_equality(dtype: Any) -> None:
    z = np.asarray([1 + 2j, -1j, 0j, complex(np.nan, 1)], dtype)

    def fn(x):
        return (
            np.zeros(x.shape, dtype=dtype) + x,
            np.ones(3, dtype=complex),
            np.full(x.shape, 1 + 2j),
            np.full(2, 3, dtype=dtype),
            np.zeros_like(x),
            np.ones_like(x),
            np.full_like(x, 2j),
            np.empty_like(x).shape,
            np.where(np.abs(x) > 0.5, x, 2.0 + 0j),
            x == 1 + 2j,
            x != x,
            x == np.conj(x),
        )

    _check_all_modes(fn, z)


@pytest.mark.parametrize("dtype", COMPLEX, ids=lambda d: d.__name__)
def test_ordering_is_numpys_lexicographic_order_with_nan(dtype: Any) -> None:
    values = _special(dtype)
    x = np.repeat(values, values.size)
    y = np.tile(values, values.size)

    def fn(a, b):
        return a < b, a <= b, a > b, a >= b, np.less(a, 1j), 2 > b

    _check_all_modes(fn, x, y)


def test_astype_to_and_from_complex() -> None:
    x = np.asarray([1.5, -0.0, np.inf], np.float32)
    _check_all_modes(lambda v: (v.astype(np.complex64), v.astype(complex)), x)
    z = np.asarray([1 + 2j, -3j, complex(-0.0, 1)], np.complex128)
    _check_all_modes(lambda v: (v.astype(np.complex64), v.astype(bool)), z)


def test_astype_complex_to_real_warns_as_numpy_and_drops_the_imaginary_part() -> None:
    z = np.asarray([1.7 + 2j, -3 - 1j], np.complex128)
    with pytest.warns(np.exceptions.ComplexWarning):
        want = z.astype(np.float32)
    with pytest.warns(np.exceptions.ComplexWarning):
        got = kiln.tensor(z).astype(np.float32)
    _assert_same(got, want)
    compiled = kiln.compile(lambda v: v.astype(np.int64))
    with pytest.warns(np.exceptions.ComplexWarning):
        _assert_same(compiled(z), z.real.astype(np.int64))


@pytest.mark.parametrize("dtype", COMPLEX, ids=lambda d: d.__name__)
def test_nan_inf_tests_and_truth_of_complex(dtype: Any) -> None:
    z = _special(dtype)

    def fn(x):
        return (
            np.isnan(x),
            np.isinf(x),
            np.isfinite(x),
            x.astype(bool),
            np.any(x),
            x.all(),
            np.count_nonzero(x),
            x[x != 0],
        )

    _check_all_modes(fn, z)


def test_internal_lowering_never_drops_an_imaginary_part() -> None:
    # what NumPy never does on its own: kiln refuses (a NumPy call falls back), astype asks
    from kiln.functions.operands import cast

    t = kiln.tensor(np.asarray([1 + 2j]))
    with pytest.raises(OpTypeError, match="imaginary part"):
        cast(t, np.dtype(np.float64))
    _assert_same(cast(t, np.dtype(np.bool_)), np.asarray([True]))


# -- what falls back ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: np.max(x),
        lambda x: np.maximum(x, x[::-1]),
        lambda x: np.sign(x),
        lambda x: np.cumsum(x),
        lambda x: np.var(x),
        lambda x: np.linalg.norm(x),
        lambda x: np.fft.fft(x),
        lambda x: np.log10(x),
        lambda x: np.exp2(x),
        lambda x: np.argmax(x),
        lambda x: x.argmax(),
        lambda x: x.max(axis=0),
        lambda x: x.var(ddof=1),
        lambda x: np.median(x),
    ],
    ids=["max", "maximum", "sign", "cumsum", "var", "norm", "fft", "log10", "exp2", "argmax"]
    + ["argmax-method", "max-method", "var-method", "median"],
)
def test_uncaptured_complex_calls_fall_back_to_numpys_answer(fn: Callable[..., Any]) -> None:
    z = np.asarray([1 + 2j, 3 - 1j, -2 + 0.5j], np.complex128)
    want = fn(z)
    compiled = kiln.compile(fn)
    with pytest.warns(kiln.errors.CaptureWarning):
        first = compiled(z)
    _assert_same(first, want)
    _assert_same(compiled(z), want)
    with pytest.raises(CaptureError):
        kiln.compile(fn, fullgraph=True)(z)


def test_kiln_function_refuses_ordering_complex_naming_the_dtype() -> None:
    with pytest.raises(OpTypeError, match="complex128"):
        kiln.maximum(kiln.tensor([1j]), kiln.tensor([2j]))


# -- the corpus kernels ------------------------------------------------------------------------


def _mandelbrot(c):
    z = np.zeros_like(c)
    count = np.zeros(c.shape, dtype=np.int64)
    for _ in range(8):
        z = z * z + c
        inside = np.abs(z) <= 2.0
        count = count + inside
        z = np.where(inside, z, 2.0 + 0j)
    return count


def _dft(x):
    n = x.shape[0]
    k = np.arange(n)
    w = np.exp(-2j * np.pi * np.outer(k, k) / n)
    spectrum = w @ x
    return np.abs(spectrum) ** 2, np.angle(spectrum)


def _rotate(z, theta):
    rotated = z * np.exp(1j * theta)
    cross = rotated * np.conj(z)
    return rotated.real, rotated.imag, np.abs(cross), np.sum(cross)


def test_complex_kernels_compile_exactly() -> None:
    re = np.linspace(-2.0, 0.6, 7)
    im = np.linspace(-1.2, 1.2, 5)
    _check_all_modes(_mandelbrot, re[None, :] + 1j * im[:, None])
    _check_all_modes(_dft, np.random.default_rng(2).standard_normal(8))
    rng = np.random.default_rng(3)
    z = rng.standard_normal(6) + 1j * rng.standard_normal(6)
    _check_all_modes(_rotate, z, rng.uniform(-np.pi, np.pi, 6))


def test_real_part_of_a_compiled_result_is_a_view_of_the_input_as_numpys() -> None:
    compiled = kiln.compile(lambda v: (v.real, v.imag))
    for _ in range(3):
        z, w = np.asarray([1 + 2j, 3 - 4j]), np.asarray([1 + 2j, 3 - 4j])
        real, imag = compiled(z)
        assert np.shares_memory(real, z) and np.shares_memory(imag, z)  # NumPy's views
        real[0] = 99.0
        w.real[0] = 99.0
        _assert_same(z, w)


def test_optimizer_keeps_complex_constants_and_their_order() -> None:
    # (x * c1) * c2 is not x * (c1 * c2) in complex arithmetic; x * 1j is not x * 0 or x * 1
    z = np.random.default_rng(5).standard_normal(200) * (1 + 1j)
    _check_all_modes(lambda x: (x * (0.3 + 0.7j)) * (1.1 - 2.3j), z)
    _check_all_modes(lambda x: (x * 1j, x + 0j, x - 1j, x * (1 + 0j), x / 1j), z)
