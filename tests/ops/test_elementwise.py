"""Elementwise operators beyond the generic sample harness: error messages, value propagation
on symbolic sizes, ONNX integer division semantics, NaN handling."""

from __future__ import annotations

import math

import numpy as np
import pytest

import kiln
from kiln.errors import OpArgumentError, OpTypeError
from kiln.ops.elementwise import erf
from kiln.ops.registry import TensorType, get_op
from kiln.symbolic import SymDim, dim_max, dim_min, floordiv, mod, symbol
from kiln.tensor import call, dispatch

from ..numerics import assert_close

B = symbol("B")
I64 = np.dtype(np.int64)
F32 = np.dtype(np.float32)


def _t(values, dtype=np.int64):
    return kiln.asarray(np.asarray(values, dtype=dtype))


def _value(op, *types, **attrs):
    opdef = get_op(op)
    (out,) = opdef.infer(list(types), opdef.bind_attrs(attrs))
    return out


# -- errors --------------------------------------------------------------------------------


def test_wrong_dtype_names_op_and_argument() -> None:
    with pytest.raises(OpTypeError, match=r"Exp: input 'X' has dtype int64; expected one of"):
        call("Exp", _t([1]))
    with pytest.raises(OpTypeError, match=r"BitwiseAnd: input 'A' has dtype float32"):
        call("BitwiseAnd", _t([1.0], F32), _t([1.0], F32))
    with pytest.raises(OpTypeError, match=r"Pow: input 'X' has dtype int8"):
        call("Pow", _t([1], np.int8), _t([1], np.int8))
    with pytest.raises(OpTypeError, match=r"Where: input 'condition' has dtype int64"):
        call("Where", _t([1]), _t([1]), _t([2]))


def test_mixed_dtypes_name_both_inputs() -> None:
    with pytest.raises(OpTypeError, match=r"Add: inputs 'A' \(int64\) and 'B' \(float32\)"):
        call("Add", _t([1]), _t([1.0], F32))
    with pytest.raises(OpTypeError, match=r"Max: inputs 'data_0' \(int64\) and 'data_2'"):
        call("Max", _t([1]), _t([2]), _t([1.0], F32))


def test_shapes_that_do_not_broadcast() -> None:
    with pytest.raises(OpArgumentError, match=r"Mul: shapes \(2, 3\) and \(4,\) do not broadcast"):
        call("Mul", _t(np.zeros((2, 3))), _t(np.zeros(4)))
    with pytest.raises(OpArgumentError, match=r"Where: shapes .* do not broadcast"):
        call("Where", _t([True, False], bool), _t([1, 2, 3]), _t([1]))
    with pytest.raises(OpArgumentError, match="Sum: shapes"):
        call("Sum", _t([1, 2]), _t([1, 2, 3]))


def test_unknown_or_bad_attributes() -> None:
    with pytest.raises(OpArgumentError, match=r"Relu: unknown attribute\(s\) alpha"):
        call("Relu", _t([1.0], F32), alpha=0.1)
    with pytest.raises(OpArgumentError, match="Gelu: attribute 'approximate' must be"):
        call("Gelu", _t([1.0], F32), approximate="erf")
    with pytest.raises(OpArgumentError, match="Mod: attribute 'fmod' must be 0 or 1"):
        call("Mod", _t([1]), _t([1]), fmod=2)


def test_clip_bounds_must_be_scalars() -> None:
    with pytest.raises(OpArgumentError, match="Clip: input 'min' must be a scalar"):
        call("Clip", _t([1.0, 2.0], F32), _t([0.0, 1.0], F32))
    with pytest.raises(OpTypeError, match="Clip: inputs 'input' .* and 'max'"):
        call("Clip", _t([1.0], F32), None, _t(1))


def test_variadic_needs_an_input() -> None:
    with pytest.raises(OpArgumentError, match="Max takes one or more inputs"):
        dispatch("Max", [])


# -- value propagation ---------------------------------------------------------------------


def _int_type(*values):
    shape = () if len(values) == 1 and not isinstance(values[0], tuple) else (len(values),)
    return TensorType(I64, shape, tuple(values))


def test_arithmetic_propagates_symbolic_values() -> None:
    shape = TensorType(I64, (2,), (B, 3))
    four = TensorType(I64, (), (4,))
    assert _value("Mul", shape, four).value == (B * 4, 12)
    assert _value("Add", shape, four).value == (B + 4, 7)
    assert _value("Sub", four, shape).value == (4 - B, 1)
    assert _value("Div", TensorType(I64, (2,), (B * 4, 12)), four).value == (B, 3)
    assert _value("Div", shape, four).value == (floordiv(B, 4), 0)
    assert _value("Mod", shape, four).value == (mod(B, 4), 3)
    assert _value("Neg", shape).value == (-B, -3)
    assert _value("Identity", shape).value == (B, 3)
    assert _value("Max", shape, TensorType(I64, (2,), (1, 5))).value == (dim_max(B, 1), 5)
    assert _value("Min", shape, four).value == (dim_min(B, 4), 3)
    assert _value("Sum", shape, four, TensorType(I64, (1,), (1,))).value == (B + 5, 8)


