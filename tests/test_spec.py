"""TensorSpec and the checks of the arguments that describe inputs (signature, dynamic_axes)."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.errors import ArgumentError, ArgumentTypeError, InputMismatchError, KilnError
from kiln.spec import (
    MAX_SIZE,
    TensorSpec,
    check_dynamic_axes,
    check_dynamic_axes_refer,
    check_signature,
)
from kiln.symbolic import symbol


def test_spec_shapes_that_are_valid() -> None:
    assert TensorSpec(("B", 4), "float32", name="x").shape == ("B", 4)
    assert TensorSpec((None, np.int64(3))).shape == (None, 3)
    assert TensorSpec(()).shape == ()
    assert TensorSpec([2, 3]).shape == (2, 3)
    assert TensorSpec(np.array([2, 3])).shape == (2, 3)
    assert TensorSpec(5).shape == (5,)  # as NumPy, one size is a 1-D shape
    assert TensorSpec((symbol("B"), 2)).shape == (symbol("B"), 2)
    assert TensorSpec((MAX_SIZE,)).shape == (MAX_SIZE,)


@pytest.mark.parametrize(
    ("shape", "match"),
    [
        (None, r"'shape' must be a sequence.*NoneType None; a 0-d spec is \(\)"),
        ("BT", r"got the str 'BT'; write \('B', 'T'\).*\('BT',\)"),
        ((2, 2.5), r"got float 2\.5 in \(2, 2\.5\)"),
        ((True, 2), r"got bool True"),
        ((2, ""), r"got str '' in"),
        (object(), r"'shape' must be a sequence"),
    ],
)
def test_spec_shape_of_the_wrong_type(shape, match) -> None:
    with pytest.raises(ArgumentTypeError, match=match):
        TensorSpec(shape)


@pytest.mark.parametrize("shape", [(-1,), (10**19,), (2**62, 4), (MAX_SIZE, 2)])
def test_spec_sizes_out_of_range(shape) -> None:
    with pytest.raises(ArgumentError, match=r"sizes from 0 to 2\*\*63 - 1"):
        TensorSpec(shape)
    with pytest.raises(ValueError):  # also the built-in, as before
        TensorSpec(shape)


@pytest.mark.parametrize("name", [123, b"x", ""])
def test_spec_name_must_be_a_str(name) -> None:
    with pytest.raises(ArgumentTypeError, match=r"'name' must be a non-empty str or None"):
        TensorSpec((2,), name=name)


def test_check_signature() -> None:
    spec = TensorSpec((2,))
    assert check_signature(None, "f") is None
    assert check_signature([spec], "f") == (spec,)
    assert check_signature((), "f") == ()
    with pytest.raises(ArgumentTypeError, match=r"f: 'signature' must be a list.*str 'x'"):
        check_signature("x", "f")
    with pytest.raises(ArgumentTypeError, match=r"f: signature\[1\] must be a kiln.TensorSpec"):
        check_signature([spec, None], "f")
    with pytest.raises(ArgumentTypeError, match=r"single TensorSpec; write signature=\["):
        check_signature(spec, "f")
    with pytest.raises(ArgumentTypeError, match=r"got int 3"):
        check_signature(3, "f")


def test_check_dynamic_axes_normalizes() -> None:
    assert check_dynamic_axes(None, "f") is None
    assert check_dynamic_axes({"x": [0, -1]}, "f") == {"x": {0: None, -1: None}}
    assert check_dynamic_axes({"x": (1,), 2: {0: "B"}}, "f") == {"x": {1: None}, 2: {0: "B"}}
    assert check_dynamic_axes({"x": {np.int64(0): "B"}}, "f") == {"x": {0: "B"}}


@pytest.mark.parametrize(
    ("axes", "match"),
    [
        ([0], r"f: 'dynamic_axes' must be a mapping.*got list \[0\].*write \{'x': \[0\]\}"),
        ("x", r"got str 'x'; to make axis 0 of 'x' dynamic write \{'x': \[0\]\}"),
        ({"x": 0}, r"dynamic_axes\['x'\] must be a list of axes.*got int 0"),
        ({"x": "0"}, r"dynamic_axes\['x'\] must be a list of axes.*got str '0'"),
        ({"x": {0: 5}}, r"axis 0 is named 5, but a size name is a non-empty str"),
        ({"x": {0: ""}}, r"axis 0 is named '', but a size name"),
        ({"x": [True]}, r"axes are ints, got bool True"),
        ({"x": ["0"]}, r"axes are ints, got str '0'"),
        ({(0, 1): [0]}, r"keys are input names \(str\) or flat input indices"),
        ({-1: [0]}, r"keys are input names.*got int -1"),
        ({True: [0]}, r"keys are input names.*got bool True"),
    ],
)
def test_check_dynamic_axes_refuses_bad_forms(axes, match) -> None:
    with pytest.raises(ArgumentTypeError, match=match):
        check_dynamic_axes(axes, "f")


def test_check_dynamic_axes_refer() -> None:
    inputs = [("x", 2), ("mask", 1)]
    check_dynamic_axes_refer({"x": {1: None}, 1: {-1: "T"}}, inputs)
    with pytest.raises(InputMismatchError, match=r"names the input 'msk'.*did you mean 'mask'"):
        check_dynamic_axes_refer({"msk": {0: None}}, inputs)
    with pytest.raises(InputMismatchError, match=r"2 tensor input\(s\).*flat index 2 names none"):
        check_dynamic_axes_refer({2: {0: None}}, inputs)
    with pytest.raises(InputMismatchError, match=r"input 'mask' has rank 1, so axis 1 does not"):
        check_dynamic_axes_refer({"mask": {1: None}}, inputs)
    with pytest.raises(InputMismatchError, match=r"input 'x' has rank 2, so axis -3"):
        check_dynamic_axes_refer({0: {-3: None}}, inputs)
    # A key naming a static (non-tensor) input of this call, or indexing past the tensor
    # inputs into the static ones, is skipped: another structure of a compiled function.
    check_dynamic_axes_refer({"n": {0: None}, 2: {0: None}}, inputs, static=["n"])
    with pytest.raises(InputMismatchError, match=r"flat index 3 names none"):
        check_dynamic_axes_refer({3: {0: None}}, inputs, static=["n"])


def test_argument_errors_are_kiln_errors_and_builtins() -> None:
    assert issubclass(ArgumentError, KilnError) and issubclass(ArgumentError, ValueError)
    assert issubclass(ArgumentTypeError, KilnError) and issubclass(ArgumentTypeError, TypeError)
    assert kiln.errors.ArgumentError is ArgumentError
    assert "ArgumentTypeError" in kiln.errors.__all__
