"""kiln.Tensor (SPEC §2): NumPy's in-place semantics, metadata, host conversions, NumPy/DLPack
interop, and the constructors (tensor, asarray, zeros/ones/full/empty/arange and *_like)."""

from __future__ import annotations

import copy
import operator
import pickle

import ml_dtypes
import numpy as np
import pytest

import kiln
from kiln import dtypes
from kiln.ops.registry import TensorType
from kiln.symbolic import symbol

from .numerics import assert_close


def _f32(values: object) -> kiln.Tensor:
    return kiln.tensor(values, dtype=kiln.float32)


# -- in place, as NumPy ------------------------------------------------------------------------

_BASE = np.arange(12, dtype=np.int16).reshape(3, 4) - 5

# (id, index, value): ``t[index] = value`` on a tensor of _BASE against the same on a copy of
# _BASE; the tensor index and value are also tried as kiln tensors.
SETITEMS: list[tuple[str, object, object]] = [
    ("int", 1, 7),
    ("neg-int", -1, np.arange(4)),
    ("ints", (2, -1), 99),
    ("slice", (slice(None), slice(1, None)), -3),
    ("neg-step", (slice(None, None, -2), 0), np.array([8, 9])),
    ("newaxis-ellipsis", (None, Ellipsis, 1), 4),
    ("broadcast-row", (slice(0, 2), Ellipsis), np.array([1, 2, 3, 4])),
    ("array", np.array([0, -1]), 100),
    ("repeat-last-wins", (np.array([1, 1, 1]), 2), np.array([5, 6, 7])),
    ("mixed", (np.array([2, 0]), slice(1, 3)), np.array([[1, 2], [3, 4]])),
    ("mask", _BASE > 0, 0),
    ("mask-values", _BASE < -2, np.array([10, 20, 30])),
    ("row-mask", np.array([True, False, True]), np.array([[1], [2]])),
    ("cast", (0, slice(0, 2)), 2.7),  # truncated, as NumPy
    ("extra-leading-ones", (0, slice(0, 2)), np.array([[[4, 5]]])),
    ("empty", slice(3, None), 1),
    ("whole", Ellipsis, np.array([[1, 2, 3, 4]])),
]


@pytest.mark.parametrize(
    ("index", "value"), [u[1:] for u in SETITEMS], ids=[u[0] for u in SETITEMS]
)
@pytest.mark.parametrize("kiln_operands", [False, True])
@pytest.mark.parametrize("dtype", ["int16", "float32", "float64", "bool"])
def test_item_assignment_writes_in_place_as_numpy(
    index: object, value: object, kiln_operands: bool, dtype: str
) -> None:
    base = _BASE.astype(dtype)
    want = base.copy()
    want[index] = value  # type: ignore[index]
    t = kiln.tensor(base)
    data = t.numpy()
    if kiln_operands:
        if isinstance(index, tuple):
            index = tuple(kiln.asarray(i) if isinstance(i, np.ndarray) else i for i in index)
        elif isinstance(index, np.ndarray):
            index = kiln.asarray(index)
        if isinstance(value, np.ndarray):
            value = kiln.asarray(value)
    t[index] = value
    assert_close(t, want)  # values, dtype and shape
    assert t.numpy() is data or np.shares_memory(t.numpy(), data)  # in place: the same memory
    assert_close(data, want)


def test_item_assignment_raises_numpys_errors() -> None:
    cases = [
        (lambda a: a.__setitem__(slice(0, 3), np.array([1, 2])), ValueError, "broadcast"),
        (lambda a: a.__setitem__(0, 300), OverflowError, "out of bounds"),
        (lambda a: a.__setitem__(5, 1), IndexError, "out of bounds"),
        (lambda a: a.__setitem__(np.array([True]), 1), IndexError, "boolean index"),
    ]
    for write, error, text in cases:
        a = np.array([1, 2, 3], dtype=np.int8)
        t = kiln.tensor(a)
        with pytest.raises(error, match=text):
            write(a)
        with pytest.raises(error, match=text):
            write(t)
        assert t.tolist() == a.tolist() == [1, 2, 3]


