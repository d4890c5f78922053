"""Shape front doors against NumPy: values, dtypes and shapes, errors, and NumPy dispatch."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import kiln
from kiln.functions import shape as F

from ..numerics import assert_close

A = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
I = np.arange(12, dtype=np.int32).reshape(3, 4) - 5  # noqa: E741
M = np.array([[True, False, True], [False, False, True]])
E = np.zeros((0, 3), dtype=np.int64)


def _k(x: Any) -> Any:
    """NumPy arrays (also inside lists) as kiln tensors."""
    if isinstance(x, np.ndarray):
        return kiln.asarray(x)
    if isinstance(x, list):
        return [_k(v) for v in x]
    return x


def _same(got: Any, want: Any, what: str) -> None:
    if isinstance(want, (list, tuple)):
        assert isinstance(got, (list, tuple)) and len(got) == len(want), what
        for g, w in zip(got, want):
            _same(g, w, what)
        return
    assert isinstance(got, kiln.Tensor), f"{what}: got {type(got).__name__}"
    assert_close(got, want, what=what)


# (name, kiln function, NumPy function, positional args, keyword args)
CASES: list[tuple[str, Callable, Callable, tuple, dict]] = [
    ("reshape", F.reshape, np.reshape, (A, (4, -1)), {}),
    ("reshape0", F.reshape, np.reshape, (E, (3, 0)), {}),
    ("reshape-int", F.reshape, np.reshape, (I, 12), {}),
    ("reshape-bool", F.reshape, np.reshape, (M, (3, 2)), {}),
    ("ravel", F.ravel, np.ravel, (A,), {}),
    ("transpose", F.transpose, np.transpose, (A,), {}),
    ("transpose-axes", F.transpose, np.transpose, (A, (1, -1, 0)), {}),
    ("matrix_transpose", F.matrix_transpose, np.matrix_transpose, (A,), {}),
    ("swapaxes", F.swapaxes, np.swapaxes, (A, 0, -1), {}),
    ("moveaxis", F.moveaxis, np.moveaxis, (A, 0, -1), {}),
    ("moveaxis2", F.moveaxis, np.moveaxis, (A, (0, 1), (-1, 0)), {}),
    ("squeeze", F.squeeze, np.squeeze, (A[:1, :, :1],), {}),
    ("squeeze-axis", F.squeeze, np.squeeze, (A[:1, :, :1],), {"axis": -1}),
    ("expand_dims", F.expand_dims, np.expand_dims, (I, 0), {}),
    ("expand_dims2", F.expand_dims, np.expand_dims, (I, (0, -1)), {}),
    ("concatenate", F.concatenate, np.concatenate, ([I, I[:1]],), {}),
    ("concatenate-promote", F.concatenate, np.concatenate, ([I, A[0]],), {}),
    ("concatenate-axis", F.concatenate, np.concatenate, ([A, A[:, :1]],), {"axis": -2}),
    ("concatenate-none", F.concatenate, np.concatenate, ([A, I],), {"axis": None}),
    ("concatenate-dtype", F.concatenate, np.concatenate, ([I, I],), {"dtype": np.float64}),
    ("concatenate-empty", F.concatenate, np.concatenate, ([E, E],), {}),
    ("stack", F.stack, np.stack, ([I, I],), {}),
    ("stack-axis", F.stack, np.stack, ([M, M, M],), {"axis": -1}),
    ("hstack", F.hstack, np.hstack, ([I, I],), {}),
    ("hstack1", F.hstack, np.hstack, ([I[0], I[1, :2]],), {}),
    ("vstack", F.vstack, np.vstack, ([I[0], I],), {}),
    ("split", F.split, np.split, (A, 2), {"axis": -1}),
    ("split-points", F.split, np.split, (A, [1, 3]), {"axis": 2}),
    ("split-odd-points", F.split, np.split, (A, [3, 1, 10]), {"axis": 2}),
    ("array_split", F.array_split, np.array_split, (A, 3), {"axis": 2}),
    ("pad-int", F.pad, np.pad, (I, 1), {}),
    ("pad-pair", F.pad, np.pad, (I, (1, 2)), {"constant_values": 9}),
    ("pad-axes", F.pad, np.pad, (A, ((0, 0), (1, 0), (2, 1))), {"constant_values": -1.5}),
    ("pad-values", F.pad, np.pad, (I, 1), {"constant_values": ((1, 2), (3, 4))}),
    ("pad-reflect", F.pad, np.pad, (I, ((2, 1), (3, 3))), {"mode": "reflect"}),
    ("pad-edge", F.pad, np.pad, (M, 2), {"mode": "edge"}),
    ("pad-wrap", F.pad, np.pad, (I, (1, 5)), {"mode": "wrap"}),
    ("tile", F.tile, np.tile, (I, 2), {}),
    ("tile-more", F.tile, np.tile, (I, (2, 1, 3)), {}),
    ("tile-less", F.tile, np.tile, (A, (2,)), {}),
    ("take", F.take, np.take, (A, [0, -1, 5]), {}),
    ("take-axis", F.take, np.take, (A, [[2, 0], [1, -1]]), {"axis": 1}),
    ("take-scalar", F.take, np.take, (I, 1), {"axis": 0}),
    ("take_along_axis", F.take_along_axis, np.take_along_axis, (I, np.argsort(I, 1)), {"axis": 1}),
    (
        "take_along_axis-bc",
        F.take_along_axis,
        np.take_along_axis,
        (A, np.array([[[0], [2], [1]]]), -1),
        {},
    ),
    (
        "take_along_axis-none",
        F.take_along_axis,
        np.take_along_axis,
        (I, np.array([3, -1, 0])),
        {"axis": None},
    ),
    ("broadcast_to", F.broadcast_to, np.broadcast_to, (I[0], (2, 3, 4)), {}),
    ("broadcast_to-same", F.broadcast_to, np.broadcast_to, (I, (3, 4)), {}),
    ("flip", F.flip, np.flip, (A,), {}),
    ("flip-axis", F.flip, np.flip, (A, -1), {}),
    ("flip-axes", F.flip, np.flip, (M, (0, 1)), {}),
    ("flip-empty", F.flip, np.flip, (E, 0), {}),
    ("tril", F.tril, np.tril, (A,), {}),
    ("tril-k", F.tril, np.tril, (I, -1), {}),
    ("triu-k", F.triu, np.triu, (I, 2), {}),
    ("triu-1d", F.triu, np.triu, (I[0],), {}),
    ("tril-bool", F.tril, np.tril, (M,), {}),
    ("nonzero", F.nonzero, np.nonzero, (I,), {}),
    ("nonzero-bool", F.nonzero, np.nonzero, (M,), {}),
    ("nonzero-empty", F.nonzero, np.nonzero, (E,), {}),
    ("argwhere", F.argwhere, np.argwhere, (I,), {}),
    ("argwhere-0d", F.argwhere, np.argwhere, (np.array(3.0),), {}),
]


@pytest.mark.parametrize("name, fn, ref, args, kwargs", CASES, ids=[c[0] for c in CASES])
def test_front_door_matches_numpy(name, fn, ref, args, kwargs) -> None:
    want = ref(*args, **kwargs)
    got = fn(*[_k(a) for a in args], **kwargs)
    _same(got, want, name)


# Every NumPy function the family implements dispatches to kiln on a kiln tensor.
DISPATCH = [
    ("concatenate", lambda t, a: np.concatenate([t, a])),
    ("stack", lambda t, a: np.stack([t, a], axis=1)),
    ("split", lambda t, a: np.split(t, 2, axis=1)),
    ("pad", lambda t, a: np.pad(t, ((1, 0), (0, 2)), mode="edge")),
    ("take", lambda t, a: np.take(t, [2, 0], axis=0)),
    ("take_along_axis", lambda t, a: np.take_along_axis(t, np.argsort(a, axis=1), axis=1)),
    ("broadcast_to", lambda t, a: np.broadcast_to(t, (2, 3, 4))),
    ("transpose", lambda t, a: np.transpose(t)),
    ("reshape", lambda t, a: np.reshape(t, (2, -1))),
    ("reshape-kw", lambda t, a: np.reshape(t, shape=(-1,))),
    ("squeeze", lambda t, a: np.squeeze(t[None], axis=0)),
    ("expand_dims", lambda t, a: np.expand_dims(t, 1)),
    ("tile", lambda t, a: np.tile(t, (1, 2))),
    ("flip", lambda t, a: np.flip(t, 0)),
    ("tril", lambda t, a: np.tril(t, 1)),
    ("triu", lambda t, a: np.triu(t)),
    ("ravel", lambda t, a: np.ravel(t)),
    ("swapaxes", lambda t, a: np.swapaxes(t, 0, 1)),
    ("moveaxis", lambda t, a: np.moveaxis(t, 0, 1)),
    ("nonzero", lambda t, a: np.nonzero(t)),
    ("argwhere", lambda t, a: np.argwhere(t)),
    ("hstack", lambda t, a: np.hstack([t, a])),
    ("vstack", lambda t, a: np.vstack([t, a])),
    ("array_split", lambda t, a: np.array_split(t, 3, axis=1)),
    ("matrix_transpose", lambda t, a: np.matrix_transpose(t)),
]


@pytest.mark.parametrize("name, fn", DISPATCH, ids=[d[0] for d in DISPATCH])
def test_numpy_dispatch(name, fn) -> None:
    a = I
    got = fn(kiln.asarray(a), a)
    want = fn(a, a)
    _same(got, want, name)


def test_tensor_methods() -> None:
    t = kiln.asarray(A)
    assert_close(t.T, A.T)
    assert_close(t.mT, np.matrix_transpose(A))
    assert_close(t.reshape(4, 6), A.reshape(4, 6))
    assert_close(t.reshape((-1,)), A.reshape(-1))
    assert_close(t.transpose(1, 0, 2), A.transpose(1, 0, 2))
    assert_close(t[:1].squeeze(0), A[:1].squeeze(0))
    assert_close(t.swapaxes(0, 2), A.swapaxes(0, 2))
    assert_close(t.flatten(), A.flatten())


@pytest.mark.parametrize(
    "call, error, words",
    [
        (lambda t: F.squeeze(t, 1), ValueError, "size not equal to one"),
        (lambda t: F.split(t, 5, axis=2), ValueError, "equal division"),
        (lambda t: F.split(t, 0), ValueError, "larger than 0"),
        (lambda t: F.reshape(t, (5, -1)), ValueError, "Reshape"),
        (lambda t: F.reshape(t, (-1, -1)), ValueError, "-1"),
        (lambda t: F.transpose(t, (0, 0, 1)), ValueError, "axes"),
        (lambda t: F.transpose(t, (0, 1, 3)), np.exceptions.AxisError, "axis 3"),
        (lambda t: F.concatenate([t, t[0]]), ValueError, "dimension"),
        (lambda t: F.concatenate([t[0, 0, 0], t[0, 0, 1]]), ValueError, "zero-dimensional"),
        (lambda t: F.stack([t, t[:1]]), ValueError, "same shape"),
        (lambda t: F.broadcast_to(t, (3, 3, 4)), ValueError, "broadcast"),
        (
            lambda t: F.take(t, [24]),
            IndexError,
            "index 24 is out of bounds for axis 0 with size 24",
        ),
        (lambda t: F.take(t, [1, -4], axis=1), IndexError, "axis 1 with size 3"),
        (lambda t: F.take(t, [1.5]), IndexError, "integer"),
        (lambda t: F.expand_dims(t, (0, 0)), ValueError, "repeated axis"),
        (lambda t: F.pad(t, -1), ValueError, "negative"),
        (lambda t: F.matrix_transpose(t[0, 0]), ValueError, "2 dimensions"),
        (lambda t: F.nonzero(t[0, 0, 0]), ValueError, "0d"),
        (lambda t: F.tril(t[0, 0, 0]), ValueError, "1-D"),
        (lambda t: F.take_along_axis(t, kiln.tensor([0])), ValueError, "same number"),
        (
            lambda t: F.pad(t, 1, mode="symmetric"),
            kiln.errors.UnsupportedOperationError,
            "symmetric",
        ),
    ],
)
def test_errors_like_numpy(call, error, words) -> None:
    with pytest.raises(error) as info:
        call(kiln.asarray(A))
    assert words in str(info.value), str(info.value)


def test_constant_of_shape_dtypes_follow_numpy() -> None:
    for fill, dtype in ((1.5, None), (3, None), (True, None), (2, np.float16), (7, np.uint8)):
        got = F.constant_of_shape((2, 3), fill, dtype)
        assert_close(got, np.full((2, 3), fill, dtype=dtype))
    got = F.constant_of_shape((0, 2), 1.0)
    assert got.shape == (0, 2)
    got = F.constant_of_shape((3,), kiln.tensor(2, dtype="int8"))
    assert_close(got, np.full((3,), 2, dtype=np.int8))
    with pytest.raises(ValueError, match="negative"):
        F.constant_of_shape((-1,), 0)


@pytest.mark.parametrize(
    "args, dtype",
    [
        ((5,), None),
        ((1, 7, 2), None),
        ((0.5, 3), None),
        ((5, 0, -2), None),
        ((4,), "float32"),
        ((3,), "uint8"),
        ((2, 2), None),
        ((1.0, 2.0, 0.25), "float16"),
    ],
)
def test_range_like_arange(args, dtype) -> None:
    want = np.arange(*args, dtype=dtype)
    tensors = [kiln.tensor(v) for v in args]
    got = F.range_(*tensors, dtype=dtype)
    assert_close(got, want)
    mixed = F.range_(kiln.tensor(args[0]), *args[1:], dtype=dtype)
    assert_close(mixed, want)


def test_results_are_recorded_through_dispatch(monkeypatch) -> None:
    # Front doors must compute via dispatch only: count the operator calls one makes.
    from kiln.tensor import dispatch as real

    seen: list[str] = []

    def spy(op, inputs, attrs=None):
        seen.append(op if isinstance(op, str) else op.name)
        return real(op, inputs, attrs)

    monkeypatch.setattr(F, "call", lambda op, *xs, **kw: spy(op, xs, kw)[0])
    # The front doors themselves, not a replay of an earlier call's plan (kiln.tensor.eager_plan).
    monkeypatch.setattr(sys.modules["kiln.tensor"], "EAGER_CACHE", False)
    F.concatenate([kiln.asarray(I), kiln.asarray(I)], axis=1)
    F.flip(kiln.asarray(I))
    F.split(kiln.asarray(I), 2, axis=1)
    assert {"Concat", "Slice"} <= set(seen)


@pytest.mark.parametrize(
    "cut",
    [
        lambda t: np.split(t, 2, axis=1),
        lambda t: np.split(t, [1, 5], axis=-1),
        lambda t: np.array_split(t, 3),
        lambda t: np.array_split(t, 5, axis=1),
    ],
)
def test_split_pieces_are_views_as_numpy_s(cut) -> None:
    a = np.arange(12.0).reshape(3, 4)
    t = kiln.asarray(a.copy())
    for want, got in zip(cut(a), cut(t), strict=True):
        assert_close(got, want)
        assert np.shares_memory(np.asarray(got), np.asarray(t)) == np.shares_memory(want, a)
        want += 1  # a write through a piece reaches the array it was cut from
        got += 1
    assert_close(t, a)