def test_value_propagation_uses_onnx_integer_semantics() -> None:
    a = TensorType(I64, (4,), (7, -7, 7, -7))
    b = TensorType(I64, (4,), (2, 2, -2, -2))
    assert _value("Div", a, b).value == (3, -3, -3, 3)  # truncation toward zero
    assert _value("Mod", a, b).value == (1, 1, -1, -1)  # sign of the divisor
    assert _value("Mod", a, b, fmod=1).value == (1, -1, 1, -1)  # sign of the dividend
    wrapped = _value(
        "Add",
        TensorType(np.dtype(np.int8), (1,), (127,)),
        TensorType(np.dtype(np.int8), (1,), (1,)),
    )
    assert wrapped.value == (-128,)


def test_value_propagation_stops_when_unknown() -> None:
    known = TensorType(I64, (2,), (B, 3))
    unknown = TensorType(I64, (2,))
    assert _value("Add", known, unknown).value is None
    assert _value("Div", known, TensorType(I64, (), (0,))).value is None  # no x / 0 sizes
    floats = TensorType(F32, (2,))
    assert _value("Add", floats, floats).value is None
    assert _value("Equal", known, known).value is None


def test_eager_tensors_carry_values_through_arithmetic() -> None:
    out = call("Mul", _t([2, 3]), _t(4))
    assert out.type.value == (8, 12)
    assert isinstance(_value("Add", TensorType(I64, (1,), (B,)), _int_type(1)).value[0], SymDim)


def test_symbolic_shapes_broadcast() -> None:
    x = TensorType(F32, (B, 1, 4))
    y = TensorType(F32, (3, 1))
    assert _value("Add", x, y).shape == (B, 3, 4)
    assert _value("Where", TensorType(np.dtype(bool), (B, 1, 1)), x, y).shape == (B, 3, 4)
    assert _value("Gelu", x).shape == (B, 1, 4)
    assert _value("Mean", x, y, TensorType(F32, ())).shape == (B, 3, 4)


# -- semantics -----------------------------------------------------------------------------


def test_integer_div_truncates_and_mod_follows_fmod() -> None:
    a = np.array([7, -7, 7, -7, -128, 5], dtype=np.int8)
    b = np.array([2, 2, -2, -2, 3, 0], dtype=np.int8)
    assert call("Div", _t(a, np.int8), _t(b, np.int8)).tolist() == [3, -3, -3, 3, -42, 0]
    assert call("Mod", _t(a, np.int8), _t(b, np.int8)).tolist() == [1, 1, -1, -1, 1, 0]
    assert call("Mod", _t(a, np.int8), _t(b, np.int8), fmod=1).tolist() == [1, -1, 1, -1, -2, 0]
    f = np.array([7.5, -7.5], dtype=np.float32)
    assert call("Mod", _t(f, F32), _t([2.0, 2.0], F32), fmod=1).tolist() == [1.5, -1.5]


def test_pow_keeps_base_dtype() -> None:
    out = call("Pow", _t([2.0, 3.0], F32), _t([2, 3], np.int32))
    assert out.dtype == F32 and out.tolist() == [4.0, 27.0]
    out = call("Pow", _t([2, -1, 1, 3]), _t([0, 3, 2, 2]))
    assert out.dtype == I64 and out.tolist() == [1, -1, 1, 9]


def test_pow_integer_negative_exponent_raises_numpys_value_error() -> None:
    # as np.power: any negative element of an integer exponent, checked at run time
    with pytest.raises(ValueError, match="Integers to negative integer powers are not allowed"):
        call("Pow", _t([2, -1, 1, 3]), _t([1, 3, -2, 2]))
    with pytest.raises(ValueError, match="Integers to negative integer powers"):
        call("Pow", _t([2, 3], np.int32), _t([-1], np.int8))
    wrapped = call("Pow", _t([6], np.int32), _t([36], np.int32))
    assert wrapped.tolist() == np.power(np.int32(6), np.int32(36)).reshape(1).tolist() == [0]


def test_nan_handling() -> None:
    x = _t([np.nan, 1.0, -np.inf, np.inf], F32)
    y = _t([0.0, np.nan, 0.0, 0.0], F32)
    assert np.isnan(call("Max", x, y).numpy()[:2]).all()
    assert np.isnan(call("Min", y, x).numpy()[:2]).all()
    assert call("IsNaN", x).tolist() == [True, False, False, False]
    assert call("IsInf", x).tolist() == [False, False, True, True]
    assert call("IsInf", x, detect_negative=0).tolist() == [False, False, False, True]
    assert call("Equal", x, x).tolist() == [False, True, True, True]
    assert np.isnan(call("Relu", x).numpy()[0])
    assert np.isnan(call("Sign", x).numpy()[0])
    assert np.isnan(call("Clip", x, _t(0.0, F32), _t(1.0, F32)).numpy()[0])
    assert np.isnan(call("Round", x).numpy()[0])
    assert np.isnan(call("Erf", x).numpy()[0])
    assert call("Erf", x).tolist()[2:] == [-1.0, 1.0]


