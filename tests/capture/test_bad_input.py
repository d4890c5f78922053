"""Bad input to kiln.compile, kiln.trace, graph.run and the creation functions: a KilnError
(also the matching built-in) naming the argument and what was expected; input NumPy accepts
(big-endian arrays) works and gives NumPy's answer."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import TensorSpec
from kiln.errors import ArgumentError, ArgumentTypeError, InputMismatchError, OpArgumentError

from ..numerics import assert_close


def double(x):
    return x * 2


X = np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5


def _finalized(fn, *args, **kwargs):
    traced = kiln.trace(fn, *args, **kwargs)
    traced.finalize()
    return traced


# -- dynamic_axes and signature -------------------------------------------------------------


@pytest.mark.parametrize("axes", [[0], "x", {"x": 0}, {"x": {0: 5}}, {"x": [True]}])
def test_dynamic_axes_of_the_wrong_form(axes) -> None:
    with pytest.raises(ArgumentTypeError, match=r"kiln.compile: .*dynamic_axes"):
        kiln.compile(double, dynamic_axes=axes)
    with pytest.raises(ArgumentTypeError, match=r"kiln.trace: .*dynamic_axes"):
        kiln.trace(double, X, dynamic_axes=axes)


def test_dynamic_axes_naming_no_input_or_no_axis() -> None:
    cases = [
        ({"y": [0]}, r"names the input 'y', but the tensor inputs are \['x'\]"),
        ({"xx": [0]}, r"did you mean 'x'"),
        ({"x": [2]}, r"input 'x' has rank 2, so axis 2 does not exist"),
        ({1: [0]}, r"1 tensor input\(s\) \['x'\], so flat index 1 names none"),
    ]
    for axes, match in cases:
        with pytest.raises(InputMismatchError, match=match):
            kiln.trace(double, X, dynamic_axes=axes)
        f = kiln.compile(double, dynamic_axes=axes)
        with pytest.raises(InputMismatchError, match=match):
            f(X)


def test_dynamic_axes_that_are_right_still_work() -> None:
    traced = _finalized(double, X, dynamic_axes={"x": {0: "B"}})
    assert str(traced.graph.inputs[0].shape[0]) == "B"
    x5 = np.ones((5, 3), np.float32)
    assert_close(traced.run([x5])[0], x5 * 2)
    f = kiln.compile(double, dynamic_axes={0: [0]})
    for x in (X, x5, X):
        assert_close(np.asarray(f(x)), x * 2)


@pytest.mark.parametrize(
    ("signature", "match"),
    [
        ("x", r"'signature' must be a list of TensorSpecs.*got str 'x'"),
        ([None], r"signature\[0\] must be a kiln.TensorSpec, got NoneType None"),
        (TensorSpec((2, 3)), r"'signature' .*a single TensorSpec; write signature=\[TensorSpec"),
    ],
)
def test_signature_of_the_wrong_form(signature, match) -> None:
    with pytest.raises(ArgumentTypeError, match="kiln.compile: " + match):
        kiln.compile(double, signature=signature)
    with pytest.raises(ArgumentTypeError, match="kiln.trace: " + match):
        kiln.trace(double, signature=signature)


def test_compile_with_signature_none_is_compile_without_one() -> None:
    f = kiln.compile(double, signature=None)
    for _ in range(2):
        assert_close(np.asarray(f(X)), X * 2)
    assert f.cache_info().captures == 1


def test_trace_without_inputs_or_signature_says_what_to_pass() -> None:
    with pytest.raises(ArgumentTypeError, match=r"no example inputs and no signature.*'x'"):
        kiln.trace(double)
    with pytest.raises(ArgumentTypeError, match=r"no example inputs and no signature"):
        kiln.trace(double, signature=None)
    with pytest.raises(ArgumentTypeError, match=r"a signature of 2 TensorSpec\(s\)"):
        kiln.trace(double, signature=[TensorSpec((2,)), TensorSpec((2,))])
    with pytest.warns(kiln.errors.CaptureWarning, match="no tensor inputs"):  # all baked
        assert kiln.trace(lambda: kiln.zeros(2)).graph.outputs[0].shape == (2,)


def test_trace_with_a_tensor_spec_as_example_input_says_use_signature() -> None:
    spec = TensorSpec(("B", 3))
    with pytest.raises(ArgumentTypeError, match=r"example input 'x' is a TensorSpec.*signature="):
        kiln.trace(double, spec)
    with pytest.raises(ArgumentTypeError, match=r"example input 'x.0' is a TensorSpec"):
        kiln.trace(lambda x: x[0] * 2, [spec])
    with pytest.raises(ArgumentTypeError, match=r"example input 'x' is a TensorSpec"):
        kiln.trace(double, x=spec)


# -- graph.run ------------------------------------------------------------------------------


def test_run_with_something_that_is_not_a_list_of_inputs() -> None:
    traced = _finalized(double, X)
    for bad in (None, "x", b"x"):
        with pytest.raises(ArgumentTypeError, match=r"run\(\) takes a list of inputs"):
            traced.run(bad)
        with pytest.raises(ArgumentTypeError, match=r"run\(\) takes a list of inputs"):
            traced.graph.run(bad)
    for bad in (None, "text"):
        with pytest.raises(ArgumentTypeError, match=r"input 'x' must be a tensor or an array"):
            traced.run([bad])


# -- big-endian, np.matrix and masked arrays ------------------------------------------------


@pytest.mark.parametrize("dtype", [">f4", ">f8", ">i8", ">i4"])
def test_big_endian_arrays_compute_as_numpy(dtype) -> None:
    x = (np.arange(6) - 2).reshape(2, 3).astype(dtype)
    expected = x * 2
    assert expected.dtype.isnative  # NumPy's results are native
    f = kiln.compile(double)
    for _ in range(3):  # capture, then replays
        assert_close(np.asarray(f(x)), expected)
    assert f.cache_info().captures == 1
    native = x.astype(x.dtype.newbyteorder("="))
    assert_close(np.asarray(f(native)), expected)  # the same capture serves native input
    assert f.cache_info().captures == 1
    traced = _finalized(double, x)
    assert traced.graph.inputs[0].dtype == native.dtype
    assert_close(traced.run([x])[0], expected)
    dynamic = _finalized(double, native, dynamic_axes={"x": [0]})  # the checked slow path
    assert_close(dynamic.run({"x": x})[0], expected)


def test_big_endian_keyword_input_computes_as_numpy() -> None:
    x = np.linspace(-1, 1, 6).astype(">f4")
    f = kiln.compile(lambda a, *, b: a + b)
    for _ in range(2):
        assert_close(np.asarray(f(x, b=x)), x + x)


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")  # np.matrix itself
def test_matrix_and_masked_arrays_get_a_clear_message() -> None:
    m = np.matrix([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32)
    masked = np.ma.masked_array([[1.0, 2.0], [3.0, 4.0]], mask=[[0, 1], [0, 0]], dtype=np.float32)
    traced = _finalized(double, np.ones((2, 2), np.float32))
    for value, match in ((m, r"numpy.matrix.*np.asarray\(m\)"), (masked, r"masked.*m.filled")):
        with pytest.raises(ArgumentTypeError, match=r"input 'x' is a " + match):
            kiln.compile(double)(value)
        with pytest.raises(ArgumentTypeError, match=r"input 'x' is a " + match):
            traced.run([value])
        with pytest.raises(ArgumentTypeError, match=r"input 'x' is a " + match):
            kiln.trace(double, value)
    assert_close(traced.run([np.asarray(m)])[0], np.asarray(m) * 2)
    assert_close(traced.run([masked.filled(0)])[0], masked.filled(0) * 2)


# -- a compiled function called with None or a str where it captured an array ---------------


def test_str_where_an_array_was_captured_gives_the_eager_result() -> None:
    f = kiln.compile(double)
    f(X)
    f(X)
    assert f("ab") == "abab"  # a new structure: served as eager Python would
    assert f(3) == 6
    assert_close(np.asarray(f(X)), X * 2)


def test_dynamic_axes_of_an_input_that_is_now_static_are_skipped() -> None:
    # dynamic_axes name inputs of the first structure; a call where the input is not an array
    # is a new structure, served as eager Python would serve it.
    f = kiln.compile(double, dynamic_axes={"x": [0]})
    assert_close(np.asarray(f(X)), X * 2)
    assert f("ab") == "abab"
    g = kiln.compile(lambda x, y: x * y, dynamic_axes={1: [0]})
    assert_close(np.asarray(g(X, X)), X * X)
    assert_close(np.asarray(g(X, 3)), X * 3)


def test_none_where_an_array_was_captured_raises_what_eager_raises() -> None:
    f = kiln.compile(double)
    f(X)
    with pytest.raises(TypeError, match=r"unsupported operand.*NoneType"):
        double(None)
    with pytest.raises(TypeError, match=r"unsupported operand.*NoneType"):
        f(None)
    g = kiln.compile(lambda x: 0 if x is None else x * 2)
    g(X)
    assert g(None) == 0
    assert_close(np.asarray(g(X)), X * 2)


# -- kiln.from_dlpack, creation functions, reshape --------------------------------------------


def test_from_dlpack_of_something_without_dlpack() -> None:
    with pytest.raises(ArgumentTypeError, match=r"from_dlpack: 'x' must be an array.*got int"):
        kiln.from_dlpack(123)
    assert_close(np.asarray(kiln.from_dlpack(X)), X)


def test_arange_with_a_zero_or_endless_step() -> None:
    with pytest.raises(ArgumentError, match=r"arange: 'step' must not be 0"):
        kiln.arange(0, 10, 0)
    with pytest.raises(ArgumentError, match=r"arange: 'step' must not be 0"):
        kiln.arange(0.0, 1.0, 0.0)
    with pytest.raises(ArgumentError, match=r"arange\(0, inf, 1\).*finite"):
        kiln.arange(0, float("inf"))
    assert_close(np.asarray(kiln.arange(0, 10, 3)), np.arange(0, 10, 3))


@pytest.mark.parametrize(
    ("shape", "error", "match"),
    [
        (("a",), ArgumentTypeError, r"full: 'shape' entries must be ints, got str 'a'"),
        ((2, 2.5), ArgumentTypeError, r"got float 2\.5"),
        (2.5, ArgumentTypeError, r"'shape' must be an int or a sequence of ints, got float"),
        (None, ArgumentTypeError, r"'shape' must be an int or a sequence of ints, got NoneType"),
        ("ab", ArgumentTypeError, r"got str 'ab'"),
        (10**19, ArgumentError, r"more than 9223372036854775807 \(2\*\*63 - 1\) elements"),
        ((2**62, 4), ArgumentError, r"holds more than"),
        ((-1,), OpArgumentError, r"negative size"),
    ],
)
def test_creation_with_a_bad_shape(shape, error, match) -> None:
    for make in (kiln.zeros, kiln.ones, kiln.empty, lambda s: kiln.full(s, 7)):
        with pytest.raises(error, match=match):
            make(shape)


def test_creation_with_good_shapes_matches_numpy() -> None:
    for shape in (3, (2, 3), [np.int64(2), 1], (), (0, 4), np.int32(2)):
        assert_close(np.asarray(kiln.zeros(shape)), np.zeros(shape))
        assert_close(np.asarray(kiln.full(shape, 7, np.int32)), np.full(shape, 7, np.int32))


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (("a",), r"reshape: shape entries must be ints \(one may be -1\), got str 'a'"),
        (((2, "a"),), r"got str 'a' in \(2, 'a'\)"),
        ((2.5,), r"got float 2\.5"),
        ((None,), r"got NoneType None"),
        ((True, 6), r"got bool True"),
        ((np.array([2.0, 3.0]),), r"got float 2\.0"),
    ],
)
def test_reshape_with_a_bad_shape(args, match) -> None:
    t = kiln.tensor(np.arange(6.0))
    with pytest.raises(ArgumentTypeError, match=match):
        t.reshape(*args)


def test_reshape_shape_arguments_numpy_accepts() -> None:
    a = np.arange(6.0)
    t = kiln.tensor(a)
    for shape in ((2, 3), [3, -1], np.array([2, 3]), np.array(6), np.int64(6), (np.array(2), 3)):
        assert_close(np.asarray(t.reshape(shape)), a.reshape(shape))
        assert_close(np.asarray(np.reshape(t, shape)), np.reshape(a, shape))
    assert_close(np.asarray(t.reshape(3, 2)), a.reshape(3, 2))
    with pytest.raises(ArgumentTypeError, match=r"'shape' must be an int or a sequence"):
        np.reshape(t, "a")
    with pytest.raises(OpArgumentError, match=r"negative dimensions other than -1"):
        t.reshape(-2, 3)
