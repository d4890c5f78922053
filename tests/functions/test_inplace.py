"""NumPy's in-place API on eager kiln tensors (issue 12 items 1 and 4), against NumPy itself.

Every case is a small program run twice: once on NumPy copies of its inputs, once on kiln tensors
made by ``kiln.asarray`` of other copies (which share memory with them). The two runs must agree
on the results (values, dtype, shape; ``res is t`` identities), on the tensors' contents after
the program, and on the wrapped ndarrays (a write into a tensor is a write into the memory it
shares). Where NumPy raises, kiln raises the same built-in exception class (NumPy's casting
errors are ``TypeError``s) and leaves the arrays as NumPy left them.

Self-check of this oracle: ``KILN_TEST_ORACLE=numpy pytest tests/functions/test_inplace.py``
runs the kiln side with NumPy itself (``kiln.asarray`` replaced by ``np.asarray``); every test
must pass then.
"""

from __future__ import annotations

import operator
import os
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import kiln

from ..numerics import assert_close

ORACLE = os.environ.get("KILN_TEST_ORACLE") == "numpy"
asarray: Callable[[np.ndarray], Any] = np.asarray if ORACLE else kiln.asarray

DTYPES = ["float32", "float64", "int32", "int64", "bool"]


def data(shape: tuple[int, ...], dtype: str, seed: int = 0, positive: bool = False) -> np.ndarray:
    """Varied values of ``dtype``: signed (or, with ``positive``, 1..3 / 0.5..3) numbers."""
    rng = np.random.default_rng(seed)
    kind = np.dtype(dtype).kind
    if kind == "b":
        return rng.random(shape) > 0.5
    if kind in "iu":
        low, high = (1, 4) if positive else (-5, 6)
        return rng.integers(low, high, shape).astype(dtype)
    if positive:
        return rng.uniform(0.5, 3.0, shape).astype(dtype)
    return (3 * rng.standard_normal(shape)).astype(dtype)


def builtin_base(cls: type[BaseException]) -> type[BaseException]:
    """The first built-in class NumPy's exception derives from (UFuncTypeError -> TypeError)."""
    return next(c for c in cls.__mro__ if c.__module__ == "builtins")


def compare(got: Any, want: Any, np_args: list, k_args: list, where: str = "result") -> None:
    """``got`` (kiln run) matches ``want`` (NumPy run), leaf by leaf."""
    for i, arg in enumerate(np_args):
        if want is arg:  # NumPy returned its argument itself: kiln returns its tensor itself
            assert got is k_args[i], f"{where}: expected the argument {i} itself, got {got!r}"
            return
    if isinstance(want, (tuple, list)):
        assert isinstance(got, (tuple, list)) and len(got) == len(want), where
        for n, (g, w) in enumerate(zip(got, want)):
            compare(g, w, np_args, k_args, f"{where}[{n}]")
    elif want is None or isinstance(want, (bool, int, float, str)):
        assert got == want, f"{where}: {got!r} != {want!r}"
    else:
        assert_close(np.asarray(got), np.asarray(want), what=where)


def check(program: Callable[..., Any], *arrays: np.ndarray) -> None:
    """Run ``program`` on NumPy copies and on kiln tensors sharing memory with other copies."""
    np_args = [np.array(a, copy=True) for a in arrays]
    shared = [np.array(a, copy=True) for a in arrays]
    k_args = [asarray(s) for s in shared]
    with np.errstate(all="ignore"):
        try:
            want = program(*np_args)
        except Exception as exc:  # NumPy refuses: kiln must refuse the same way
            with pytest.raises(builtin_base(type(exc))):
                program(*k_args)
        else:
            got = program(*k_args)
            compare(got, want, np_args, k_args)
    for i, (n, s, k) in enumerate(zip(np_args, shared, k_args)):
        assert_close(np.asarray(k), n, what=f"argument {i} after the program")
        assert_close(s, n, what=f"the ndarray under argument {i} after the program")


# -- t[index] = value ----------------------------------------------------------------------

SHAPE = (3, 4, 5)
IDX = np.array([0, -1, 1])
IDX_DUP = np.array([2, 0, 2, -3])  # duplicates: the last write wins
ROW_MASK = np.array([True, False, True])