def test_writes_through_views_reach_the_base_as_numpy() -> None:
    a = np.arange(6.0, dtype=np.float32).reshape(2, 3)
    t = kiln.tensor(a)
    for view_a, view_t in (
        (a[1], t[1]),
        (a[:, ::-2], t[:, ::-2]),
        (a.T, t.T),
        (a.reshape(3, 2), t.reshape(3, 2)),
        (a[..., None], t[..., None]),
    ):
        assert np.shares_memory(view_t.numpy(), t.numpy())
        view_a[...] = view_a * 2 + 1
        view_t[...] = view_t * 2 + 1
        assert_close(t, a)
        a[0, 0] -= 3.0  # a write to the base is seen through the view
        t[0, 0] -= 3.0
        assert_close(view_t, view_a)
    for copy_a, copy_t in (
        (a[[0, 1]], t[[0, 1]]),
        (a[a > 3], t[t > 3]),
        (a.T.reshape(6), t.T.reshape(6)),
    ):
        assert not np.shares_memory(copy_t.numpy(), t.numpy())  # NumPy copies here
        copy_a[...] = 0
        copy_t[...] = 0
        assert_close(t, a)


def test_attributes_cannot_be_added() -> None:
    t = kiln.tensor([1.0])
    with pytest.raises(AttributeError):
        t.extra = 1  # type: ignore[attr-defined]


def test_numpy_view_is_writable_and_aliases_the_tensor() -> None:
    t = _f32([1.0, 2.0])
    view = t.numpy()
    assert view.flags.writeable
    view[0] = 5.0
    assert t.tolist() == [5.0, 2.0]
    asarray_view = np.asarray(t)
    assert asarray_view.flags.writeable and np.shares_memory(asarray_view, view)
    asarray_view += 1
    assert t.tolist() == [6.0, 3.0]
    t[1] = -1.0  # and a write to the tensor is seen through the arrays
    assert view.tolist() == asarray_view.tolist() == [6.0, -1.0]


def test_a_read_only_array_stays_read_only_as_numpy() -> None:
    a = np.arange(3.0)
    a.flags.writeable = False
    t = kiln.asarray(a)  # shares memory, so it is read-only where np.asarray(a) is
    assert np.shares_memory(t.numpy(), a) and not t.numpy().flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        np.asarray(a)[0] = 1.0
    with pytest.raises(ValueError, match="read-only"):
        t[0] = 1.0
    assert a.tolist() == t.tolist() == [0.0, 1.0, 2.0]
    u = kiln.tensor(a)  # a copy, writable as np.array(a)
    assert u.numpy().flags.writeable == np.array(a).flags.writeable
    u[0] = 1.0
    assert a.tolist() == [0.0, 1.0, 2.0]


def test_tensor_copies_its_source() -> None:
    a = np.arange(4.0)
    t = kiln.tensor(a)
    a[0] = 100.0
    assert t.tolist() == [0.0, 1.0, 2.0, 3.0]
    assert not np.shares_memory(t.numpy(), a)
    u = kiln.tensor(t)  # a tensor of a tensor is a copy too
    assert not np.shares_memory(u.numpy(), t.numpy())


def test_asarray_shares_memory_zero_copy() -> None:
    a = np.arange(4.0)
    t = kiln.asarray(a)
    assert np.shares_memory(t.numpy(), a)
    assert np.shares_memory(np.asarray(t), a)
    assert a.flags.writeable  # the caller's array is left as it was
    assert kiln.asarray(t) is t


def test_tensors_are_unhashable_like_arrays() -> None:
    with pytest.raises(TypeError):
        hash(kiln.tensor([1]))


# -- metadata ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "dtype", "shape"),
    [
        (3.5, kiln.float64, ()),
        ([1, 2, 3], kiln.int64, (3,)),
        ([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], kiln.float64, (3, 2)),
        ([True, False], kiln.bool_, (2,)),
        (np.zeros((2, 0, 3), np.float16), kiln.float16, (2, 0, 3)),
    ],
)
def test_metadata(data: object, dtype: np.dtype, shape: tuple) -> None:
    t = kiln.tensor(data)
    assert t.dtype == dtype and isinstance(t.dtype, np.dtype)
    assert t.shape == shape and isinstance(t.shape, tuple)
    assert t.ndim == len(shape)
    assert t.size == int(np.prod(shape)) and isinstance(t.size, int)
    assert t.device == kiln.Device("cpu")
    assert t.type == TensorType(dtype, shape, t.type.value)


