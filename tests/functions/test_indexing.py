"""NumPy indexing on kiln tensors (``t[index]``) and ``kiln.functions.index_update``, against
NumPy itself."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import kiln
from kiln.functions.shape import getitem, index_update

from ..numerics import assert_close

X = np.arange(2 * 3 * 4 * 5).reshape(2, 3, 4, 5).astype(np.float32)
V = np.arange(6, dtype=np.int64) - 3
Z = np.zeros((3, 0, 2), dtype=np.int32)
MASK = X[:, :, 0, 0] > 20  # leading-dims mask (2, 3)

IDX_A = np.array([0, -1, 1])
IDX_B = np.array([[1], [0]])

# (id, array, index); the kiln tensor index is built from the same values.
TABLE: list[tuple[str, np.ndarray, Any]] = [
    ("int", X, 1),
    ("neg-int", X, -1),
    ("ints", X, (1, 2, -1)),
    ("all-ints", X, (1, 2, 3, 4)),
    ("slice", X, slice(1, None)),
    ("neg-step", X, slice(None, None, -2)),
    ("rev-bounds", X, (slice(None), slice(2, 0, -1))),
    ("clamped", X, (slice(-10, 10), slice(5, 1))),
    ("ellipsis-int", X, (Ellipsis, 0)),
    ("ellipsis-mid", X, (0, Ellipsis, 1)),
    ("newaxis", X, (None, 1, None)),
    ("mixed-basic", X, (slice(1, None), None, Ellipsis, 2)),
    ("empty-tuple", X, ()),
    ("ellipsis-only", X, Ellipsis),
    ("list", X, [0, 1, 1]),
    ("list-2", X, ([0, 1], slice(None), [1, 2])),
    ("array-last", X, (slice(1, None), None, Ellipsis, IDX_A)),
    ("array-front", X, (IDX_A,)),
    ("array-mid", X, (slice(None), IDX_A)),
    ("adjacent-arrays", X, (slice(None), IDX_A, IDX_A)),
    ("separated-arrays", X, (IDX_A, slice(None), IDX_A)),
    ("broadcast-arrays", X, (slice(None), IDX_B, slice(None), IDX_A)),
    ("int-and-array-adjacent", X, (0, IDX_A)),
    ("int-and-array-separated", X, (0, slice(None), IDX_A)),
    ("array-and-newaxis", X, (None, IDX_A, None, IDX_A)),
    ("2d-index", X, (np.array([[0, 1], [1, 0]]),)),
    ("empty-list", X, ([],)),
    ("mask-full", V, V > 0),
    ("mask-leading", X, (MASK,)),
    ("mask-after-slice", X, (slice(None), slice(None), X[0, 0, :, 0] > 6)),
    ("mask-and-array", X, (MASK, IDX_A[:1])),
    ("mask-none-true", V, V > 100),
    ("mask-2d-mid", X, (slice(None), X[0, :, :, 0] > 7)),
    ("bool-true", V, True),
    ("bool-false", X, (False, 0)),
    ("vector-neg", V, -6),
    ("vector-rev", V, slice(None, None, -1)),
    ("empty-axis-slice", Z, (slice(None), slice(None, None, -1))),
    ("empty-axis-int", Z, (1, Ellipsis)),
    ("empty-axis-array", Z, (IDX_A,)),
    ("empty-result", V, slice(4, 2)),
    ("ellipsis-none", V, (Ellipsis, None)),
    ("scalar-array", X, (np.array(1), slice(None), np.array(2))),
]


def _as_kiln_index(index: Any) -> Any:
    if isinstance(index, tuple):
        return tuple(_as_kiln_index(i) for i in index)
    if isinstance(index, np.ndarray):
        return kiln.asarray(index)
    return index


@pytest.mark.parametrize("name, array, index", TABLE, ids=[t[0] for t in TABLE])
def test_getitem_matches_numpy(name: str, array: np.ndarray, index: Any) -> None:
    want = array[index]
    t = kiln.asarray(array)
    assert_close(t[index], want, what=f"{name} (NumPy index)")
    assert_close(t[_as_kiln_index(index)], want, what=f"{name} (kiln index)")


@pytest.mark.parametrize(
    "index, error, message",
    [
        (5, IndexError, "index 5 is out of bounds for axis 0 with size 2"),
        ((0, -4), IndexError, "index -4 is out of bounds for axis 1 with size 3"),
        ((slice(None), [0, 3]), IndexError, "index 3 is out of bounds for axis 1 with size 3"),
        ((None, [5]), IndexError, "index 5 is out of bounds for axis 0 with size 2"),
        ((0, 0, 0, 0, 0), IndexError, "too many indices for array"),
        ((Ellipsis, Ellipsis), IndexError, "single ellipsis"),
        (1.5, IndexError, "only integers, slices"),
        ("a", IndexError, "only integers, slices"),
        (np.array([1.0]), IndexError, "integer (or boolean)"),
        (np.array([True, False, True]), IndexError, "boolean index did not match"),
        (([0, 1], slice(None), [0, 1, 2]), IndexError, "shape mismatch"),
        (slice(None, None, 0), ValueError, "slice step cannot be zero"),
    ],
)
def test_index_errors(index: Any, error: type, message: str) -> None:
    with pytest.raises(error) as kiln_error:
        kiln.asarray(X)[index]
    assert message in str(kiln_error.value), str(kiln_error.value)
    with pytest.raises(error):
        X[index]


def test_tensor_setitem_writes_as_numpy_and_agrees_with_index_update() -> None:
    # t[index] = value is NumPy's in-place write (into the memory kiln.asarray shares);
    # index_update is its functional form: the same values, the original left alone.
    for name, array, index, value in UPDATES:
        want = array.copy()
        want[index] = value
        source = array.copy()
        t = kiln.asarray(source)
        functional = index_update(t, index, value)
        t[index] = value
        assert_close(t, want, what=name)
        assert_close(source, want, what=f"{name} (the shared array)")
        assert_close(functional, want, what=f"{name} (index_update)")
        assert not np.shares_memory(np.asarray(functional), source)


UPDATES: list[tuple[str, np.ndarray, Any, Any]] = [
    ("int", X, 1, 0.0),
    ("slice", X, (slice(None), slice(1, None)), -1.5),
    ("neg-step", V, slice(None, None, -2), np.array([7, 8, 9])),
    ("broadcast-row", X, (0, Ellipsis), np.arange(5, dtype=np.float32)),
    ("array", V, [0, -1], 100),
    ("repeat-last-wins", V, [1, 1], np.array([5, 6])),
    ("arrays", X, (IDX_A, slice(None), IDX_A), 3.0),
    ("mask", V, V > 0, 0),
    ("mask-values", V, V < 0, np.array([10, 20, 30])),
    ("leading-mask", X, MASK, np.arange(20, dtype=np.float32).reshape(4, 5)),
    ("newaxis", V, (None, slice(2, 4)), np.array([[1, 2]])),
    ("cast", V, slice(0, 2), 2.7),
    ("extra-leading-ones", V, slice(0, 2), np.array([[[4, 5]]])),
    ("empty", Z, Ellipsis, 1),
]


@pytest.mark.parametrize("name, array, index, value", UPDATES, ids=[u[0] for u in UPDATES])
def test_index_update_matches_numpy_assignment(name, array, index, value) -> None:
    want = array.copy()
    want[index] = value
    got = index_update(kiln.asarray(array), index, value)
    assert_close(got, want, what=name)
    k_value = kiln.asarray(value) if isinstance(value, np.ndarray) else value
    got = index_update(kiln.asarray(array), _as_kiln_index(index), k_value)
    assert_close(got, want, what=f"{name} (kiln operands)")


def test_index_update_errors() -> None:
    # The same errors as NumPy's assignment, and the original is untouched.
    v = V.copy()
    t = kiln.asarray(v)
    with pytest.raises(ValueError, match="could not broadcast"):
        v.copy()[0:3] = np.array([1, 2])
    with pytest.raises(ValueError, match="could not broadcast"):
        index_update(t, slice(0, 3), np.array([1, 2]))
    v8 = v.astype(np.int8)
    with pytest.raises(OverflowError):
        v8.copy()[0] = 300
    with pytest.raises(OverflowError):
        index_update(kiln.asarray(v8), 0, 300)
    assert v.tolist() == v8.tolist() == t.tolist() == list(range(-3, 3))


def test_getitem_is_the_tensor_method() -> None:
    t = kiln.asarray(X)
    assert_close(getitem(t, (0, slice(None, 2))), X[0, :2])


# -- random basic indices ------------------------------------------------------------------

SHAPE = (3, 0, 4, 1)
BASE = np.arange(int(np.prod(SHAPE)), dtype=np.int16).reshape(SHAPE)
SHAPE_FULL = (3, 2, 4, 1)
FULL = np.arange(int(np.prod(SHAPE_FULL)), dtype=np.float64).reshape(SHAPE_FULL)

bounds = st.one_of(st.none(), st.integers(-6, 6))
slices = st.builds(slice, bounds, bounds, st.one_of(st.none(), st.integers(-3, 3).filter(bool)))


@st.composite
def basic_index(draw: Any, shape: tuple[int, ...]) -> tuple:
    items: list[Any] = []
    axis = 0
    ellipsis = False
    for _ in range(draw(st.integers(0, len(shape) + 2))):
        kind = draw(st.sampled_from(["slice", "int", "none", "ellipsis"]))
        if kind == "none":
            items.append(None)
        elif kind == "ellipsis" and not ellipsis:
            ellipsis = True
            items.append(Ellipsis)
        elif axis < len(shape):
            if kind == "int" and shape[axis] > 0:
                items.append(draw(st.integers(-shape[axis], shape[axis] - 1)))
            else:
                items.append(draw(slices))
            axis += 1
    return tuple(items)


def _check_basic(array: np.ndarray, index: tuple) -> None:
    try:
        want = array[index]
    except IndexError:  # an int past an Ellipsis can land on a smaller axis: same error
        with pytest.raises(IndexError):
            kiln.asarray(array)[index]
        return
    assert_close(kiln.asarray(array)[index], want, what=repr(index))


@given(basic_index(SHAPE_FULL))
def test_random_basic_indices(index: tuple) -> None:
    _check_basic(FULL, index)


@given(basic_index(SHAPE))
def test_random_basic_indices_with_empty_axis(index: tuple) -> None:
    _check_basic(BASE, index)