# (id, index) into an array of SHAPE.
INDICES: list[tuple[str, Any]] = [
    ("int", 1),
    ("neg-int", -1),
    ("ints", (1, 2, -1)),
    ("all-ints", (2, -1, 0)),
    ("slice", slice(1, None)),
    ("neg-step", slice(None, None, -2)),
    ("rev-bounds", (slice(None), slice(3, 0, -1))),
    ("clamped", (slice(-10, 10), slice(5, 1))),
    ("empty-slice", slice(2, 2)),
    ("ellipsis", Ellipsis),
    ("ellipsis-int", (Ellipsis, -2)),
    ("ellipsis-mid", (0, Ellipsis, 1)),
    ("newaxis", (None, 1, None)),
    ("mixed-basic", (slice(1, None), None, Ellipsis, 2)),
    ("empty-tuple", ()),
    ("array", (IDX,)),
    ("array-dup", (IDX_DUP,)),
    ("list", [0, 2]),
    ("array-mid", (slice(None), IDX[:2])),
    ("arrays-pair", (IDX, IDX)),
    ("arrays-separated", (IDX, slice(None), IDX)),
    ("array-2d", (np.array([[0, 1], [2, 0]]),)),
    ("int-and-array", (0, slice(None), IDX)),
    ("mask-rows", (ROW_MASK,)),
    ("mask-none-true", (np.zeros(3, bool),)),
    ("mask-and-slice", (slice(None), np.array([True, False, False, True]))),
    ("mask-and-array", (ROW_MASK, slice(None), IDX[:2])),
]


def value_for(kind: str, target_shape: tuple[int, ...], dtype: str) -> Any:
    if kind == "scalar":
        return {"b": True, "i": -7, "u": 7, "f": 2.5}[np.dtype(dtype).kind]
    if kind == "full":
        return data(target_shape, dtype, seed=9)
    if kind == "broadcast":  # the last axis only: broadcast over the others
        return data(target_shape[-1:], dtype, seed=8)
    raise AssertionError(kind)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", ["scalar", "full", "broadcast"])
@pytest.mark.parametrize("index", [i for _, i in INDICES], ids=[n for n, _ in INDICES])
def test_setitem_matches_numpy(index, kind, dtype):
    a = data(SHAPE, dtype)
    value = value_for(kind, a[index].shape, dtype)

    def program(t):
        t[index] = value

    check(program, a)


@pytest.mark.parametrize("index", [i for _, i in INDICES], ids=[n for n, _ in INDICES])
def test_setitem_with_a_kiln_tensor_value_and_a_kiln_tensor_index(index):
    a, v = data(SHAPE, "float32"), data(SHAPE, "float32", seed=3)

    def program(t, u):
        t[index] = u[index] * 2  # the value is a tensor of the same library
        return t[index]

    check(program, a, v)


def test_setitem_with_index_and_mask_tensors_computed_from_values():
    a = data((4, 5), "float64")

    def program(t):
        t[t < 0] = 0  # a mask tensor
        t[np.argmax(t[:, 0])] = -1  # a 0-d integer tensor
        t[:, np.argmin(t, axis=0)] = 7  # an integer-array tensor
        rows = np.arange(t.shape[0])
        t[rows, np.argmax(t, axis=1)] = 5  # mixed: NumPy array and tensor index arrays
        return t.sum()

    check(program, a)


def test_setitem_with_a_python_list_value():
    a = data((3, 4), "int64")

    def program(t):
        t[1] = [1, 2, 3, 4]
        t[:, 0] = [[7], [8], [9]][0] * 3
        t[[0, 2]] = [[1, 1, 1, 1], [2, 2, 2, 2]]

    check(program, a)


# (id, target dtype, value): NumPy's casting on assignment.
SETITEM_CASTS: list[tuple[str, str, Any]] = [
    ("float-to-int-truncates", "int64", 1.7),
    ("neg-float-to-int-truncates", "int32", -1.7),
    ("float-array-to-int-truncates", "int32", np.array([1.7, -2.5, 3.9, 0.2])),
    ("int-to-bool", "bool", 2),
    ("zero-to-bool", "bool", 0),
    ("float-array-to-bool", "bool", np.array([0.0, 0.5, -1.0, 0.0])),
    ("float64-to-float32-rounds", "float32", np.array([0.1, 1 / 3, 1e-40, 2.0**30 + 1])),
    ("int64-to-int32", "int32", np.array([1, -2, 3, 4], dtype=np.int64)),
    ("bool-to-float", "float64", np.array([True, False, True, True])),
    ("nan-to-int-raises", "int64", np.nan),
    ("out-of-bounds-int-raises", "int32", 2**40),
    ("complex-to-float-raises", "float64", 1 + 2j),
]


