"""Reduction front doors against NumPy 2: value, dtype and shape, over dtypes, axes and keepdims;
Tensor methods, NumPy dispatch (np.sum(t), np.add.reduce(t)) and a hypothesis property test."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import kiln
from kiln.errors import OpArgumentError
from kiln.ops.sampling import sample_array

from ..numerics import assert_close

DTYPES = ["bool", "int8", "int32", "int64", "uint8", "float16", "float32", "float64"]
AXES = [None, 0, -1, (0, 2), (-1, 0), ()]


def _data(shape, dtype):
    low, high = (0, 5) if np.dtype(dtype).kind in "u" else (-4, 5)
    return sample_array(shape, dtype, low, high)


def _loose(dtype) -> dict:
    # float16 results NumPy rounds at other points than kiln's lowering; one ulp apart.
    return {"rtol": 5e-3, "atol": 5e-3} if np.dtype(dtype) == np.float16 else {}


def _compare(kiln_fn, np_fn, x, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        expected = np.asarray(np_fn(x, **kwargs))
        got = kiln_fn(kiln.asarray(x), **kwargs)
    assert isinstance(got, kiln.Tensor)
    assert_close(got, expected, what=f"{np_fn.__name__}{kwargs}", **_loose(x.dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("axis", AXES)
@pytest.mark.parametrize("keepdims", [False, True])
def test_sum_prod_mean_max_min(dtype, axis, keepdims) -> None:
    x = _data((2, 3, 4), dtype)
    for fn, ref in [
        (kiln.sum, np.sum),
        (kiln.prod, np.prod),
        (kiln.mean, np.mean),
        (kiln.max, np.max),
        (kiln.min, np.min),
        (kiln.any, np.any),
        (kiln.all, np.all),
        (kiln.count_nonzero, np.count_nonzero),
    ]:
        _compare(fn, ref, x, axis=axis, keepdims=keepdims)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("axis", [None, 1, -1, (0, 1)])
@pytest.mark.parametrize("ddof", [0, 1])
def test_var_std(dtype, axis, ddof) -> None:
    x = _data((3, 4), dtype)
    _compare(kiln.var, np.var, x, axis=axis, ddof=ddof)
    _compare(kiln.std, np.std, x, axis=axis, ddof=ddof, keepdims=True)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("axis", [None, 0, -1])
@pytest.mark.parametrize("keepdims", [False, True])
def test_argmax_argmin(dtype, axis, keepdims) -> None:
    x = _data((3, 4), dtype)
    _compare(kiln.argmax, np.argmax, x, axis=axis, keepdims=keepdims)
    _compare(kiln.argmin, np.argmin, x, axis=axis, keepdims=keepdims)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("axis", [None, 0, -1])
def test_cumsum(dtype, axis) -> None:
    _compare(kiln.cumsum, np.cumsum, _data((3, 4), dtype), axis=axis)


@pytest.mark.parametrize(
    "fn, ref, dtype",
    [
        (kiln.sum, np.sum, "int32"),
        (kiln.sum, np.sum, "float32"),
        (kiln.sum, np.sum, "int8"),  # wraps in int8, as NumPy does
        (kiln.prod, np.prod, "float64"),
        (kiln.mean, np.mean, "float32"),
        (kiln.cumsum, np.cumsum, "int16"),
        (kiln.var, np.var, "float32"),
    ],
)
def test_explicit_dtype(fn, ref, dtype) -> None:
    x = _data((3, 40), "int64")
    _compare(fn, ref, x, axis=-1, dtype=np.dtype(dtype))


def test_zero_size_and_size_one() -> None:
    empty = np.zeros((0, 3), np.float32)
    _compare(kiln.sum, np.sum, empty)
    _compare(kiln.sum, np.sum, empty, axis=0)
    _compare(kiln.prod, np.prod, empty, axis=0)
    _compare(kiln.mean, np.mean, empty, axis=0)
    _compare(kiln.any, np.any, empty, axis=0)
    _compare(kiln.all, np.all, empty, axis=0)
    _compare(kiln.max, np.max, empty, axis=1)  # reducing non-empty lanes of nothing is fine
    _compare(kiln.max, np.max, empty, axis=())
    _compare(kiln.cumsum, np.cumsum, empty, axis=0)
    one = np.asarray([[2.5]], np.float64)
    for fn, ref in [(kiln.sum, np.sum), (kiln.max, np.max), (kiln.var, np.var)]:
        _compare(fn, ref, one, axis=0)
    scalar = np.asarray(3, np.int32)
    for fn, ref in [(kiln.sum, np.sum), (kiln.max, np.max), (kiln.argmax, np.argmax)]:
        _compare(fn, ref, scalar)
        _compare(fn, ref, scalar, axis=0)


@pytest.mark.parametrize("fn, word", [(kiln.max, "maximum"), (kiln.min, "minimum")])
def test_max_of_empty_raises_like_numpy(fn, word) -> None:
    with pytest.raises(ValueError, match=f"zero-size array to reduction operation {word}"):
        fn(kiln.tensor(np.zeros((0, 3))))
    with pytest.raises(ValueError, match="zero-size array"):
        fn(kiln.tensor(np.zeros((0, 3))), axis=0)
    with pytest.raises(ValueError, match="empty sequence"):
        kiln.argmax(kiln.tensor(np.zeros((0,))))


def test_bad_axes() -> None:
    t = kiln.tensor(np.ones((2, 3)))
    with pytest.raises(OpArgumentError, match="sum: axis 2 is out of bounds for an array of dim"):
        kiln.sum(t, axis=2)
    with pytest.raises(OpArgumentError, match="duplicate value in 'axis'"):
        kiln.mean(t, axis=(1, -1))
    with pytest.raises(TypeError, match="axis must be an int"):
        kiln.max(t, axis=1.0)
    with pytest.raises(OpArgumentError, match="argmax: axis -3 is out of bounds"):
        kiln.argmax(t, axis=-3)


def test_invalid_options_raise_as_numpy() -> None:
    t = kiln.tensor(np.ones((2, 3)))
    # max with a where= mask needs initial=, in NumPy too
    with pytest.raises(ValueError, match="initial"):
        np.max(t, where=np.asarray([True, False, True]))
    with pytest.raises(ValueError, match="does not broadcast"):
        kiln.sum(t, where=np.ones((3, 3), bool))
    with pytest.raises(TypeError, match="out="):
        kiln.sum(t, out=np.zeros(()))


def test_tensor_methods() -> None:
    x = _data((3, 4), "float32")
    t = kiln.asarray(x)
    assert_close(t.sum(axis=-1), x.sum(axis=-1))
    assert_close(t.mean(axis=0, keepdims=True), x.mean(axis=0, keepdims=True))
    assert_close(t.max(), x.max())
    assert_close(t.min(axis=1), x.min(axis=1))
    assert_close(t.prod(axis=0), x.prod(axis=0))
    assert_close(t.argmax(axis=1), x.argmax(axis=1))
    assert_close(t.argmin(), x.argmin())
    assert_close(t.var(ddof=1), x.var(ddof=1))
    assert_close(t.std(axis=0), x.std(axis=0))
    assert_close(t.any(axis=0), x.any(axis=0))
    assert_close(t.all(), x.all())
    assert_close(t.cumsum(axis=1), x.cumsum(axis=1))


def test_numpy_dispatch() -> None:
    x = _data((3, 4), "int8")
    t = kiln.asarray(x)
    for fn in (
        np.sum,
        np.prod,
        np.mean,
        np.max,
        np.amax,
        np.min,
        np.amin,
        np.argmax,
        np.argmin,
        np.var,
        np.std,
        np.any,
        np.all,
        np.cumsum,
        np.count_nonzero,
    ):
        got = fn(t, axis=0)
        assert isinstance(got, kiln.Tensor), fn.__name__
        assert_close(got, fn(x, axis=0), what=fn.__name__)
    assert_close(np.sum(t, 1, None, None, True), np.sum(x, 1, None, None, True))
    assert_close(np.var(t, correction=1), np.var(x, correction=1))


@pytest.mark.parametrize("dtype", ["bool", "int8", "uint8", "float32"])
@pytest.mark.parametrize(
    "ufunc", [np.add, np.multiply, np.maximum, np.minimum, np.logical_or, np.logical_and]
)
def test_ufunc_reduce(ufunc, dtype) -> None:
    x = _data((3, 4), dtype)
    t = kiln.asarray(x)
    for kwargs in ({}, {"axis": 1}, {"axis": None}, {"axis": (0, 1), "keepdims": True}):
        got = ufunc.reduce(t, **kwargs)
        assert isinstance(got, kiln.Tensor)
        assert_close(got, ufunc.reduce(x, **kwargs), what=f"{ufunc.__name__}.reduce{kwargs}")
    if dtype != "bool" and ufunc not in (np.logical_or, np.logical_and):
        assert_close(ufunc.reduce(t, dtype=np.float64), ufunc.reduce(x, dtype=np.float64))
    # initial= is recorded (add, multiply, maximum, minimum) or falls back to NumPy (logical)
    assert_close(ufunc.reduce(t, axis=1, initial=0), ufunc.reduce(x, axis=1, initial=0))


def test_mean_float16_accumulates_in_float32() -> None:
    x = np.full(4096, 1.0001, dtype=np.float16)  # a float16 running sum would stall at 2048
    got = kiln.mean(kiln.asarray(x))
    assert got.dtype == np.float16
    assert_close(got, np.mean(x))


def test_logsumexp() -> None:
    x = np.asarray([[1000.0, 1000.0], [-1.0, 2.0]], np.float32)
    got = kiln.logsumexp(kiln.asarray(x), axis=1)
    expected = np.asarray([1000.0 + np.log(2.0), np.log(np.exp(-1.0) + np.exp(2.0))])
    assert_close(got, expected.astype(np.float32))
    ints = kiln.logsumexp(kiln.tensor([[0, 1], [2, 3]]), keepdims=True)
    assert ints.dtype == np.float64 and ints.shape == (1, 1)
    assert kiln.logsumexp(kiln.tensor(np.zeros((0,)))).item() == -np.inf


def test_topk() -> None:
    x = np.asarray([[3, 1, 4, 1, 5], [9, 2, 6, 5, 3]], np.int32)
    values, indices = kiln.topk(kiln.asarray(x), 3)
    np.testing.assert_array_equal(np.asarray(values), [[5, 4, 3], [9, 6, 5]])
    np.testing.assert_array_equal(np.asarray(indices), [[4, 2, 0], [0, 2, 3]])
    assert values.dtype == np.int32 and indices.dtype == np.int64
    values, indices = kiln.topk(kiln.asarray(x), 2, axis=0, largest=False)
    np.testing.assert_array_equal(np.asarray(values), [[3, 1, 4, 1, 3], [9, 2, 6, 5, 5]])
    flags = kiln.tensor([False, True, True])
    values, indices = kiln.topk(flags, 1)
    assert values.dtype == np.bool_ and indices.tolist() == [1]


_SHAPES = st.lists(st.integers(0, 4), min_size=0, max_size=4).map(tuple)


@given(
    shape=_SHAPES,
    data=st.data(),
    keepdims=st.booleans(),
    dtype=st.sampled_from(["int32", "float64", "uint8"]),
)
def test_property_sum_mean_max(shape, data, keepdims, dtype) -> None:
    ndim = len(shape)
    axis = data.draw(
        st.one_of(
            st.none(),
            st.integers(-ndim, ndim - 1) if ndim else st.just(None),
            st.lists(st.integers(0, max(ndim - 1, 0)), unique=True, max_size=ndim).map(tuple)
            if ndim
            else st.just(()),
        )
    )
    x = _data(shape, dtype)
    _compare(kiln.sum, np.sum, x, axis=axis, keepdims=keepdims)
    _compare(kiln.mean, np.mean, x, axis=axis, keepdims=keepdims)
    try:
        expected = np.max(x, axis=axis, keepdims=keepdims)
    except ValueError:
        with pytest.raises(ValueError, match="zero-size array"):
            kiln.max(kiln.asarray(x), axis=axis, keepdims=keepdims)
    else:
        assert_close(kiln.max(kiln.asarray(x), axis=axis, keepdims=keepdims), expected)


@pytest.mark.parametrize(
    "fn, x",
    [
        (lambda a: np.max(a, axis=0, initial=-1.0), np.zeros((0, 3))),
        (lambda a: np.max(a, axis=1, keepdims=True, initial=5), np.zeros((4, 0), np.int32)),
        (lambda a: np.min(a, initial=2.0), np.zeros((0, 3), np.float32)),
        (lambda a: np.linalg.norm(a, np.inf), np.zeros(0)),  # NumPy: max(..., initial=0)
        (lambda a: np.linalg.norm(a, np.inf), np.zeros((5, 0))),
        (lambda a: np.linalg.norm(a, 1), np.zeros((5, 0))),
        (lambda a: np.diag(a), np.zeros(0)),  # a 0 x 0 result
    ],
)
def test_empty_reductions_with_initial_are_captured_as_numpy(fn, x):
    f = kiln.compile(fn, fullgraph=True)
    for _ in range(2):
        got, want = f(x), fn(x)
        assert got.dtype == np.asarray(want).dtype and got.shape == np.shape(want)
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64])
@pytest.mark.parametrize(
    "fn",
    [
        lambda a: np.sum(a, where=a.real > 0),
        lambda a: np.sum(a, axis=0, where=a.real > 0),
        lambda a: np.sum(a, axis=-1, keepdims=True, where=a.real > -0.5),
        lambda a: np.mean(a, axis=1, where=a.real > 0),
        lambda a: np.prod(a, axis=0, where=a.real > 0),
        lambda a: a.sum(axis=1, where=np.array([True, False, True, True, False, True, True])),
    ],
)
def test_masked_reductions_are_numpys_bit_for_bit(dtype, fn):
    # NumPy reduces each run of selected elements apart (pairwise within a run, in sequence
    # across runs): the masked array summed whole is an ulp off in some cases (kiln.MaskedReduce
    # runs np.add.reduce(..., where=) itself)
    rng = np.random.default_rng(11)
    compiled = kiln.compile(fn)
    for i in range(12):
        a = (rng.standard_normal((9, 7)) * 10).astype(dtype)
        if i % 3 == 2:
            a = np.asfortranarray(a)  # NumPy's order of the runs follows the memory
        with np.errstate(all="ignore"):
            want = fn(a)
            got = compiled(a)
        assert got.dtype == want.dtype and got.shape == np.shape(want)
        assert got.tobytes() == np.asarray(want).tobytes(), (i, got, want)
    eager = fn(kiln.asarray(a))
    assert np.asarray(eager).tobytes() == np.asarray(fn(a)).tobytes()