def test_round_is_half_to_even() -> None:
    x = _t([0.5, 1.5, 2.5, -0.5, -1.5], F32)
    assert call("Round", x).tolist() == [0.0, 2.0, 2.0, -0.0, -2.0]


def test_erf_is_accurate_in_float64() -> None:
    xs = np.concatenate([np.linspace(-7, 7, 2001), [1e-300, -1e-12, 0.0, 1.0, 3.0, 6.0]])
    expected = np.array([math.erf(v) for v in xs])
    assert_close(erf(xs), expected, rtol=4e-15, atol=0)


def test_stable_activations_at_extremes() -> None:
    x = _t([-100.0, 100.0, 0.0], F32)
    assert_close(call("Sigmoid", x), np.array([math.exp(-100), 1.0, 0.5], F32))
    assert_close(call("Softplus", x), np.array([0.0, 100.0, math.log(2)], F32))
    h = _t([-20.0, 20.0], np.float16)
    assert call("Softplus", h).tolist() == [0.0, 20.0]


def test_float_mod_fmod0_takes_the_divisor_sign() -> None:
    # ONNX Mod-28: fmod=0 on floats is A - floor(A / B) * B, including the IEEE edge cases
    a = np.array([-4.3, 7.2, 5.0, 0.0, np.inf, 3.0, 3.0, -3.0], np.float32)
    b = np.array([2.1, -3.4, 1.0, -2.0, 1.0, 0.0, np.inf, np.inf], np.float32)
    got = call("Mod", kiln.tensor(a), kiln.tensor(b)).numpy()
    with np.errstate(invalid="ignore"):
        want = np.remainder(a, b)
    np.testing.assert_array_equal(np.signbit(got[:4]), np.signbit(want[:4]))
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_cast_like_takes_the_dtype_only() -> None:
    x = kiln.tensor(np.array([1.7, -2.5, 0.0], np.float32))
    like = kiln.tensor(np.zeros((4, 4), np.int16))
    got = call("CastLike", x, like)
    assert got.dtype == np.int16 and got.shape == (3,)
    assert got.tolist() == [1, -2, 0]
    known = get_op("CastLike").infer(
        [TensorType(np.dtype(np.int64), (2,), (3, 4)), TensorType(np.dtype(np.int32), ())], {}
    )
    assert known[0].value == (3, 4) and known[0].dtype == np.int32


def test_prelu_broadcasts_one_way_only() -> None:
    x = kiln.tensor(np.array([[-1.0, 2.0], [-3.0, 4.0]], np.float32))
    slope = kiln.tensor(np.array([[0.5], [0.1]], np.float32))
    assert_close(call("PRelu", x, slope).numpy(), np.array([[-0.5, 2.0], [-0.3, 4.0]], F32))
    with pytest.raises(OpArgumentError, match="PRelu: input 'slope' has shape"):
        call("PRelu", kiln.tensor(np.ones((2,), np.float32)), kiln.tensor(np.ones((3, 2), F32)))
    b = symbol("B")
    (t,) = get_op("PRelu").infer([TensorType(F32, (b, 3)), TensorType(F32, (3,))], {})
    assert t.shape == (b, 3)


def test_activation_attributes() -> None:
    x = kiln.tensor(np.array([-2.0, -0.4, 0.3, 1.5], np.float32))
    shrunk = call("Shrink", x, lambd=0.5, bias=0.25).numpy()
    np.testing.assert_allclose(shrunk, [-1.75, 0.0, 0.0, 1.25])
    np.testing.assert_allclose(call("ThresholdedRelu", x, alpha=0.3).numpy(), [0, 0, 0, 1.5])
    celu = call("Celu", x, alpha=2.0).numpy()
    np.testing.assert_allclose(
        celu, [2.0 * math.expm1(-1.0), 2.0 * math.expm1(-0.2), 0.3, 1.5], rtol=1e-6
    )


def test_contiguous_lays_out_each_batch_element_in_its_own_axis_order():
    from kiln.ops.elementwise import _contiguous

    base = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 4, 3)
    x = base.transpose(0, 2, 1)  # (2, 3, 4): each element column-major
    y = _contiguous(x)
    np.testing.assert_array_equal(y, x)
    assert y is x  # already one element after another, each in its strides' order
    strided = np.ascontiguousarray(x.transpose(1, 0, 2)).transpose(1, 0, 2)  # batch inside
    assert strided.strides == (16, 32, 4)
    y = _contiguous(strided)
    np.testing.assert_array_equal(y, x)
    assert y.strides == (48, 16, 4)  # each element contiguous, row-major as it was
    inner = _contiguous(strided, batch_axes=2)  # two batch axes: the last one is the element
    assert inner.strides[2] == 4 and inner.strides[0] > inner.strides[1] > 0
    np.testing.assert_array_equal(inner, x)
    assert _contiguous(np.float32(2.0).reshape(())).shape == ()  # (0-d stays 0-d)