@pytest.mark.parametrize(
    "dtype, value", [(d, v) for _, d, v in SETITEM_CASTS], ids=[n for n, _, _ in SETITEM_CASTS]
)
@pytest.mark.parametrize("index", [0, slice(None), np.array([3, 0])], ids=["int", "all", "fancy"])
def test_setitem_casts_as_numpy_does(dtype, value, index):
    a = data((4,), dtype)
    if isinstance(value, np.ndarray) and np.ndim(a[index]) == 0:
        value = value[0]
    elif isinstance(value, np.ndarray) and isinstance(index, np.ndarray):
        value = value[:2]

    def program(t):
        t[index] = value

    check(program, a)


# (id, shape, index, value): errors NumPy raises on assignment.
SETITEM_ERRORS: list[tuple[str, tuple[int, ...], Any, Any]] = [
    ("int-out-of-range", (3,), 3, 1),
    ("neg-int-out-of-range", (3,), -4, 1),
    ("array-out-of-range", (3,), np.array([0, 5]), 1),
    ("too-many-indices", (3,), (0, 0), 1),
    ("mask-wrong-shape", (3,), np.array([True, False]), 1),
    ("value-not-broadcastable", (4, 3), slice(0, 2), np.ones(4)),
    ("value-too-many-dims", (3,), slice(None), np.ones((2, 3))),
    ("mask-value-wrong-count", (4,), np.array([True, False, True, True]), np.ones(2)),
    ("float-index", (3,), 1.0, 1),
]


@pytest.mark.parametrize(
    "shape, index, value",
    [(s, i, v) for _, s, i, v in SETITEM_ERRORS],
    ids=[n for n, *_ in SETITEM_ERRORS],
)
def test_setitem_errors_match_numpy(shape, index, value):
    def program(t):
        t[index] = value

    with pytest.raises(Exception):  # noqa: B017 - the case must be an error in NumPy itself
        program(np.zeros(shape))
    check(program, np.zeros(shape))


# -- augmented assignment -------------------------------------------------------------------

IOPS: list[tuple[str, Callable[[Any, Any], Any]]] = [
    ("+=", operator.iadd),
    ("-=", operator.isub),
    ("*=", operator.imul),
    ("/=", operator.itruediv),
    ("//=", operator.ifloordiv),
    ("%=", operator.imod),
    ("**=", operator.ipow),
    ("@=", operator.imatmul),
    ("&=", operator.iand),
    ("|=", operator.ior),
    ("^=", operator.ixor),
    ("<<=", operator.ilshift),
    (">>=", operator.irshift),
]
IOP_IDS = [n for n, _ in IOPS]
IOP_FUNCS = [f for _, f in IOPS]

# The right-hand side: Python scalars (weak, NEP 50) and arrays of several dtypes.
OPERANDS = ["int", "float", "bool", "same", "int64", "float32", "float64"]


def operand(kind: str, dtype: str, shape: tuple[int, ...]) -> Any:
    if kind == "int":
        return 2
    if kind == "float":
        return 1.5
    if kind == "bool":
        return True
    target = dtype if kind == "same" else kind
    return data(shape, target, seed=5, positive=True)


