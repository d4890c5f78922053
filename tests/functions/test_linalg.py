"""Linear-algebra front doors against NumPy 2: value, dtype and shape; ``t @ w`` and NumPy
dispatch (np.matmul, np.dot, np.einsum ...)."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.errors import OpArgumentError, UnsupportedOperationError
from kiln.ops.sampling import sample_array

from ..numerics import assert_close

DTYPES = ["bool", "int8", "int32", "int64", "uint8", "float16", "float32", "float64"]


def _data(shape, dtype):
    return sample_array(shape, dtype, 0 if np.dtype(dtype).kind in "ub" else -3, 4)


def _check(got, expected, what=""):
    assert isinstance(got, kiln.Tensor), what
    loose = {"rtol": 1e-2, "atol": 1e-2} if np.asarray(expected).dtype == np.float16 else {}
    assert_close(got, expected, what=what, **loose)


MATMUL_SHAPES = [
    ((3, 4), (4, 5)),
    ((2, 3, 4), (4, 2)),
    ((2, 1, 3, 4), (5, 4, 2)),
    ((4,), (4, 3)),
    ((2, 3, 4), (4,)),
    ((4,), (4,)),
    ((0, 3), (3, 2)),
    ((2, 0), (0, 3)),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("sa, sb", MATMUL_SHAPES)
def test_matmul(dtype, sa, sb) -> None:
    a, b = _data(sa, dtype), _data(sb, dtype)
    _check(kiln.matmul(kiln.asarray(a), kiln.asarray(b)), np.matmul(a, b), f"{sa}@{sb}")
    _check(kiln.asarray(a) @ kiln.asarray(b), a @ b)
    _check(np.matmul(kiln.asarray(a), b), np.matmul(a, b))


@pytest.mark.parametrize("da, db", [("int8", "float32"), ("uint8", "int8"), ("bool", "int32")])
def test_matmul_promotes_like_numpy(da, db) -> None:
    a, b = _data((2, 3), da), _data((3, 2), db)
    _check(kiln.asarray(a) @ kiln.asarray(b), a @ b)
    _check(np.matmul(a, kiln.asarray(b)), np.matmul(a, b))


def test_matmul_errors() -> None:
    with pytest.raises(ValueError, match=r"MatMul: inputs 'A' \(2, 3\) and 'B' \(4, 2\)"):
        kiln.tensor(np.ones((2, 3))) @ kiln.tensor(np.ones((4, 2)))
    with pytest.raises(ValueError, match="must have rank >= 1"):
        kiln.matmul(kiln.tensor(np.ones(3)), 2.0)


DOT_SHAPES = [
    ((), (3,)),
    ((3,), ()),
    ((3,), (3,)),
    ((2, 3), (3, 4)),
    ((2, 3), (3,)),
    ((3,), (3, 4)),
    ((2, 2, 3), (3,)),
    ((3,), (2, 3, 4)),
    ((2, 3, 4), (4, 5)),
    ((2, 3, 4), (5, 4, 2)),  # N-D x M-D: sum over a[-1] and b[-2]
]


@pytest.mark.parametrize("dtype", ["bool", "int8", "int64", "float16", "float32"])
@pytest.mark.parametrize("sa, sb", DOT_SHAPES)
def test_dot(dtype, sa, sb) -> None:
    a, b = _data(sa, dtype), _data(sb, dtype)
    _check(kiln.dot(kiln.asarray(a), kiln.asarray(b)), np.dot(a, b), f"dot{sa}{sb}")
    _check(np.dot(kiln.asarray(a), b), np.dot(a, b))
    if a.ndim:
        _check(kiln.asarray(a).dot(b), a.dot(b))


def test_dot_scalars_are_strong_and_shapes_must_align() -> None:
    a = _data((3,), "int8")
    _check(kiln.dot(kiln.asarray(a), 2), np.dot(a, 2))  # int64, as NumPy converts 2 to an array
    with pytest.raises(OpArgumentError, match=r"dot: shapes \(2, 3\) and \(1, 4\) are not aligned"):
        kiln.dot(kiln.tensor(np.ones((2, 3))), kiln.tensor(np.ones((1, 4))))


@pytest.mark.parametrize("dtype", ["int32", "float32", "bool"])
def test_inner_outer_vdot(dtype) -> None:
    for sa, sb in [((3,), (3,)), ((2, 3), (4, 3)), ((2, 2, 3), (3,)), ((), (2, 3))]:
        a, b = _data(sa, dtype), _data(sb, dtype)
        _check(kiln.inner(kiln.asarray(a), kiln.asarray(b)), np.inner(a, b), f"inner{sa}{sb}")
        _check(np.inner(kiln.asarray(a), b), np.inner(a, b))
    for sa, sb in [((3,), (4,)), ((2, 2), (3,)), ((), (2,))]:
        a, b = _data(sa, dtype), _data(sb, dtype)
        _check(kiln.outer(kiln.asarray(a), kiln.asarray(b)), np.outer(a, b), f"outer{sa}{sb}")
        _check(np.outer(kiln.asarray(a), b), np.outer(a, b))
    if dtype != "bool":  # np.vdot has no bool loop
        a, b = _data((2, 3), dtype), _data((3, 2), dtype)
        _check(kiln.vdot(kiln.asarray(a), kiln.asarray(b)), np.vdot(a, b))


@pytest.mark.parametrize(
    "sa, sb, axes",
    [
        ((3, 4), (4, 3), 1),
        ((2, 3, 4), (3, 4, 5), 2),
        ((3, 4), (3, 4), 0),
        ((2, 3, 4), (4, 2, 3), ([0, 1], [1, 2])),
        ((2, 3, 4), (4, 3), ([-1, 1], [0, -1])),
    ],
)
def test_tensordot(sa, sb, axes) -> None:
    a, b = _data(sa, "float64"), _data(sb, "int32")
    _check(kiln.tensordot(kiln.asarray(a), kiln.asarray(b), axes), np.tensordot(a, b, axes))
    _check(np.tensordot(kiln.asarray(a), b, axes=axes), np.tensordot(a, b, axes=axes))


def test_tensordot_errors() -> None:
    a, b = kiln.tensor(np.ones((2, 3))), kiln.tensor(np.ones((2, 3)))
    with pytest.raises(OpArgumentError, match="not aligned"):
        kiln.tensordot(a, b, 1)
    with pytest.raises(OpArgumentError, match="pair 2 axes of a with 1 of b"):
        kiln.tensordot(a, b, ([0, 1], [0]))


@pytest.mark.parametrize(
    "equation, shapes",
    [
        ("ij,jk->ik", [(3, 4), (4, 2)]),
        ("ij,jk", [(3, 4), (4, 2)]),
        ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
        ("...ij,...jk", [(2, 1, 3, 4), (5, 4, 2)]),
        ("ii->i", [(3, 3)]),
        ("ii", [(3, 3)]),
        ("ij->", [(0, 3)]),
        ("i,j->ij", [(3,), (2,)]),
        ("bhqd,bhkd->bhqk", [(1, 2, 3, 4), (1, 2, 5, 4)]),
    ],
)
@pytest.mark.parametrize("dtype", ["bool", "int8", "int64", "float32"])
def test_einsum(equation, shapes, dtype) -> None:
    ops = [_data(s, dtype) for s in shapes]
    _check(kiln.einsum(equation, *map(kiln.asarray, ops)), np.einsum(equation, *ops), equation)


def test_einsum_numpy_dispatch_and_promotion() -> None:
    t, w = _data((2, 3), "float32"), _data((3, 4), "int8")
    _check(np.einsum("ij,jk->ik", kiln.asarray(t), kiln.asarray(w)), np.einsum("ij,jk->ik", t, w))
    _check(
        kiln.einsum("ij,jk", kiln.asarray(t), w, dtype=np.float64),
        np.einsum("ij,jk", t, w, dtype=np.float64),
    )
    with pytest.raises(UnsupportedOperationError, match="only the string form"):
        kiln.einsum(kiln.asarray(t), [0, 1], kiln.asarray(w), [1, 2])


@pytest.mark.parametrize("dtype", ["int32", "float16", "float32", "float64"])
def test_norm(dtype) -> None:
    x = _data((3, 4), dtype)
    t = kiln.asarray(x)
    for kwargs in (
        {},
        {"axis": 1},
        {"axis": (0, 1)},
        {"axis": -1, "ord": 1},
        {"ord": "fro"},
        {"axis": 0, "ord": 2, "keepdims": True},
    ):
        _check(kiln.norm(t, **kwargs), np.linalg.norm(x, **kwargs), f"norm{kwargs}")
    _check(np.linalg.norm(t), np.linalg.norm(x))
    with pytest.raises(UnsupportedOperationError, match="ord='nuc'"):
        kiln.norm(t, ord="nuc")


def test_tensor_methods() -> None:
    a, b = _data((2, 3), "float32"), _data((3, 4), "float32")
    ta = kiln.asarray(a)
    _check(ta.dot(b), a.dot(b))
    _check(ta @ b, a @ b)
    _check(a @ kiln.asarray(b), a @ b)  # ndarray @ Tensor defers to Tensor.__rmatmul__


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tensordot_makes_numpys_matrix_product_with_infinities(dtype):
    # NumPy's tensordot is one BLAS matrix product of the flattened operands, whose fused
    # multiply-adds turn inf + (a product past the range) into inf where a plain sum gives
    # nan (fuzz 26:775); kiln makes the same product, eagerly and compiled.
    big = 1e30 if dtype == np.float32 else 1e300
    a = np.array(
        [3.33, 3.15, -0.5, 1.94, -3.05, -0.0, -3.21, -2.74, -np.inf, -1.0, 0.05, 2.78, -3.5]
        + [1.0, big, 1.0, -2.93, 88.5],
        dtype,
    ).reshape(3, 2, 3)

    def f(a):
        return np.tensordot(a, a[..., -1], axes=1)

    expected = f(a)
    eager = kiln.tensordot(kiln.tensor(a), kiln.tensor(a[..., -1]), axes=1).numpy()
    compiled = kiln.compile(f)
    for got in (eager, compiled(a), compiled(a)):
        assert got.dtype == expected.dtype
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16])
@pytest.mark.parametrize("shape", [(1000,), (37, 11), (3, 0), (1,), (2, 3, 5)])
@pytest.mark.parametrize("keepdims", [False, True])
def test_compiled_norm_is_numpys_bit_for_bit(dtype, shape, keepdims):
    # NumPy's norm(x) (axis None) is sqrt(dot(x.ravel('K'), itself)): BLAS's summation order,
    # which np.add.reduce of the squares misses by an ulp about once in five.
    f = kiln.compile(lambda x: np.linalg.norm(x, keepdims=keepdims))
    rng = np.random.default_rng(7)
    for _ in range(8):
        x = (rng.standard_normal(shape) * 3).astype(dtype)
        for arg in (x, x.T):  # a transposed input: memory order, as NumPy's ravel('K')
            got, want = f(arg), np.linalg.norm(arg, keepdims=keepdims)
            assert got.dtype == want.dtype and got.shape == np.shape(want)
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    "shapes", [((9,), (9,)), ((4, 9), (9,)), ((9,), (5, 9)), ((4, 9), (5, 9)), ((0, 3), (2, 3))]
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int64])
def test_compiled_inner_and_outer_are_numpys_bit_for_bit(shapes, dtype):
    # inner of vectors and matrices: NumPy's BLAS products (an einsum sums in another order);
    # outer: a product per element, so -0.0 stays -0.0 (an einsum added it to +0.0).
    rng = np.random.default_rng(3)
    for fn in (np.inner, np.outer):
        f = kiln.compile(lambda a, b, fn=fn: fn(a, b))
        for _ in range(4):
            a, b = ((rng.standard_normal(s) * 10).astype(dtype) for s in shapes)
            if a.size:
                a.flat[0] = -0.0
            got, want = f(a, b), fn(a, b)
            assert got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_array_equal(got, want)
            np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


@pytest.mark.parametrize(
    "shapes",
    [((3, 4, 5), (5, 2)), ((3, 5), (2, 5, 4)), ((2, 3, 4), (3, 4, 2)), ((2, 3, 4), (4,))],
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_compiled_dot_of_more_axes_is_numpys_bit_for_bit(shapes, dtype):
    # np.dot with an operand of more than two axes is a BLAS dot per output element: a
    # batched matmul or an einsum adds in other orders (up to 256 ulp in float32).
    f = kiln.compile(lambda a, b: np.dot(a, b))
    rng = np.random.default_rng(4)
    for _ in range(4):
        a, b = ((rng.standard_normal(s) * 10).astype(dtype) for s in shapes)
        got, want = f(a, b), np.dot(a, b)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
    assert [n.op for n in f.current_graph.nodes] == ["kiln.Dot"]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "fn",
    [
        lambda a, z: np.dot(a, z),
        lambda a, z: np.tensordot(a, z, axes=1),
        lambda a, z: np.inner(a, z.T),
        lambda a, z: a.dot(z),
    ],
)
def test_dot_skips_a_zero_operand_as_numpys_blas_does(dtype, fn):
    # np.dot hands matrices to BLAS's gemm/gemv, which never compute inf * 0 where the other
    # operand is zero (NumPy: 0); np.matmul's own loop for small shapes gives nan. kiln
    # recorded np.dot as MatMul (fuzz 32:145); now it runs np.dot itself.
    a = np.array([0.02, 0.5, -0.58, -np.inf, np.inf, -0.68], dtype).reshape(6, 1)
    z = np.zeros((1, 1), dtype)
    b = a[::-1].copy()
    compiled = kiln.compile(fn)
    with np.errstate(all="ignore"):
        for x in (a, a, b, a):  # capture, replays, a replay on other values
            got, want = compiled(x, z), fn(x, z)
            assert got.dtype == want.dtype
            np.testing.assert_array_equal(got, want)
        eager = kiln.dot(kiln.tensor(a), kiln.tensor(z)).numpy()
        np.testing.assert_array_equal(eager, np.dot(a, z))
