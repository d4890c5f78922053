"""kiln dtypes are NumPy dtypes; as_dtype, result_type (NumPy 2 / NEP 50) and the predicates."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import kiln
from kiln import dtypes
from kiln.errors import KilnError, OpTypeError

NAMES = [
    "bool_",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "complex64",
    "complex128",
]


@pytest.mark.parametrize("name", NAMES)
def test_every_dtype_is_exported_and_is_a_numpy_dtype(name: str) -> None:
    dt = getattr(kiln, name)
    assert dt is getattr(dtypes, name)
    assert isinstance(dt, np.dtype)
    assert dt in dtypes.ALL_DTYPES
    numpy_name = "bool" if name == "bool_" else name
    assert dt.name == numpy_name
    assert name in kiln.__all__


def test_dtypes_equal_numpy_dtypes() -> None:
    assert kiln.float32 == np.dtype("float32")
    assert kiln.int64 == np.int64
    assert kiln.bool_ == np.dtype(bool)
    assert kiln.bfloat16 == np.dtype(ml_dtypes.bfloat16)
    assert kiln.DType is np.dtype
    # Usable wherever NumPy wants a dtype, with no conversion.
    assert np.zeros(2, dtype=kiln.float16).dtype == np.float16
    assert np.zeros(2, dtype=kiln.bfloat16).dtype == kiln.bfloat16


def test_dtype_groups() -> None:
    assert len(dtypes.ALL_DTYPES) == 15 == len(set(dtypes.ALL_DTYPES))
    assert set(dtypes.COMPLEX_DTYPES) == {kiln.complex64, kiln.complex128}
    assert not set(dtypes.COMPLEX_DTYPES) & set(dtypes.NUMERIC_DTYPES)
    assert set(dtypes.FLOAT_DTYPES) == {kiln.float16, kiln.bfloat16, kiln.float32, kiln.float64}
    assert kiln.bool_ not in dtypes.NUMERIC_DTYPES
    assert set(dtypes.INT_DTYPES) | set(dtypes.FLOAT_DTYPES) == set(dtypes.NUMERIC_DTYPES)


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("float32", np.float32),
        ("f4", np.float32),
        ("bfloat16", ml_dtypes.bfloat16),
        (ml_dtypes.bfloat16, ml_dtypes.bfloat16),
        (np.float16, np.float16),
        (np.dtype("uint8"), np.uint8),
        (kiln.int16, np.int16),
        (float, np.float64),
        (int, np.int64),
        (bool, np.bool_),
        ("bool", np.bool_),
    ],
)
def test_as_dtype_accepts_names_types_and_dtypes(spec: object, expected: type) -> None:
    result = dtypes.as_dtype(spec)
    assert isinstance(result, np.dtype)
    assert result == np.dtype(expected)


@pytest.mark.parametrize("bad", ["not_a_dtype", 3, [1, 2]])
def test_as_dtype_rejects_non_dtypes(bad: object) -> None:
    with pytest.raises(OpTypeError, match="is not a dtype") as info:
        dtypes.as_dtype(bad)
    # The message lists what is accepted.
    assert "float32" in str(info.value) and "bfloat16" in str(info.value)
    assert isinstance(info.value, TypeError) and isinstance(info.value, KilnError)


@pytest.mark.parametrize("bad", [np.longdouble, object, str, "datetime64[s]"])
def test_as_dtype_rejects_unsupported_dtypes_naming_them(bad: object) -> None:
    with pytest.raises(TypeError, match="does not support dtype") as info:
        dtypes.as_dtype(bad)
    assert np.dtype(bad).name.split("[")[0] in str(info.value) or str(np.dtype(bad)) in str(
        info.value
    )


@pytest.mark.parametrize(
    ("operands", "expected"),
    [
        # Python scalars are weak (NEP 50): they adopt the strong dtype when the kind allows.
        ((kiln.float32, 2.0), kiln.float32),
        ((kiln.float16, 2.0), kiln.float16),
        ((kiln.int8, 1), kiln.int8),
        ((kiln.uint8, 200), kiln.uint8),
        ((kiln.int32, 2.5), kiln.float64),
        ((kiln.bool_, 1), kiln.int64),
        ((kiln.bool_, True), kiln.bool_),
        ((kiln.int64, 1.0), kiln.float64),
        # Only Python scalars: NumPy's defaults.
        ((2.0,), kiln.float64),
        ((1, 2), kiln.int64),
        # Strong operands promote as NumPy 2.
        ((kiln.int8, kiln.uint8), kiln.int16),
        ((kiln.int32, kiln.float32), kiln.float64),
        ((kiln.float16, kiln.float32), kiln.float32),
        ((kiln.int64, kiln.uint64), kiln.float64),
        # NumPy scalars are strong.
        ((kiln.float32, np.float64(2.0)), kiln.float64),
    ],
)
def test_result_type_follows_numpy2(operands: tuple, expected: np.dtype) -> None:
    assert dtypes.result_type(*operands) == expected
    assert kiln.result_type is dtypes.result_type


@pytest.mark.parametrize(
    "operands",
    [(kiln.bfloat16, kiln.float32), (kiln.bfloat16, kiln.float16), (kiln.bfloat16, 2.0)],
    ids=str,
)
def test_bfloat16_promotes_as_ml_dtypes_and_numpy_do(operands: tuple) -> None:
    # bfloat16's promotion is ml_dtypes' own and changed between its releases (0.5.4 with
    # NumPy 2.4: bfloat16 + float16 has no common dtype); kiln gives NumPy's answer or error.
    try:
        want = np.result_type(*operands)
    except Exception as exc:  # noqa: BLE001 - whatever NumPy raises, kiln raises it too
        with pytest.raises(type(exc)):
            dtypes.result_type(*operands)
    else:
        assert dtypes.result_type(*operands) == want


def test_result_type_matches_numpy_on_strong_pairs() -> None:
    native = [d for d in dtypes.ALL_DTYPES if d != kiln.bfloat16]
    for a in native:
        for b in native:
            assert dtypes.result_type(a, b) == np.result_type(a, b), (a, b)


def test_result_type_reads_dtype_of_arrays_and_tensors() -> None:
    t = kiln.tensor([1.0, 2.0], dtype="float32")
    assert dtypes.result_type(t, 2) == kiln.float32
    assert dtypes.result_type(np.zeros(2, np.int16), t) == kiln.float32
    assert dtypes.result_type(kiln.tensor([1], dtype="int8"), 3.5) == kiln.float64


def test_result_type_of_complex_python_scalars_is_weak() -> None:
    # NEP 50: a Python complex takes the precision of the strong operand's kind
    assert dtypes.result_type(kiln.float32, 1j) == kiln.complex64
    assert dtypes.result_type(kiln.float64, 1j) == kiln.complex128
    assert dtypes.result_type(kiln.int32, 1j) == kiln.complex128
    assert dtypes.result_type(kiln.float16, 1j) == kiln.complex64


def test_result_type_rejects_unsupported_results() -> None:
    with pytest.raises(OpTypeError, match="longdouble|float128"):
        dtypes.result_type(np.dtype(np.longdouble), kiln.float32)


@pytest.mark.parametrize("dt", dtypes.ALL_DTYPES, ids=lambda d: d.name)
def test_predicates(dt: np.dtype) -> None:
    assert dtypes.is_floating(dt) == (dt.name in {"float16", "bfloat16", "float32", "float64"})
    assert dtypes.is_integer(dt) == (dt.kind in "iu")
    assert dtypes.is_signed_integer(dt) == (dt.kind == "i")
    assert dtypes.is_bool(dt) == (dt.kind == "b")
    assert dtypes.is_complex(dt) == (dt.kind == "c")
    # Exactly one family.
    families = dtypes.is_floating(dt), dtypes.is_integer(dt), dtypes.is_bool(dt)
    assert sum(families) + dtypes.is_complex(dt) == 1