@pytest.mark.parametrize("kind", OPERANDS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("iop", IOP_FUNCS, ids=IOP_IDS)
def test_augmented_assignment_on_a_tensor(iop, dtype, kind):
    """``t op= v``: in place (the same object, its memory written), NumPy's casting rules."""
    square = iop is operator.imatmul
    a = data((3, 3) if square else (2, 3), dtype, positive=True)
    v = operand(kind, dtype, (3, 3) if square else (3,))

    def program(t):
        before = t
        t = iop(t, v)
        return t is before, t

    check(program, a)


def test_augmented_assignment_with_a_tensor_operand_of_the_same_library():
    a, b = data((2, 3), "float32"), data((3,), "float32", seed=1)

    def program(t, u):
        t += u
        t *= u[::-1]
        u -= t[0]  # the operand written too
        return t, u

    check(program, a, b)


# (id, index) for views augmented in place: t[index] op= v.
VIEW_INDICES: list[tuple[str, Any]] = [
    ("tail", slice(1, None)),
    ("neg-step", slice(None, None, -1)),
    ("int", -1),
    ("column", (Ellipsis, 0)),
    ("newaxis", (None, slice(None), 1)),
    ("fancy", np.array([0, 2])),
    ("fancy-dup", np.array([1, 1, 0])),  # NumPy buffers: each position updated once
    ("mask", np.array([True, False, True])),
    ("empty", slice(0, 0)),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("iop", IOP_FUNCS, ids=IOP_IDS)
@pytest.mark.parametrize("index", [i for _, i in VIEW_INDICES], ids=[n for n, _ in VIEW_INDICES])
def test_augmented_assignment_on_an_indexed_view(index, iop, dtype):
    """``t[index] op= v`` is ``t[index] = t[index] op v`` with NumPy's buffering."""
    square = iop is operator.imatmul
    a = data((3, 3), dtype, seed=2, positive=True)
    v = data((3, 3), dtype, seed=6, positive=True) if square else 2

    def program(t):
        view = t[index]
        view = iop(view, v)
        t[index] = view
        return t[index]

    check(program, a)


def test_mask_update_halves_the_selected_elements():
    a = data((4, 5), "float64")

    def program(t):
        t[t > 0] *= 0.5
        t[1:] += 1
        t[:, ::-2] -= t[:, 0:1]
        return t

    check(program, a)


# (id, dtype, value): unsafe in-place casts NumPy refuses (and the safe ones it takes).
IOP_CASTS: list[tuple[str, Callable[[Any, Any], Any], str, Any]] = [
    ("int-plus-float-scalar", operator.iadd, "int64", 1.5),
    ("int32-plus-float-array", operator.iadd, "int32", np.ones(3, np.float32)),
    ("int-truediv-int", operator.itruediv, "int64", 2),
    ("bool-minus-bool", operator.isub, "bool", True),
    ("bool-plus-int-array", operator.iadd, "bool", np.ones(3, np.int64)),
    ("float32-plus-float64-array", operator.iadd, "float32", np.full(3, 0.1)),  # same kind
    ("int32-plus-int64-array", operator.iadd, "int32", np.full(3, 2, np.int64)),  # same kind
    ("float-and-int", operator.iand, "float64", 1),
    ("int-pow-negative", operator.ipow, "int64", -1),
    ("int-times-huge-int", operator.imul, "int32", 2**40),
    ("non-broadcastable-output", operator.iadd, "float64", np.ones((2, 2, 3))),
]


@pytest.mark.parametrize(
    "iop, dtype, value",
    [(f, d, v) for _, f, d, v in IOP_CASTS],
    ids=[n for n, *_ in IOP_CASTS],
)
def test_augmented_assignment_casting_as_numpy(iop, dtype, value):
    a = data((2, 3), dtype, positive=True)

    def program(t):
        t = iop(t, value)

    check(program, a)


def numpy_error(action: Callable[[], Any]) -> type[BaseException]:
    try:
        action()
    except Exception as exc:
        return type(exc)
    raise AssertionError("NumPy did not raise")


def test_unsafe_in_place_cast_raises_numpys_error_and_leaves_the_tensor_unchanged():
    expected = numpy_error(lambda: operator.iadd(np.arange(4), 1.5))  # UFuncTypeError
    assert issubclass(expected, TypeError)
    a = np.arange(4)
    t = asarray(a)
    with pytest.raises(expected):  # the same class: code catching NumPy's error catches it
        t += 1.5
    with pytest.raises(expected):
        np.add(t, 1.5, out=t)
    np.testing.assert_array_equal(a, np.arange(4))
    np.testing.assert_array_equal(np.asarray(t), np.arange(4))
    t[0] = 1.7  # assignment truncates instead
    assert np.asarray(t)[0] == 1 and a[0] == 1


def test_overlapping_reads_and_writes_follow_numpy():
    a = data((8,), "int64")

    def program(t):
        t[1:] += t[:-1]  # NumPy reads the operand before writing (buffered)
        t[1:] = t[:-1]  # shift right, no smear
        t[:-2] = t[2:]  # shift left
        t[::-1] = t  # reverse into itself
        t[t.shape[0] // 2 :] -= t[::2][: t.shape[0] - t.shape[0] // 2]
        np.add(t[:-1], t[1:], out=t[1:])  # the output overlaps both inputs
        np.copyto(t[2:], t[:-2])
        np.multiply(t[::-1], 2, out=t)
        return t

    check(program, a)


def test_in_place_with_its_own_transpose_is_buffered():
    def program(t):
        t += t.T  # NumPy sees the overlap and buffers: the result is symmetric
        t[...] = t.T - 2 * t
        t[1:, :] = t[:, 1:].T
        return t

    check(program, data((4, 4), "float64"))
    check(program, data((4, 4), "int32"))


def test_values_and_indices_of_other_dtypes_and_ranks():
    def program(t, u, i):
        t[0] = u[0]  # float tensor into int: truncates
        t[1] = u.sum()  # a 0-d tensor value
        t[i] = u[i, ::-1]  # an integer-tensor index
        t[u > 0] = u[u > 0] * 10  # a 2-d tensor mask with tensor values
        np.add(t, 1, out=t, casting="unsafe", dtype=np.float64)
        return t

    check(
        program,
        data((3, 4), "int32"),
        data((3, 4), "float32", seed=1),
        np.array([2, 0, 2]),
    )


def test_duplicate_fancy_indices_last_write_wins():
    a, v = data((5,), "float32"), data((6,), "float32", seed=4)

    def program(t, u):
        t[np.array([0, 3, 0, 3, 1, 0])] = u
        t[[4, 4]] = [1.0, 2.0]
        t[np.array([2, 2, 2])] += 1  # buffered: once
        return t

    check(program, a, v)


@pytest.mark.parametrize("dtype", ["int32", "int64", "bool"])
def test_binary_forms_of_the_in_place_shift_operators(dtype):
    def program(t):
        return t << 1, t >> 1, 2 << t, t << t, t >> np.int32(1)

    check(program, data((2, 3), dtype, positive=True))


# -- views alias their base -----------------------------------------------------------------


def _write_through_slice(t):
    v = t[1:]
    v[0] = 9
    t[-1] = 7  # seen through v
    return v, t


def _write_through_neg_step(t):
    v = t[::-2]
    v[...] = 0
    return v


def _write_through_transpose(t):
    v = t.T
    v[0] = 1  # column 0 of t
    t[1, 2] = -5  # seen through v
    return v, t.transpose()


def _write_through_transpose_axes(t):
    v = np.transpose(t[None], (2, 0, 1))
    v[-1] += 10
    return v


def _write_through_reshape(t):
    v = t.reshape(-1)  # contiguous: a view
    v[::2] = 0
    w = np.reshape(t, (t.shape[1], t.shape[0]))
    w[0, 0] = 42
    return v, w


def _write_through_ravel(t):
    v = t.ravel()
    v[-1] = 5
    v += 1
    return v


def _write_through_newaxis(t):
    v = t[..., None]
    v[0, 0, 0] = 3
    v[1] *= 2
    return v.shape, v


def _view_of_a_view(t):
    v = t[1:][::2]
    v[:] = -1
    w = t.T[1:].T
    w[0] = 8
    return v, w


def _view_sees_base_writes(t):
    v = t[:, :2]
    before = v * 1
    t[0] = 100
    t[:] += 1
    after = v * 1
    return before, after, v


def _augmented_through_column_view(t):
    v = t[:, 0]
    v *= 2
    np.add(v, 1, out=v)
    return t


def _fancy_index_is_a_copy(t):
    c = t[[0, 1]]
    c[0] = 99
    m = t[t > 0]
    m[:] = 0
    return c, m, t


def _noncontiguous_reshape_is_a_copy(t):
    c = t.T.reshape(-1)  # NumPy copies
    c[0] = 99
    d = t.T.ravel()
    d[:] = -1
    f = t.flatten()  # always a copy
    f[0] = 123
    return c, d, f, t


def _copy_is_a_copy(t):
    c = t.copy()
    c[0] = 99
    d = np.array(t[1])
    d[:] = 5
    return c, d, t


def _write_through_numpy_asarray(t):
    n = np.asarray(t)  # zero-copy: the tensor's own storage
    n[0] = 5
    t[1] = 6  # seen through n
    return n * 1, t


def _write_through_swapaxes_and_expand_dims(t):
    v = np.swapaxes(t, 0, 1)
    v[0] = 2
    w = np.expand_dims(t, 0)
    w[0, -1] += 3
    m = np.moveaxis(t[None], 0, -1)
    m[1, 1, 0] = 4
    return v, w, m


def _chained_views_augmented(t):
    v = t[::-1].T[1:]
    v += 1
    v[:, ::-1] *= 3
    return v, t


def _iterate_and_chained_index(t):
    for row in t:  # iteration yields views
        row[0] = row[-1]
    t[1][2] = t[0][0]  # t[1] is a view: the write reaches t
    t[-1][::-1] = t[0]
    return t


VIEW_PROGRAMS = [
    _write_through_slice,
    _write_through_neg_step,
    _write_through_transpose,
    _write_through_transpose_axes,
    _write_through_reshape,
    _write_through_ravel,
    _write_through_newaxis,
    _view_of_a_view,
    _view_sees_base_writes,
    _augmented_through_column_view,
    _fancy_index_is_a_copy,
    _noncontiguous_reshape_is_a_copy,
    _copy_is_a_copy,
    _write_through_numpy_asarray,
    _write_through_swapaxes_and_expand_dims,
    _chained_views_augmented,
    _iterate_and_chained_index,
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("program", VIEW_PROGRAMS, ids=[p.__name__[1:] for p in VIEW_PROGRAMS])
def test_views_alias_their_base_and_copies_do_not(program, dtype):
    check(program, data((3, 4), dtype, seed=1, positive=dtype != "bool"))


def _write_into_broadcast_to(t):
    np.broadcast_to(t, (2, *t.shape))[0, 0, 0] = 1  # NumPy: a read-only view


def _write_into_diagonal(t):
    np.diagonal(t)[0] = 5  # NumPy: a read-only view


@pytest.mark.parametrize("program", [_write_into_broadcast_to, _write_into_diagonal])
def test_read_only_views_refuse_writes_as_numpy_does(program):
    with pytest.raises(ValueError):
        program(np.zeros((3, 3)))
    check(program, data((3, 3), "float64"))


def test_ufunc_at_accumulates_duplicate_indices():
    def program(t, u):
        np.add.at(t, np.array([0, 0, 2, 0]), 1)  # unbuffered: every duplicate counts
        np.multiply.at(t, (np.array([1, 1]), np.array([2, 2])), u[0, :2])
        return t

    check(program, data((3, 3), "float64"), data((3, 3), "float64", seed=1))


def test_a_view_keeps_seeing_its_base_after_many_writes():
    a = data((6,), "float64")
    t = asarray(a)
    v = t[::2]
    t[:] = 1.0
    t[0] = 5.0
    v[1] = 6.0
    np.testing.assert_array_equal(np.asarray(v), [5.0, 6.0, 1.0])
    np.testing.assert_array_equal(a, [5.0, 1.0, 6.0, 1.0, 1.0, 1.0])


# -- fill, copyto, out= ----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("value", [3, 1.7, -1.7, True, 0, np.nan], ids=str)
def test_fill(dtype, value):
    def program(t):
        r = t.fill(value)
        t[1:].fill(1)
        return r, t

    check(program, data((3, 2), dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("src_dtype", ["float64", "int64", "bool"])
@pytest.mark.parametrize("casting", [None, "unsafe", "no"])
def test_copyto(dtype, src_dtype, casting):
    src = data((2, 3), src_dtype, seed=7)
    kw = {} if casting is None else {"casting": casting}

    def program(t):
        np.copyto(t, src, **kw)
        return t

    check(program, data((2, 3), dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_copyto_with_where_and_broadcasting(dtype):
    src = data((3,), dtype, seed=3)

    def program(t, s):
        np.copyto(t, src, where=np.array([True, False, True]))  # NumPy source and mask
        np.copyto(t[::-1], s[0], where=s[1] != s[0])  # tensor source and mask, into a view
        np.copyto(t, 1, where=t == t[0, 0])  # scalar source
        return t

    check(program, data((2, 3), dtype), data((2, 3), dtype, seed=4))


def test_copyto_from_a_tensor_into_a_tensor_of_another_dtype():
    def program(t, s):
        np.copyto(t, s, casting="unsafe")
        np.copyto(t[0], s[1] * 2, casting="same_kind")
        return t

    check(program, data((2, 3), "int32"), data((2, 3), "float32", seed=1))
    check(program, data((2, 3), "float32"), data((2, 3), "int64", seed=1))


# (id, program(t, u)) with t the output tensor. Each returns ``result is out`` and the output.
def _ufunc_out_self(t, u):
    r = np.add(t, u, out=t)
    return r is t, t


def _ufunc_out_other(t, u):
    r = np.multiply(u, 2, out=t)
    return r is t, t


def _ufunc_out_tuple(t, u):
    r = np.subtract(u, t, out=(t,))
    return r is t, t


def _ufunc_out_unary(t, u):
    r = np.negative(t, out=t)
    s = np.sqrt(np.abs(u), out=t)
    return r is t, s is t, t


def _ufunc_out_view(t, u):
    r = np.maximum(t[0], u[1], out=t[1])
    return r.shape, t


def _ufunc_out_where(t, u):
    np.add(t, 10, out=t, where=u > 1)
    return t


def _ufunc_out_numpy_inputs(t, u):
    x = np.arange(t.size).reshape(t.shape)  # only the output is a tensor
    r = np.add(x, x, out=t)
    return r is t, t


def _ufunc_out_numpy_output(t, u):
    buf = np.zeros(t.shape, t.dtype)  # a kiln input, a NumPy output: NumPy's array is written
    r = np.multiply(t, 3, out=buf)
    return r is buf, buf


def _ufunc_out_dtype_cast(t, u):
    np.add(t, u, out=t, casting="unsafe")
    return t


def _function_out_sum(t, u):
    out = t[0]
    r = np.sum(u, axis=0, out=out)
    return r is out, t


def _function_out_reductions(t, u):
    r = np.sum(u[None], axis=0, out=t)
    m = np.max(u, axis=1, out=t[:, 2])
    c = np.cumsum(u, axis=0, out=t)
    return r is t, m.shape, c is t, t


def _function_out_clip(t, u):
    r = np.clip(t, 1, 2, out=t)
    return r is t, t


def _function_out_matmul(t, u):
    out = t[:, :2]
    r = np.matmul(u[:, :2], np.eye(2, dtype=u.dtype), out=out)
    return r is out, t


def _function_out_where_cast_refused(t, u):
    np.divide(t, 3, out=t)  # an int output of a float result: NumPy refuses


OUT_PROGRAMS = [
    _ufunc_out_self,
    _ufunc_out_other,
    _ufunc_out_tuple,
    _ufunc_out_unary,
    _ufunc_out_view,
    _ufunc_out_where,
    _ufunc_out_numpy_inputs,
    _ufunc_out_numpy_output,
    _ufunc_out_dtype_cast,
    _function_out_sum,
    _function_out_reductions,
    _function_out_clip,
    _function_out_matmul,
    _function_out_where_cast_refused,
]


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
@pytest.mark.parametrize("program", OUT_PROGRAMS, ids=[p.__name__[1:] for p in OUT_PROGRAMS])
def test_out_argument(program, dtype):
    check(program, data((3, 3), dtype, positive=True), data((3, 3), dtype, seed=2, positive=True))


def test_out_of_another_dtype_follows_numpy_casting():
    def program(t, u):
        np.add(u, u, out=t)  # float64 result into float32: same kind, allowed
        return t

    check(program, data((4,), "float32"), data((4,), "float64", seed=1))

    def refused(t, u):
        np.add(u, u, out=t)  # float into int: refused

    check(refused, data((4,), "int32"), data((4,), "float64", seed=1))


# -- sizes 0 and 1, 0-d ----------------------------------------------------------------------


def _sizes_program(t):
    t[...] = 1
    t[:] += 2
    t[t > 2] *= 3
    t[::-1] -= 1
    t.fill(t.sum() if t.size else 0)
    np.add(t, 1, out=t)
    np.copyto(t, 4, where=t > 100)
    return t


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
@pytest.mark.parametrize("shape", [(0,), (1,), (0, 3), (3, 0), (1, 1), ()], ids=str)
def test_sizes_zero_and_one_and_zero_d(shape, dtype):
    check(_sizes_program, data(shape, dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_zero_d_tensor_writes(dtype):
    def program(t):
        t[()] = 1
        t[...] = t + 1
        t += 1
        return t, t.shape

    check(program, data((), dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_value_broadcasting(dtype):
    row, col = data((4,), dtype, seed=1), data((3, 1), dtype, seed=2)

    def program(t):
        t[:] = row
        t[:, 1:3] = col
        t[1] = t[0]
        t[np.array([0, 2]), 1:] = row[:3]
        t[t[:, 0] == t[0, 0]] = row
        t |= col if dtype == "bool" else 0
        return t

    check(program, data((3, 4), dtype))


# -- other dtypes: small ints wrap, Python ints out of range refuse, float16 -----------------


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "uint16", "float16"])
@pytest.mark.parametrize(
    "value", [1, 100, 200, 300, -1, 1.5, "array"], ids=lambda v: str(v).replace(".", "_")
)
def test_small_and_complex_dtypes(dtype, value):
    a = (np.arange(6) * 40).astype(dtype).reshape(2, 3)
    v = np.array([100, 200, 3]).astype(dtype) if value == "array" else value

    def program(t):
        t += v
        t[0] = v
        t[1, ::-1] *= v
        return t

    check(program, a)


# -- kiln.asarray of a view, of a read-only array ---------------------------------------------


def test_writes_reach_a_strided_and_a_transposed_ndarray():
    base = np.arange(12.0).reshape(3, 4)
    want = base.copy()
    t = asarray(base[:, ::-2])  # a non-contiguous view: kiln.asarray shares its memory
    t += 1
    t[0] = -1
    want[:, ::-2] += 1
    want[0, ::-2] = -1
    np.testing.assert_array_equal(base, want)
    f = np.asfortranarray(np.arange(6).reshape(2, 3))
    u = asarray(f.T)
    u[0, 1] = 100
    assert f[1, 0] == 100


def test_a_read_only_ndarray_refuses_writes_as_numpy_does():
    base = np.arange(3.0)
    base.flags.writeable = False
    t = asarray(base)
    with pytest.raises(ValueError):
        t[0] = 1
    with pytest.raises(ValueError):
        t += 1
    np.testing.assert_array_equal(base, np.arange(3.0))


# -- the result of an in-place operation in expressions -------------------------------------


def test_reads_after_writes_see_the_new_contents():
    a = data((3, 4), "float64")

    def program(t):
        s0 = t.sum()
        t[0] = 0
        s1 = t.sum()
        v = t[1]
        v += 1
        s2 = t.sum(axis=0)
        return s0, s1, s2, v * 2

    check(program, a)


def test_a_tensor_result_of_an_operation_is_writable_and_independent():
    a = data((3,), "float32")

    def program(t):
        r = t * 2  # a fresh array: writing it leaves t alone
        r[0] = 100
        s = np.exp(t)
        s += 1
        return r, s, t

    check(program, a)


# -- np.put, np.putmask, np.fill_diagonal --------------------------------------------------------

PROGRAM_IDS: dict[int, int] = {}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "program",
    [
        lambda a: np.put(a, [0, -1, 7], np.array([9, 8, 7]).astype(a.dtype)),
        lambda a: np.put(a, [3, 3, 5], np.array([1, 2, 3]).astype(a.dtype)),  # last wins
        lambda a: np.put(a, np.array([[1, 2], [4, 6]]), np.ones(3, a.dtype)),  # repeated
        lambda a: np.put(a, [2, 100, -100], np.zeros(1, a.dtype), mode="clip"),
        lambda a: np.put(a, [2, 101, -101], np.zeros(2, a.dtype), mode="wrap"),
        lambda a: np.put(a, [60], np.zeros(1, a.dtype)),  # out of range: IndexError
        lambda a: np.put(a, [1, 2], 2.5),  # a float into ints: NumPy's unsafe cast
        lambda a: np.putmask(a, a > 0, np.array([5, 6, 7]).astype(a.dtype)),
        lambda a: np.putmask(a, np.ones(a.shape, bool), a[::-1].copy()),
        lambda a: np.putmask(a, np.zeros((2, 2), bool), 1),  # wrong size: NumPy's error
        lambda a: np.fill_diagonal(a, np.array([4, 5]).astype(a.dtype)),
        lambda a: np.fill_diagonal(a.T, np.array([3]).astype(a.dtype), wrap=True),
        lambda a: np.fill_diagonal(a[0], 1),
        lambda a: np.fill_diagonal(a[:, 0, :2], 1, wrap=True),
        lambda a: np.fill_diagonal(a, 1),  # 3-D of unequal sizes: NumPy's error
    ],
    ids=lambda p: f"program{PROGRAM_IDS.setdefault(id(p), len(PROGRAM_IDS))}",
)
def test_flat_writes_match_numpy(program, dtype):
    check(program, data((3, 4, 5), dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "program",
    [
        lambda a: a.flat[7],
        lambda a: a.flat[3:9].copy(),
        lambda a: a.T.flat[np.array([0, -1, 2])],
        lambda a: [v for v in a[0].flat],
        lambda a: (len(a.flat), a.flat.copy()),
        lambda a: a.flat.__setitem__([0, 5, 5], np.array([1, 2, 3]).astype(a.dtype)),
        lambda a: a.T.flat.__setitem__(slice(2, 9), np.array([4, 5]).astype(a.dtype)),
        lambda a: a[1].flat.__setitem__(a[1].ravel() > 0, 0),
        lambda a: a.flat.__setitem__(100, 1),  # out of range: IndexError
    ],
    ids=lambda p: f"program{PROGRAM_IDS.setdefault(id(p), len(PROGRAM_IDS))}",
)
def test_flat_reads_and_writes_match_numpy(program, dtype):
    check(program, data((3, 4, 5), dtype))