def test_small_integer_tensors_carry_their_value() -> None:
    assert kiln.tensor([2, 3]).type.value == (2, 3)
    assert kiln.tensor(7).type.value == (7,)
    assert kiln.tensor([2.0]).type.value == (2.0,)  # small float vectors too (Resize scales)
    assert kiln.tensor(2.0).type.value is None
    assert kiln.zeros(9).type.value is None
    assert kiln.tensor([[1, 2]]).type.value is None  # 2-D
    assert kiln.zeros(100, dtype="int64").type.value is None  # large


def test_symbolic_shape_of_an_abstract_tensor() -> None:
    # A tracer's stand-in: a type, no values. Its metadata stays symbolic.
    b = symbol("B")
    t = kiln.Tensor._abstract(TensorType(kiln.float32, (b, 3)), trace=None)
    assert t.shape == (b, 3) and t.ndim == 2 and t.dtype == kiln.float32
    assert t.size == 3 * b
    assert repr(t) == "Tensor(<traced>, dtype=float32, shape=(B, 3))"
    with pytest.raises(TypeError, match="symbolic size B"):
        len(t)


# -- host conversions --------------------------------------------------------------------------


def test_item_and_tolist() -> None:
    assert kiln.tensor(2.5).item() == 2.5 and type(kiln.tensor(2.5).item()) is float
    assert type(kiln.tensor(3).item()) is int
    assert type(kiln.tensor(True).item()) is bool
    assert kiln.tensor([[4]]).item() == 4
    with pytest.raises(ValueError, match=r"one element, got shape \(2,\)"):
        kiln.tensor([1, 2]).item()
    nested = kiln.tensor([[1, 2], [3, 4]], dtype="int8").tolist()
    assert nested == [[1, 2], [3, 4]] and type(nested[0][0]) is int
    assert kiln.tensor(1.5).tolist() == 1.5
    assert kiln.zeros((2, 0)).tolist() == [[], []]


def test_len() -> None:
    assert len(kiln.zeros((4, 2))) == 4
    assert len(kiln.zeros((0,))) == 0
    with pytest.raises(TypeError, match="0-d"):
        len(kiln.tensor(1.0))


def test_bool() -> None:
    assert bool(kiln.tensor(1)) is True
    assert bool(kiln.tensor([0.0])) is False
    assert bool(kiln.tensor([[True]])) is True
    for ambiguous in (kiln.tensor([1, 2]), kiln.zeros((0,))):
        with pytest.raises(ValueError, match="ambiguous"):
            bool(ambiguous)


def test_float_int_index() -> None:
    assert float(kiln.tensor(2)) == 2.0 and type(float(kiln.tensor(2))) is float
    assert int(kiln.tensor(3.9)) == 3 and type(int(kiln.tensor(3.9))) is int
    assert operator.index(kiln.tensor(4, dtype="uint8")) == 4
    assert [10, 20, 30][kiln.tensor(1)] == 20
    with pytest.raises(TypeError, match="only integer tensors"):
        operator.index(kiln.tensor(1.0))
    with pytest.raises(TypeError, match="only integer tensors"):
        operator.index(kiln.tensor(True))  # as NumPy: a bool is not an index
    with pytest.raises(TypeError, match="one element"):
        float(kiln.tensor([1.0, 2.0]))
    with pytest.raises(TypeError, match="one element"):
        int(kiln.zeros((0,)))


@pytest.mark.skipif(not hasattr(kiln, "getitem"), reason="indexing (kiln.getitem) not written yet")
def test_iteration_yields_sub_tensors() -> None:
    rows = list(kiln.tensor([[1, 2], [3, 4]]))
    assert [r.tolist() for r in rows] == [[1, 2], [3, 4]]
    assert all(isinstance(r, kiln.Tensor) for r in rows)
    assert list(kiln.zeros((0, 2))) == []


def test_iterating_a_0d_tensor_raises() -> None:
    with pytest.raises(TypeError, match="0-d"):
        iter(kiln.tensor(1.0)).__next__()


def test_repr_shows_dtype_shape_and_values() -> None:
    text = repr(_f32([1.0, 2.5]))
    assert text.startswith("Tensor([1. , 2.5]")
    assert "dtype=float32" in text and "shape=(2,)" in text
    assert repr(kiln.tensor(3)) == "Tensor(3, dtype=int64, shape=())"
    assert repr(kiln.zeros((0, 3))) == "Tensor([], dtype=float64, shape=(0, 3))"
    assert "dtype=bfloat16" in repr(kiln.tensor([1.5], dtype=kiln.bfloat16))
    multiline = repr(kiln.tensor([[1, 2], [3, 4]]))
    assert "[[1, 2],\n" in multiline and "shape=(2, 2)" in multiline


