"""The complex operators (kiln.ops.complex) and the complex dtypes of the ONNX-domain records:
kernels against NumPy bit for bit, dtype rules, and the engines that refuse complex values."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.errors import OpTypeError, UnsupportedOperationError
from kiln.ops.dispatch import run_kernel
from kiln.ops.registry import TensorType, get_op

COMPLEX = (np.complex64, np.complex128)
PARTS = {np.complex64: np.float32, np.complex128: np.float64}


def _special(dtype: type) -> np.ndarray:
    """Signed zeros, infinities and NaN in either part, beside ordinary values."""
    parts = [0.0, -0.0, 1.5, -2.0, np.inf, -np.inf, np.nan]
    return np.asarray([complex(a, b) for a in parts for b in parts], dtype=dtype)


def _same_bits(got: np.ndarray, want: np.ndarray) -> None:
    got, want = np.atleast_1d(got), np.atleast_1d(want)
    assert got.dtype == want.dtype and got.shape == want.shape
    # NaN payloads aside, bit for bit: signed zeros count
    g = got.view(got.real.dtype) if got.dtype.kind == "c" else got
    w = want.view(want.real.dtype) if want.dtype.kind == "c" else want
    np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
    ok = ~np.isnan(w)
    np.testing.assert_array_equal(g[ok], w[ok])
    np.testing.assert_array_equal(np.signbit(g[ok]), np.signbit(w[ok]))


def _run(op: str, *arrays: np.ndarray, **attrs: object) -> np.ndarray:
    opdef = get_op(op)
    types = [TensorType(a.dtype, a.shape) for a in arrays]
    (out_type,) = opdef.infer(types, opdef.bind_attrs(attrs))
    (out,) = run_kernel(opdef, list(arrays), opdef.bind_attrs(attrs))
    assert out.dtype == out_type.dtype
    if all(isinstance(d, int) for d in out_type.shape):  # the axes' values are not typed here
        assert tuple(out.shape) == tuple(out_type.shape)
    return out


@pytest.mark.parametrize("dtype", COMPLEX, ids=lambda d: d.__name__)
@pytest.mark.parametrize(
    ("op", "numpy_fn"),
    [
        ("kiln.Real", np.real),
        ("kiln.Imag", np.imag),
        ("kiln.Conj", np.conjugate),
        ("kiln.Angle", np.angle),
        ("kiln.ComplexAbs", np.abs),
    ],
)
def test_complex_unary_kernels_are_numpys(dtype: type, op: str, numpy_fn) -> None:
    for x in (_special(dtype), np.zeros((0, 2), dtype), np.asarray(1 - 2j, dtype)):
        _same_bits(_run(op, x), numpy_fn(x))


@pytest.mark.parametrize("op", ["kiln.Real", "kiln.Imag", "kiln.Conj", "kiln.ComplexAbs"])
def test_complex_only_operators_refuse_real_inputs_naming_the_dtype(op: str) -> None:
    with pytest.raises(OpTypeError, match=f"{op.split('.')[1]}.*float32.*complex128, complex64"):
        get_op(op).infer([TensorType(np.dtype(np.float32), (2,))], {})


def test_angle_of_a_real_input_is_arctan2_of_zero() -> None:
    x = np.asarray([1.0, -1.0, 0.0, -0.0, np.nan, -np.inf], np.float32)
    _same_bits(_run("kiln.Angle", x), np.angle(x))


@pytest.mark.parametrize("dtype", COMPLEX, ids=lambda d: d.__name__)
@pytest.mark.parametrize(
    ("op", "numpy_fn"),
    [("Add", np.add), ("Sub", np.subtract), ("Mul", np.multiply), ("Div", np.divide)],
)
def test_arithmetic_records_take_complex(dtype: type, op: str, numpy_fn) -> None:
    a = _special(dtype)
    b = a[::-1].copy()
    with np.errstate(all="ignore"):
        _same_bits(_run(op, a, b), numpy_fn(a, b))


@pytest.mark.parametrize("dtype", COMPLEX, ids=lambda d: d.__name__)
@pytest.mark.parametrize(
    "op", ["Exp", "Log", "Sqrt", "Reciprocal", "Sin", "Cos", "Tan", "Tanh", "Sinh", "Neg"]
)
def test_math_records_take_complex(dtype: type, op: str) -> None:
    fn = {"Neg": np.negative, "Reciprocal": np.reciprocal}.get(op) or getattr(np, op.lower())
    x = _special(dtype)
    with np.errstate(all="ignore"):
        _same_bits(_run(op, x), fn(x))


@pytest.mark.parametrize("dtype", COMPLEX, ids=lambda d: d.__name__)
def test_pow_computes_in_the_complex_base_dtype(dtype: type) -> None:
    x = np.asarray([1 + 2j, -3 + 0.5j, 0j, 2.0], dtype)
    y = np.asarray([2.5, 0.5, 3.0, -1.0], dtype)
    with np.errstate(all="ignore"):
        _same_bits(_run("Pow", x, y), np.power(x, y))


@pytest.mark.parametrize("dtype", COMPLEX, ids=lambda d: d.__name__)
def test_matmul_gemm_and_reductions_take_complex(dtype: type) -> None:
    rng = np.random.default_rng(3)
    a = (rng.standard_normal((3, 4)) + 1j * rng.standard_normal((3, 4))).astype(dtype)
    b = (rng.standard_normal((4, 2)) + 1j * rng.standard_normal((4, 2))).astype(dtype)
    c = (rng.standard_normal((3, 2)) + 1j * rng.standard_normal((3, 2))).astype(dtype)
    _same_bits(_run("MatMul", a, b), np.matmul(a, b))
    # alpha/beta scale in the complex dtype (an integer-style float64 round trip would drop
    # the imaginary part)
    gemm = _run("Gemm", a, b, c, alpha=2.0, beta=0.5)
    _same_bits(gemm, np.matmul(a, b) * dtype(2.0) + c * dtype(0.5))
    axes = np.asarray([1])
    _same_bits(_run("ReduceSum", a, axes, keepdims=0), np.sum(a, axis=1))
    _same_bits(_run("ReduceProd", a, axes, keepdims=0), np.prod(a, axis=1))
    _same_bits(_run("ReduceMean", a, axes, keepdims=0), np.mean(a, axis=1))
    _same_bits(_run("ReduceMean", a[:0], axes, keepdims=0), np.mean(a[:0], axis=1))


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin", "Less", "Max", "Floor", "Sign"])
def test_ordered_and_rounding_records_refuse_complex(op: str) -> None:
    t = TensorType(np.dtype(np.complex64), (2,))
    opdef = get_op(op)
    with pytest.raises(OpTypeError, match="complex64"):
        opdef.infer([t] * (2 if op in ("Less", "Max") else 1), opdef.bind_attrs({}))


def test_cast_from_complex_drops_the_imaginary_part_quietly_and_to_bool_tests_both() -> None:
    x = np.asarray([1.7 + 2j, -0.0 + 0j, 0 + 1j, np.nan + 0j], np.complex128)
    code = kiln.dtypes.onnx_dtype_code
    with np.errstate(all="ignore"):
        _same_bits(_run("Cast", x, to=code("float32")), x.real.astype(np.float32))
        _same_bits(_run("Cast", x, to=code("int32")), x.real.astype(np.int32))
    _same_bits(_run("Cast", x, to=code("bool")), x.astype(bool))
    _same_bits(_run("Cast", x, to=code("complex64")), x.astype(np.complex64))
    real = np.asarray([1.5, -0.0], np.float32)
    _same_bits(_run("Cast", real, to=code("complex128")), real.astype(np.complex128))


def test_onnx_codes_of_complex_dtypes() -> None:
    assert kiln.dtypes.onnx_dtype_code(kiln.complex64) == 14
    assert kiln.dtypes.onnx_dtype_code("complex128") == 15
    assert kiln.dtypes.dtype_from_onnx_code(15) == np.complex128


def _rotate(z, t):
    return np.abs(z * np.exp(1j * t))


def test_onnx_export_names_the_first_complex_operator_and_tensor() -> None:
    pytest.importorskip("onnx")
    x = np.ones(3, np.float32)
    graph = kiln.trace(lambda v: np.abs(v * 1j), x).graph
    with pytest.raises(UnsupportedOperationError, match=r"ONNX has no complex Cast .*complex64"):
        kiln.io.to_onnx(graph)


def test_onnxruntime_and_jax_refuse_complex_graphs_and_numpy_runs_them() -> None:
    z = np.asarray([1 + 2j, 3j])
    t = np.asarray([0.5, 1.0])
    graph = kiln.trace(_rotate, z, t).graph
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    with pytest.raises(UnsupportedOperationError, match="complex128"):
        graph.finalize(engine="onnxruntime")
    pytest.importorskip("jax")
    with pytest.raises(UnsupportedOperationError, match="jax engine.*complex128"):
        graph.finalize(engine="jax")
    graph.finalize(engine="numpy")
    _same_bits(np.asarray(graph.run([z, t])[0]), _rotate(z, t))


def test_automatic_engine_choice_keeps_complex_on_numpy() -> None:
    z = np.ones((64, 64), np.complex64)
    graph = kiln.trace(lambda a: (a @ a) * 1j, z).graph
    graph.finalize()
    _same_bits(np.asarray(graph.run([z])[0]), (z @ z) * 1j)