def test_str_and_format() -> None:
    assert str(_f32([1.0, 2.0])) == "[1. 2.]"
    assert str(kiln.tensor(5)) == "5"
    assert f"{kiln.tensor(2.5):.2f}" == "2.50"
    assert f"{kiln.tensor([1, 2])}" == "[1 2]"


@pytest.mark.parametrize("dtype", ["float32", "int8", "bool", "bfloat16", "uint64"])
def test_pickle_round_trip(dtype: str) -> None:
    t = kiln.tensor([[1, 0, 1]], dtype=dtype)
    back = pickle.loads(pickle.dumps(t))
    assert isinstance(back, kiln.Tensor)
    assert back.dtype == t.dtype and back.shape == t.shape
    assert back.tolist() == t.tolist()
    a = t.numpy()
    a_back = pickle.loads(pickle.dumps(a))
    assert back.numpy().flags.writeable == a_back.flags.writeable  # writable, as NumPy's
    assert not np.shares_memory(back.numpy(), a)
    back[0, 0] = 0
    a_back[0, 0] = 0
    assert back.tolist() == a_back.tolist()
    assert t.tolist() == a.tolist() == kiln.tensor([[1, 0, 1]], dtype=dtype).tolist()


@pytest.mark.parametrize(
    "make",
    [copy.copy, copy.deepcopy, lambda x: x.copy(), operator.pos, lambda x: x.flatten()],
    ids=["copy.copy", "copy.deepcopy", "method-copy", "unary-plus", "flatten"],
)
def test_copies_are_new_writable_tensors_as_numpy(make: object) -> None:
    a = np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32)
    t = kiln.tensor(a)
    got, want = make(t), make(a)  # type: ignore[operator]
    assert isinstance(got, kiln.Tensor) and got is not t
    assert_close(got, want)
    assert not np.shares_memory(got.numpy(), t.numpy()) and not np.shares_memory(want, a)
    assert got.numpy().flags.writeable == want.flags.writeable
    got[0] = 9.0
    want[0] = 9.0
    assert_close(got, want)
    assert t.tolist() == a.tolist() == [[1.0, 2.0], [3.0, 4.0]]  # the original is untouched


def test_deepcopy_keeps_shared_references_shared_as_numpy() -> None:
    a = np.array([1.0, 2.0])
    t = kiln.tensor(a)
    got, want = copy.deepcopy({"w": t, "v": t}), copy.deepcopy({"w": a, "v": a})
    assert want["w"] is want["v"] and got["w"] is got["v"]
    assert got["w"] is not t and not np.shares_memory(got["w"].numpy(), t.numpy())


# -- NumPy interop -----------------------------------------------------------------------------


def test_np_asarray_is_zero_copy() -> None:
    t = _f32([1.0, 2.0, 3.0])
    a = np.asarray(t)
    assert a.dtype == np.float32
    assert a.ctypes.data == t.numpy().ctypes.data  # the same buffer
    assert np.asarray(t, copy=False).ctypes.data == a.ctypes.data
    assert np.asarray(t, dtype=np.float32).ctypes.data == a.ctypes.data


def test_np_asarray_with_dtype_converts() -> None:
    t = _f32([1.5, 2.5])
    a = np.asarray(t, dtype=np.float64)
    assert a.dtype == np.float64 and a.tolist() == [1.5, 2.5]
    assert not np.shares_memory(a, t.numpy())
    assert np.asarray(t, dtype="int32").tolist() == [1, 2]


def test_np_asarray_copy_false_with_dtype_change_raises() -> None:
    with pytest.raises(ValueError, match="needs a copy"):
        np.asarray(_f32([1.0]), dtype=np.float64, copy=False)


def test_np_array_copies_into_a_writable_array() -> None:
    t = _f32([1.0, 2.0])
    a = np.array(t)
    assert a.flags.writeable and not np.shares_memory(a, t.numpy())
    a[0] = 9.0
    assert t.tolist() == [1.0, 2.0]


def test_dlpack_round_trip_through_kiln() -> None:
    t = _f32([[1.0, 2.0], [3.0, 4.0]])
    assert t.__dlpack_device__() == (1, 0)
    u = kiln.from_dlpack(t)
    assert isinstance(u, kiln.Tensor)
    assert u.dtype == t.dtype and u.shape == t.shape and u.tolist() == t.tolist()
    assert np.shares_memory(u.numpy(), t.numpy())


@pytest.mark.parametrize("writeable", [True, False])
def test_numpy_from_dlpack_of_a_tensor_shares_memory_as_numpy(writeable: bool) -> None:
    source = np.array([1, 2, 3], dtype=np.int16)
    source.flags.writeable = writeable
    t = kiln.asarray(source)
    a = np.from_dlpack(t)
    want = np.from_dlpack(source)  # what NumPy's own exchange gives
    assert a.dtype == np.int16 and a.tolist() == [1, 2, 3]
    assert np.shares_memory(a, t.numpy()) and np.shares_memory(want, source)
    assert a.flags.writeable == want.flags.writeable == writeable
    if writeable:
        a[0] = 7  # the consumer's write is the tensor's, as with NumPy's arrays
        assert t.tolist() == source.tolist() == [7, 2, 3]
        t[2] = -1
        assert a.tolist() == [7, 2, -1]


@pytest.mark.parametrize("writeable", [True, False])
def test_kiln_from_dlpack_of_a_numpy_array_shares_memory(writeable: bool) -> None:
    a = np.arange(6, dtype=np.float64).reshape(2, 3)
    a.flags.writeable = writeable
    t = kiln.from_dlpack(a)
    want = np.from_dlpack(a)
    assert t.shape == (2, 3) and t.dtype == kiln.float64
    assert np.shares_memory(t.numpy(), a) and np.shares_memory(want, a)
    assert t.numpy().flags.writeable == want.flags.writeable == writeable
    if writeable:
        t[0, 0] = 100.0
        assert a[0, 0] == 100.0
        a[1, 2] = -1.0
        assert t.tolist() == [[100.0, 1.0, 2.0], [3.0, 4.0, -1.0]]
    else:
        with pytest.raises(ValueError, match="read-only"):
            t[0, 0] = 100.0
        assert a.tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]


def test_from_dlpack_refuses_non_cpu_objects() -> None:
    class OnGpu:
        def __dlpack_device__(self) -> tuple[int, int]:
            return (2, 0)  # kDLCUDA

        def __dlpack__(self, **kwargs: object) -> object:
            raise AssertionError("must not be asked for data")

    with pytest.raises(kiln.UnsupportedOperationError, match="CPU"):
        kiln.from_dlpack(OnGpu())


@pytest.mark.parametrize(
    ("data", "name"),
    [
        (np.zeros(2, np.longdouble), np.dtype(np.longdouble).name),
        (np.zeros(2, "datetime64[s]"), "datetime64"),
        ([object()], "object"),
        (["a", "b"], "<U1"),
    ],
)
def test_unsupported_dtypes_raise_type_error_naming_them(data: object, name: str) -> None:
    for make in (kiln.tensor, kiln.asarray):
        with pytest.raises(TypeError, match="does not support dtype") as info:
            make(data)
        assert name in str(info.value)


def test_unsupported_dtype_argument_raises() -> None:
    with pytest.raises(TypeError, match="datetime64"):
        kiln.tensor([1.0], dtype="datetime64[s]")
    assert kiln.tensor([1.0], dtype="complex64").dtype == kiln.complex64
    with pytest.raises(TypeError, match="is not a dtype"):
        kiln.zeros(2, dtype="nope")


def test_foreign_byte_order_is_stored_natively() -> None:
    big = np.arange(3, dtype=">f4")
    for t in (kiln.tensor(big), kiln.asarray(big)):
        assert t.dtype == kiln.float32 and t.dtype.isnative
        assert t.tolist() == [0.0, 1.0, 2.0]


# -- constructors ------------------------------------------------------------------------------


def test_tensor_default_dtypes_follow_numpy() -> None:
    assert kiln.tensor(1.0).dtype == kiln.float64
    assert kiln.tensor([1, 2]).dtype == kiln.int64
    assert kiln.tensor([1, 2.5]).dtype == kiln.float64
    assert kiln.tensor(True).dtype == kiln.bool_
    assert kiln.tensor(np.float32(1)).dtype == kiln.float32
    assert kiln.tensor([]).dtype == kiln.float64 and kiln.tensor([]).shape == (0,)


@pytest.mark.parametrize(
    "dtype", ["float32", kiln.float16, np.int8, kiln.bfloat16, "bfloat16", "uint32", bool]
)
def test_tensor_dtype_argument(dtype: object) -> None:
    t = kiln.tensor([[0, 1], [1, 0]], dtype=dtype)
    want = dtypes.as_dtype(dtype)
    assert t.dtype == want and t.shape == (2, 2)
    assert_close(t, np.array([[0, 1], [1, 0]]).astype(want))


def test_tensor_of_nested_tensors_and_arrays() -> None:
    rows = [kiln.tensor([1.0, 2.0]), np.array([3.0, 4.0])]
    assert kiln.tensor(rows).tolist() == [[1.0, 2.0], [3.0, 4.0]]
    assert kiln.tensor((1, 2)).shape == (2,)


def test_asarray() -> None:
    a = np.arange(3, dtype=np.int32)
    same = kiln.asarray(a, dtype="int32")
    assert np.shares_memory(same.numpy(), a)
    converted = kiln.asarray(a, dtype=kiln.float32)
    assert converted.dtype == kiln.float32 and converted.tolist() == [0.0, 1.0, 2.0]
    assert not np.shares_memory(converted.numpy(), a)
    t = kiln.tensor([1.0])
    assert kiln.asarray(t, dtype=kiln.float64) is t
    assert kiln.asarray([1, 2]).dtype == kiln.int64
    assert kiln.asarray(2.5, dtype="float16").dtype == kiln.float16


@pytest.mark.skipif(not hasattr(kiln, "astype"), reason="kiln.astype not written yet")
def test_asarray_of_a_tensor_with_a_new_dtype() -> None:
    t = kiln.tensor([1.5, 2.5])
    u = kiln.asarray(t, dtype="float32")
    assert u.dtype == kiln.float32 and u.tolist() == [1.5, 2.5]


@pytest.mark.parametrize("shape", [(), 3, (2, 3), (0,), (2, 0, 4), [1, 1]])
@pytest.mark.parametrize("dtype", [None, "float32", kiln.int8, kiln.bool_, kiln.bfloat16])
def test_zeros_ones_empty(shape: object, dtype: object) -> None:
    want = np.dtype(np.float64) if dtype is None else dtypes.as_dtype(dtype)
    for make, expected in ((kiln.zeros, np.zeros), (kiln.ones, np.ones), (kiln.empty, np.zeros)):
        t = make(shape, dtype=dtype)
        assert isinstance(t, kiln.Tensor)
        want_array = expected(shape, dtype=want)
        assert_close(t, want_array)
        assert t.numpy().flags.writeable == want_array.flags.writeable  # writable, as NumPy's
        other = make(shape, dtype=dtype)
        assert not np.shares_memory(t.numpy(), other.numpy())  # each call its own memory
        t[...] = 1
        want_array[...] = 1
        assert_close(t, want_array)
        assert_close(other, expected(shape, dtype=want))  # untouched by the write


def test_full() -> None:
    assert_close(kiln.full((2, 2), 7), np.full((2, 2), 7))  # int64, as NumPy
    assert_close(kiln.full(3, 1.5), np.full(3, 1.5))
    assert_close(kiln.full((2,), 1.5, dtype="float16"), np.full((2,), 1.5, np.float16))
    assert_close(kiln.full((1, 2), True), np.full((1, 2), True))
    assert_close(kiln.full((0, 3), 2.0), np.full((0, 3), 2.0))
    assert_close(kiln.full((2,), kiln.tensor(3.0, dtype="float32")), np.full(2, 3.0, np.float32))
    assert_close(kiln.full((np.int64(2),), 0, dtype="uint8"), np.zeros(2, np.uint8))
    with pytest.raises(ValueError, match="negative size"):
        kiln.full((2, -1), 0.0)


def test_like_constructors_keep_shape_and_dtype() -> None:
    x = kiln.tensor([[1, 2, 3]], dtype="int16")
    for make, value in ((kiln.zeros_like, 0), (kiln.ones_like, 1), (kiln.empty_like, 0)):
        t = make(x)
        assert t.dtype == kiln.int16 and t.shape == (1, 3)
        assert t.tolist() == [[value] * 3]
        assert make(x, dtype="float32").dtype == kiln.float32
    f = kiln.full_like(x, 9)
    assert f.dtype == kiln.int16 and f.tolist() == [[9, 9, 9]]
    assert kiln.full_like(x, 2.5, dtype=kiln.float64).tolist() == [[2.5, 2.5, 2.5]]
    assert kiln.zeros_like(np.zeros((0, 2), np.float32)).shape == (0, 2)
    assert kiln.ones_like([1.0, 2.0]).dtype == kiln.float64


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        ((5,), {}),
        ((2, 7), {}),
        ((0, 1, 0.25), {}),
        ((5, 0, -2), {}),
        ((0,), {}),
        ((3, 1), {}),  # empty
        ((4,), {"dtype": "float32"}),
        ((0, 2, 0.5), {"dtype": kiln.float16}),
        ((1, 4), {"dtype": "uint8"}),
    ],
)
def test_arange_matches_numpy(args: tuple, kwargs: dict) -> None:
    assert_close(kiln.arange(*args, **kwargs), np.arange(*args, **kwargs))


def test_cpu_device_argument_is_accepted() -> None:
    for place in ("cpu", kiln.Device("cpu"), kiln.Stream("cpu"), None):
        assert kiln.tensor([1], device=place).device == kiln.Device("cpu")
    assert kiln.asarray([1], device="cpu").tolist() == [1]
    assert kiln.zeros(2, device="cpu").shape == (2,)
    assert kiln.arange(3, device="cpu").tolist() == [0, 1, 2]


@pytest.mark.parametrize(
    "make",
    [
        lambda: kiln.tensor([1.0], device="cuda:0"),
        lambda: kiln.asarray(np.zeros(2), device="cuda:0"),
        lambda: kiln.zeros((2,), device="cuda:0"),
        lambda: kiln.ones(2, device=kiln.Device("cuda", 0)),
        lambda: kiln.full(2, 1.0, device="cuda"),
        lambda: kiln.arange(3, device="cuda:0"),
    ],
)
def test_cuda_device_raises_saying_what_to_install(make: object) -> None:
    with pytest.raises(kiln.DeviceUnavailableError, match="cupy") as info:
        make()  # type: ignore[operator]
    assert "cuda:0" in str(info.value)


def test_bad_device_argument() -> None:
    with pytest.raises(ValueError, match="unknown device type"):
        kiln.zeros(2, device="tpu")
    with pytest.raises(TypeError, match="expected a place"):
        kiln.tensor([1], device=0)  # type: ignore[arg-type]


# -- computing through the existing front doors ------------------------------------------------


def test_operators_and_functions_return_new_tensors() -> None:
    x = _f32([1.0, 2.0])
    y = x + 1
    assert isinstance(y, kiln.Tensor) and y.dtype == kiln.float32  # weak Python scalar
    assert y.tolist() == [2.0, 3.0] and x.tolist() == [1.0, 2.0]
    assert (1 + x).tolist() == [2.0, 3.0]
    assert (x + x).tolist() == [2.0, 4.0]
    z = kiln.add(x, np.float64(1.0))
    assert z.dtype == kiln.float64
    assert_close(kiln.exp(x), np.exp(np.array([1.0, 2.0], np.float32)))
    assert kiln.exp(kiln.tensor([0, 1])).dtype == kiln.float64  # as NumPy


def test_numpy_array_plus_tensor_defers_to_the_tensor() -> None:
    x = _f32([1.0, 2.0])
    result = np.array([1.0, 1.0], np.float32) + x
    assert isinstance(result, kiln.Tensor)
    assert result.tolist() == [2.0, 3.0]
    assert isinstance(np.add(x, 1.0), kiln.Tensor)
    assert isinstance(np.exp(x), kiln.Tensor)


def test_bfloat16_tensor_values() -> None:
    t = kiln.tensor([1.0, 2.5, -3.0], dtype=kiln.bfloat16)
    assert t.numpy().dtype == ml_dtypes.bfloat16
    assert t.tolist() == [1.0, 2.5, -3.0]


def test_an_ndarray_attribute_kiln_lacks_is_numpys_on_the_values():
    x = np.arange(6.0).reshape(2, 3)
    t = kiln.asarray(x)
    assert t.strides == x.strides
    np.testing.assert_array_equal(t.diagonal(), x.diagonal())
    assert type(t.view()) is np.ndarray
    with pytest.raises(AttributeError, match="no attribute 'not_numpy'"):
        t.not_numpy  # noqa: B018
    with pytest.raises(AttributeError):
        t._private  # noqa: B018
    with pytest.raises(kiln.errors.CaptureError, match="ndarray.diagonal"):
        kiln.trace(lambda v: v.diagonal(), x)
